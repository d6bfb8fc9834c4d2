"""Exported libraries hold compiled GPU code, not CUDA source (tilus_tvm/runtime/export.py)."""
import json
import logging
import os
import subprocess
import sys

import pytest
import torch

import tilus_tvm
from tilus_tvm.errors import CompileError, LaunchError
from tilus_tvm.runtime import export
from tilus_tvm.runtime.export import CudaPayload, LibraryBlob, fatbin_entries, read_library_blob
from tilus_tvm.schedules.matmul import Matmul

from tests.helpers import ROOT

THIN = dict(block_m=16, block_n=128, block_k=64, warps=4, stages=3)


def compiled_matmul(arch: str):
    a = torch.empty(256, 256, dtype=torch.float16)
    return Matmul(**THIN).compile(256, 256, 256, a, a, a, target=arch)


def cuda_payloads(path: str) -> list[CudaPayload]:
    return [CudaPayload.parse(m.payload) for m in read_library_blob(path).modules if m.kind == "cuda"]


def test_a_kernel_exports_one_cubin_per_architecture_and_no_source(tmp_path):
    kernel = compiled_matmul("sm_80")
    path = kernel.export(str(tmp_path / "matmul.so"), archs=["sm_80", "sm_90"])
    data = open(path, "rb").read()
    assert b"__global__" not in data and b"extern \"C\"" not in data  # no CUDA source
    assert b"__tvm_ffi_matmul" in data  # the host entry point
    (payload,) = cuda_payloads(path)
    assert payload.fmt == "fatbin" and payload.function_names() == ["matmul_kernel"]
    assert fatbin_entries(payload.code) == [("cubin", "sm_80"), ("cubin", "sm_90")]  # SASS only, no PTX
    assert json.load(open(path + ".json"))["archs"] == ["sm_80", "sm_90"]


def test_by_default_a_kernel_exports_for_its_own_architecture(tmp_path, caplog):
    kernel = compiled_matmul("sm_90")
    with caplog.at_level(logging.WARNING, logger="tilus_tvm.export"):
        (payload,) = cuda_payloads(kernel.export(str(tmp_path / "a.so")))
        kernel.export(str(tmp_path / "b.so"), archs=["sm_80", "sm_90"])
    assert fatbin_entries(payload.code) == [("cubin", "sm_90")]
    assert "kernels built for sm_90 go into a library for sm_80 too" in caplog.text


def test_a_kernel_from_the_disk_cache_is_rebuilt_from_its_tir_to_export(tmp_path):
    kernel = compiled_matmul("sm_90")
    kernel.executable, kernel._prim_func = None, None  # as load_entry gives it: a library and the TIR text
    (payload,) = cuda_payloads(kernel.export(str(tmp_path / "cached.so")))
    assert payload.fmt == "fatbin" and payload.function_names() == ["matmul_kernel"]


def test_load_gives_back_the_kernel_with_the_jit_argument_checks(tmp_path):
    path = compiled_matmul("sm_90").export(str(tmp_path / "matmul.so"))
    kernel = tilus_tvm.load(path)
    assert isinstance(kernel, tilus_tvm.CompiledKernel) and kernel.arch == "sm_90"
    a = torch.empty(256, 256, dtype=torch.float16)
    with pytest.raises(LaunchError, match=r"matmul takes 6 arguments \(m_size: int32, n_size: int, k_size: int"):
        kernel(256, a, a, a)
    if torch.cuda.is_available():
        a = a.cuda()
        with pytest.raises(LaunchError, match="was compiled for n_size=256, got 512"):
            kernel(256, 512, 256, a, a, a)
    else:
        with pytest.raises(LaunchError, match="cannot launch, this machine has no CUDA GPU"):
            kernel(256, 256, 256, a, a, a)
    with pytest.raises(LaunchError, match=r"load: .*missing.so does not exist"):
        tilus_tvm.load(str(tmp_path / "missing.so"))


def test_a_relax_executable_exports_compiled_code(tmp_path):
    from tests.relax.test_call import TwoMatmuls
    import tilus_tvm.relax as tilus_relax

    executable = tilus_relax.build(TwoMatmuls, "sm_90")
    path = tilus_relax.export(executable, str(tmp_path / "model.so"))  # the architecture it was built for
    assert b"__global__" not in open(path, "rb").read()
    blob = read_library_blob(path)
    assert [m.kind for m in blob.modules] == ["relax.VMExecutable", "_lib", "cuda"]
    (payload,) = cuda_payloads(path)
    assert payload.fmt == "fatbin" and fatbin_entries(payload.code) == [("cubin", "sm_90")]
    names = payload.function_names()
    assert len(names) == 2 and "add_kernel" in names and any(n.startswith("tilus_matmul_float16_") for n in names)


def test_a_relax_module_built_for_sm_80_exports_for_sm_80_and_sm_90(tmp_path):
    from tvm import relax

    import tilus_tvm.relax as tilus_relax

    x = relax.Var("x", relax.TensorType([16, 1024], "float16"))
    builder = relax.BlockBuilder()
    with builder.function("main", [x]):
        builder.emit_func_output(builder.emit(relax.op.nn.softmax(x)))
    mod = tilus_relax.DispatchKernels("sm_80")(builder.get())
    path = tilus_relax.export(tilus_relax.build(mod, "sm_80"), str(tmp_path / "softmax.so"), archs=["sm_80", "sm_90"])
    (payload,) = cuda_payloads(path)
    assert fatbin_entries(payload.code) == [("cubin", "sm_80"), ("cubin", "sm_90")]
    (name,) = payload.function_names()
    assert name.startswith("tilus_softmax_float16_") and name.endswith("_kernel")


def test_the_library_blob_round_trips():
    import tvm
    import tvm_ffi
    from tvm.script import tirx as T

    @T.prim_func
    def add_one(A: T.Buffer((256,), "float32"), B: T.Buffer((256,), "float32")):
        bx = T.launch_thread("blockIdx.x", 2)
        tx = T.launch_thread("threadIdx.x", 128)
        B[bx * 128 + tx] = A[bx * 128 + tx] + T.float32(1)

    executable = tvm.compile(add_one, target=tvm.target.Target({"kind": "cuda", "arch": "sm_90"}, host="llvm"))
    blob = bytes(tvm_ffi.get_global_func("runtime.ModulePackImportsToTensor")(executable.mod).numpy())
    library = LibraryBlob.parse(blob)
    assert library.pack() == blob and [m.kind for m in library.modules] == ["_lib", "cuda"]
    payload = CudaPayload.parse(library.modules[1].payload)
    source = executable.mod.imports[0].inspect_source()
    assert payload.fmt == "cuda" and payload.code.decode() == source  # what TVM alone would ship
    assert payload.pack() == library.modules[1].payload and payload.function_names() == ["add_one_kernel"]
    compiled, names = export.compile_blob(blob, ["sm_90"])
    (new,) = [CudaPayload.parse(m.payload) for m in LibraryBlob.parse(compiled).modules if m.kind == "cuda"]
    assert names == ["add_one_kernel"] and new.fmt == "fatbin" and new.function_table == payload.function_table


def test_compiler_failures_say_what_is_missing(monkeypatch):
    with pytest.raises(CompileError, match=r"nvcc failed to build a fatbin for sm_90:\n.*error"):
        export.compile_cuda_binary("this is not CUDA", ["sm_90"])
    with pytest.raises(CompileError, match="unknown target 'sm_70'"):
        export.compile_cuda_binary("", ["sm_70"])
    # a source nvcc needs seconds for (a fully unrolled loop of 20000 steps), stopped after 0.2 s
    slow = ("extern \"C\" __global__ void k(float* x) {\n#pragma unroll\n"
            "  for (int i = 0; i < 20000; ++i) x[i * threadIdx.x] += x[i + 1] * 3.0f;\n}\n")
    with pytest.raises(CompileError, match=r"nvcc took longer than 0.2 s to build a fatbin for sm_90 \(4 lines"):
        export.compile_cuda_binary(slow, ["sm_90"], timeout_sec=0.2)
    monkeypatch.setattr(export, "nvcc_path", lambda: None)
    with pytest.raises(CompileError, match=r"several architectures \(sm_80, sm_90\) holds a fatbin built by nvcc, "
                                           r"and nvcc is not on PATH"):
        export.compile_cuda_binary("", ["sm_80", "sm_90"])


# --- on the GPU: a fresh process, no compilers ----------------------------------------------------
# The child sees no nvcc on PATH, cannot import cuda-bindings (NVRTC), and TVM's compile callback,
# should anything call it, would go to the missing nvcc.
HIDE_COMPILERS = """
import shutil, sys
sys.modules["cuda"] = None
sys.modules["cuda.bindings"] = None
assert shutil.which("nvcc") is None, shutil.which("nvcc")
"""


def environment_without_compilers() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "CUDA_PATH")}
    env["PATH"] = os.pathsep.join(d for d in env.get("PATH", "").split(os.pathsep)
                                  if d and not os.access(os.path.join(d, "nvcc"), os.X_OK))
    env["TVM_CUDA_COMPILE_MODE"] = "nvcc"
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def run_without_compilers(code: str, *args: str) -> dict:
    result = subprocess.run([sys.executable, "-c", HIDE_COMPILERS + code, *args], capture_output=True, text=True,
                            cwd=ROOT, env=environment_without_compilers(), timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


LAUNCH = """
import json, time, torch
start = time.perf_counter()
import tilus_tvm
kernel = tilus_tvm.load(sys.argv[1])
loaded = time.perf_counter() - start
a = torch.randn(300, 256, dtype=torch.float16, device="cuda")
b = torch.randn(256, 256, dtype=torch.float16, device="cuda")
c = torch.full((300, 256), float("nan"), dtype=torch.float16, device="cuda")
kernel(300, 256, 256, a, b, c)
error = ((c.float() - a.float() @ b.float()).abs().max() / (a.float() @ b.float()).abs().max()).item()
print(json.dumps({"error": error, "load_s": loaded, "tvm_imported": "tvm" in sys.modules}))
"""


@pytest.mark.gpu
def test_an_exported_kernel_runs_in_a_fresh_process_without_compilers(tmp_path):
    arch = "sm_{}{}".format(*torch.cuda.get_device_capability())
    path = compiled_matmul("sm_80").export(str(tmp_path / "matmul.so"), archs=["sm_80", arch])  # one library, both
    result = run_without_compilers(LAUNCH, path)
    assert result["error"] < 1e-2
    assert not result["tvm_imported"]  # TVM's runtime libraries, not its Python package
    assert result["load_s"] < 2.0  # import tilus_tvm + load: nothing is compiled
