"""One quantized_matmul decode call per weight type inside an NVTX range "prof", for Nsight Compute.

    ncu --nvtx --nvtx-include "prof/" --section SpeedOfLight --section MemoryWorkloadAnalysis \\
        --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats \\
        python scripts/profile_quantized.py --types uint4b,uint2b

Each type: the weights of M x K x N (default 1 x 8192 x 28672, group 128) built, packed and checked as
bench_quantized.py does, three warm-up calls outside the range, then one call inside it (the quantized
kernel, which adds up K's splits itself). ``--config warps,units,split`` profiles that configuration
instead of the table's.
"""
import argparse
import pathlib
import sys
from dataclasses import replace

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import bench_quantized as bench  # noqa: E402
from tilus_tvm.schedules.quantized_matmul import quantized_matmul  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--types", default="uint4b", help="comma-separated weight types")
    parser.add_argument("--shape", default="1x8192x28672", help="MxKxN")
    parser.add_argument("--config", default=None, help="warps,units_per_warp,split_k (default: the table's)")
    args = parser.parse_args()
    m, k, n = (int(v) for v in args.shape.split("x"))
    torch.manual_seed(0)
    for name in args.types.split(","):
        w = bench.Weights(name, k, n)
        config = bench.table_config(m, w.packed.format)  # (on sm_90a its Hopper and wgmma rows, as quantized_matmul)
        if args.config:
            warps, units, split = (int(v) for v in args.config.split(","))
            config = replace(config, warps=warps, units_per_warp=units, split_k=split)
        a = torch.randn(m, k, device="cuda").half()
        out = torch.empty(m, n, dtype=torch.float16, device="cuda")
        for _ in range(3):
            quantized_matmul(a, w.packed, w.scales, out=out, config=config)
        w.check(a, out)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_push("prof")
        quantized_matmul(a, w.packed, w.scales, out=out, config=config)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
        print(f"{name} {args.shape}: profiled {bench.config_text(config)}")
        del w
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
