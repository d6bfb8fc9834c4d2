"""Tuning on the GPU host: the tuned Matmul against its default and hand-picked configurations and cuBLAS,
and MetaSchedule's tune_tir with the tilus.* intrinsics, in one table with the tuning wall times.

    python scripts/bench_tuning.py                              # 4096^3, 8192^3, three LLM shapes, tune_tir 4096^3
    python scripts/bench_tuning.py --shapes 4096x4096x4096 --tir-trials 0
    python scripts/bench_tuning.py --tracker host:9190:h100     # time candidates on the tracker's GPUs

Each shape is tuned from an empty database (a temporary directory), so the wall time is the whole
tuning: lowering, building on every core (MetaSchedule's LocalBuilder), timing (LocalRunner).
Goals: tuned >= the best hand-picked configuration; tune_tir >= 0.5x cuBLAS; 32 configurations in < 60 s.
"""
from __future__ import annotations

import argparse
import pathlib
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import tilus_tvm as tilus  # noqa: E402
from tilus_tvm.schedules.matmul import Matmul  # noqa: E402
from tilus_tvm.utils import benchmark_func  # noqa: E402

SHAPES = "4096x4096x4096,8192x8192x8192,16x14336x4096,128x4096x14336,1024x28672x4096"
# (block_m, block_n, block_k, warps, stages): the configurations bench_matmul.py and matmul() pick by hand
HAND_PICKED = ((128, 256, 64, 8, 3), (128, 256, 64, 8, 4), (128, 256, 32, 8, 4), (128, 128, 32, 4, 4),
               (64, 128, 64, 4, 4), (16, 128, 64, 4, 4))


@tilus.autotune("block_m, block_n", [(64, 128), (128, 128), (128, 256), (256, 128)])
@tilus.autotune("block_k", [32, 64])
@tilus.autotune("warps", [4, 8])
@tilus.autotune("stages", [3, 4])
class TunedMatmul(Matmul):
    """The library Matmul over 32 configurations."""


def tflops(m: int, n: int, k: int, ms: float) -> float:
    return 2 * m * n * k / (ms * 1e-3) / 1e12


def bench_shape(m: int, n: int, k: int, tracker, rows: list) -> None:
    import torch

    a = (torch.rand(m, k, device="cuda") - 0.5).half()
    b = (torch.rand(k, n, device="cuda") - 0.5).half()
    c = torch.empty(m, n, device="cuda", dtype=torch.float16)
    shape = f"{m}x{n}x{k}"
    cublas = benchmark_func(lambda: torch.matmul(a, b, out=c))
    default = benchmark_func(lambda: Matmul()(m, n, k, a, b, c))
    hand = {}
    for config in HAND_PICKED:
        try:
            kernel = Matmul(*config)
            hand[config] = benchmark_func(lambda: kernel(m, n, k, a, b, c))
        except Exception as exc:  # noqa: BLE001 - a configuration that does not fit this shape
            print(f"  {shape}: hand-picked {config} failed: {type(exc).__name__}: {str(exc)[:120]}")
    best_hand = min(hand.items(), key=lambda item: item[1]) if hand else (None, float("nan"))
    started = time.perf_counter()
    result = tilus.tune(TunedMatmul(), m, n, k, a, b, c, database=tempfile.mkdtemp(prefix="bench_tuning_"),
                        tracker=tracker)
    wall = time.perf_counter() - started
    tuned = result.instantiate()
    tuned_ms = benchmark_func(lambda: tuned(m, n, k, a, b, c))
    torch.testing.assert_close(c.float(), a.float() @ b.float(), rtol=2e-2, atol=2e-1)
    measured = sum(t.ok for t in result.trials)
    config = ",".join(str(result.config[name]) for name in ("block_m", "block_n", "block_k", "warps", "stages"))
    rows.append((shape, "Matmul default", default, cublas, ""))
    rows.append((shape, f"Matmul best hand-picked {best_hand[0]}", best_hand[1], cublas, ""))
    rows.append((shape, f"Matmul tuned ({config})", tuned_ms, cublas,
                 f"{wall:.1f} s for {len(result.trials)} configs ({measured} timed)"))
    rows.append((shape, "cuBLAS (torch.matmul)", cublas, cublas, ""))


def bench_tune_tir(size: int, trials: int, rows: list) -> None:
    import torch
    import tvm

    from tests.intrin.matmul import te_matmul
    from tilus_tvm.tune import tir

    func = te_matmul(size, size, size, "float16", "float32")
    started = time.perf_counter()
    database = tilus.tune_tir(func, None, work_dir=tempfile.mkdtemp(prefix="bench_tune_tir_"),
                              max_trials_global=trials, num_trials_per_iter=min(64, trials), seed=1)
    wall = time.perf_counter() - started
    scheduled = tir.compile_best(database, func, None)
    shape = f"{size}x{size}x{size}"
    a = (torch.rand(size, size, device="cuda") - 0.5).half()
    b = (torch.rand(size, size, device="cuda") - 0.5).half()
    c32 = torch.empty(size, size, device="cuda", dtype=torch.float32)
    c16 = torch.empty(size, size, device="cuda", dtype=torch.float16)
    cublas = benchmark_func(lambda: torch.matmul(a, b, out=c16))
    if scheduled is None:
        rows.append((shape, "tune_tir (no valid schedule)", float("nan"), cublas, f"{wall:.1f} s, {trials} trials"))
        return
    kernel = tvm.compile(scheduled, target=tir.tuning_target(None), tir_pipeline="s_tir")["main"]
    ms_time = benchmark_func(lambda: kernel(a, b, c32))
    torch.testing.assert_close(c32, a.float() @ b.float(), rtol=0, atol=5e-2)
    rows.append((shape, "tune_tir, tilus.* intrinsics (f32 out)", ms_time, cublas, f"{wall:.1f} s, {trials} trials"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", default=SHAPES, help="comma-separated MxNxK")
    parser.add_argument("--tracker", default=None, help="host:port:key of a TVM RPC tracker")
    parser.add_argument("--tir-size", type=int, default=4096)
    parser.add_argument("--tir-trials", type=int, default=256, help="0: skip tune_tir")
    args = parser.parse_args()
    import torch

    print(f"device: {torch.cuda.get_device_name()}")
    rows: list = []
    for shape in args.shapes.split(","):
        m, n, k = (int(x) for x in shape.split("x"))
        bench_shape(m, n, k, args.tracker, rows)
    if args.tir_trials:
        bench_tune_tir(args.tir_size, args.tir_trials, rows)
    print(f"\n{'shape':<18} {'kernel':<52} {'ms':>9} {'TFLOP/s':>8} {'vs cuBLAS':>9}  tuning")
    for shape, name, ms, cublas, note in rows:
        m, n, k = (int(x) for x in shape.split("x"))
        print(f"{shape:<18} {name:<52} {ms:9.4f} {tflops(m, n, k, ms):8.1f} {cublas / ms:8.2f}x  {note}")


if __name__ == "__main__":
    main()
