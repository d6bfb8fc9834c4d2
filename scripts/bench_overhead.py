"""Launch overhead and start-up cost: tilus-tvm beside torch and Triton, in one table.

    python scripts/bench_overhead.py          # on a GPU host; under a minute

- import: ``import X`` timed in fresh subprocesses (best of a few), for torch, triton, tilus_tvm,
  tilus_tvm.layout and tvm;
- launch: µs per launch of a trivial kernel -- an add-one Script on a small tensor, torch's
  ``x.add_(1)``, the same add-one in Triton -- each measured the same way: warm up, then many
  launches in a loop, synchronize, wall time / count (best of a few rounds);
- warm start: a fresh process imports, launches a kernel that this process left in the disk cache
  (tilus-tvm's, Triton's, each in a new temporary directory), synchronizes. ``total`` runs from
  before the imports to after the synchronize; ``beyond imports`` leaves out the imports (torch
  and the package; for tilus-tvm also tvm_ffi, which loads and calls the kernel library) and
  torch's CUDA context, which every GPU program pays. The note under the table says whether the
  load imported TVM's Python package.

Ratios are ours / Triton and ours / torch (lower is better for us).
"""
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
N = 1024  # elements of the add-one tensors
IMPORTS = ["torch", "triton", "tilus_tvm", "tilus_tvm.layout", "tvm"]


def _script_kernel():
    """The add-one Script; defined at module level so a fresh process finds the same cache key."""
    import tilus_tvm as tilus
    from tilus_tvm import float32, int32
    from tilus_tvm.utils import cdiv

    global AddOne

    class AddOne(tilus.Script):
        def __init__(self, block_n: int = 128, warps: int = 4):
            super().__init__()
            self.block_n, self.warps = block_n, warps

        def __call__(self, n: int32, a_ptr: ~float32, b_ptr: ~float32):
            self.attrs.blocks = cdiv(n, self.block_n)
            self.attrs.warps = self.warps
            ga = self.global_view(a_ptr, shape=[n], dtype=float32)
            gb = self.global_view(b_ptr, shape=[n], dtype=float32)
            offset = self.blockIdx.x * self.block_n
            self.store_global(gb, self.load_global(ga, offsets=[offset], shape=[self.block_n]) + 1.0,
                              offsets=[offset])

    return AddOne()


def _triton_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def add_one(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        tl.store(y_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + 1.0, mask=mask)

    return lambda x, y: add_one[(triton.cdiv(N, 128),)](x, y, N, BLOCK=128)


# --- measurements ---------------------------------------------------------------------------------

def import_ms(module: str, rounds: int = 2) -> float | None:
    code = f"import time; t = time.perf_counter(); import {module}; print(time.perf_counter() - t)"
    best = None
    for _ in range(rounds):
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
        if result.returncode != 0:
            return None
        seconds = float(result.stdout.strip().splitlines()[-1])
        best = seconds if best is None else min(best, seconds)
    return best * 1e3


def launch_us(fn) -> float:
    from tilus_tvm.utils.benchmark import launch_overhead_us

    return launch_overhead_us(fn)


def warm_start(which: str, cache: str) -> dict | None:
    """Time a fresh process running the kernel that this process compiled into ``cache``."""
    result = subprocess.run([sys.executable, __file__, "--warm", which, cache], capture_output=True, text=True,
                            cwd=ROOT)
    if result.returncode != 0:
        print(f"warm start of {which} failed:\n{result.stderr[-2000:]}", file=sys.stderr)
        return None
    return json.loads(result.stdout.strip().splitlines()[-1])


def _warm_child(which: str, cache: str) -> None:
    """One fresh process: imports, CUDA context, (TVM), launch once, synchronize; times as JSON."""
    start = time.perf_counter()
    import torch

    if which == "ours":
        os.environ["TILUS_TVM_CACHE_DIR"] = cache
        import tilus_tvm  # noqa: F401
        import tvm_ffi  # noqa: F401 - tilus_tvm imports it at the load; counted as an import here
    else:
        os.environ["TRITON_CACHE_DIR"] = cache
        import triton  # noqa: F401
    imported = time.perf_counter()
    x = torch.rand(N, device="cuda")
    y = torch.empty_like(x)
    torch.cuda.synchronize()
    context = time.perf_counter()
    if which == "ours":
        kernel = _script_kernel()
        kernel(N, x, y)
    else:
        _triton_kernel()(x, y)
    torch.cuda.synchronize()
    done = time.perf_counter()
    assert torch.equal(y, x + 1), "wrong result"
    modules = sys.modules
    print(json.dumps({"total_ms": (done - start) * 1e3, "imports_ms": (imported - start) * 1e3,
                      "context_ms": (context - imported) * 1e3, "beyond_imports_ms": (done - context) * 1e3,
                      "tvm_imported": "tvm" in modules}))


# --- the table ------------------------------------------------------------------------------------

def ratio(ours, other) -> str:
    return f"{ours / other:.2f}" if ours is not None and other else ""


def cell(value, digits: int = 1) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def main() -> None:
    with tempfile.TemporaryDirectory() as caches:
        # this process compiles into fresh caches; the warm-start processes then find the kernels there
        ours_cache, triton_cache = os.path.join(caches, "tilus_tvm"), os.path.join(caches, "triton")
        os.environ["TILUS_TVM_CACHE_DIR"], os.environ["TRITON_CACHE_DIR"] = ours_cache, triton_cache
        measure(ours_cache, triton_cache)


def measure(ours_cache: str, triton_cache: str) -> None:
    import torch

    imports = {module: import_ms(module) for module in IMPORTS}
    x = torch.rand(N, device="cuda")
    y = torch.empty_like(x)
    kernel = _script_kernel()
    kernel(N, x, y)
    assert torch.equal(y, x + 1)
    ours = launch_us(lambda: kernel(N, x, y))
    torch_us = launch_us(lambda: x.add_(1))
    triton_us = None
    if imports["triton"] is not None:
        triton_add = _triton_kernel()
        triton_add(x, y)
        assert torch.equal(y, x + 1)
        triton_us = launch_us(lambda: triton_add(x, y))
    warm_ours = warm_start("ours", ours_cache)
    warm_triton = warm_start("triton", triton_cache) if imports["triton"] is not None else None

    def warm(key: str, result):
        return None if result is None else result[key]

    rows = [
        ("import tilus_tvm / torch / triton (ms)", imports["tilus_tvm"], imports["torch"], imports["triton"]),
        ("import tilus_tvm.layout (ms)", imports["tilus_tvm.layout"], None, None),
        ("import tvm (ms)", imports["tvm"], None, None),
        (f"launch, add one to {N} floats (us)", ours, torch_us, triton_us),
        ("warm start from the disk cache, total (ms)", warm("total_ms", warm_ours), None,
         warm("total_ms", warm_triton)),
        ("warm start, beyond imports and CUDA context (ms)", warm("beyond_imports_ms", warm_ours), None,
         warm("beyond_imports_ms", warm_triton)),
    ]
    header = f"{'':<50} {'tilus_tvm':>10} {'torch':>10} {'triton':>10} {'ours/triton':>12} {'ours/torch':>11}"
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, python {sys.version.split()[0]}")
    print(header)
    print("-" * len(header))
    for label, value, torch_value, triton_value in rows:
        print(f"{label:<50} {cell(value):>10} {cell(torch_value):>10} {cell(triton_value):>10} "
              f"{ratio(value, triton_value):>12} {ratio(value, torch_value):>11}")
    if warm_ours is not None:
        print(f"(warm start of tilus_tvm: imports of torch, tilus_tvm and tvm_ffi {warm_ours['imports_ms']:.0f} ms, "
              f"CUDA context {warm_ours['context_ms']:.0f} ms; TVM's Python package imported: "
              f"{warm_ours['tvm_imported']})")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    if len(sys.argv) == 4 and sys.argv[1] == "--warm":
        _warm_child(sys.argv[2], sys.argv[3])
    else:
        main()
