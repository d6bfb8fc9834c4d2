"""Emitters of elementwise instructions, casts, layout conversions, reductions, sync and printf.

Elementwise instructions work slot by slot: layout inference made every operand's layout the
output's (or, for a broadcast operand, the output's reduced over its size-1 dimensions), so slot
``i`` of the output reads slot ``i`` of a same-shape operand and slot ``broadcast_local(i)`` of a
broadcast one, in the same thread.
"""
from __future__ import annotations

import math
from typing import Any

from tvm import tirx
from tvm.script.ir_builder import tirx as Tb

from tilus_tvm.backend.context import CodegenContext, broadcast_local, const, drop_local_dims, emitter
from tilus_tvm.dtypes import DataType
from tilus_tvm.ir import inst as ir
from tilus_tvm.ir.scalar import expr_dtype
from tilus_tvm.ir.tensor import RegisterTensor
from tilus_tvm.layout.register import RegisterLayout, row_major_ravel, row_major_unravel
from tilus_tvm.passes.shared_memory import dim_spatial_positions, reduce_partial_groups, reduce_shuffle_lanes

UNARY = {
    "neg": lambda x: -x, "not": tirx.Not, "abs": tirx.abs, "exp": tirx.exp, "exp2": tirx.exp2, "log": tirx.log,
    "log2": tirx.log2, "sqrt": tirx.sqrt, "rsqrt": tirx.rsqrt, "sin": tirx.sin, "cos": tirx.cos,
    "tanh": tirx.tanh, "sigmoid": tirx.sigmoid, "floor": tirx.floor, "ceil": tirx.ceil, "round": tirx.round,
    "erf": tirx.erf,
}

BINARY = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b, "div": lambda a, b: a / b,
    "floordiv": tirx.floordiv, "mod": tirx.floormod, "max": tirx.max, "min": tirx.min, "pow": tirx.power,
    "lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b,
    "eq": tirx.EQ, "ne": tirx.NE, "and": tirx.And, "or": tirx.Or,
}

REDUCE_COMBINE = {"sum": lambda a, b: a + b, "max": tirx.max, "min": tirx.min}


def operand_value(ctx: CodegenContext, operand: Any, out_layout: RegisterLayout, local: Any, dtype: DataType):
    """The value of ``operand`` (tensor or scalar) for the output slot ``local``."""
    if isinstance(operand, RegisterTensor):
        return ctx.reg(operand)[broadcast_local(out_layout, operand.shape, local)]
    return const(operand, dtype)


@emitter(ir.Unary)
def emit_unary(ctx: CodegenContext, inst: ir.Unary) -> None:
    out, fn = inst.output, UNARY[inst.op]
    src, dst = ctx.reg(inst.x), ctx.reg(out)
    with Tb.unroll(0, out.layout.local_size) as i:
        Tb.buffer_store(dst, fn(src[i]), [i])


@emitter(ir.Binary)
def emit_binary(ctx: CodegenContext, inst: ir.Binary) -> None:
    out, fn = inst.output, BINARY[inst.op]
    operand_dtype = next(t.dtype for t in (inst.lhs, inst.rhs) if isinstance(t, RegisterTensor))
    dst = ctx.reg(out)
    with Tb.unroll(0, out.layout.local_size) as i:
        a = operand_value(ctx, inst.lhs, out.layout, i, operand_dtype)
        b = operand_value(ctx, inst.rhs, out.layout, i, operand_dtype)
        Tb.buffer_store(dst, fn(a, b), [i])


@emitter(ir.Where)
def emit_where(ctx: CodegenContext, inst: ir.Where) -> None:
    out = inst.output
    dst = ctx.reg(out)
    with Tb.unroll(0, out.layout.local_size) as i:
        cond = operand_value(ctx, inst.cond, out.layout, i, inst.cond.dtype)
        x = operand_value(ctx, inst.x, out.layout, i, out.dtype)
        y = operand_value(ctx, inst.y, out.layout, i, out.dtype)
        Tb.buffer_store(dst, tirx.Select(cond, x, y), [i])


@emitter(ir.Cast)
def emit_cast(ctx: CodegenContext, inst: ir.Cast) -> None:
    out = inst.output
    src, dst = ctx.reg(inst.x), ctx.reg(out)
    with Tb.unroll(0, out.layout.local_size) as i:
        Tb.buffer_store(dst, tirx.Cast(out.dtype.name, src[i]), [i])


@emitter(ir.Assign)
def emit_assign(ctx: CodegenContext, inst: ir.Assign) -> None:
    src, dst = ctx.reg(inst.src), ctx.reg(inst.dst)
    if src.same_as(dst):
        return
    with Tb.unroll(0, inst.dst.layout.local_size) as i:
        Tb.buffer_store(dst, src[i], [i])


def _sync() -> None:
    Tb.evaluate(Tb.tvm_storage_sync("shared"))


@emitter(ir.Sync)
def emit_sync(ctx: CodegenContext, inst: ir.Sync) -> None:
    _sync()


@emitter(ir.Printf)
def emit_printf(ctx: CodegenContext, inst: ir.Printf) -> None:
    with ctx.guarded(ctx.tx == 0):
        Tb.evaluate(Tb.cuda.printf(inst.fmt, *inst.args))


def _row_major_linear(index, shape) -> Any:
    return row_major_ravel(list(index), list(shape))


@emitter(ir.ConvertLayout)
def emit_convert_layout(ctx: CodegenContext, inst: ir.ConvertLayout) -> None:
    """Through shared memory: owners write every element at its row-major position, all read back."""
    src, out = inst.x, inst.output
    scratch = ctx.shared_view(ctx.plan.offset_of(inst), src.dtype, src.size, f"{out.name}_scratch")
    src_buf, dst_buf = ctx.reg(src), ctx.reg(out)
    _sync()  # the scratch may overlap memory other threads were still reading
    with ctx.guarded(ctx.owner_condition(src.layout)):
        with Tb.unroll(0, src.layout.local_size) as i:
            Tb.buffer_store(scratch, src_buf[i], [_row_major_linear(ctx.logical(src.layout, i), src.shape)])
    _sync()
    with Tb.unroll(0, out.layout.local_size) as i:
        position = _row_major_linear(ctx.logical(out.layout, i), out.shape)
        Tb.buffer_store(dst_buf, scratch[position], [i])
    _sync()


def _reduce_groups(x_layout: RegisterLayout, dim: int) -> tuple[list[list[int]], int]:
    """For each output slot, the input slots of one thread that reduce into it (compile time)."""
    num_out = x_layout.local_size // math.prod(x_layout.mode_shape[m] for m in x_layout.local_modes
                                               if m in x_layout.grouped_modes[dim])
    groups: list[list[int]] = [[] for _ in range(num_out)]
    for i in range(x_layout.local_size):
        groups[drop_local_dims(x_layout, {dim}, i)].append(i)
    return groups, num_out


def _shuffle_xor(value, lane_mask: int):
    return Tb.call_extern(expr_dtype(value), "__shfl_xor_sync", tirx.const(0xFFFFFFFF, "uint32"), value, lane_mask, 32)


@emitter(ir.Reduce)
def emit_reduce(ctx: CodegenContext, inst: ir.Reduce) -> None:
    """Per thread, then across the threads that hold parts of one output row: with butterfly warp
    shuffles when those threads sit in one warp at power-of-two strides, else through shared memory."""
    x, out = inst.x, inst.output
    combine = REDUCE_COMBINE[inst.op]
    src, dst = ctx.reg(x), ctx.reg(out)
    groups, num_out = _reduce_groups(x.layout, inst.dim)
    for j, slots in enumerate(groups):
        acc = src[slots[0]]
        for s in slots[1:]:
            acc = combine(acc, src[s])
        Tb.buffer_store(dst, acc, [j])
    lanes = reduce_shuffle_lanes(x.layout, inst.dim)
    if lanes is not None:
        for stride, size in lanes:
            mask = stride
            while mask < stride * size:
                with Tb.unroll(0, num_out) as j:
                    Tb.buffer_store(dst, combine(dst[j], _shuffle_xor(dst[j], mask)), [j])
                mask *= 2
        return
    _reduce_through_shared(ctx, inst, num_out)


def _reduce_through_shared(ctx: CodegenContext, inst: ir.Reduce, num_out: int) -> None:
    x, out = inst.x, inst.output
    combine = REDUCE_COMBINE[inst.op]
    dst = ctx.reg(out)
    partials = reduce_partial_groups(x.layout, inst.dim)
    scratch = ctx.shared_view(ctx.plan.offset_of(inst), x.dtype, partials * out.size, f"{out.name}_partials")
    positions = dim_spatial_positions(x.layout, inst.dim)
    digits = row_major_unravel(ctx.tx, x.layout.spatial_shape)
    part = row_major_ravel([digits[p] for p in positions], [x.layout.spatial_shape[p] for p in positions])
    _sync()
    with ctx.guarded(ctx.owner_condition(x.layout)):
        with Tb.unroll(0, num_out) as j:
            position = _row_major_linear(ctx.logical(out.layout, j), out.shape)
            Tb.buffer_store(scratch, dst[j], [part * out.size + position])
    _sync()
    with Tb.unroll(0, num_out) as j:
        position = _row_major_linear(ctx.logical(out.layout, j), out.shape)
        acc = scratch[position]
        for p in range(1, partials):
            acc = combine(acc, scratch[p * out.size + position])
        Tb.buffer_store(dst, acc, [j])
    _sync()

