"""Memory-bound kernels: softmax, LayerNorm and RMSNorm beside torch eager and torch.compile, at LLM
shapes, in achieved TB/s (bytes read + written / time) and as a fraction of the device-to-device
copy bandwidth measured in the same run (``torch.clone`` of a 1 GiB tensor).

    python scripts/bench_norms.py            # about two minutes on an H100

Every result is checked against torch (float32 reference) before it is timed. The ``copy here``
column is a device-to-device copy of the same bytes (``y.copy_(x)``, x's shape): at small shapes the
launch and the last partial wave cost a copy too, which is what limits the fraction of the 1 GiB
copy bandwidth there (the goal column stays against the 1 GiB figure). ``benchmark_func`` leaves the
L2 clean before each timed call, so an output smaller than the L2 may still sit there, unwritten, when
the call ends: small shapes can exceed 100% of the 1 GiB figure, and so can the same-size copy. The
torch.compile column is compiled once per operation with dynamic shapes; if compiling fails it shows "-".
Goal: >= 85% of copy bandwidth and faster than eager.
"""
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from tilus_tvm.schedules import layer_norm, rms_norm, softmax  # noqa: E402
from tilus_tvm.utils import benchmark_func  # noqa: E402

NORM_SHAPES = [(4096, 4096), (16384, 4096), (32768, 4096), (4096, 8192), (16384, 8192), (32768, 8192)]
SOFTMAX_SHAPES = [(4096, 1024), (4096, 4096), (4096, 8192), (4096, 16384), (2048, 32768)]
DTYPE = torch.float16


def copy_bandwidth() -> float:
    """TB/s of torch.clone on a 1 GiB tensor (read + write)."""
    x = torch.empty(1 << 29, dtype=torch.float16, device="cuda")
    ms = benchmark_func(lambda: x.clone(), warmup=3, repeat=20)
    return 2 * x.numel() * x.element_size() / ms / 1e9


def eager_rms_norm(x, w, eps=1e-6):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


def torch_layer_norm(x, w, b):
    return torch.nn.functional.layer_norm(x, [x.shape[-1]], w, b, 1e-5)


def torch_rms_norm(x, w):
    if hasattr(torch.nn.functional, "rms_norm"):
        return torch.nn.functional.rms_norm(x, [x.shape[-1]], w, 1e-6)
    return eager_rms_norm(x, w)


def torch_softmax(x):
    return torch.softmax(x, dim=-1)


def compiled(fn):
    """torch.compile(fn) with dynamic shapes, or None when it cannot compile."""
    try:
        return torch.compile(fn, dynamic=True)
    except Exception as exc:  # noqa: BLE001 - the column is optional
        print(f"# torch.compile unavailable: {exc}")
        return None


def timed(fn, *args):
    return benchmark_func(lambda: fn(*args), warmup=3, repeat=20)


def run_row(name, shape, nbytes, ours, eager, compiled_fn, args, reference, copy_tbs):
    result = ours(*args)
    expected = reference(*args)
    error = (result.float() - expected.float()).abs().max().item()
    t_ours = timed(ours, *args)
    t_eager = timed(eager, *args)
    t_compiled = None
    if compiled_fn is not None:
        try:
            compiled_fn(*args)
            t_compiled = timed(compiled_fn, *args)
        except Exception as exc:  # noqa: BLE001
            print(f"# torch.compile failed for {name} {shape}: {type(exc).__name__}")
    x = args[0]
    y = torch.empty_like(x)
    t_copy = timed(y.copy_, x)
    tbs = lambda ms: nbytes / ms / 1e9  # noqa: E731
    compiled_text = f"{tbs(t_compiled):9.2f}" if t_compiled else f"{'-':>9}"
    print(f"{name:<11}{str(shape):<16}{tbs(t_ours):9.2f}{tbs(t_eager):9.2f}{compiled_text}"
          f"{tbs(t_ours) / copy_tbs:9.0%}{t_eager / t_ours:9.2f}x{tbs(t_copy):10.2f}{t_copy / t_ours:10.0%}"
          f"{error:10.1e}")


def main():
    if not torch.cuda.is_available():
        print("bench_norms.py needs a CUDA GPU")
        return
    torch.manual_seed(0)
    copy_tbs = copy_bandwidth()
    print(f"# {torch.cuda.get_device_name()}, copy bandwidth (clone, read + write): {copy_tbs:.2f} TB/s, "
          f"dtype {DTYPE}; goal: >= 85% of copy and faster than eager")
    print(f"{'op':<11}{'shape':<16}{'ours':>9}{'eager':>9}{'compile':>9}{'of copy':>9}{'vs eager':>10}"
          f"{'copy here':>10}{'of it':>10}{'max err':>10}")
    print(f"{'':<27}{'(TB/s)':>9}{'(TB/s)':>9}{'(TB/s)':>9}{'(goal)':>9}{'':>10}{'(TB/s)':>10}")
    compiled_ln, compiled_rms, compiled_sm = compiled(torch_layer_norm), compiled(torch_rms_norm), compiled(torch_softmax)
    for rows, hidden in NORM_SHAPES:
        x = torch.randn(rows, hidden, dtype=DTYPE, device="cuda")
        w = torch.randn(hidden, dtype=DTYPE, device="cuda")
        b = torch.randn(hidden, dtype=DTYPE, device="cuda")
        nbytes = 2 * x.numel() * x.element_size()
        run_row("layer_norm", (rows, hidden), nbytes, lambda x, w, b: layer_norm(x, w, b, 1e-5), torch_layer_norm,
                compiled_ln, (x, w, b),
                lambda x, w, b: torch.nn.functional.layer_norm(x.float(), [hidden], w.float(), b.float(), 1e-5),
                copy_tbs)
        run_row("rms_norm", (rows, hidden), nbytes, lambda x, w: rms_norm(x, w, 1e-6), torch_rms_norm, compiled_rms,
                (x, w), eager_rms_norm, copy_tbs)
        del x
    for rows, n in SOFTMAX_SHAPES:
        x = torch.randn(rows, n, dtype=DTYPE, device="cuda") * 3
        nbytes = 2 * x.numel() * x.element_size()
        run_row("softmax", (rows, n), nbytes, softmax, torch_softmax, compiled_sm, (x,),
                lambda x: torch.softmax(x.float(), -1), copy_tbs)
        if n >= 16384:  # both forms where they overlap
            run_row("softmax-onl", (rows, n), nbytes, lambda x: softmax(x, online=True), torch_softmax, None, (x,),
                    lambda x: torch.softmax(x.float(), -1), copy_tbs)
        del x


if __name__ == "__main__":
    main()
