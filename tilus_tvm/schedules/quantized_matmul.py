"""``QuantizedMatmul``: ``out = a @ w`` with float16/bfloat16 activations and low-precision weights.

``a`` [M, K] (float16 or bfloat16), ``w`` [K, N] of any integer type of 1 to 8 bits or float of at
most 8 bits (:func:`~tilus_tvm.schedules.quantized_weight.check_weight_dtype`), packed by
:func:`pack_weight`, with per-group scales ``s`` [K / g, N] and optional zero points ``z`` (a's
dtype; g = 32, 64, 128 or K): ``out[m, n] = sum_k a[m, k] * (value(q[k, n]) - z[k // g, n]) * s[k // g, n]``.

The kernel computes ``out^T = w^T @ a^T`` on ``mma.sync.m16n8k16``, so the weights are the A operand
(16 output channels per mma) and the batch is the n of the mma (8 per mma: a batch of 1 to 8 wastes
at most 7/8 of a tensor-core op that is not the limit, the weight stream is). A block owns
``block_n = warps * units_per_warp * 16`` output channels and ``block_m`` batch rows; warp ``w``
owns ``units_per_warp`` units of 16 channels. Each k-step of ``kt`` inputs (the group size, or 128
per channel):

1. every thread loads its bytes of the packed weight tile straight into registers -- whole vectors
   of up to 16 bytes, a warp's load instruction reading 512 contiguous bytes -- one step ahead of
   the step it computes, so the loads of step ``i + 1`` are in flight during step ``i``;
2. ``self.view`` reinterprets the words as the codes of the mma A fragments (pack_weight put each
   lane's codes in fragment order) and ``self.cast`` converts them in registers (``prmt`` / ``lop3``
   / magic-number fma for integers, ``cvt`` for fp8 on sm_89+, :mod:`tilus_tvm.instructions.cast`);
   zero points are subtracted there;
3. the activations of the step ([block_m, kt], 4-byte loads in fragment layout, viewed transposed)
   meet them in ``dot_split`` (float32 accumulation). With groups, each step's product starts from
   zero and is added to the accumulator times the group's scales (one multiply per output, not per
   weight); per channel, the scales multiply once at the end.

With ``scale_weights=True`` the scales multiply the weights instead (one multiply per weight, in
the activations' type, but no second accumulator: the choice for large batches, whose accumulator
fills many registers).

``stage_activations=True`` (large batches) copies the activation tile into shared memory with
``cp.async`` (``stages`` deep) and reads fragments with ``ldmatrix``, since all warps of the block
share it; the weights still go straight to registers (each is used by one warp only).

The grid is (M / block_m, N / block_n): the batch tiles of one weight tile run next to each other,
so a weight tile read by several batch tiles comes from L2 after the first.
"""
from __future__ import annotations

import math
from typing import Any, Optional

import tilus_tvm as tilus
from tilus_tvm import bfloat16, float16, float32, int32, void
from tilus_tvm.dtypes import as_dtype
from tilus_tvm.errors import LaunchError, ScriptError
from tilus_tvm.schedules.quantized_weight import (QuantizedWeight, WeightFormat, check_weight, check_weight_dtype,
                                                  dequantize, pack_weight, quantize_weight)

__all__ = ["QuantizedMatmul", "quantized_matmul", "pack_weight", "quantize_weight", "dequantize", "QuantizedWeight",
           "kernel_layouts", "choose_config"]


def kernel_layouts(fmt: WeightFormat, warps: int, units_per_warp: int, block_m: int, dtype: Any):
    """(words, a, x, b, c): the layouts of one k-step: the packed weight words a thread loads
    ([granules, chunks, 32, words per vector]), the weight codes as mma A operand ([block_n, kt]), the
    activations as loaded ([block_m, kt]) and as mma B operand ([kt, block_m]), and the accumulator."""
    from tilus_tvm.instructions.dot import dot_layouts
    from tilus_tvm.instructions.dot_split import split_config
    from tilus_tvm.layout.register import register_layout
    from tilus_tvm.layout.register_ops import permute

    block_n = warps * units_per_warp * 16
    config = split_config(block_n, block_m, fmt.kt, as_dtype(dtype).name, "float32", (warps, 1), warps)
    a, b, c = dot_layouts(config)
    granules = units_per_warp // fmt.units
    words = register_layout([warps * granules, fmt.chunks, 32, fmt.vector_bytes // 4],
                            [warps, granules, fmt.chunks, 32, fmt.vector_bytes // 4], [0, 3], [1, 2, 4])
    return words, a, permute(b, [1, 0]), b, c


class QuantizedMatmul(tilus.Script):
    """``out = a @ w`` for one packed weight format (see the module docstring).

    ``fmt``: the :class:`WeightFormat` of the weights (``QuantizedWeight.format``); ``dtype``: the
    activations' (float16 or bfloat16); ``zero_points``: whether ``z`` is given; ``warps``,
    ``units_per_warp`` (16 channels each; a multiple of ``fmt.units``), ``block_m`` (a multiple of 8):
    the block's tile; ``stage_activations``/``stages``: the shared-memory path for large batches;
    ``scale_weights``: scales applied to the weights rather than to each group's product.
    """

    def __init__(self, fmt: WeightFormat, dtype: Any = float16, zero_points: bool = False, warps: int = 4,
                 units_per_warp: int = 2, block_m: int = 8, stage_activations: bool = False, stages: int = 2,
                 scale_weights: bool = False):
        super().__init__()
        dtype = as_dtype(dtype)
        if dtype not in (float16, bfloat16):
            raise ScriptError(f"QuantizedMatmul: dtype (the activations') must be float16 or bfloat16, got {dtype.name}")
        check_weight_dtype(fmt.dtype)
        if units_per_warp < 1 or units_per_warp % fmt.units:
            raise ScriptError(f"QuantizedMatmul: units_per_warp={units_per_warp} must be a positive multiple of "
                              f"{fmt.units} for {fmt.describe()} (a lane's codes of {fmt.units} unit(s) fill whole "
                              f"32-bit words)")
        if block_m < 8 or block_m % 8:
            raise ScriptError(f"QuantizedMatmul: block_m={block_m} must be a positive multiple of 8 (the mma's n)")
        if not 1 <= warps <= 16:
            raise ScriptError(f"QuantizedMatmul: warps={warps} must be in [1, 16]")
        if stage_activations and stages < 2:
            raise ScriptError(f"QuantizedMatmul: stages={stages} must be at least 2")
        self.fmt, self.dtype, self.zero_points = fmt, dtype, bool(zero_points)
        self.warps, self.units_per_warp, self.block_m = warps, units_per_warp, block_m
        self.stage_activations, self.stages, self.scale_weights = bool(stage_activations), stages, bool(scale_weights)

    def __call__(self, m_size: int32, a_ptr: ~void, w_ptr: ~int32, s_ptr: ~void, z_ptr: ~void, out_ptr: ~void):
        fmt, dtype, warps = self.fmt, self.dtype, self.warps
        bm, kt = self.block_m, fmt.kt
        bn = warps * self.units_per_warp * 16
        self.attrs.blocks = [self.utils.ceil_div(m_size, bm), self.utils.ceil_div(fmt.n, bn)]
        self.attrs.warps = warps
        m0: int32 = self.blockIdx.x * bm
        n0: int32 = self.blockIdx.y * bn
        granule0: int32 = self.blockIdx.y * (bn // (16 * fmt.units))
        words, a_layout, x_layout, b_layout, c_layout = kernel_layouts(fmt, warps, self.units_per_warp, bm, dtype)
        gw = self.global_view(w_ptr, dtype=int32, shape=list(fmt.storage_shape))
        ga = self.global_view(a_ptr, dtype=dtype, shape=[m_size, fmt.k])
        gs = self.global_view(s_ptr, dtype=dtype, shape=[fmt.n, fmt.groups], strides=[1, fmt.n])  # s^T
        go = self.global_view(out_ptr, dtype=dtype, shape=[fmt.n, m_size], strides=[1, fmt.n])  # out^T
        gz = self.global_view(z_ptr, dtype=dtype, shape=[fmt.n, fmt.groups], strides=[1, fmt.n])
        num_steps = fmt.k // kt
        acc = self.register_tensor(dtype=float32, shape=[bn, bm], layout=c_layout, init=0.0)
        sx = None
        if self.stage_activations:
            sx = self.shared_tensor(dtype=dtype, shape=[self.stages, bm, kt])
            for s in range(self.stages - 1):
                self.copy_async(src=ga, dst=sx[s], offsets=[m0, s * kt])
                self.copy_async_commit_group()
        w_words = self.load_global(gw, offsets=[granule0, 0, 0, 0, 0], shape=list(words.shape), dims=[0, 2, 3, 4],
                                   layout=words)
        x_now = None if self.stage_activations else \
            self.load_global(ga, offsets=[m0, 0], shape=[bm, kt], layout=x_layout)
        for step in range(num_steps):
            # the next step's weights (and activations) are in flight while this step computes
            w_next = self.load_global(gw, offsets=[granule0, step + 1, 0, 0, 0], shape=list(words.shape),
                                      dims=[0, 2, 3, 4], layout=words)
            if self.stage_activations:
                ahead = step + self.stages - 1
                self.copy_async(src=ga, dst=sx[ahead % self.stages], offsets=[m0, ahead * kt])
                self.copy_async_commit_group()
                self.copy_async_wait_group(self.stages - 1)
                self.sync()
                x = self.load_shared(sx[step % self.stages].transpose(), layout=b_layout)
            else:
                x_next = self.load_global(ga, offsets=[m0, (step + 1) * kt], shape=[bm, kt], layout=x_layout)
                x = self.view(x_now, layout=b_layout)
            codes = self.view(w_words, dtype=fmt.dtype, layout=a_layout)
            weights = self.cast(codes, dtype)
            group = step * kt // fmt.group_size
            if self.zero_points:
                weights = weights - self.load_global(gz, offsets=[n0, group], shape=[bn, 1])
            if fmt.per_channel:
                acc = self.dot_split(weights, x, acc, warp_grid=[warps, 1])
            elif self.scale_weights:
                weights = weights * self.load_global(gs, offsets=[n0, group], shape=[bn, 1])
                acc = self.dot_split(weights, x, acc, warp_grid=[warps, 1])
            else:
                zero = self.register_tensor(dtype=float32, shape=[bn, bm], layout=c_layout, init=0.0)
                partial = self.dot_split(weights, x, zero, warp_grid=[warps, 1])
                scale = self.load_global(gs, offsets=[n0, step], shape=[bn, 1])
                acc = acc + partial * scale.to(float32)
            if self.stage_activations:
                self.sync()  # every warp has read this stage before a later step refills it
            else:
                x_now = x_next
            w_words = w_next
        if fmt.per_channel:
            acc = acc * self.load_global(gs, offsets=[n0, 0], shape=[bn, 1]).to(float32)
        if self.stage_activations:
            self.copy_async_wait_all()
        self.store_global(go, acc.to(dtype), offsets=[n0, m0])


# ---- the torch-like function -----------------------------------------------------------------------------------
# (largest batch served, (warps, units_per_warp, block_m, stage_activations, stages, scale_weights)), first
# match wins; tuned with scripts/bench_quantized.py (see its --configs)
CONFIGS = ((8, (4, 2, 8, False, 2, False)), (16, (4, 2, 16, False, 2, False)), (48, (4, 2, 32, True, 3, True)),
           (None, (4, 2, 64, True, 3, True)))
_KERNELS: dict = {}


def choose_config(m: int, fmt: WeightFormat) -> tuple:
    """(warps, units_per_warp, block_m, stage_activations, stages, scale_weights) for a batch of ``m`` rows."""
    warps, units, block_m, staged, stages, scale_weights = next(c for limit, c in CONFIGS if limit is None or m <= limit)
    units = max(units, fmt.units) // fmt.units * fmt.units
    return warps, units, block_m, staged, stages, scale_weights


def kernel_for(fmt: WeightFormat, dtype: Any, zero_points: bool, config: tuple) -> QuantizedMatmul:
    key = (fmt, as_dtype(dtype).name, bool(zero_points), tuple(config))
    if key not in _KERNELS:
        _KERNELS[key] = QuantizedMatmul(fmt, dtype, zero_points, *config)
    return _KERNELS[key]


def quantized_matmul(a: Any, packed_weight: QuantizedWeight, scales: Any, zeros: Any = None, out: Any = None, *,
                     dtype: Any = None, group_size: Optional[int] = None, config: Optional[tuple] = None) -> Any:
    """``a @ w`` for a CUDA float16/bfloat16 ``a`` [..., K] and a weight packed by :func:`pack_weight`.

    ``w[k, n] = (value(q[k, n]) - zeros[k // g, n]) * scales[k // g, n]``; ``scales`` (and ``zeros``)
    are [K / g, N] tensors of a's dtype. ``dtype`` / ``group_size``, when given, are checked against
    what the weight was packed for. ``out`` ([..., N], a's dtype, contiguous) receives the result.
    ``config`` overrides the kernel configuration ``(warps, units_per_warp, block_m, stage_activations,
    stages, scale_weights)`` (:class:`QuantizedMatmul`). Every argument is checked before anything is launched.

    >>> qw, s, _ = quantize_weight(w, "uint4b", group_size=128)      # doctest: +SKIP
    >>> y = quantized_matmul(x, qw.to("cuda"), s.cuda())              # doctest: +SKIP
    """
    import torch

    fmt = check_weight(packed_weight, scales, zeros, dtype, group_size)
    if not isinstance(a, torch.Tensor) or a.dim() < 1 or a.shape[-1] != fmt.k:
        raise LaunchError(f"quantized_matmul: a must be a tensor [..., K={fmt.k}] for the weight ({fmt.describe()}), "
                          f"got {type(a).__name__}{list(a.shape) if isinstance(a, torch.Tensor) else ''}")
    if a.dtype not in (torch.float16, torch.bfloat16):
        raise LaunchError(f"quantized_matmul: a must be float16 or bfloat16, got {a.dtype}")
    for name, tensor in (("scales", scales), ("zeros", zeros)):
        if tensor is not None and tensor.dtype != a.dtype:
            raise LaunchError(f"quantized_matmul: {name} must have a's dtype {a.dtype}, got {tensor.dtype}")
    devices = {t.device for t in (a, packed_weight.storage, scales, zeros) if t is not None}
    if len(devices) != 1:
        raise LaunchError(f"quantized_matmul: a, the weight, scales and zeros must be on one device, got "
                          f"{sorted(str(d) for d in devices)}")
    rows = a.reshape(-1, fmt.k)
    if not rows.is_contiguous():
        rows = rows.contiguous()
    m = rows.shape[0]
    shape = (*a.shape[:-1], fmt.n)
    if out is None:
        out = torch.empty(shape, dtype=a.dtype, device=a.device)
    elif tuple(out.shape) != shape or out.dtype != a.dtype or not out.is_contiguous():
        raise LaunchError(f"quantized_matmul: out must be a contiguous {a.dtype} tensor of shape {list(shape)}, "
                          f"got {out.dtype} {list(out.shape)}")
    if config is None:
        config = choose_config(m, fmt)
    kernel = kernel_for(fmt, a.dtype, zeros is not None, config)
    if m:
        kernel(m, rows, packed_weight.storage, scales.contiguous(),
               (zeros if zeros is not None else scales).contiguous(), out)
    return out
