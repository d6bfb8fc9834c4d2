"""Where the decoder block's time goes: every GPU kernel of one call, summed by name, for the module
with our kernels dispatched and for PyTorch eager (torch.profiler; CUPTI sees the kernels TVM's VM
launches too).

    python scripts/profile_relax.py                 # prefill, 4 x 2048 tokens
    python scripts/profile_relax.py --config decode
"""
from __future__ import annotations

import argparse
import collections
import os
import pathlib
import sys
import tempfile

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import bench_relax  # noqa: E402


def kernel_table(fn, iters: int = 5, top: int = 14) -> str:
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
    totals: dict = collections.defaultdict(float)
    counts: dict = collections.defaultdict(int)
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            totals[event.name] += event.device_time / iters
            counts[event.name] += 1
    total = sum(totals.values())
    lines = [f"  {'us':>9} {'share':>6} {'calls':>5}  kernel"]
    for name, us in sorted(totals.items(), key=lambda item: -item[1])[:top]:
        lines.append(f"  {us:9.1f} {us / total:6.1%} {counts[name] // iters:5d}  {name[:100]}")
    lines.append(f"  {total:9.1f} total GPU time per call")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default="prefill", choices=sorted(bench_relax.SHAPES))
    args = parser.parse_args()
    import tvm

    import tilus_tvm
    import tilus_tvm.relax as tilus_relax
    from tilus_tvm.target import current_arch

    t = bench_relax.tutorial()
    config = t.CONFIGS["llama-7b"]
    batch, seq = bench_relax.SHAPES[args.config]
    arch = current_arch()
    mod, named_params = bench_relax.export_module(t, config, batch, seq)
    names = [n for n, _ in named_params]
    weights = {n: w.cuda() for n, w in t.make_weights(config, names).items()}
    x = torch.randn(batch, seq, config.hidden, generator=torch.Generator().manual_seed(1)).half().cuda()
    args_tvm = [tvm.runtime.from_dlpack(x)] + [tvm.runtime.from_dlpack(weights[n]) for n in names]
    path = os.path.join(tempfile.mkdtemp(prefix="profile_relax_"), "block.so")
    tilus_relax.export(tilus_relax.build(tilus_relax.DispatchKernels(arch)(mod), arch), path)
    vm = tilus_tvm.load(path)
    print(f"{torch.cuda.get_device_name()} ({arch}), {args.config} {batch} x {seq}")
    print("tilus (our kernels dispatched):")
    print(kernel_table(lambda: vm["forward"](*args_tvm)))
    block = bench_relax.torch_block(config)
    with torch.no_grad():
        print("torch eager:")
        print(kernel_table(lambda: block(x, weights)))


if __name__ == "__main__":
    main()
