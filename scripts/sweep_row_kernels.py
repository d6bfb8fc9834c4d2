"""Row kernels (RMSNorm, LayerNorm, softmax) at the bench_norms.py shapes, each under its default
RowConfig and its neighbours (half and twice the threads per row), in TB/s and as a fraction of the
copy bandwidth measured in the same run.

Two timings per kernel: "b2b" times 50 launches of the kernel back to back between two CUDA events
(the kernel's own speed whenever one launch takes less host time than the kernel takes on the GPU);
"call" is the median of single calls of the torch-like function (default config only), which also
pays the host-side wrapper, as bench_norms.py does.

    python scripts/sweep_row_kernels.py            # about a minute on an H100 (compiles ~27 kernels)
    python scripts/sweep_row_kernels.py --quick    # the default configs only
"""
import argparse
import importlib
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from tilus_tvm import bfloat16, float16, float32  # noqa: E402
from tilus_tvm.schedules import layer_norm, rms_norm, softmax  # noqa: E402
from tilus_tvm.utils import benchmark_func  # noqa: E402

softmax_module = importlib.import_module("tilus_tvm.schedules.softmax")
norms_module = importlib.import_module("tilus_tvm.schedules.norms")
RowConfig, row_config = softmax_module.RowConfig, softmax_module.row_config

NORM_SHAPES = [(4096, 4096), (16384, 4096), (32768, 4096), (4096, 8192), (16384, 8192), (32768, 8192)]
SOFTMAX_SHAPES = [(4096, 1024), (4096, 4096), (4096, 8192), (4096, 16384), (2048, 32768)]
DTYPE = torch.float16
TILUS_DTYPE = {torch.float16: float16, torch.bfloat16: bfloat16, torch.float32: float32}[DTYPE]
BATCH = 50


def copy_bandwidth() -> float:
    x = torch.empty(1 << 29, dtype=torch.float16, device="cuda")
    ms = benchmark_func(lambda: x.clone(), warmup=3, repeat=20)
    return 2 * x.numel() * x.element_size() / ms / 1e9


def back_to_back_ms(fn) -> float:
    """Milliseconds per launch of ``BATCH`` launches between two events (median of 5 batches)."""
    for _ in range(3):
        fn()
    times = []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(BATCH):
            fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / BATCH)
    return sorted(times)[len(times) // 2]


def neighbours(n: int, bits: int, quick: bool) -> list:
    """The default RowConfig first, then half and twice its threads per row (those that are valid,
    keep at most 128 bytes per thread and fit in 1024 threads)."""
    base = row_config(n, bits)
    configs = [base]
    if quick:
        return configs
    vector = 128 // bits
    for threads in (base.threads_per_row // 2, base.threads_per_row * 2):
        if not 32 <= threads <= 1024:
            continue
        unit = threads * vector
        block_n = -(-n // unit) * unit
        if block_n // threads * bits // 8 > 128:
            continue
        rows_per_block = max(1, 128 // threads)
        configs.append(RowConfig(block_n, threads * rows_per_block // 32, rows_per_block))
    return configs


def report(name, shape, config, default, nbytes, b2b_ms, call_ms, copy_tbs):
    tbs = nbytes / b2b_ms / 1e9
    call = f"{nbytes / call_ms / 1e9:8.2f}" if call_ms else f"{'':8}"
    mark = "*" if default else " "
    print(f"{name:<10}{str(shape):<15}{mark}{config.threads_per_row:>5}{config.rows_per_block:>4}"
          f"{config.values_per_thread:>5}{tbs:9.2f}{tbs / copy_tbs:8.0%}{call}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="default configs only")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("sweep_row_kernels.py needs a CUDA GPU")
        return
    torch.manual_seed(0)
    copy_tbs = copy_bandwidth()
    print(f"# {torch.cuda.get_device_name()}, copy bandwidth {copy_tbs:.2f} TB/s, dtype {DTYPE}; "
          f"* = the default config")
    print(f"{'op':<10}{'shape':<15} {'thr':>5}{'rpb':>4}{'vals':>5}{'b2b':>9}{'of copy':>8}{'call':>8}")
    bits = TILUS_DTYPE.nbits
    for rows, hidden in NORM_SHAPES:
        x = torch.randn(rows, hidden, dtype=DTYPE, device="cuda")
        w = torch.randn(1, hidden, dtype=DTYPE, device="cuda")
        b = torch.randn(1, hidden, dtype=DTYPE, device="cuda")
        y = torch.empty_like(x)
        nbytes = 2 * x.numel() * x.element_size()
        for name in ("rms_norm", "layer_norm"):
            expected = (rms_norm(x, w[0], 1e-6) if name == "rms_norm" else layer_norm(x, w[0], b[0], 1e-5)).float()
            for i, config in enumerate(neighbours(hidden, bits, args.quick)):
                if name == "rms_norm":
                    kernel = norms_module.RMSNorm(config.block_n, config.warps, TILUS_DTYPE, config.rows_per_block)
                    launch = lambda: kernel(rows, hidden, 1e-6, x, w, y)  # noqa: E731
                    call = lambda: rms_norm(x, w[0], 1e-6)  # noqa: E731
                else:
                    kernel = norms_module.LayerNorm(config.block_n, config.warps, TILUS_DTYPE, True,
                                                    config.rows_per_block)
                    launch = lambda: kernel(rows, hidden, 1e-5, x, w, b, y)  # noqa: E731
                    call = lambda: layer_norm(x, w[0], b[0], 1e-5)  # noqa: E731
                launch()
                error = (y.float() - expected).abs().max().item()
                assert error < 0.1, f"{name} {config}: max error {error}"
                call_ms = benchmark_func(call, warmup=3, repeat=20) if i == 0 else None
                report(name, (rows, hidden), config, i == 0, nbytes, back_to_back_ms(launch), call_ms, copy_tbs)
        del x, y
    for rows, n in SOFTMAX_SHAPES:
        x = torch.randn(rows, n, dtype=DTYPE, device="cuda") * 3
        y = torch.empty_like(x)
        nbytes = 2 * x.numel() * x.element_size()
        expected = torch.softmax(x.float(), -1)
        for i, config in enumerate(neighbours(n, bits, args.quick)):
            kernel = softmax_module.Softmax(config.block_n, config.warps, TILUS_DTYPE, config.rows_per_block)
            launch = lambda: kernel(rows, n, x, y)  # noqa: E731
            launch()
            error = (y.float() - expected).abs().max().item()
            assert error < 1e-2, f"softmax {config}: max error {error}"
            call_ms = benchmark_func(lambda: softmax(x), warmup=3, repeat=20) if i == 0 else None
            report("softmax", (rows, n), config, i == 0, nbytes, back_to_back_ms(launch), call_ms, copy_tbs)
        if n >= 16384:
            online = softmax_module.OnlineSoftmax(4096, 8, TILUS_DTYPE)
            ms = back_to_back_ms(lambda: online(rows, n, x, y))
            tbs = nbytes / ms / 1e9
            print(f"{'softmax':<10}{str((rows, n)):<15} online chunk 4096, 8 warps{tbs:9.2f}{tbs / copy_tbs:8.0%}")
        del x, y


if __name__ == "__main__":
    main()
