"""The operators :class:`~tilus_tvm.relax.dispatch.DispatchKernels` rewrites, one table entry each.

Each rewrite checks the kernel's constraints on the Relax call (raising ``NotDispatched`` with the
reason when one fails), flattens the leading dimensions into rows with a reshape (a view: no copy
once lowered), calls the kernel through ``context.kernel`` and reshapes the result back:

    relax.matmul        x [..., K] @ w [K, N], or @ permute_dims(w [N, K])  ->  Matmul (b row/col-major)
                        float16/bfloat16, K and N static multiples of 8
    relax.matmul        x [..., K] @ dequantize(storage, scales[, zeros]) (QuantizedLinear,
                        tilus_tvm.relax.quantized)                       ->  QuantizedMatmul (+ R.sum of K splits)
                        float16/bfloat16, integer weights, group 32/64/128 or per channel
    relax.nn.softmax    over the last axis, static length                    ->  Softmax / OnlineSoftmax
    relax.nn.layer_norm over the last axis, with gamma and beta              ->  LayerNorm
    relax.nn.rms_norm   over the last axis                                   ->  RMSNorm
    relax.nn.attention  [B, S, H, D] (BSHD), D 64 or 128, equal head counts,
                        no bias or window, causal top-left (or equal lengths) ->  FlashAttention on the
                                                                               [B, S, H, D] rows in place
                                                                               (or the fused QKV tensor)
    relax.add           two tensors of one shape (a residual), static last dim ->  ResidualAdd
    relax.multiply      silu(g) * u, g and u the halves of one split(x @ w.T, 2, -1), the matmul on
                        MatmulWgmma                              ->  MatmulWgmma(gated=True) (x @ w.T
                                                                     never written)
    relax.multiply      silu(g) * u, g and u the halves of one split(x, 2, -1) ->  SwiGLU (reads x once)

On sm_90a (an H100 or H200) the matmul of ``permute_dims(w)`` is MatmulWgmma (Hopper's wgmma) instead of
Matmul where :func:`tilus_tvm.schedules.matmul.wgmma_tile` gives it a tile (symbolic rows, or enough
static rows and columns to fill the GPU).

Adding a kernel is one :class:`Pattern` here (or ``DispatchKernels(patterns=PATTERNS + (mine,))``).
Patterns of one operator are tried in order; ``NotApplicable`` passes silently to the next.
"""
from __future__ import annotations

import functools
import math
import operator
from dataclasses import dataclass, replace
from typing import Any, Optional

from tvm import relax, tirx

from tilus_tvm.relax.dispatch import DispatchContext, NotApplicable, NotDispatched, Pattern

HALF_DTYPES = ("float16", "bfloat16")
ROW_DTYPES = ("float16", "bfloat16", "float32")
VECTOR_ELEMENTS = 8  # 16-byte rows of float16/bfloat16: what the cp.async tiles of Matmul load
LARGE_M = 1 << 20  # a symbolic number of rows picks the configuration for many rows
LOG2E = 1.4426950408889634


# --- helpers ------------------------------------------------------------------------------------
def _tensor(expr: Any, what: str) -> Any:
    ty = getattr(expr, "ty", None)
    if not isinstance(ty, relax.TensorType) or ty.shape is None or ty.ndim < 0:
        raise NotDispatched(f"{what} has no known shape ({ty})")
    return ty


def _dims(ty: Any) -> list:
    return list(ty.shape.values)


def _text(dim: Any) -> str:
    """A dimension as people write it: ``768``, ``seq``."""
    static = _static(dim)
    return str(static) if static is not None else str(dim)


def _shape(dims: list) -> str:
    return "(" + ", ".join(_text(d) for d in dims) + ")"


def _static(dim: Any) -> Optional[int]:
    if isinstance(dim, int):
        return dim
    return int(dim.value) if isinstance(dim, tirx.IntImm) else None


def _same_dim(a: Any, b: Any) -> bool:
    if _static(a) is not None or _static(b) is not None:
        return _static(a) == _static(b)
    return a.same_as(b)


def _rows(dims: list) -> Any:
    """The product of ``dims`` (int64), a constant when they all are."""
    if all(_static(d) is not None for d in dims):
        return tirx.IntImm("int64", math.prod(_static(d) for d in dims))
    return functools.reduce(operator.mul, dims)


def _reshape(context: DispatchContext, expr: Any, shape: list, name: str) -> Any:
    ty = expr.ty
    if len(_dims(ty)) == len(shape) and all(_same_dim(a, b) for a, b in zip(_dims(ty), shape)):
        return expr
    return context.emit(relax.op.reshape(expr, shape), name)


def _dtype(ty: Any) -> str:
    return str(ty.dtype)


def _last_axis(axes: Any, ndim: int, what: str) -> None:
    axes = [int(a) for a in (axes if isinstance(axes, (list, tuple)) or hasattr(axes, "__len__") else [axes])]
    if [a % ndim for a in axes] != [ndim - 1]:
        raise NotDispatched(f"{what} over axes {axes}; the kernel works over the last axis only")


def _static_last(ty: Any, what: str) -> int:
    last = _static(_dims(ty)[-1])
    if last is None:
        raise NotDispatched(f"{what}: the last dimension {_text(_dims(ty)[-1])} is symbolic; the kernel is built per "
                            f"length")
    return last


def _output(shape: list, dtype: str) -> Any:
    return relax.TensorType(shape, dtype)


def _is_op(expr: Any, name: str) -> bool:
    return expr is not None and getattr(getattr(expr, "op", None), "name", None) == name


# --- matmul -------------------------------------------------------------------------------------
def _weight_of(context: DispatchContext, b: Any) -> tuple[Any, str]:
    """``(w, "col")`` when ``b`` is ``permute_dims`` of a 2-D ``w`` (``x @ w.T``, as nn.Linear writes it),
    else ``(b, "row")``. Relax tensors are row-major, so ``w`` [N, K] is b column-major."""
    source = context.binding_of(b)
    if _is_op(source, "relax.permute_dims"):
        inner = source.args[0]
        axes = source.attrs.axes
        ndim = getattr(getattr(inner, "ty", None), "ndim", -1)
        if ndim == 2 and (axes is None or [int(a) for a in axes] == [1, 0]):
            return inner, "col"
    return b, "row"


def rewrite_matmul(context: DispatchContext, call: Any) -> Any:
    """``R.matmul(x, w)`` with a 2-D weight -> ``Matmul`` over ``x`` flattened to [rows, K]."""
    from tilus_tvm.schedules.matmul import kernel_for

    a, b = call.args
    a_ty = _tensor(a, "a")
    dtype = _dtype(a_ty)
    if dtype not in HALF_DTYPES:
        raise NotDispatched(f"dtype {dtype}: Matmul takes float16 or bfloat16")
    out_dtype = call.attrs.out_dtype
    if out_dtype is not None and str(out_dtype) not in ("", "void", dtype):
        raise NotDispatched(f"out_dtype {out_dtype}: Matmul writes the inputs' dtype {dtype}")
    weight, layout = _weight_of(context, b)
    w_ty = _tensor(weight, "b")
    if _dtype(w_ty) != dtype:
        raise NotDispatched(f"a is {dtype}, b is {_dtype(w_ty)}; Matmul takes one dtype")
    if w_ty.ndim != 2:
        raise NotDispatched(f"b is {w_ty.ndim}-D: Matmul multiplies by a 2-D weight (a batched matmul of two "
                            f"activations stays on TVM's path)")
    if a_ty.ndim < 2:
        raise NotDispatched("a is 1-D; Matmul takes [..., K] rows")
    w_dims = [_static(d) for d in _dims(w_ty)]
    if None in w_dims:
        raise NotDispatched(f"b has the symbolic shape {_shape(_dims(w_ty))}; Matmul is built per N and K")
    n, k = (w_dims[0], w_dims[1]) if layout == "col" else (w_dims[1], w_dims[0])
    if _static(_dims(a_ty)[-1]) != k:
        raise NotDispatched(f"a's last dimension {_text(_dims(a_ty)[-1])} is not b's K = {k}")
    for name, value in (("K", k), ("N", n)):
        if value % VECTOR_ELEMENTS:
            raise NotDispatched(f"{name} = {value} is not a multiple of {VECTOR_ELEMENTS} (Matmul loads 16-byte rows)")
    rows = _rows(_dims(a_ty)[:-1])
    kernel = kernel_for(_static(rows) or LARGE_M, dtype, layout, context.hopper, wgmma=context.wgmma, n=n)
    a2 = _reshape(context, a, [rows, _dims(a_ty)[-1]], "tilus_rows")
    y = context.emit(context.kernel(kernel, [rows, n, k, a2, weight], out=_output([rows, n], dtype)), "tilus_matmul")
    if type(kernel).__name__ == "MatmulWgmma" and layout == "col":  # a gated activation may fuse into it
        context.sources.append((y, LinearSource(rows, n, k, a2, weight, dtype)))
    if a_ty.ndim == 2:
        return y
    out_shape = _dims(a_ty)[:-1] + [tirx.IntImm("int64", n)]
    return _reshape(context, y, out_shape, "tilus_out")


@dataclass(frozen=True)
class LinearSource:
    """A dispatched ``x @ w.T`` on ``MatmulWgmma``: ``a`` [rows, k] (the Relax expression), ``w`` [n, k]."""

    rows: Any
    n: int
    k: int
    a: Any
    w: Any
    dtype: str


def _dequantize_source(context: DispatchContext, weight: Any) -> Optional[tuple[Any, Any]]:
    """``(call_tir, PrimFunc)`` when ``weight`` is bound to a call of a dequantize PrimFunc
    (:mod:`tilus_tvm.relax.quantized`), else None."""
    from tilus_tvm.relax.quantized import DEQUANTIZE_ATTR

    source = context.binding_of(weight)
    if not _is_op(source, "relax.call_tir"):
        return None
    func = context.function(source.args[0])
    if func is None or func.attrs is None or DEQUANTIZE_ATTR not in func.attrs:
        return None
    return source, func


def rewrite_dequantize_matmul(context: DispatchContext, call: Any) -> Any:
    """``R.matmul(x, dequantize(storage, scales[, zeros]))`` -> ``QuantizedMatmul`` on the packed weight.

    The dequantize call is the one :class:`tilus_tvm.relax.quantized.QuantizedLinear` emits (a PrimFunc
    marked ``tilus.dequantize`` with the weight format); ``storage`` is already in ``pack_weight``'s
    layout, so the kernel reads it as is. Small batches split K (``choose_config``) and add the
    float32 partial sums with ``R.sum``. Constraints: float16/bfloat16 activations with scales (and
    zeros) of the same dtype, a weight type and group size the kernel takes (``check_weight_dtype``,
    ``check_group``), x's last dimension static and equal to K."""
    import numpy as np

    from tilus_tvm.errors import ScriptError
    from tilus_tvm.relax.quantized import format_of
    from tilus_tvm.schedules.quantized_configs import choose_config
    from tilus_tvm.schedules.quantized_matmul import kernel_for
    from tilus_tvm.schedules.quantized_weight import check_group, check_weight_dtype

    a, b = call.args
    found = _dequantize_source(context, b)
    if found is None:
        inner = context.binding_of(b)
        if _is_op(inner, "relax.permute_dims") and _dequantize_source(context, inner.args[0]) is not None:
            raise NotDispatched("the dequantized weight is transposed (permute_dims); QuantizedMatmul multiplies by "
                                "the [K, N] weight that QuantizedLinear's dequantize produces")
        weight, _ = _weight_of(context, b)
        other = context.binding_of(weight)
        callee = other.args[0].name_hint if _is_op(other, "relax.call_tir") else ""
        if _is_op(other, "relax.dequantize") or "dequantize" in callee or "decode" in callee:
            raise NotDispatched("the weight is dequantised, but not by QuantizedLinear's dequantize of a pack_weight "
                                "layout (tilus_tvm.relax.quantized), the one form QuantizedMatmul reads")
        raise NotApplicable()
    source, func = found
    fmt, zero_points = format_of(func.attrs)
    a_ty = _tensor(a, "x")
    dtype = _dtype(a_ty)
    if dtype not in HALF_DTYPES:
        raise NotDispatched(f"x is {dtype}: QuantizedMatmul takes float16 or bfloat16 activations")
    out_dtype = call.attrs.out_dtype
    if out_dtype is not None and str(out_dtype) not in ("", "void", dtype):
        raise NotDispatched(f"out_dtype {out_dtype}: QuantizedMatmul writes the activations' dtype {dtype}")
    operands = list(source.args[1].fields)
    storage, scales = operands[0], operands[1]
    zeros = operands[2] if zero_points else None
    for name, tensor in (("scales", scales), ("zeros", zeros), ("the dequantized weight", b)):
        if tensor is not None and _dtype(_tensor(tensor, name)) != dtype:
            raise NotDispatched(f"{name} is {_dtype(tensor.ty)} and x {dtype}; QuantizedMatmul takes them in one dtype")
    try:
        check_weight_dtype(fmt.dtype)
        check_group(fmt.k, fmt.group_size)
    except ScriptError as exc:
        raise NotDispatched(f"{fmt.describe()}: {exc}") from None
    storage_dims = [_static(d) for d in _dims(_tensor(storage, "weight storage"))]
    if tuple(storage_dims) != fmt.storage_shape or _dtype(storage.ty) != "int32":
        raise NotDispatched(f"the weight storage is {_dtype(storage.ty)} {storage_dims}, not the int32 "
                            f"{list(fmt.storage_shape)} of pack_weight for {fmt.describe()}")
    if a_ty.ndim < 2 or _static(_dims(a_ty)[-1]) != fmt.k:
        raise NotDispatched(f"x has shape {_shape(_dims(a_ty))}; QuantizedMatmul takes [..., K={fmt.k}] with K static")
    rows = _rows(_dims(a_ty)[:-1])
    # R.call_tir passes every buffer, so the split-K partial sums come back as an output (the serial
    # reduction's semaphores would need a workspace that persists between calls)
    config = replace(choose_config(_static(rows) or LARGE_M, fmt, wgmma=context.wgmma, zero_points=zero_points,
                                   dtype=dtype), split_reduce="kernel")
    kernel = kernel_for(fmt, dtype, zero_points, config)
    # the kernel's tensors are flat buffers (strided views): every operand goes in as 1-D (views, no copies)
    def flat(expr: Any, name: str) -> Any:
        return _reshape(context, expr, [_rows(_dims(expr.ty))], f"tilus_{name}_flat")

    n = tirx.IntImm("int64", fmt.n)
    count = _rows([rows, n])
    operands = [rows, flat(a, "x"), flat(storage, "weight"), flat(scales, "scales"),
                flat(zeros if zeros is not None else scales, "zeros")]
    if config.split_k == 1:
        unused = relax.const(np.zeros([1], "float32"))  # the split-K workspace, not read without a split
        y = context.emit(context.kernel(kernel, operands + [unused], out=_output([count], dtype), outputs=("out_ptr",)),
                         "tilus_quantized_matmul")
    else:
        splits = tirx.IntImm("int64", config.split_k)
        unused = relax.const(np.zeros([1], "float32"))  # out, which the kernel does not touch when K is split
        partial = context.emit(context.kernel(kernel, operands + [unused], out=_output([_rows([splits, count])],
                                                                                         "float32"),
                                              outputs=("ws_ptr",)), "tilus_partial_sums")
        partial = _reshape(context, partial, [splits, count], "tilus_partials")
        # the sum of the splits on TVM's path: SplitKSum's one-tensor call would be taken for a reshape by
        # relax's RewriteDataflowReshape, which cannot read a tilus PrimFunc
        total = context.emit(relax.op.sum(partial, axis=[0]), "tilus_split_sum")
        y = context.emit(relax.op.astype(total, dtype), "tilus_quantized_matmul")
    out_shape = _dims(a_ty)[:-1] + [n]
    return _reshape(context, y, out_shape, "tilus_out")


# --- row kernels ----------------------------------------------------------------------------------
def _row_input(call: Any, what: str) -> tuple[Any, str, int]:
    x_ty = _tensor(call.args[0], what)
    dtype = _dtype(x_ty)
    if dtype not in ROW_DTYPES:
        raise NotDispatched(f"dtype {dtype}: the kernel takes float16, bfloat16 or float32")
    return x_ty, dtype, _static_last(x_ty, what)


def rewrite_softmax(context: DispatchContext, call: Any) -> Any:
    """``R.nn.softmax(x, axis=-1)`` -> ``Softmax`` (or ``OnlineSoftmax`` past 64 KB rows) over rows."""
    from tilus_tvm.schedules.softmax import softmax_kernel_for

    x_ty, dtype, n = _row_input(call, "x")
    _last_axis([call.attrs.axis], x_ty.ndim, "softmax")
    rows = _rows(_dims(x_ty)[:-1])
    x2 = _reshape(context, call.args[0], [rows, n], "tilus_rows")
    y = context.kernel(softmax_kernel_for(n, dtype), [rows, n, x2], out=_output([rows, n], dtype))
    return _restore(context, y, x_ty)


def _vector_param(context: DispatchContext, expr: Any, hidden: int, dtype: str, what: str) -> Any:
    ty = _tensor(expr, what)
    if ty.ndim != 1 or _static(_dims(ty)[0]) != hidden or _dtype(ty) != dtype:
        raise NotDispatched(f"{what} is {_dtype(ty)} {_shape(_dims(ty))}; the kernel takes a {dtype} [{hidden}] vector")
    return _reshape(context, expr, [1, hidden], f"tilus_{what}")


def rewrite_rms_norm(context: DispatchContext, call: Any) -> Any:
    """``R.nn.rms_norm(x, weight, axes=-1)`` -> ``RMSNorm`` over rows."""
    from tilus_tvm.schedules.norms import norm_kernel_for

    x_ty, dtype, hidden = _row_input(call, "x")
    _last_axis(call.attrs.axes, x_ty.ndim, "rms_norm")
    weight = _vector_param(context, call.args[1], hidden, dtype, "weight")
    rows = _rows(_dims(x_ty)[:-1])
    x2 = _reshape(context, call.args[0], [rows, hidden], "tilus_rows")
    kernel = norm_kernel_for("rms_norm", hidden, dtype)
    y = context.kernel(kernel, [rows, hidden, float(call.attrs.epsilon), x2, weight], out=_output([rows, hidden], dtype))
    return _restore(context, y, x_ty)


def rewrite_layer_norm(context: DispatchContext, call: Any) -> Any:
    """``R.nn.layer_norm(x, gamma, beta, axes=-1)`` (centred and scaled) -> ``LayerNorm`` over rows."""
    from tilus_tvm.schedules.norms import norm_kernel_for

    x_ty, dtype, hidden = _row_input(call, "x")
    _last_axis(call.attrs.axes, x_ty.ndim, "layer_norm")
    if not (call.attrs.center and call.attrs.scale):
        raise NotDispatched("layer_norm without gamma/beta (center or scale off); LayerNorm here is affine")
    gamma = _vector_param(context, call.args[1], hidden, dtype, "gamma")
    beta = _vector_param(context, call.args[2], hidden, dtype, "beta")
    rows = _rows(_dims(x_ty)[:-1])
    x2 = _reshape(context, call.args[0], [rows, hidden], "tilus_rows")
    kernel = norm_kernel_for("layer_norm", hidden, dtype)
    y = context.kernel(kernel, [rows, hidden, float(call.attrs.epsilon), x2, gamma, beta],
                       out=_output([rows, hidden], dtype))
    return _restore(context, y, x_ty)


def _restore(context: DispatchContext, y: Any, ty: Any) -> Any:
    """``y`` [rows, n] back to the shape of ``ty``, as a view (``R.memory.view``): when the result is the
    function's output, an ``R.reshape`` would become a copy kernel (RewriteDataflowReshape turns only
    reshapes bound inside a dataflow block into views)."""
    if ty.ndim == 2:
        return y
    return relax.op.memory.view(context.emit(y, "tilus_y"), _dims(ty))


# --- attention ------------------------------------------------------------------------------------
def rewrite_attention(context: DispatchContext, call: Any) -> Any:
    """``R.nn.attention(q, k, v)`` on [B, S, H, D] -> ``FlashAttention`` reading and writing [B, S, H, D]
    rows where they are (``heads=H``); when q, k and v are the thirds of one fused QKV tensor, it reads
    that tensor (``packed_qkv``) and the split that made them is left for dead-code elimination."""
    from tilus_tvm.schedules.attention import HEAD_DIMS, flash_kernel_for

    if len(call.args) > 3:
        raise NotDispatched("attention with a bias; FlashAttention takes none")
    if call.attrs.window_size is not None:
        raise NotDispatched(f"sliding-window attention (window {call.attrs.window_size}); FlashAttention has none")
    q, k, v = call.args
    q_ty, k_ty, v_ty = _tensor(q, "q"), _tensor(k, "k"), _tensor(v, "v")
    dtype = _dtype(q_ty)
    if dtype not in HALF_DTYPES or {_dtype(k_ty), _dtype(v_ty)} != {dtype}:
        raise NotDispatched(f"dtypes q {dtype}, k {_dtype(k_ty)}, v {_dtype(v_ty)}; FlashAttention takes one of "
                            f"float16, bfloat16")
    batch, seq_q, heads, head_dim = _dims(q_ty)
    if any(not _same_dim(a, b) for a, b in zip(_dims(k_ty), _dims(v_ty))):
        raise NotDispatched(f"k {_shape(_dims(k_ty))} and v {_shape(_dims(v_ty))} differ in shape")
    k_batch, seq_k, k_heads, k_dim = _dims(k_ty)
    if not (_same_dim(heads, k_heads) and _same_dim(batch, k_batch)):
        raise NotDispatched(f"q has {_text(heads)} heads and k {_text(k_heads)} (grouped-query attention) or the "
                            f"batches differ; "
                            f"FlashAttention takes equal head counts")
    d = _static(head_dim)
    if d not in HEAD_DIMS or _static(k_dim) != d or _static(heads) is None:
        raise NotDispatched(f"head_dim {_text(head_dim)} (heads {_text(heads)}); FlashAttention takes static heads "
                            f"and head_dim in {HEAD_DIMS}")
    mask = call.attrs.causal_mask
    if mask not in (None, "TopLeft") and not (mask == "BottomRight" and _same_dim(seq_q, seq_k)):
        raise NotDispatched(f"causal_mask {mask!r} with different query and key lengths; FlashAttention aligns "
                            f"the causal mask at the top left")
    scale = float(call.attrs.scale.value) if call.attrs.scale is not None else 1.0 / math.sqrt(d)
    rows = _rows([batch, heads])
    h = _static(heads)
    packed = _packed_qkv(context, (q, k, v), h, d)
    if packed is not None:  # q, k, v are thirds of one QKV tensor: the kernel reads it where it is
        qkv = _reshape(context, packed, [batch, seq_q, tirx.IntImm("int64", 3 * h), head_dim], "tilus_qkv")
        operands = [qkv, qkv, qkv]
    else:
        operands = [q, k, v]
    kernel = flash_kernel_for(d, mask is not None, dtype, heads=h, packed_qkv=packed is not None,
                              wgmma=context.wgmma)
    return context.kernel(kernel, [rows, seq_q, seq_k, scale * LOG2E, *operands],
                          out=_output([batch, seq_q, heads, head_dim], dtype))


def _split_source(context: DispatchContext, parts: list) -> Optional[Any]:
    """The ``R.split(x, len(parts), axis)`` call when ``parts`` are bound to its items 0, 1, ... in order
    (equal sections), else None."""
    items = [context.binding_of(part) for part in parts]
    if not all(isinstance(item, relax.TupleGetItem) for item in items) or \
            [item.index for item in items] != list(range(len(parts))) or \
            not all(item.tuple_value.same_as(items[0].tuple_value) for item in items):
        return None
    split = context.binding_of(items[0].tuple_value)
    if not _is_op(split, "relax.split"):
        return None
    sections = split.attrs.indices_or_sections
    return split if isinstance(sections, tirx.IntImm) and sections.value == len(parts) else None


def _packed_qkv(context: DispatchContext, qkv: tuple, heads: int, head_dim: int) -> Optional[Any]:
    """The tensor ``x`` when q, k and v are ``reshape(split(reshape(x, [b, s, 3, heads, head_dim]), 3,
    axis=2)[i], [b, s, heads, head_dim])`` for i = 0, 1, 2 (a fused QKV projection, as the frontend's
    attention modules write it), else None."""
    reshapes = [context.binding_of(tensor) for tensor in qkv]
    if not all(_is_op(reshape, "relax.reshape") for reshape in reshapes):
        return None
    source = _split_source(context, [reshape.args[0] for reshape in reshapes])
    if source is None or int(source.attrs.axis) != 2:
        return None
    five_d = source.args[0]
    dims = _dims(five_d.ty)
    if len(dims) != 5 or [_static(x) for x in dims[2:]] != [3, heads, head_dim]:
        return None
    return five_d


# --- elementwise ----------------------------------------------------------------------------------
def rewrite_add(context: DispatchContext, call: Any) -> Any:
    """``R.add(x, y)`` of two tensors of one shape (a residual connection) -> ``ResidualAdd`` over rows."""
    from tilus_tvm.schedules.elementwise import elementwise_kernel_for

    x, y = call.args
    x_ty = getattr(x, "ty", None)
    y_ty = getattr(y, "ty", None)
    if not isinstance(x_ty, relax.TensorType) or not isinstance(y_ty, relax.TensorType) or x_ty.ndim < 1:
        raise NotApplicable()
    if x_ty.ndim != y_ty.ndim or not all(_same_dim(a, b) for a, b in zip(_dims(x_ty), _dims(y_ty))):
        raise NotApplicable()  # a broadcast (a bias, a scalar): TVM's path fuses those with their producer
    x_ty, dtype, n = _row_input(call, "x")
    if _dtype(y_ty) != dtype:
        raise NotDispatched(f"x is {dtype} and y {_dtype(y_ty)}; ResidualAdd takes one dtype")
    rows = _rows(_dims(x_ty)[:-1])  # 1 for a 1-D tensor
    x2 = _reshape(context, x, [rows, n], "tilus_rows")
    y2 = _reshape(context, y, [rows, n], "tilus_rows")
    out = context.kernel(elementwise_kernel_for("add", n, dtype), [rows, x2, y2], out=_output([rows, n], dtype))
    return _restore(context, out, x_ty)


def _gated_activation(context: DispatchContext, call: Any) -> tuple[Any, Any, Any]:
    """``(silu(g), x, x's type)`` when ``call`` is ``R.multiply(R.nn.silu(g), u)`` with ``g, u = R.split(x, 2,
    axis=-1)`` (a gated MLP's activation); else ``NotApplicable``."""
    silu_var, up = call.args
    silu = context.binding_of(silu_var)
    if not _is_op(silu, "relax.nn.silu"):
        raise NotApplicable()
    split = _split_source(context, [silu.args[0], up])
    if split is None:
        raise NotApplicable()
    x = split.args[0]
    x_ty = _tensor(x, "x")
    if int(split.attrs.axis) not in (-1, x_ty.ndim - 1):
        raise NotApplicable()
    return silu_var, x, x_ty


def rewrite_swiglu(context: DispatchContext, call: Any) -> Any:
    """``R.multiply(R.nn.silu(g), u)`` with ``g, u = R.split(x, 2, axis=-1)`` (a gated MLP's activation) ->
    ``SwiGLU`` reading ``x`` once."""
    from tilus_tvm.schedules.elementwise import elementwise_kernel_for

    silu_var, x, x_ty = _gated_activation(context, call)
    dtype = _dtype(x_ty)
    if dtype not in ROW_DTYPES:
        raise NotDispatched(f"dtype {dtype}: SwiGLU takes float16, bfloat16 or float32")
    width = _static_last(x_ty, "x")
    if width % 2:
        raise NotApplicable()
    rows = _rows(_dims(x_ty)[:-1])  # 1 for a 1-D tensor
    x2 = _reshape(context, x, [rows, width], "tilus_rows")
    out = context.kernel(elementwise_kernel_for("swiglu", width // 2, dtype), [rows, x2],
                         out=_output([rows, width // 2], dtype))
    return _restore(context, out, _tensor(silu_var, "silu(gate)"))


def rewrite_gated_linear(context: DispatchContext, call: Any) -> Any:
    """``silu(g) * u`` with ``g, u = split(x @ w.T, 2, axis=-1)``, the matmul dispatched to ``MatmulWgmma``
    (sm_90a) -> one ``MatmulWgmma(gated=True)``: the activation in the matmul's epilogue, so ``x @ w.T``
    is never written (the matmul's kernel is left unused and removed)."""
    from tilus_tvm.schedules.matmul import kernel_for

    silu_var, x, _ = _gated_activation(context, call)
    source = context.source_of(x)
    if source is None or source.n % 2:
        raise NotApplicable()
    half = source.n // 2
    kernel = kernel_for(LARGE_M, source.dtype, "col", context.hopper, wgmma=True, gated=True)
    out = context.kernel(kernel, [source.rows, half, source.k, source.a, source.w],
                         out=_output([source.rows, half], source.dtype))
    return _restore(context, out, _tensor(silu_var, "silu(gate)"))


PATTERNS: tuple[Pattern, ...] = (
    Pattern("dequantize_matmul", "relax.matmul", "tilus_tvm.schedules.quantized_matmul", rewrite_dequantize_matmul),
    Pattern("matmul", "relax.matmul", "tilus_tvm.schedules.matmul", rewrite_matmul),
    Pattern("softmax", "relax.nn.softmax", "tilus_tvm.schedules.softmax", rewrite_softmax),
    Pattern("layer_norm", "relax.nn.layer_norm", "tilus_tvm.schedules.norms", rewrite_layer_norm),
    Pattern("rms_norm", "relax.nn.rms_norm", "tilus_tvm.schedules.norms", rewrite_rms_norm),
    Pattern("flash_attention", "relax.nn.attention", "tilus_tvm.schedules.attention", rewrite_attention),
    Pattern("residual_add", "relax.add", "tilus_tvm.schedules.elementwise", rewrite_add),
    Pattern("gated_linear", "relax.multiply", "tilus_tvm.schedules.matmul_sm90", rewrite_gated_linear),
    Pattern("swiglu", "relax.multiply", "tilus_tvm.schedules.elementwise", rewrite_swiglu),
)
