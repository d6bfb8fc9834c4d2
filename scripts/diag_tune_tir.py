"""Hand-picked points of ``tune_tir``'s design space, timed beside cuBLAS: how fast the space's best
schedules are, apart from how well the search finds them.

    python scripts/diag_tune_tir.py                        # build each point (no GPU needed)
    python scripts/diag_tune_tir.py --gpu --stages 3 --store float16

Each point fixes the decisions of the sketch MetaSchedule's ``MultiLevelTilingTensorCore`` makes for a
4096^3 f16 matmul (``tilus_tvm.tune.tir.space``): the five-level tiles of i (16-row mma atoms) and j
(8-column atoms), ``[blockIdx.y, blockIdx.x, threadIdx.y, per-warp, innermost]``, the three-level tiles
of k (16-deep atoms; the shared tile holds the last two), the copies' vector lengths and the unroll
step. They are the tilings the hand-written ``Matmul`` uses (64x64 warp tiles, 128x256 or 256x128
blocks, k tiles of 32) and neighbours of them. ``--store float16`` times the matmul whose float32
sums are stored as float16 (cuBLAS's output type) instead of float32.

Measured on an H200 (cuBLAS 758-766 TFLOP/s), float32 output: with 4 stages and
``refill_after_wait`` (the defaults) 384-395 TFLOP/s (0.49-0.52x) for every point but 128x128
(328, 0.43x); with two barriers a k-step (``--no-refill``) 327-354
(0.43-0.47x). The search (``bench_tuning.py --part tir``) found 0.45-0.51x with 64 trials, 0.53x with 128. The hand-written
``mma.sync`` ``Matmul`` reaches 452-456.
"""
import argparse
import pathlib
import sys

import tvm
from tvm.s_tir import meta_schedule as ms

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from tests.intrin.matmul import te_matmul  # noqa: E402
from tilus_tvm.tune import tir  # noqa: E402

SIZE = 4096
# name: (i tiles, j tiles, k tiles, elements a copy moves (4 or 8), unroll step)
POINTS = {
    "128x256, 2x4 warps of 64x64, k 32, unroll 0": ([32, 1, 2, 1, 4], [1, 16, 4, 2, 4], [128, 2, 1], 8, 0),
    "128x256, 2x4 warps of 64x64, k 32, unroll 16": ([32, 1, 2, 1, 4], [1, 16, 4, 2, 4], [128, 2, 1], 8, 16),
    "128x256, 2x4 warps of 64x64 (2x2 inner), k 32": ([32, 1, 2, 2, 2], [1, 16, 4, 2, 4], [128, 2, 1], 8, 16),
    "128x256, 2x4 warps of 64x64, k 64": ([32, 1, 2, 1, 4], [1, 16, 4, 2, 4], [64, 4, 1], 8, 16),
    "128x128, 2x2 warps of 64x64, k 32": ([32, 1, 2, 1, 4], [1, 32, 2, 2, 4], [128, 2, 1], 8, 16),
    "256x128, 4x2 warps of 64x64, k 32": ([16, 1, 4, 1, 4], [1, 32, 2, 2, 4], [128, 2, 1], 8, 16),
}


def schedules(stages: int = 4, store: str = "float32"):
    """(name, scheduled IRModule or None when the postprocessors reject it, target) for each point."""
    func = te_matmul(SIZE, SIZE, SIZE, "float16", "float32", None if store == "float32" else store)
    mod = tvm.IRModule({"main": func.with_attr("global_symbol", "main")})
    target = tir.tuning_target("sm_90")
    context = ms.TuneContext(mod=mod, target=target, space_generator=tir.space(("float16",), True, stages),
                             task_name="mm", num_threads=1)
    for name, (ti, tj, tk, vector, step) in POINTS.items():
        yield name, tir.fixed_schedule(context, ti, tj, tk, vector=vector, unroll=step), target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", action="store_true", help="time each point against cuBLAS (else only build)")
    parser.add_argument("--stages", type=int, default=4, help="the cp.async pipeline's depth (AsyncPipeline)")
    parser.add_argument("--store", default="float32", choices=["float32", "float16"])
    parser.add_argument("--no-refill", action="store_true", help="compile without refill_after_wait (two barriers a k-step)")
    options = parser.parse_args()
    if options.gpu:
        import torch

        from tilus_tvm.utils import benchmark_func

        a = (torch.rand(SIZE, SIZE, device="cuda") - 0.5).half()
        b = (torch.rand(SIZE, SIZE, device="cuda") - 0.5).half()
        c16 = torch.empty(SIZE, SIZE, device="cuda", dtype=torch.float16)
        out = c16 if options.store == "float16" else torch.empty(SIZE, SIZE, device="cuda", dtype=torch.float32)
        expected = a.float() @ b.float()
        cublas = benchmark_func(lambda: torch.matmul(a, b, out=c16))
        print(f"{torch.cuda.get_device_name()}: cuBLAS {cublas:.4f} ms, {2 * SIZE ** 3 / cublas * 1e-9:.1f} TFLOP/s")
    print(f"# goal (issue 13): tune_tir >= 0.5x cuBLAS at {SIZE}^3; these points bound what its space holds")
    print(f"{'point':<50} {'ms':>8} {'TFLOP/s':>8} {'vs cuBLAS':>9}   ({options.stages} stages, {options.store} out)")
    for name, mod, target in schedules(options.stages, options.store):
        if mod is None:
            print(f"{name:<50} rejected by the postprocessors")
            continue
        kernel = tir.build(mod, target, refill_after_wait=not options.no_refill)["main"]
        if not options.gpu:
            print(f"{name:<50} built")
            continue
        out.fill_(float("nan"))
        kernel(a, b, out)
        error = (out.float() - expected).abs().max().item()
        if not error < 5e-2:
            print(f"{name:<50} WRONG: max error {error:.3g}")
            continue
        ms_ = benchmark_func(lambda: kernel(a, b, out))
        print(f"{name:<50} {ms_:>8.4f} {2 * SIZE ** 3 / ms_ * 1e-9:>8.1f} {cublas / ms_:>8.2f}x")


if __name__ == "__main__":
    main()
