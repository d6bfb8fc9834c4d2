"""Matmul benchmark: the library's pipelined ``Matmul`` beside torch.matmul (cuBLAS) and an
autotuned Triton matmul, measured in one run on one GPU.

    python scripts/bench_matmul.py                       # 4096^3, 8192^3 and LLM shapes
    python scripts/bench_matmul.py --shapes 4096x4096x4096 --configs 128,256,32,8,4

For every shape our row is the best of ``--configs`` (block_m, block_n, block_k, warps, stages,
min_blocks), and the table says which configuration reached it; ``matmul()`` (the torch-like
function, with its own configuration choice) gets a row too, noting the split count it chose.
Shapes with m <= 128 also get ``MatmulSplitK`` rows: its configuration for m with each of
``--splits`` (those the k allows), to tune ``choose_splits`` in tilus_tvm/schedules/matmul_splitk.py.
The seed's MatmulV0 runs at 4096^3 for reference. On an H100 or H200 (m >= 64), every shape also runs
with b stored [n, k] (``x @ w.t()``, the layout Hopper's ``wgmma`` reads): cuBLAS on ``a @ w.t()``,
``MatmulWgmma`` at its best of ``--wgmma-configs`` (its tiles loaded by TMA, and again by ``cp.async``),
and ``matmul(a, w.t())``; those rows' ratios are
against that cuBLAS row. Results are checked against torch before
timing; times are medians of CUDA events.
Our Triton kernel is written for this benchmark in the style of Triton's matmul tutorial (grouped
tile order, tl.dot, autotuned over the usual block configurations).
"""
import argparse
import importlib
import math
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from tests.helpers import load_tutorial  # noqa: E402
matmul_module = importlib.import_module("tilus_tvm.schedules.matmul")  # the module: the package exports the function
from tilus_tvm.schedules.matmul import Matmul, matmul  # noqa: E402
from tilus_tvm.schedules.matmul_sm90 import MatmulWgmma  # noqa: E402
from tilus_tvm.schedules import matmul_splitk  # noqa: E402
from tilus_tvm.utils import benchmark_func  # noqa: E402

DEFAULT_SHAPES = ("4096x4096x4096,8192x8192x8192,1x4096x4096,16x14336x4096,128x4096x14336,"
                  "1024x28672x4096,4096x4096x14336,16x4096x14336,32x8192x28672")
WGMMA_CONFIGS = "128,256,64,4 256,128,64,4 128,128,64,6 64,256,64,5"
DEFAULT_CONFIGS = "128,256,64,8,3,1 128,256,64,8,4,1 128,256,32,8,4,1 128,128,32,4,4,1 64,128,64,4,4,1 16,128,64,4,4,1"


def triton_matmul():
    """An autotuned Triton matmul (None when Triton is not installed)."""
    try:
        import triton
        import triton.language as tl
    except ImportError:
        return None

    configs = [triton.Config({"BM": bm, "BN": bn, "BK": bk, "GROUP": 8}, num_stages=s, num_warps=w)
               for bm, bn, bk, s, w in ((128, 256, 64, 3, 8), (256, 128, 64, 3, 8), (128, 128, 64, 4, 4),
                                        (128, 128, 32, 4, 4), (64, 128, 64, 4, 4), (128, 64, 64, 4, 4),
                                        (64, 64, 64, 4, 4), (32, 64, 64, 4, 4), (16, 64, 128, 4, 4))]

    @triton.autotune(configs=configs, key=["M", "N", "K"])
    @triton.jit
    def kernel(a, b, c, M, N, K, sam, sak, sbk, sbn, scm, scn,
               BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr):
        pid = tl.program_id(0)
        blocks_m, blocks_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
        group = pid // (GROUP * blocks_n)
        first_m = group * GROUP
        rows = min(blocks_m - first_m, GROUP)
        pm = first_m + (pid % (GROUP * blocks_n)) % rows
        pn = (pid % (GROUP * blocks_n)) // rows
        om = pm * BM + tl.arange(0, BM)
        on = pn * BN + tl.arange(0, BN)
        ok = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k0 in range(0, tl.cdiv(K, BK)):
            kk = k0 * BK + ok
            x = tl.load(a + om[:, None] * sam + kk[None, :] * sak, mask=(om[:, None] < M) & (kk[None, :] < K), other=0.0)
            y = tl.load(b + kk[:, None] * sbk + on[None, :] * sbn, mask=(kk[:, None] < K) & (on[None, :] < N), other=0.0)
            acc = tl.dot(x, y, acc)
        tl.store(c + om[:, None] * scm + on[None, :] * scn, acc.to(tl.float16), mask=(om[:, None] < M) & (on[None, :] < N))

    def run(x, y, out):
        m, k = x.shape
        n = y.shape[1]
        grid = lambda meta: (triton.cdiv(m, meta["BM"]) * triton.cdiv(n, meta["BN"]),)  # noqa: E731
        kernel[grid](x, y, out, m, n, k, x.stride(0), x.stride(1), y.stride(0), y.stride(1), out.stride(0),
                     out.stride(1))

    return run


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", default=DEFAULT_SHAPES, help="comma-separated MxNxK")
    parser.add_argument("--configs", default=DEFAULT_CONFIGS, help="space-separated bm,bn,bk,warps,stages,min_blocks")
    parser.add_argument("--wgmma-configs", default=WGMMA_CONFIGS,
                        help="space-separated bm,bn,bk,stages of MatmulWgmma (on an H100 or H200)")
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--every-config", action="store_true", help="a row for every configuration, not only the best")
    parser.add_argument("--no-triton", action="store_true", help="leave out the autotuned Triton rows (slow to tune)")
    parser.add_argument("--splits", default="2,3,5,8,12", help="split counts tried for m <= 128")
    args = parser.parse_args()
    configs = [tuple(int(v) for v in c.split(",")) for c in args.configs.split()]
    wgmma_configs = [tuple(int(v) for v in c.split(",")) for c in args.wgmma_configs.split()]
    triton_run = None if args.no_triton else triton_matmul()
    lines = []
    for shape in args.shapes.split(","):
        m, n, k = (int(v) for v in shape.split("x"))
        a = (torch.rand(m, k, dtype=torch.float16, device="cuda") - 0.5) / math.sqrt(k)
        b = (torch.rand(k, n, dtype=torch.float16, device="cuda") - 0.5) / math.sqrt(k)
        c = torch.empty(m, n, dtype=torch.float16, device="cuda")
        expected = a @ b
        flops = 2 * m * n * k

        def row(name, ms, note=""):
            lines.append(f"{m:>5} {n:>6} {k:>6}  {name:<24} {ms:>9.4f} {flops / ms * 1e-9:>8.1f} "
                         f"{cublas_ms / ms:>8.2f}x  {note}")

        cublas_ms = benchmark_func(lambda: torch.matmul(a, b, out=c), warmup=5, repeat=args.repeat)
        row("torch.matmul (cuBLAS)", cublas_ms)
        if triton_run is not None:
            triton_run(a, b, c)
            torch.testing.assert_close(c, expected, atol=1e-2, rtol=1e-2)
            row("Triton (autotuned)", benchmark_func(lambda: triton_run(a, b, c), warmup=5, repeat=args.repeat))
        def best_of(name, kernel_configs, make, weight):
            """Each configuration checked against torch and timed; a row for the fastest (every one with
            --every-config)."""
            best = None
            for config in kernel_configs:
                kernel = make(config)
                c.fill_(float("nan"))
                kernel(m, n, k, a, weight, c)
                torch.testing.assert_close(c, expected, atol=1e-2, rtol=1e-2)
                ms = benchmark_func(lambda: kernel(m, n, k, a, weight, c), warmup=5, repeat=args.repeat)
                if args.every_config:
                    row(name, ms, "config " + ",".join(map(str, config)))
                if best is None or ms < best[0]:
                    best = (ms, config)
            row(f"{name} (best)", best[0], "config " + ",".join(map(str, best[1])))

        # configurations far taller than the matrix are skipped
        best_of("tilus-tvm Matmul", [cfg for cfg in configs if cfg[0] <= 16 * max(1, math.ceil(m / 16)) * 8],
                lambda config: Matmul(*config), b)
        if matmul_splitk.split_k_config(m) is not None:
            for splits in (int(v) for v in args.splits.split(",")):
                if splits > math.ceil(k / matmul_splitk.split_k_config(m)[2]):
                    continue
                kernel = matmul_splitk.split_k_kernel(m, splits, torch.float16)
                c.fill_(float("nan"))
                kernel(m, n, k, a, b, c)
                torch.testing.assert_close(c, expected, atol=1e-2, rtol=1e-2)
                ms = benchmark_func(lambda: kernel(m, n, k, a, b, c), warmup=5, repeat=args.repeat)
                row(f"MatmulSplitK splits={splits}", ms,
                    "config " + ",".join(map(str, matmul_splitk.split_k_config(m))))
        chosen = matmul_splitk.choose_splits(m, n, k, matmul_splitk.sm_count(torch.cuda.current_device()))
        c.fill_(float("nan"))
        matmul(a, b, out=c)
        torch.testing.assert_close(c, expected, atol=1e-2, rtol=1e-2)
        row("tilus-tvm matmul()", benchmark_func(lambda: matmul(a, b, out=c), warmup=5, repeat=args.repeat),
            f"splits={chosen}")
        if (m, n, k) == (4096, 4096, 4096):
            v0 = load_tutorial("04_matmul_v0").MatmulV0()
            row("seed MatmulV0", benchmark_func(lambda: v0(m, n, k, a, b, c), warmup=5, repeat=args.repeat))
        if torch.cuda.get_device_capability() == (9, 0) and m >= 64:
            # b stored [n, k] (w, as in x @ w.t()): the layout Hopper's wgmma reads; its own cuBLAS reference
            w = b.t().contiguous()
            cublas_ms = benchmark_func(lambda: torch.matmul(a, w.t(), out=c), warmup=5, repeat=args.repeat)
            row("cuBLAS, b = w.t()", cublas_ms)
            best_of("MatmulWgmma", wgmma_configs, lambda config: MatmulWgmma(*config), w)
            best_of("MatmulWgmma, cp.async", wgmma_configs, lambda config: MatmulWgmma(*config, tma=False), w)
            c.fill_(float("nan"))
            matmul(a, w.t(), out=c)
            torch.testing.assert_close(c, expected, atol=1e-2, rtol=1e-2)
            chosen = matmul_module.kernel_for(m, torch.float16, "col", True, wgmma=True, n=n,
                                              multiprocessors=torch.cuda.get_device_properties(0).multi_processor_count)
            chosen = type(chosen).__name__ + (f" {chosen.block_m}x{chosen.block_n}" if hasattr(chosen, "block_n") else "")
            row("matmul(a, w.t())", benchmark_func(lambda: matmul(a, w.t(), out=c), warmup=5, repeat=args.repeat),
                chosen)
    header = f"{'m':>5} {'n':>6} {'k':>6}  {'kernel':<24} {'ms':>9} {'TFLOP/s':>8} {'vs cuBLAS':>9}"
    print(f"device: {torch.cuda.get_device_name()}")
    print(header)
    print("-" * len(header))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
