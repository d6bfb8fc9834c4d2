"""Matmul benchmark: the seed's MatmulV0 (and the 4-warp Matmul) beside torch.matmul (cuBLAS).

    python scripts/bench_matmul.py            # 4096^3 and a few LLM-serving shapes

Each row is the median of CUDA-event timings (tilus_tvm.utils.benchmark_func) measured in the same
run; results are checked against torch before timing.
"""
import argparse
import math
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from tests.helpers import load_tutorial  # noqa: E402
from tilus_tvm.utils import benchmark_func  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", default="4096x4096x4096,16x4096x4096,4096x12288x4096",
                        help="comma-separated MxNxK")
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()
    kernels = {
        "tilus-tvm MatmulV0 (1 warp, 64x64x16)": load_tutorial("04_matmul_v0").MatmulV0(),
        "tilus-tvm Matmul (4 warps, 64x128x16)": load_tutorial("03_matmul").Matmul(),
    }
    lines = []
    for shape in args.shapes.split(","):
        m, n, k = (int(v) for v in shape.split("x"))
        a = (torch.rand(m, k, dtype=torch.float16, device="cuda") - 0.5) / math.sqrt(k)
        b = (torch.rand(k, n, dtype=torch.float16, device="cuda") - 0.5) / math.sqrt(k)
        c = torch.empty(m, n, dtype=torch.float16, device="cuda")
        expected = a @ b
        rows = [("torch.matmul (cuBLAS)", lambda: torch.matmul(a, b, out=c))]
        for name, kernel in kernels.items():
            kernel(m, n, k, a, b, c)
            torch.testing.assert_close(c, expected, atol=1e-2, rtol=1e-2)
            rows.append((name, lambda kernel=kernel: kernel(m, n, k, a, b, c)))
        torch_ms = None
        for name, fn in rows:
            ms = benchmark_func(fn, warmup=5, repeat=args.repeat)
            torch_ms = torch_ms or ms
            tflops = 2 * m * n * k / ms * 1e-9
            lines.append(f"{m:>6} {n:>6} {k:>6}  {name:<40} {ms:>9.4f} {tflops:>8.1f} {torch_ms / ms:>8.2f}x")
    # printed at the end, so compilation progress bars (stderr) never interleave with the table
    header = f"{'m':>6} {'n':>6} {'k':>6}  {'kernel':<40} {'ms':>9} {'TFLOP/s':>8} {'vs torch':>9}"
    print(f"device: {torch.cuda.get_device_name()}")
    print(header)
    print("-" * len(header))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
