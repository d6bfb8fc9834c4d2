"""Global-memory tile accesses: ``LoadGlobal`` and ``StoreGlobal``.

No layout rule of their own: a load takes the layout its uses give its output (a ``dot`` operand
is loaded straight into fragment layout), else the default coalesced layout. No scratch memory.

Emitter: a thread handles the elements of its register slots (slot ``i`` of thread ``t`` holds the
tile element ``layout.logical(t, i)``). Accesses are masked against the view's shape. When the
layout gives a thread runs of consecutive elements along a unit-stride dimension (and alignment
is provable), accesses are vectorised up to 16 bytes.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

from tvm import sym, tirx
from tvm.script.ir_builder import tirx as Tb

from tilus_tvm.backend.context import CodegenContext, const, global_bounds, place_tile
from tilus_tvm.instructions import packed_memory
from tilus_tvm.instructions.registry import register
from tilus_tvm.ir import inst as ir
from tilus_tvm.ir.tensor import GlobalTensor
from tilus_tvm.layout.register import RegisterLayout
from tilus_tvm.lowp import is_packed

MAX_VECTOR_BYTES = 16


def vector_width(layout: RegisterLayout, tensor: GlobalTensor, offsets: Sequence[Any], dims: Sequence[int],
                 analyzer: Any = None) -> int:
    """Elements per vector access, or 1.

    The innermost local mode must be the innermost mode of the tile's last dimension (so register
    slots ``v*j .. v*j+v-1`` are consecutive elements of one row), that dimension must have stride 1
    in global memory, and every address of a vector must be a multiple of its width: the other
    strides, the tile offset along the vector and the view's extent there must be multiples of
    the width (the extent so a vector is either fully inside or fully outside the view); a
    sub-view's base offset must be one too (the parent's strides of its leading indices).
    """
    if not layout.local_modes:
        return 1
    last_dim = len(layout.shape) - 1
    inner_mode = layout.local_modes[-1]
    if layout.grouped_modes[last_dim][-1:] != (inner_mode,):
        return 1
    global_dim = dims[-1]
    if not _is_one(tensor.strides[global_dim]):
        return 1
    width = math.gcd(layout.mode_shape[inner_mode], max(1, MAX_VECTOR_BYTES * 8 // tensor.dtype.nbits))
    analyzer = analyzer or sym.Analyzer()
    while width > 1:
        multiples = [offsets[global_dim], tensor.shape[global_dim]]
        multiples += [s for d, s in enumerate(tensor.strides) if d != global_dim]
        multiples += tensor.base_strides  # a sub-view's first element
        if all(_divisible(analyzer, value, width) for value in multiples):
            return width
        width //= 2
    return 1


def _is_one(value: Any) -> bool:
    return (isinstance(value, int) and value == 1) or (isinstance(value, tirx.IntImm) and value.value == 1)


def _divisible(analyzer: sym.Analyzer, value: Any, width: int) -> bool:
    if isinstance(value, int):
        return value % width == 0
    modular = analyzer.modular_set(value)
    return modular.coeff % width == 0 and modular.base % width == 0


class _GlobalAccess:
    """The per-vector addressing shared by global loads and stores: vector ``j`` covers register
    slots ``j*width ..`` and tile elements along ``dims[-1]`` starting at ``coords``."""

    def __init__(self, ctx: CodegenContext, layout: RegisterLayout, tensor: GlobalTensor, offsets, dims):
        self.ctx, self.layout, self.tensor, self.offsets, self.dims = ctx, layout, tensor, offsets, dims
        aligned = ctx.func.aligned(tensor.pointer)
        self.width = vector_width(layout, tensor, offsets, dims, ctx.func.analyzer()) if aligned else 1

    def coords(self, first_slot) -> list[Any]:
        return place_tile(self.offsets, self.dims, self.ctx.logical(self.layout, first_slot))

    def element(self, view, coords: list[Any]) -> tuple[Any, list[Any]]:
        """(buffer, indices) of the element or vector at ``coords``. TVM allows a vector only in a
        buffer's last index, so a vector goes through the flat pointer buffer at the linear offset."""
        if self.width == 1:
            return view, coords
        linear = sum((c * s for c, s in zip(coords, self.tensor.strides)), 0)
        return self.ctx.flat_view(self.tensor), [tirx.Ramp(linear, 1, self.width)]

    def slots(self, first_slot):
        return first_slot if self.width == 1 else tirx.Ramp(first_slot, 1, self.width)


def emit_load_global(ctx: CodegenContext, inst: ir.LoadGlobal) -> None:
    out = inst.output
    if is_packed(out.dtype):  # sub-byte types and 8-bit floats: bit arithmetic, in packed_memory.py
        return packed_memory.emit_load_global(ctx, inst)
    access = _GlobalAccess(ctx, out.layout, inst.src, inst.offsets, inst.dims)
    view, buf, width = ctx.view(inst.src), ctx.reg(out), access.width
    # TVM 0.27's CUDA codegen prints a zero of more than four 8-bit lanes as make_uint4 (or
    # make_uint2) of one argument a lane, which does not compile: such vectors are zeroed lane by lane
    lanewise_zero = out.dtype.nbits == 8 and width > 4
    zero = const(0, out.dtype) if width == 1 else tirx.Broadcast(const(0, out.dtype), width)
    with Tb.unroll(0, out.layout.local_size // width) as j:
        coords = access.coords(j * width)
        load = tirx.BufferLoad(*access.element(view, coords))
        cond = global_bounds(inst.src, coords)
        if not lanewise_zero:
            Tb.buffer_store(buf, tirx.if_then_else(cond, load, zero), [access.slots(j * width)])
        else:
            with Tb.If(cond):
                with Tb.Then():
                    Tb.buffer_store(buf, load, [access.slots(j * width)])
                with Tb.Else():
                    for lane in range(width):
                        Tb.buffer_store(buf, const(0, out.dtype), [j * width + lane])


def emit_store_global(ctx: CodegenContext, inst: ir.StoreGlobal) -> None:
    src = inst.src
    if is_packed(src.dtype):
        return packed_memory.emit_store_global(ctx, inst)
    access = _GlobalAccess(ctx, src.layout, inst.dst, inst.offsets, inst.dims)
    view, buf, width = ctx.view(inst.dst), ctx.reg(src), access.width
    with ctx.guarded(ctx.owner_condition(src.layout)):
        with Tb.unroll(0, src.layout.local_size // width) as j:
            coords = access.coords(j * width)
            with ctx.guarded(global_bounds(inst.dst, coords)):
                target, index = access.element(view, coords)
                Tb.buffer_store(target, tirx.BufferLoad(buf, [access.slots(j * width)]), index)


register(ir.LoadGlobal, emit=emit_load_global)
register(ir.StoreGlobal, emit=emit_store_global)
