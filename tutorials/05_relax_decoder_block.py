"""Tutorial 5: a Llama-style decoder block in Relax, on tilus kernels, shipped as one ``.so``.

The block is written with TVM's ``relax.frontend.nn`` as usual -- RMSNorm, causal multi-head
attention (no KV cache, no rotary embedding), a SwiGLU MLP, all float16. One switch,
``tilus_relax.enabled(arch)``, makes ``export_tvm`` hand back the module with its matmuls, norms,
attention, residual adds and SwiGLU activation rewritten to tilus kernels (``DispatchKernels``; the
log says what went where and why anything did not), and makes ``tvm.compile`` lower those kernels
with the right TIR pipeline. Attention reads q, k and v straight out of the fused QKV projection,
so the splits and transposes around it disappear; on an H100 or H200 (sm_90a) the matmuls use
Hopper's ``wgmma``.

``tilus_relax.export`` writes the executable as one shared library whose CUDA code is a fatbin
built by nvcc: a fresh process loads it with ``tilus_tvm.load`` (a ``relax.VirtualMachine``) in
milliseconds, without nvcc or NVRTC, and runs it on torch tensors. The output is checked against
a PyTorch implementation of the block with the same weights.

    python tutorials/05_relax_decoder_block.py            # Llama-2-7B sizes: hidden 4096, 32 heads
    python tutorials/05_relax_decoder_block.py --small    # hidden 1024, 8 heads (quicker)

Without a GPU it builds and exports for sm_90 (nvcc is enough) and says that running needs a GPU.
"""
from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

import torch

import tilus_tvm
import tilus_tvm.relax as tilus_relax


@dataclass(frozen=True)
class Config:
    hidden: int = 4096
    heads: int = 32
    intermediate: int = 11008
    eps: float = 1e-6

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


CONFIGS = {"llama-7b": Config(), "small": Config(hidden=1024, heads=8, intermediate=2816)}


def decoder_block_class():
    """The block as a ``relax.frontend.nn`` module (defined in a function: TVM is imported lazily)."""
    from tvm.relax.frontend import nn
    from tvm.relax.frontend.nn import op

    class DecoderBlock(nn.Module):
        def __init__(self, config: Config):
            self.config = config
            self.input_norm = nn.RMSNorm(config.hidden, axes=-1, epsilon=config.eps, bias=False)
            self.qkv = nn.Linear(config.hidden, 3 * config.hidden, bias=False)
            self.o_proj = nn.Linear(config.hidden, config.hidden, bias=False)
            self.post_norm = nn.RMSNorm(config.hidden, axes=-1, epsilon=config.eps, bias=False)
            self.gate_up = nn.Linear(config.hidden, 2 * config.intermediate, bias=False)
            self.down = nn.Linear(config.intermediate, config.hidden, bias=False)

        def forward(self, x: nn.Tensor) -> nn.Tensor:  # x: [batch, seq, hidden]
            c = self.config
            batch, seq, _ = x.shape
            qkv = op.reshape(self.qkv(self.input_norm(x)), (batch, seq, 3, c.heads, c.head_dim))
            q, k, v = (op.reshape(t, (batch, seq, c.heads, c.head_dim)) for t in op.split(qkv, 3, axis=2))
            attention = op.scaled_dot_product_attention(q, k, v, is_causal=True)  # [batch, seq, heads, head_dim]
            x = x + self.o_proj(op.reshape(attention, (batch, seq, c.hidden)))
            gate, up = op.split(self.gate_up(self.post_norm(x)), 2, axis=-1)
            return x + self.down(op.silu(gate) * up)

    return DecoderBlock


def build_and_export(config: Config, arch: str, path: str) -> list[str]:
    """Export the block for ``arch`` to ``path``; returns the names of its weights, in call order."""
    import tvm
    from tvm.relax.frontend import nn

    from tilus_tvm.target import tvm_target

    model = decoder_block_class()(config)
    model.to("float16")
    spec = {"forward": {"x": nn.spec.Tensor(("batch", "seq", config.hidden), "float16")}}
    with tilus_relax.enabled(arch):  # the switch: export_tvm dispatches, tvm.compile lowers our kernels right
        mod, named_params = model.export_tvm(spec=spec)
        executable = tvm.compile(mod, target=tvm_target(arch))
    tilus_relax.export(executable, path, archs=[arch])  # one .so, a fatbin inside
    return [name for name, _ in named_params]


def describe_library(path: str) -> None:
    from tilus_tvm.runtime.export import CudaPayload, fatbin_entries, read_library_blob

    blob = read_library_blob(path)
    print(f"{path}: {os.path.getsize(path) / 1e6:.1f} MB; modules {[m.kind for m in blob.modules]}")
    for entry in blob.modules:
        if entry.kind == "cuda":
            payload = CudaPayload.parse(entry.payload)
            images = fatbin_entries(payload.code) if payload.fmt == "fatbin" else [(payload.fmt, "?")]
            print(f"  CUDA module: {payload.fmt} ({', '.join(f'{k} {a}' for k, a in images)}), "
                  f"{len(payload.code) / 1e3:.0f} KB")
    with open(path, "rb") as f:
        print(f"  CUDA source in the library: {'yes' if b'__global__' in f.read() else 'no'}")


def make_weights(config: Config, names: list[str], seed: int = 0) -> dict[str, torch.Tensor]:
    """Random float16 weights of the right shapes (norm weights around 1, projections ~ N(0, 0.02))."""
    generator = torch.Generator().manual_seed(seed)
    shapes = {"input_norm.weight": (config.hidden,), "post_norm.weight": (config.hidden,),
              "qkv.weight": (3 * config.hidden, config.hidden), "o_proj.weight": (config.hidden, config.hidden),
              "gate_up.weight": (2 * config.intermediate, config.hidden),
              "down.weight": (config.hidden, config.intermediate)}
    weights = {}
    for name in names:
        noise = torch.randn(shapes[name], generator=generator)
        weights[name] = (1 + 0.1 * noise if name.endswith("norm.weight") else 0.02 * noise).half()
    return weights


def reference(x: torch.Tensor, w: dict[str, torch.Tensor], config: Config) -> torch.Tensor:
    """The block in PyTorch, float32 math on the float16 weights."""
    f = {name: t.float() for name, t in w.items()}
    batch, seq, hidden = x.shape

    def rms_norm(t: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + config.eps) * weight

    h = x.float()
    qkv = (rms_norm(h, f["input_norm.weight"]) @ f["qkv.weight"].T).view(batch, seq, 3, config.heads, config.head_dim)
    q, k, v = (t.transpose(1, 2) for t in qkv.unbind(2))  # [batch, heads, seq, head_dim]
    attention = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    h = h + attention.transpose(1, 2).reshape(batch, seq, hidden) @ f["o_proj.weight"].T
    gate, up = (rms_norm(h, f["post_norm.weight"]) @ f["gate_up.weight"].T).chunk(2, dim=-1)
    return h + (torch.nn.functional.silu(gate) * up) @ f["down.weight"].T


def run_exported(path: str, weights_path: str, config: Config) -> float:
    """Load the library (in this fresh process), run the block at two shapes, compare with PyTorch."""
    start = time.perf_counter()
    vm = tilus_tvm.load(path)  # a relax.VirtualMachine on cuda:0; nothing is compiled
    print(f"loaded {os.path.basename(path)} in {(time.perf_counter() - start) * 1e3:.1f} ms")
    saved = torch.load(weights_path)
    names, weights = saved["names"], {n: t.cuda() for n, t in saved["weights"].items()}
    worst = 0.0
    for batch, seq in ((1, 7), (2, 160)):
        x = torch.randn(batch, seq, config.hidden, generator=torch.Generator().manual_seed(seq)).half().cuda()
        out = vm["forward"](x, *[weights[n] for n in names])
        out = out if isinstance(out, torch.Tensor) else torch.from_dlpack(out)
        expected = reference(x, weights, config)
        error = ((out.float() - expected).abs().max() / expected.abs().max()).item()
        worst = max(worst, error)
        print(f"  batch {batch}, seq {seq}: max |tilus - torch| / max |torch| = {error:.2e}")
    print("OK: the exported block matches PyTorch" if worst < 2e-2 else "MISMATCH")
    return worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="hidden 1024, 8 heads, intermediate 2816")
    parser.add_argument("--out", default=None, help="directory for the .so and the weights (default: a temp dir)")
    parser.add_argument("--run", nargs=2, metavar=("LIBRARY", "WEIGHTS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    config = CONFIGS["small" if args.small else "llama-7b"]
    if args.run:  # the fresh process
        sys.exit(0 if run_exported(args.run[0], args.run[1], config) < 2e-2 else 1)

    logging.basicConfig(format="  %(message)s")
    logging.getLogger("tilus_tvm.relax").setLevel(logging.INFO)  # what DispatchKernels did, and why
    gpu = torch.cuda.is_available()
    from tilus_tvm.target import current_arch

    arch = current_arch() if gpu else "sm_90"  # the GPU's (sm_90a on an H100: wgmma matmuls), else Hopper
    directory = args.out or tempfile.mkdtemp(prefix="tilus_block_")
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "decoder_block.so")
    print(f"building the decoder block (hidden {config.hidden}, {config.heads} heads, intermediate "
          f"{config.intermediate}, float16) for {arch}:")
    start = time.perf_counter()
    names = build_and_export(config, arch, path)
    print(f"built and exported in {time.perf_counter() - start:.0f} s")
    describe_library(path)
    if not gpu:
        print("no CUDA GPU here: the library is built and exported; running it needs a GPU (run this tutorial "
              "on one to load it in a fresh process and compare with PyTorch)")
        return
    weights_path = os.path.join(directory, "weights.pt")
    torch.save({"names": names, "weights": make_weights(config, names)}, weights_path)
    command = [sys.executable, os.path.abspath(__file__), "--run", path, weights_path] + (["--small"] * args.small)
    sys.exit(subprocess.run(command).returncode)  # a fresh process: nothing of this one's build is reused


if __name__ == "__main__":
    main()
