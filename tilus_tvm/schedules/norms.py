"""``LayerNorm`` and ``RMSNorm`` over the last dimension, float32 math, the result in x's dtype.

Rows are held in registers, spread as :class:`~tilus_tvm.schedules.softmax.RowConfig` says
(``rows_per_block`` rows per block, each over ``threads_per_row`` threads holding 16-byte vectors;
``hidden`` is a compile-time constant padded to ``block_n`` columns). x is read once, in its own
dtype, and kept that way (half the registers of float32 for 16-bit types, so more rows are in
flight per SM); it is converted to float32 where it is used. The row sums are warp shuffles plus,
for rows over several warps, one shared-memory round:

    LayerNorm:  mean = sum(x) / n;  var = sum((x - mean)^2) / n   (two-pass, on the registers)
                y = (x - mean) * rsqrt(var + eps) * weight + bias
    RMSNorm:    y = x * rsqrt(sum(x^2) / n + eps) * weight

x, weight, bias and y share one dtype: float16, bfloat16 or float32.

    y = layer_norm(x, weight, bias, eps=1e-5)     # x [..., hidden]
    y = rms_norm(x, weight, eps=1e-6)
    y = rms_norm(x, weight, tune=True)            # the tuned number of warps (docs/tuning.md)

Both kernels carry an ``opt_in`` ``@autotune`` space over ``warps`` and ``rows_per_block`` (``rows``
bucketed by powers of two), ``block_n`` fixed by the row length.
"""
from __future__ import annotations

from typing import Any, Optional

import tilus_tvm as tilus
from tilus_tvm import float32, int32, void
from tilus_tvm.dtypes import as_dtype
from tilus_tvm.errors import LaunchError, ScriptError
from tilus_tvm.schedules.softmax import ROW_WARPS, ROWS_PER_BLOCK, RowConfig, _dtype_of, check_row_kernel, row_config
from tilus_tvm.tune.library import tuned_kernel, use_tuned


def _row_kernel_config(name: str, block_n: int, warps: int, rows_per_block: int) -> RowConfig:
    try:
        return RowConfig(block_n, warps, rows_per_block)
    except ScriptError as exc:
        raise ScriptError(f"{name}: {exc}") from None


@tilus.autotune("warps", ROW_WARPS, bucket={"rows": "pow2"}, opt_in=True)
@tilus.autotune("rows_per_block", ROWS_PER_BLOCK)
class LayerNorm(tilus.Script):
    """Layer normalisation of rows of ``hidden`` <= ``block_n`` values (see the module docstring);
    ``rows_per_block`` rows per block, each over ``32 * warps / rows_per_block`` threads.
    ``affine=False`` drops weight and bias (the pointers are still passed and ignored)."""

    def __init__(self, block_n: int, warps: int = 4, dtype: Any = float32, affine: bool = True,
                 rows_per_block: int = 1):
        super().__init__()
        self.dtype = check_row_kernel("LayerNorm", dtype, warps)
        self.config = _row_kernel_config("LayerNorm", block_n, warps, rows_per_block)
        self.block_n, self.warps, self.affine = block_n, warps, bool(affine)

    def __call__(self, rows: int32, hidden: int, eps: float32, x_ptr: ~void, w_ptr: ~void, b_ptr: ~void,
                 y_ptr: ~void):
        config = self.config
        self.attrs.blocks = self.utils.ceil_div(rows, config.rows_per_block)
        self.attrs.warps = self.warps
        self.attrs.min_blocks_per_sm = config.min_blocks_per_sm()
        row = self.blockIdx.x * config.rows_per_block
        layout = config.layout(self.dtype.nbits)
        gx = self.global_view(x_ptr, dtype=self.dtype, shape=[rows, hidden])
        gy = self.global_view(y_ptr, dtype=self.dtype, shape=[rows, hidden])
        x = self.load_global(gx, offsets=[row, 0], shape=[config.rows_per_block, self.block_n], layout=layout)
        mean = self.sum(x.to(float32), dim=1, keepdim=True) * (1.0 / hidden)
        centered = x.to(float32) - mean
        if self.block_n > hidden:  # the padding columns read as 0, so only the centred values need masking
            cols = self.register_tensor(dtype=int32, shape=[config.rows_per_block, self.block_n],
                                        init=lambda r, c: c)
            centered = self.where(cols < hidden, centered, 0.0)
        rstd = self.rsqrt(self.sum(centered * centered, dim=1, keepdim=True) * (1.0 / hidden) + eps)
        y = (x.to(float32) - mean) * rstd  # from x (its dtype) again: centered need not stay in registers
        if self.affine:
            gw = self.global_view(w_ptr, dtype=self.dtype, shape=[1, hidden])
            gb = self.global_view(b_ptr, dtype=self.dtype, shape=[1, hidden])
            w = self.load_global(gw, offsets=[0, 0], shape=[1, self.block_n]).to(float32)
            b = self.load_global(gb, offsets=[0, 0], shape=[1, self.block_n]).to(float32)
            y = y * w + b
        self.store_global(gy, y, offsets=[row, 0])


@tilus.autotune("warps", ROW_WARPS, bucket={"rows": "pow2"}, opt_in=True)
@tilus.autotune("rows_per_block", ROWS_PER_BLOCK)
class RMSNorm(tilus.Script):
    """RMS normalisation of rows of ``hidden`` <= ``block_n`` values (see the module docstring);
    ``rows_per_block`` rows per block, each over ``32 * warps / rows_per_block`` threads."""

    def __init__(self, block_n: int, warps: int = 4, dtype: Any = float32, rows_per_block: int = 1):
        super().__init__()
        self.dtype = check_row_kernel("RMSNorm", dtype, warps)
        self.config = _row_kernel_config("RMSNorm", block_n, warps, rows_per_block)
        self.block_n, self.warps = block_n, warps

    def __call__(self, rows: int32, hidden: int, eps: float32, x_ptr: ~void, w_ptr: ~void, y_ptr: ~void):
        config = self.config
        self.attrs.blocks = self.utils.ceil_div(rows, config.rows_per_block)
        self.attrs.warps = self.warps
        self.attrs.min_blocks_per_sm = config.min_blocks_per_sm()
        row = self.blockIdx.x * config.rows_per_block
        gx = self.global_view(x_ptr, dtype=self.dtype, shape=[rows, hidden])
        gw = self.global_view(w_ptr, dtype=self.dtype, shape=[1, hidden])
        gy = self.global_view(y_ptr, dtype=self.dtype, shape=[rows, hidden])
        x = self.load_global(gx, offsets=[row, 0], shape=[config.rows_per_block, self.block_n],
                             layout=config.layout(self.dtype.nbits))
        xf = x.to(float32)
        rstd = self.rsqrt(self.sum(xf * xf, dim=1, keepdim=True) * (1.0 / hidden) + eps)
        w = self.load_global(gw, offsets=[0, 0], shape=[1, self.block_n]).to(float32)
        self.store_global(gy, x.to(float32) * rstd * w, offsets=[row, 0])


_KERNELS: dict = {}
# A thread holds its share of x and of the weight (whose loads the compiler issues early): past 64
# bytes of x per thread, rows take 1024 threads rather than more registers.
NORM_MAX_BYTES_PER_THREAD = 64


def norm_kernel_for(kind: str, hidden: int, dtype: Any, affine: bool = True, tune: bool = False) -> tilus.Script:
    """The kernel :func:`layer_norm` (``kind="layer_norm"``) or :func:`rms_norm` (``"rms_norm"``) uses
    for rows of ``hidden`` values of ``dtype`` (``affine``: LayerNorm with weight and bias; ``tune``:
    the tunable instance, whose launches use the tuned number of warps). Memoised on the arguments:
    the torch-like functions call it on every launch."""
    request = (kind, hidden, dtype, affine, tune)
    kernel = _KERNELS.get(request)
    if kernel is not None:
        return kernel
    if kind not in ("layer_norm", "rms_norm"):
        raise ScriptError(f"norm_kernel_for: kind must be 'layer_norm' or 'rms_norm', got {kind!r}")
    dtype = as_dtype(dtype)
    config = row_config(hidden, dtype.nbits, NORM_MAX_BYTES_PER_THREAD)
    if tune:
        _KERNELS[request] = (tuned_kernel(LayerNorm, block_n=config.block_n, dtype=dtype, affine=affine)
                             if kind == "layer_norm" else tuned_kernel(RMSNorm, block_n=config.block_n, dtype=dtype))
        return _KERNELS[request]
    key = (kind, config, dtype.name, bool(affine))
    if key not in _KERNELS:
        args = (config.block_n, config.warps, dtype)
        _KERNELS[key] = (LayerNorm(*args, affine=affine, rows_per_block=config.rows_per_block)
                         if kind == "layer_norm" else RMSNorm(*args, rows_per_block=config.rows_per_block))
    _KERNELS[request] = _KERNELS[key]
    return _KERNELS[key]


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
    affine = weight is not None
    kernel = norm_kernel_for("layer_norm", hidden, dtype, affine, use_tuned(tune, "layer_norm"))
    x2 = x if x.dim() == 2 else x.view(rows, hidden)
    y2 = out if out.dim() == 2 else out.view(rows, hidden)
    w2, b2 = (weight.view(1, hidden), bias.view(1, hidden)) if affine else (x2, x2)  # unread without affine
    kernel(rows, hidden, float(eps), x2, w2, b2, y2)
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
    x2, y2 = (x, out) if x.dim() == 2 else (x.view(rows, hidden), out.view(rows, hidden))
    kernel = norm_kernel_for("rms_norm", hidden, dtype, tune=use_tuned(tune, "rms_norm"))
    kernel(rows, hidden, float(eps), x2, weight.view(1, hidden), y2)
    return out
