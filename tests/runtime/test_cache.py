"""The disk cache: a second process loads the kernel instead of compiling it."""
import json
import subprocess
import sys

import pytest

from tests.helpers import ROOT

COMPILE = """
import json, sys, torch, tvm
import tilus_tvm as tilus
from tests.helpers import load_tutorial

tilus.set_cache_dir(sys.argv[1])
if sys.argv[2] == "forbid-build":
    def refuse(*args, **kwargs):
        raise AssertionError("tvm.compile called although the kernel is cached")
    tvm.compile = refuse
kernel = load_tutorial("03_matmul").Matmul()
a = torch.zeros(16, 256, dtype=torch.float16)
compiled = kernel.compile(16, 512, 256, a, torch.zeros(256, 512, dtype=torch.float16),
                          torch.zeros(16, 512, dtype=torch.float16), target="sm_80")
print(json.dumps({"from_cache": compiled.from_cache, "has_mma": "mma.sync" in compiled.cuda_source,
                  "tir_lines": len(compiled.prim_func.script().splitlines()), "grid": compiled.grid([100]),
                  "library": compiled.library_path}))
"""


def run(cache_dir, mode):
    result = subprocess.run([sys.executable, "-c", COMPILE, str(cache_dir), mode], capture_output=True, text=True,
                            cwd=ROOT, timeout=600)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_second_process_hits_the_disk_cache(tmp_path):
    first = run(tmp_path, "build")
    assert first["from_cache"] is False and first["has_mma"]
    second = run(tmp_path, "forbid-build")
    assert second["from_cache"] is True and second["has_mma"]
    assert second["tir_lines"] == first["tir_lines"] > 10
    assert second["grid"] == first["grid"] == [2, 4]
    assert second["library"] == first["library"]


def test_cache_keys_separate_what_kernels_depend_on():
    from tilus_tvm import float16, float32
    from tilus_tvm.runtime.cache import kernel_key
    from tests.lang import kernels as K

    def key(kernel, specialization=(), arch="sm_80"):
        return kernel_key(type(kernel), kernel.hyper_parameters(), specialization, arch)

    softmax = K.Softmax(8, 128, 4)
    assert key(softmax) == key(K.Softmax(8, 128, 4))
    assert key(softmax) != key(K.Softmax(8, 64, 4))  # hyper-parameters
    assert key(softmax) != key(softmax, arch="sm_90")  # target
    assert key(softmax) != key(softmax, specialization=((("n", 1),), ()))  # compile-time arguments
    # the same class body built with other closure values
    assert key(K.dot_kernel(64, 64, 32, float16, float32)) != key(K.dot_kernel(64, 128, 32, float16, float32))


def test_unwritable_cache_still_compiles(tmp_path):
    import torch

    import tilus_tvm as tilus
    from tests.helpers import load_tutorial

    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    tilus.set_cache_dir(blocker / "cache")
    try:
        with pytest.warns(UserWarning, match="could not write kernel cache entry"):
            compiled = load_tutorial("02_add_one").AddOneKernel(32, 1).compile(
                8, torch.zeros(8), torch.zeros(8), target="sm_80")
        assert compiled.library_path is None and compiled.executable is not None
    finally:
        tilus.set_cache_dir(None)


WARM = """
import inspect, json, pathlib, sys, torch
import tilus_tvm as tilus
from tests.helpers import load_tutorial

tilus.set_cache_dir(sys.argv[1])
kernel = load_tutorial("02_add_one").AddOneKernel(32, 1)
if sys.argv[2] == "warm":
    def refuse(*args, **kwargs):
        raise AssertionError("a source file was read although the memo holds its digest")
    inspect.getsource = refuse  # the kernel class's source
    pathlib.Path.read_bytes = refuse  # the package's sources
compiled = kernel.compile(8, torch.zeros(8), torch.zeros(8), target="sm_80")
print(json.dumps({"from_cache": compiled.from_cache, "tvm": "tvm" in sys.modules}))
"""


def test_warm_start_reads_no_source_and_imports_no_tvm(tmp_path):
    def run_warm(mode):
        result = subprocess.run([sys.executable, "-c", WARM, str(tmp_path), mode], capture_output=True, text=True,
                                cwd=ROOT, timeout=600)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout.strip().splitlines()[-1])

    assert run_warm("build") == {"from_cache": False, "tvm": True}
    assert run_warm("warm") == {"from_cache": True, "tvm": False}


def test_source_digest_is_remembered_until_the_file_changes(tmp_path, monkeypatch):
    import importlib.util
    import inspect
    import linecache
    import os

    import tilus_tvm as tilus
    from tilus_tvm.runtime.cache import source_digest

    def load(text, mtime):
        path = tmp_path / "helper_module.py"
        path.write_text(text)
        os.utime(path, ns=(mtime, mtime))
        linecache.checkcache(str(path))
        spec = importlib.util.spec_from_file_location("helper_module", path)
        module = importlib.util.module_from_spec(spec)
        monkeypatch.setitem(sys.modules, "helper_module", module)
        spec.loader.exec_module(module)
        return module.Helper

    tilus.set_cache_dir(tmp_path / "cache")
    try:
        first = source_digest(load("class Helper:\n    x = 1\n", 10**18))
        real = inspect.getsource
        monkeypatch.setattr(inspect, "getsource", lambda obj: 1 / 0)
        assert source_digest(load("class Helper:\n    x = 1\n", 10**18)) == first  # from the memo
        monkeypatch.setattr(inspect, "getsource", real)
        assert source_digest(load("class Helper:\n    x = 2\n", 2 * 10**18)) != first
    finally:
        tilus.set_cache_dir(None)


GPU_WARM = """
import json, sys, time, torch
import tilus_tvm as tilus
from tests.helpers import load_tutorial

tilus.set_cache_dir(sys.argv[1])
x = torch.rand(1000, device="cuda")
y = torch.full_like(x, float("nan"))
torch.cuda.synchronize()
start = time.perf_counter()
kernel = load_tutorial("02_add_one").AddOneKernel(128, 4)
kernel(1000, x, y)
torch.cuda.synchronize()
seconds = time.perf_counter() - start
(compiled,) = kernel._tilus.kernels.values()
print(json.dumps({"from_cache": compiled.from_cache, "tvm": "tvm" in sys.modules,
                  "correct": bool(torch.equal(y, x + 1)), "ms": seconds * 1e3}))
"""


@pytest.mark.gpu
def test_warm_start_on_the_gpu_launches_from_the_cache_without_tvm(tmp_path):
    def run_gpu(label):
        result = subprocess.run([sys.executable, "-c", GPU_WARM, str(tmp_path)], capture_output=True, text=True,
                                cwd=ROOT, timeout=600)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout.strip().splitlines()[-1])

    first = run_gpu("cold")
    assert first["from_cache"] is False and first["correct"]
    second = run_gpu("warm")
    assert second["from_cache"] is True and second["correct"] and second["tvm"] is False, second
    print(f"warm start: {second['ms']:.1f} ms from the Script call to the synchronize")
