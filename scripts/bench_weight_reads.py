"""How fast quantized_matmul's weight loads alone can read DRAM: a kernel that loads a packed weight's
words exactly as ``QuantizedMatmul`` does (its ``words`` layout, k-steps in flight, split-K over grid z)
and only xors them together, beside the device-to-device copy bandwidth and ``quantized_matmul`` itself.

    python scripts/bench_weight_reads.py                      # u4 and u2 at 1x8192x28672, group 128
    python scripts/bench_weight_reads.py --types uint4b --k 4096 --n 11008

The difference between the two is the conversion and mma time that the loads do not hide. Timing as in
bench_quantized.py (CUDA graph replays, L2 flushed clean before each).
"""
import argparse
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import bench_quantized as bench  # noqa: E402
import tilus_tvm as tilus  # noqa: E402
from tilus_tvm import dtypes, int32  # noqa: E402
from tilus_tvm.schedules.quantized_matmul import Config, kernel_layouts  # noqa: E402
from tilus_tvm.schedules.quantized_weight import WeightFormat  # noqa: E402


def reader(fmt: WeightFormat, warps: int, units: int, splits: int, prefetch: int):
    """The weight loads of QuantizedMatmul(fmt, warps=, units_per_warp=, split_k=, prefetch=), xored."""
    words, _, _, _, _ = kernel_layouts(fmt, warps, units, 8, dtypes.float16)
    shape, strides = list(fmt.storage_shape), list(fmt.storage_strides)
    bn = warps * units * 16
    steps = fmt.steps // splits

    class ReadWeights(tilus.Script):
        def __call__(self, w_ptr: ~int32, out_ptr: ~int32):
            self.attrs.blocks = [1, self.utils.ceil_div(fmt.n, bn), splits]
            self.attrs.warps = warps
            granule0: int32 = self.blockIdx.y * (bn // (16 * fmt.units))
            first: int32 = self.blockIdx.z * steps
            gw = self.global_view(w_ptr, dtype=int32, shape=[shape[0], first + steps] + shape[2:], strides=strides)
            ahead = []
            for j in list(range(prefetch)):
                ahead.append(self.load_global(gw, offsets=[granule0, first + j, 0, 0, 0], shape=list(words.shape),
                                              dims=[0, 2, 3, 4], layout=words))
            acc = self.register_tensor(dtype=int32, shape=list(words.shape), layout=words, init=0)
            for i in range(steps):
                new = self.load_global(gw, offsets=[granule0, first + i + prefetch, 0, 0, 0],
                                       shape=list(words.shape), dims=[0, 2, 3, 4], layout=words)
                acc = acc ^ ahead[0]
                for later in list(range(1, len(ahead))):
                    self.assign(ahead[later - 1], ahead[later])
                self.assign(ahead[-1], new)
            go = self.global_view(out_ptr, dtype=int32, shape=[self.utils.ceil_div(fmt.n, bn) * splits] + list(words.shape))
            self.store_global(go, acc, offsets=[self.blockIdx.y * splits + self.blockIdx.z, 0, 0, 0, 0],
                              dims=[1, 2, 3, 4])

    return ReadWeights(), words


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--types", default="uint4b,uint2b")
    parser.add_argument("--k", type=int, default=8192)
    parser.add_argument("--n", type=int, default=28672)
    args = parser.parse_args()
    bandwidth = bench.copy_bandwidth()
    print(f"# {torch.cuda.get_device_name()}; copy bandwidth {bandwidth / 1e6:.2f} TB/s; M=1, group 128")
    print(f"{'weights':<10}{'kernel':<34}{'MB read':>9}{'time us':>9}{'TB/s':>7}{'of copy':>9}")
    for name in args.types.split(","):
        w = bench.Weights(name, args.k, args.n)
        fmt = w.packed.format
        t_ours, _, _, config, _ = bench.run_ours(w, 1)
        nbytes = w.packed.storage.numel() * 4
        rows = [(f"quantized_matmul {bench.config_text(config)}", t_ours)]
        for warps, units, prefetch in ((config.warps, config.units_per_warp, config.prefetch),
                                       (config.warps, config.units_per_warp, 1), (8, config.units_per_warp, 2)):
            kernel, words = reader(fmt, warps, units, config.split_k, prefetch)
            blocks = -(-fmt.n // (warps * units * 16)) * config.split_k
            out = torch.empty((blocks,) + tuple(words.shape), dtype=torch.int32, device="cuda")
            kernel(w.packed.storage, out)
            rows.append((f"loads only {bench.config_text(Config(warps=warps, units_per_warp=units, split_k=config.split_k, prefetch=prefetch))}",
                         bench.timed(lambda: kernel(w.packed.storage, out))))
        for label, t in rows:
            print(f"{name:<10}{label:<34}{nbytes / 1e6:9.1f}{t:9.1f}{nbytes / t / 1e6:7.2f}{nbytes / bandwidth / t:9.0%}")
        del w
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
