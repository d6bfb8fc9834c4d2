"""``LayerNorm`` and ``RMSNorm`` over the last dimension, float32 math, the result in x's dtype.

One block per row; the row (``hidden`` values, a compile-time constant, padded to ``block_n``
columns) is loaded once into registers with 16-byte vectors, reduced across the block (warp
shuffles, then shared memory across warps) and written once:

    LayerNorm:  mean = sum(x) / n;  var = sum((x - mean)^2) / n   (two-pass, on the registers)
                y = (x - mean) * rsqrt(var + eps) * weight + bias
    RMSNorm:    y = x * rsqrt(sum(x^2) / n + eps) * weight

x, weight, bias and y share one dtype: float16, bfloat16 or float32.

    y = layer_norm(x, weight, bias, eps=1e-5)     # x [..., hidden]
    y = rms_norm(x, weight, eps=1e-6)
    y = rms_norm(x, weight, tune=True)            # the tuned number of warps (docs/tuning.md)

Both kernels carry an ``opt_in`` ``@autotune`` space over ``warps`` (``rows`` bucketed by powers of
two); ``block_n`` follows from ``hidden`` and is fixed by the caller. Warp counts whose threads do
not divide ``block_n`` are refused by ``__init__`` and skipped when tuning.
"""
from __future__ import annotations

from typing import Any, Optional

import tilus_tvm as tilus
from tilus_tvm import float32, int32, void
from tilus_tvm.errors import LaunchError, ScriptError
from tilus_tvm.schedules.softmax import ROW_WARPS, _dtype_of, check_row_kernel, row_tile
from tilus_tvm.tune.library import tuned_kernel, use_tuned


@tilus.autotune("warps", ROW_WARPS, bucket={"rows": "pow2"}, opt_in=True)
class LayerNorm(tilus.Script):
    """Layer normalisation of rows of ``hidden`` <= ``block_n`` values (see the module docstring);
    ``affine=False`` drops weight and bias (the pointers are still passed and ignored)."""

    def __init__(self, block_n: int, warps: int = 4, dtype: Any = float32, affine: bool = True):
        super().__init__()
        self.dtype = check_row_kernel("LayerNorm", dtype, warps)
        if block_n % (32 * warps):
            raise ScriptError(f"LayerNorm: block_n={block_n} must be a multiple of the block's {32 * warps} threads")
        self.block_n, self.warps, self.affine = block_n, warps, bool(affine)

    def __call__(self, rows: int32, hidden: int, eps: float32, x_ptr: ~void, w_ptr: ~void, b_ptr: ~void,
                 y_ptr: ~void):
        self.attrs.blocks = rows
        self.attrs.warps = self.warps
        row = self.blockIdx.x
        gx = self.global_view(x_ptr, dtype=self.dtype, shape=[rows, hidden])
        gy = self.global_view(y_ptr, dtype=self.dtype, shape=[rows, hidden])
        x = self.load_global(gx, offsets=[row, 0], shape=[1, self.block_n]).to(float32)
        mean = self.sum(x, dim=1, keepdim=True) * (1.0 / hidden)
        centered = x - mean
        if self.block_n > hidden:  # the padding columns read as 0, so only the centred values need masking
            cols = self.register_tensor(dtype=int32, shape=[1, self.block_n], init=lambda r, c: c)
            centered = self.where(cols < hidden, centered, 0.0)
        var = self.sum(centered * centered, dim=1, keepdim=True) * (1.0 / hidden)
        y = centered * self.rsqrt(var + eps)
        if self.affine:
            gw = self.global_view(w_ptr, dtype=self.dtype, shape=[1, hidden])
            gb = self.global_view(b_ptr, dtype=self.dtype, shape=[1, hidden])
            w = self.load_global(gw, offsets=[0, 0], shape=[1, self.block_n]).to(float32)
            b = self.load_global(gb, offsets=[0, 0], shape=[1, self.block_n]).to(float32)
            y = y * w + b
        self.store_global(gy, y, offsets=[row, 0])


@tilus.autotune("warps", ROW_WARPS, bucket={"rows": "pow2"}, opt_in=True)
class RMSNorm(tilus.Script):
    """RMS normalisation of rows of ``hidden`` <= ``block_n`` values (see the module docstring)."""

    def __init__(self, block_n: int, warps: int = 4, dtype: Any = float32):
        super().__init__()
        self.dtype = check_row_kernel("RMSNorm", dtype, warps)
        if block_n % (32 * warps):
            raise ScriptError(f"RMSNorm: block_n={block_n} must be a multiple of the block's {32 * warps} threads")
        self.block_n, self.warps = block_n, warps

    def __call__(self, rows: int32, hidden: int, eps: float32, x_ptr: ~void, w_ptr: ~void, y_ptr: ~void):
        self.attrs.blocks = rows
        self.attrs.warps = self.warps
        row = self.blockIdx.x
        gx = self.global_view(x_ptr, dtype=self.dtype, shape=[rows, hidden])
        gw = self.global_view(w_ptr, dtype=self.dtype, shape=[1, hidden])
        gy = self.global_view(y_ptr, dtype=self.dtype, shape=[rows, hidden])
        x = self.load_global(gx, offsets=[row, 0], shape=[1, self.block_n]).to(float32)
        mean_square = self.sum(x * x, dim=1, keepdim=True) * (1.0 / hidden)
        w = self.load_global(gw, offsets=[0, 0], shape=[1, self.block_n]).to(float32)
        self.store_global(gy, x * self.rsqrt(mean_square + eps) * w, offsets=[row, 0])


_KERNELS: dict = {}


def _check_norm_inputs(fn: str, x: Any, params: dict) -> Any:
    import torch

    if not isinstance(x, torch.Tensor) or x.dim() == 0 or x.numel() == 0:
        raise LaunchError(f"{fn}: x must be a non-empty tensor [..., hidden], got "
                          f"{list(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__}")
    if not x.is_contiguous():
        raise LaunchError(f"{fn}: x must be contiguous, got strides {list(x.stride())} for shape {list(x.shape)}")
    try:
        dtype = _dtype_of(x)
    except LaunchError as exc:
        raise LaunchError(f"{fn}: x: {exc}") from None
    hidden = x.shape[-1]
    for name, t in params.items():
        if t is None:
            continue
        if not isinstance(t, torch.Tensor) or tuple(t.shape) != (hidden,):
            raise LaunchError(f"{fn}: {name} must be a tensor of shape [{hidden}] (x's last dimension), got "
                              f"{list(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__}")
        if t.dtype != x.dtype:
            raise LaunchError(f"{fn}: {name} has dtype {t.dtype}, x has {x.dtype}; they must match")
        if t.device != x.device:
            raise LaunchError(f"{fn}: {name} is on {t.device}, x on {x.device}")
        if not t.is_contiguous():
            raise LaunchError(f"{fn}: {name} must be contiguous")
    return dtype


def _output(fn: str, x: Any, out: Optional[Any]) -> Any:
    import torch

    if out is None:
        return torch.empty_like(x)
    if out.shape != x.shape or out.dtype != x.dtype or not out.is_contiguous():
        raise LaunchError(f"{fn}: out must be a contiguous {x.dtype} tensor of shape {list(x.shape)}, got "
                          f"{out.dtype} {list(out.shape)}")
    return out


def layer_norm(x: Any, weight: Optional[Any] = None, bias: Optional[Any] = None, eps: float = 1e-5,
               out: Optional[Any] = None, *, tune: Optional[bool] = None) -> Any:
    """``torch.nn.functional.layer_norm(x, [hidden], weight, bias, eps)`` over x's last dimension.
    ``weight`` and ``bias`` are both given or both None; they have x's dtype. ``tune=True``
    (``None``: ``tilus_tvm.tune.configure(library=...)``) launches the tuned number of warps."""
    if (weight is None) != (bias is None):
        raise LaunchError("layer_norm: give both weight and bias, or neither")
    dtype = _check_norm_inputs("layer_norm", x, {"weight": weight, "bias": bias})
    out = _output("layer_norm", x, out)
    hidden = x.shape[-1]
    rows = x.numel() // hidden
    block_n, warps = row_tile(hidden, dtype.nbits)
    affine = weight is not None
    if use_tuned(tune, "layer_norm"):
        kernel = tuned_kernel(LayerNorm, block_n=block_n, dtype=dtype, affine=affine)
    else:
        key = ("layer_norm", block_n, warps, dtype.name, affine)
        if key not in _KERNELS:
            _KERNELS[key] = LayerNorm(block_n, warps, dtype, affine)
        kernel = _KERNELS[key]
    x2 = x.view(rows, hidden)
    w2, b2 = (weight.view(1, hidden), bias.view(1, hidden)) if affine else (x2, x2)  # unread without affine
    kernel(rows, hidden, float(eps), x2, w2, b2, out.view(rows, hidden))
    return out


def rms_norm(x: Any, weight: Any, eps: float = 1e-6, out: Optional[Any] = None, *,
             tune: Optional[bool] = None) -> Any:
    """``x * rsqrt(mean(x^2, -1) + eps) * weight`` (``torch.nn.functional.rms_norm``) over x's last dimension.
    ``tune=True`` (``None``: ``tilus_tvm.tune.configure(library=...)``) launches the tuned number of warps."""
    if weight is None:
        raise LaunchError("rms_norm: weight is required")
    dtype = _check_norm_inputs("rms_norm", x, {"weight": weight})
    out = _output("rms_norm", x, out)
    hidden = x.shape[-1]
    rows = x.numel() // hidden
    block_n, warps = row_tile(hidden, dtype.nbits)
    if use_tuned(tune, "rms_norm"):
        kernel = tuned_kernel(RMSNorm, block_n=block_n, dtype=dtype)
    else:
        key = ("rms_norm", block_n, warps, dtype.name)
        if key not in _KERNELS:
            _KERNELS[key] = RMSNorm(block_n, warps, dtype)
        kernel = _KERNELS[key]
    kernel(rows, hidden, float(eps), x.view(rows, hidden), weight.view(1, hidden), out.view(rows, hidden))
    return out
