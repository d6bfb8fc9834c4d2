"""On the GPU: Relax modules on tilus kernels, exported, reloaded and checked against PyTorch."""
import pytest
import torch

import tilus_tvm
import tilus_tvm.relax as tilus_relax

from tests.helpers import load_tutorial
from tests.runtime.test_export import run_without_compilers

pytestmark = pytest.mark.gpu


def current_arch() -> str:
    """The GPU's target: sm_90a on an H100 or H200, so large matmuls dispatch to MatmulWgmma."""
    return tilus_tvm.target.current_arch()


RUN_BLOCK = """
import json, time
import tvm, tvm_ffi

def refuse(*args):
    raise RuntimeError("CUDA code was compiled while loading the library")

tvm_ffi.register_global_func("tvm_callback_cuda_compile", refuse, override=True)
import tilus_tvm
from tests.helpers import load_tutorial
tutorial = load_tutorial("05_relax_decoder_block")
start = time.perf_counter()
tilus_tvm.load(sys.argv[1])
load_s = time.perf_counter() - start
error = tutorial.run_exported(sys.argv[1], sys.argv[2], tutorial.CONFIGS["small"])
print(json.dumps({"error": error, "load_s": load_s}))
"""


def test_the_tutorial_block_matches_pytorch_after_a_reload_without_compilers(tmp_path):
    tutorial = load_tutorial("05_relax_decoder_block")
    config = tutorial.CONFIGS["small"]
    path = str(tmp_path / "block.so")
    names = tutorial.build_and_export(config, current_arch(), path)
    weights = str(tmp_path / "weights.pt")
    torch.save({"names": names, "weights": tutorial.make_weights(config, names)}, weights)
    result = run_without_compilers(RUN_BLOCK, path, weights)
    assert result["error"] < 2e-2
    assert result["load_s"] < 1.0  # TVM imported already: loading the library itself compiles nothing


def rms_norm_softmax_module():
    from tvm import relax, tirx

    n = tirx.Var("n", "int64")
    x = relax.Var("x", relax.TensorType([n, 1024], "float16"))
    w = relax.Var("w", relax.TensorType([2048, 1024], "float16"))
    g = relax.Var("g", relax.TensorType([2048], "float16"))
    builder = relax.BlockBuilder()
    with builder.function("main", [x, w, g]):
        with builder.dataflow():
            y = builder.emit(relax.op.matmul(x, builder.emit(relax.op.permute_dims(w))))
            z = builder.emit(relax.op.nn.rms_norm(y, g, axes=[-1], epsilon=1e-6))
            out = builder.emit_output(builder.emit(relax.op.nn.softmax(z)))
        builder.emit_func_output(out)
    return builder.get()


def test_one_compiled_module_serves_three_sizes(tmp_path):
    arch = current_arch()
    dispatch = tilus_relax.DispatchKernels(arch)
    mod = dispatch(rms_norm_softmax_module())
    assert [(d.pattern, d.dispatched) for d in dispatch.decisions] == [
        ("matmul", True), ("rms_norm", True), ("softmax", True)]
    path = tilus_relax.export(tilus_relax.build(mod, arch), str(tmp_path / "dynamic.so"))
    vm = tilus_tvm.load(path)
    w = torch.randn(2048, 1024, device="cuda").half() * 0.03
    g = (1 + 0.1 * torch.randn(2048, device="cuda")).half()
    for n in (1, 77, 1000):
        x = torch.randn(n, 1024, device="cuda").half()
        out = vm["main"](x, w, g)
        out = out if isinstance(out, torch.Tensor) else torch.from_dlpack(out)
        y = x.float() @ w.float().T
        expected = torch.softmax(y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + 1e-6) * g.float(), dim=-1)
        torch.testing.assert_close(out.float(), expected, atol=2e-3, rtol=2e-2)


def test_call_in_tvmscript_runs_for_several_sizes(tmp_path):
    from tests.relax.test_call import TwoMatmuls  # y = x @ w.T, z = y @ w.T, u = z + x; n is dynamic

    arch = current_arch()  # TwoMatmuls was lowered for sm_90 when it was parsed
    executable = tilus_relax.build(TwoMatmuls, arch) if arch == "sm_90" else _two_matmuls_for(arch)
    path = tilus_relax.export(executable, str(tmp_path / "two.so"))
    vm = tilus_tvm.load(path)
    w = torch.randn(512, 512, device="cuda").half() * 0.05
    for n in (3, 64, 513):
        x = torch.randn(n, 512, device="cuda").half()
        out = vm["main"](x, w)
        out = out if isinstance(out, torch.Tensor) else torch.from_dlpack(out)
        expected = (x.float() @ w.float().T).half().float() @ w.float().T + x.float()
        torch.testing.assert_close(out.float(), expected, atol=3e-2, rtol=2e-2)


def _two_matmuls_for(arch: str):
    """TwoMatmuls (built for sm_90 when the test module was imported) rebuilt with call() for ``arch``."""
    from tvm import relax, tirx

    from tests.relax.test_call import MATMUL

    n = tirx.Var("n", "int64")
    x = relax.Var("x", relax.TensorType([n, 512], "float16"))
    w = relax.Var("w", relax.TensorType([512, 512], "float16"))
    builder = relax.BlockBuilder()
    out_type = relax.TensorType([n, 512], "float16")
    with builder.function("main", [x, w]):
        with builder.dataflow():
            y = builder.emit(tilus_relax.call(MATMUL, n, 512, 512, x, w, out=out_type, target=arch))
            z = builder.emit(tilus_relax.call(MATMUL, n, 512, 512, y, w, out=out_type, target=arch))
            out = builder.emit_output(builder.emit(relax.op.add(z, x)))
        builder.emit_func_output(out)
    return tilus_relax.build(builder.get(), arch)
