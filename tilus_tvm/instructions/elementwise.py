"""Elementwise instructions: ``Unary``, ``Binary``, ``Where`` and ``Assign`` (``Cast``, with its
conversion rules for the low-precision types, is ``cast.py``).

Layout rule: the output and every full-shape operand share one layout; a broadcast operand (size-1
dimensions) has the output's layout reduced over those dimensions, its threads replicas. Layouts
flow both ways (from operands to the output and back), so a tile loaded for a ``dot`` keeps the
fragment layout through the arithmetic around it.

Emitter: slot by slot in each thread. Slot ``i`` of the output reads slot ``i`` of a same-shape
operand and slot ``broadcast_local(i)`` of a broadcast one. No scratch memory.
"""
from __future__ import annotations

from typing import Any

from tvm import tirx
from tvm.script.ir_builder import tirx as Tb

from tilus_tvm.backend.context import CodegenContext, broadcast_local, const
from tilus_tvm.dtypes import DataType
from tilus_tvm.instructions.registry import register
from tilus_tvm.ir import inst as ir
from tilus_tvm.ir.tensor import RegisterTensor
from tilus_tvm.layout.register import RegisterLayout
from tilus_tvm.passes.layout_choice import broadcast_layout

UNARY = {
    "neg": lambda x: -x, "not": tirx.Not, "invert": tirx.bitwise_not, "abs": tirx.abs, "exp": tirx.exp, "exp2": tirx.exp2, "log": tirx.log,
    "log2": tirx.log2, "sqrt": tirx.sqrt, "rsqrt": tirx.rsqrt, "sin": tirx.sin, "cos": tirx.cos,
    "tanh": tirx.tanh, "sigmoid": tirx.sigmoid, "floor": tirx.floor, "ceil": tirx.ceil, "round": tirx.round,
    "erf": tirx.erf,
}

BINARY = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b, "div": lambda a, b: a / b,
    "floordiv": tirx.floordiv, "mod": tirx.floormod, "max": tirx.max, "min": tirx.min, "pow": tirx.power,
    "lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b,
    "eq": tirx.EQ, "ne": tirx.NE, "and": tirx.And, "or": tirx.Or, "xor": tirx.NE,
    "shl": tirx.shift_left, "shr": tirx.shift_right,
}

# ``&``, ``|``, ``^`` of integer tensors are bitwise (of bool tensors, logical: BINARY above)
BITWISE = {"and": tirx.bitwise_and, "or": tirx.bitwise_or, "xor": tirx.bitwise_xor}


# --- layout rules ----------------------------------------------------------------------------------
def set_layout(tensor: RegisterTensor, layout: RegisterLayout) -> bool:
    """Give ``tensor`` ``layout`` unless it has one; True when it changed."""
    if tensor.layout is None:
        tensor.layout = layout
        return True
    return False


def propagate_same(out: RegisterTensor, x: RegisterTensor) -> bool:
    if out.layout is None and x.layout is not None:
        return set_layout(out, x.layout)
    if x.layout is None and out.layout is not None:
        return set_layout(x, out.layout)
    return False


def propagate_elementwise(out: RegisterTensor, operands: list) -> bool:
    tensors = [t for t in operands if isinstance(t, RegisterTensor)]
    changed = False
    if out.layout is None:
        full = [t for t in tensors if t.shape == out.shape and t.layout is not None]
        if not full:
            return False
        changed = set_layout(out, full[0].layout)
    for t in tensors:
        if t.layout is None:
            changed |= set_layout(t, broadcast_layout(out.layout, t.shape))
    return changed


def required_broadcast(out: RegisterTensor, operands: list) -> list:
    return [(t, broadcast_layout(out.layout, t.shape)) for t in operands if isinstance(t, RegisterTensor)]


# --- emitters --------------------------------------------------------------------------------------
def operand_value(ctx: CodegenContext, operand: Any, out_layout: RegisterLayout, local: Any, dtype: DataType):
    """The value of ``operand`` (tensor or scalar) for the output slot ``local``."""
    if isinstance(operand, RegisterTensor):
        return ctx.reg(operand)[broadcast_local(out_layout, operand.shape, local)]
    return const(operand, dtype)


def emit_unary(ctx: CodegenContext, inst: ir.Unary) -> None:
    out, fn = inst.output, UNARY[inst.op]
    src, dst = ctx.reg(inst.x), ctx.reg(out)
    with Tb.unroll(0, out.layout.local_size) as i:
        Tb.buffer_store(dst, fn(src[i]), [i])


def emit_binary(ctx: CodegenContext, inst: ir.Binary) -> None:
    out = inst.output
    operand_dtype = next(t.dtype for t in (inst.lhs, inst.rhs) if isinstance(t, RegisterTensor))
    fn = BITWISE[inst.op] if inst.op in BITWISE and operand_dtype.is_integer else BINARY[inst.op]
    dst = ctx.reg(out)
    with Tb.unroll(0, out.layout.local_size) as i:
        a = operand_value(ctx, inst.lhs, out.layout, i, operand_dtype)
        b = operand_value(ctx, inst.rhs, out.layout, i, operand_dtype)
        Tb.buffer_store(dst, fn(a, b), [i])


def emit_where(ctx: CodegenContext, inst: ir.Where) -> None:
    out = inst.output
    dst = ctx.reg(out)
    with Tb.unroll(0, out.layout.local_size) as i:
        cond = operand_value(ctx, inst.cond, out.layout, i, inst.cond.dtype)
        x = operand_value(ctx, inst.x, out.layout, i, out.dtype)
        y = operand_value(ctx, inst.y, out.layout, i, out.dtype)
        Tb.buffer_store(dst, tirx.Select(cond, x, y), [i])


def emit_assign(ctx: CodegenContext, inst: ir.Assign) -> None:
    src, dst = ctx.reg(inst.src), ctx.reg(inst.dst)
    if src.same_as(dst):
        return
    with Tb.unroll(0, dst.shape[0]) as i:  # the array's length: packed types hold several slots a word
        Tb.buffer_store(dst, src[i], [i])


register(ir.Unary, emit=emit_unary, propagate=lambda inst: propagate_same(inst.output, inst.x),
         required=lambda inst: [(inst.x, inst.output.layout)])
register(ir.Binary, emit=emit_binary,
         propagate=lambda inst: propagate_elementwise(inst.output, [inst.lhs, inst.rhs]),
         required=lambda inst: required_broadcast(inst.output, [inst.lhs, inst.rhs]))
register(ir.Where, emit=emit_where,
         propagate=lambda inst: propagate_elementwise(inst.output, [inst.cond, inst.x, inst.y]),
         required=lambda inst: required_broadcast(inst.output, [inst.cond, inst.x, inst.y]))
register(ir.Assign, emit=emit_assign, propagate=lambda inst: propagate_same(inst.dst, inst.src),
         required=lambda inst: [(inst.src, inst.dst.layout)])
