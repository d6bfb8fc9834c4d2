"""The decoder block of tutorials/05: TVM's default CUDA pipeline vs the same module on tilus kernels
vs PyTorch eager (and torch.compile when it works), at decode (batch 1, one token) and prefill
(batch 4 x 2048 tokens), float16, Llama-2-7B sizes.

- ``tvm default``: ``tvm.compile`` of the exported Relax module (LegalizeOps, FuseOps, dlight).
- ``tilus``: the same module after ``DispatchKernels`` (matmuls, RMSNorms and attention on tilus
  kernels, the rest as above), exported with ``tilus_relax.export`` and loaded with
  ``tilus_tvm.load`` -- the artifact that ships.
- ``torch eager`` / ``torch.compile``: the block in PyTorch (``F.linear``, ``F.rms_norm``, SDPA).

One table: milliseconds (median of CUDA-event timings), TFLOP/s, and the ratios to TVM's default and
to eager. The goal is tilus >= 3x TVM default at prefill and tilus >= eager.

    python scripts/bench_relax.py [--small] [--iters 30] [--configs decode prefill]
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import tempfile
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHAPES = {"decode": (1, 1), "prefill": (4, 2048)}


def tutorial():
    path = os.path.join(ROOT, "tutorials", "05_relax_decoder_block.py")
    spec = importlib.util.spec_from_file_location("tutorial_05", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["tutorial_05"] = module
    spec.loader.exec_module(module)
    return module


def flops(config, batch: int, seq: int) -> float:
    rows = batch * seq
    linear = 2 * rows * config.hidden * (3 * config.hidden + config.hidden + 3 * config.intermediate)
    attention = 4 * batch * config.heads * seq * seq * config.head_dim / 2  # causal: half the scores
    return linear + attention


def time_ms(fn, iters: int) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def torch_block(config):
    import torch.nn.functional as F

    def block(x, w):
        batch, seq, hidden = x.shape
        eps = config.eps
        qkv = F.linear(F.rms_norm(x, (hidden,), w["input_norm.weight"], eps), w["qkv.weight"])
        q, k, v = qkv.view(batch, seq, 3, config.heads, config.head_dim).unbind(2)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        x = x + F.linear(o.transpose(1, 2).reshape(batch, seq, hidden), w["o_proj.weight"])
        gate, up = F.linear(F.rms_norm(x, (hidden,), w["post_norm.weight"], eps), w["gate_up.weight"]).chunk(2, -1)
        return x + F.linear(F.silu(gate) * up, w["down.weight"])

    return block


def export_module(t, config, batch: int, seq: int):
    from tvm.relax.frontend import nn

    model = t.decoder_block_class()(config)
    model.to("float16")
    return model.export_tvm(spec={"forward": {"x": nn.spec.Tensor((batch, seq, config.hidden), "float16")}})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true")
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--configs", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("bench_relax.py needs a CUDA GPU")
        return
    import tvm
    from tvm import relax

    import tilus_tvm
    import tilus_tvm.relax as tilus_relax
    from tilus_tvm.target import tvm_target

    t = tutorial()
    config = t.CONFIGS["small" if args.small else "llama-7b"]
    from tilus_tvm.target import current_arch

    arch = current_arch()  # sm_90a on an H100/H200: the dispatched matmuls may use wgmma
    device = tvm.cuda(0)
    workdir = tempfile.mkdtemp(prefix="bench_relax_")
    rows = []
    print(f"{torch.cuda.get_device_name()} ({arch}), hidden {config.hidden}, heads {config.heads}, "
          f"intermediate {config.intermediate}, float16")
    for name in args.configs:
        batch, seq = SHAPES[name]
        mod, named_params = export_module(t, config, batch, seq)
        names = [n for n, _ in named_params]
        weights = {n: w.cuda() for n, w in t.make_weights(config, names).items()}
        x = torch.randn(batch, seq, config.hidden, generator=torch.Generator().manual_seed(1)).half().cuda()
        args_tvm = [tvm.runtime.from_dlpack(x)] + [tvm.runtime.from_dlpack(weights[n]) for n in names]
        results = {}

        start = time.perf_counter()
        default_vm = relax.VirtualMachine(tvm.compile(mod, target=tvm_target(arch)), device)
        print(f"[{name}] tvm default built in {time.perf_counter() - start:.0f} s")
        results["tvm default"] = (time_ms(lambda: default_vm["forward"](*args_tvm), args.iters),
                                  torch.from_dlpack(default_vm["forward"](*args_tvm)))

        start = time.perf_counter()
        dispatched = tilus_relax.build(tilus_relax.DispatchKernels(arch)(mod), arch)
        path = os.path.join(workdir, f"block_{name}.so")
        tilus_relax.export(dispatched, path)
        tilus_vm = tilus_tvm.load(path)
        print(f"[{name}] tilus built and exported in {time.perf_counter() - start:.0f} s")
        results["tilus"] = (time_ms(lambda: tilus_vm["forward"](*args_tvm), args.iters),
                            torch.from_dlpack(tilus_vm["forward"](*args_tvm)))

        block = torch_block(config)
        with torch.no_grad():
            results["torch eager"] = (time_ms(lambda: block(x, weights), args.iters), block(x, weights))
            try:
                compiled = torch.compile(block)
                compiled(x, weights)
                results["torch.compile"] = (time_ms(lambda: compiled(x, weights), args.iters), compiled(x, weights))
            except Exception as exc:  # noqa: BLE001 - torch.compile may be unavailable (no triton...)
                print(f"[{name}] torch.compile skipped: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}")
        expected = t.reference(x, weights, config)
        work = flops(config, batch, seq)
        for impl, (ms, out) in results.items():
            error = ((out.float() - expected).abs().max() / expected.abs().max()).item()
            rows.append((name, impl, ms, work / ms / 1e9, results["tvm default"][0] / ms,
                         results["torch eager"][0] / ms, error))

    print(f"\n{'config':8} {'implementation':15} {'ms':>9} {'TFLOP/s':>8} {'x tvm':>7} {'x eager':>8} {'rel err':>8}")
    for name, impl, ms, tflops, vs_tvm, vs_eager, error in rows:
        print(f"{name:8} {impl:15} {ms:9.3f} {tflops:8.1f} {vs_tvm:7.2f} {vs_eager:8.2f} {error:8.1e}")
    goals = {(r[0], r[1]): r for r in rows}
    if ("prefill", "tilus") in goals:
        row = goals[("prefill", "tilus")]
        print(f"\nprefill: tilus is {row[4]:.2f}x TVM default (goal >= 3) and {row[5]:.2f}x eager (goal >= 1)")
    if ("decode", "tilus") in goals:
        row = goals[("decode", "tilus")]
        print(f"decode:  tilus is {row[4]:.2f}x TVM default and {row[5]:.2f}x eager (goal >= 1)")


if __name__ == "__main__":
    main()
