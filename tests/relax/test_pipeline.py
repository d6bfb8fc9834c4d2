"""The "tilus" TIR pipeline (tilus_tvm/relax/pipeline.py)."""
import re

import tvm
from tvm import relax, tirx

import tilus_tvm.relax as tilus_relax
from tilus_tvm.relax.pipeline import is_tilus_kernel
from tilus_tvm.target import tvm_target

from tests.relax.test_call import cuda_sources
from tests.relax.test_dispatch import function_with, tensor


def kernel_names(executable) -> set[str]:
    (source,) = cuda_sources(executable.mod)
    return set(re.findall(r"__global__ void (?:__launch_bounds__\([^)]*\) )?(\w+)\(", source))


def test_tilus_kernels_and_dlight_kernels_compile_side_by_side():
    m = tirx.Var("m", "int64")
    mod = function_with(lambda x, w: relax.op.nn.silu(relax.op.matmul(x, w)),
                        [tensor("x", [m, 64]), tensor("w", [64, 64])])
    mod = tilus_relax.DispatchKernels("sm_90")(mod)
    assert sum(is_tilus_kernel(f) for f in mod.functions.values()) == 1
    names = kernel_names(tilus_relax.build(mod, "sm_90"))
    assert any(n.startswith("tilus_matmul_float16_") for n in names) and any("silu" in n for n in names)


def test_modules_without_tilus_kernels_compile_as_with_tvms_default():
    mod = function_with(lambda x: relax.op.nn.softmax(relax.op.add(x, x)), [tensor("x", [8, 256])])
    target = tvm_target("sm_90")
    default = tvm.compile(mod, target=target)
    ours = tvm.compile(mod, target=target, tir_pipeline=tilus_relax.TIR_PIPELINE)
    assert cuda_sources(ours.mod) == cuda_sources(default.mod)
