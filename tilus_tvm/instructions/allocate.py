"""Allocation instructions: ``AllocateRegister``, ``AllocateShared``, ``FreeShared``, ``GlobalView``,
``GlobalSubview``.

None has a layout rule: a register tensor takes the layout its uses give it (or the default), a
shared tensor has the layout it was created with. Shared tensors get their offsets in the pool
from the shared-memory plan, which reads allocations and frees directly.
"""
from __future__ import annotations

from tvm.script.ir_builder import tirx as Tb

from tilus_tvm.backend.context import CodegenContext, const
from tilus_tvm.instructions import register_bits
from tilus_tvm.instructions.registry import register
from tilus_tvm.ir import inst as ir
from tilus_tvm.ir.values import is_scalar
from tilus_tvm.lowp import is_packed


def emit_allocate_register(ctx: CodegenContext, inst: ir.AllocateRegister) -> None:
    if inst.init is None:
        return
    out = inst.output
    if is_packed(out.dtype):  # codes packed into words: register_bits.py
        return register_bits.emit_packed_allocate(ctx, inst)
    buf = ctx.reg(out)
    if isinstance(inst.init, ir.SlotValues):
        for i, value in enumerate(inst.init.values):
            Tb.buffer_store(buf, const(value, out.dtype), [i])
        return
    with Tb.unroll(0, out.layout.local_size) as i:
        if is_scalar(inst.init):  # (TVM expressions are callable too, so test for a scalar first)
            value = inst.init
        else:
            value = inst.init(*ctx.logical(out.layout, i))
        Tb.buffer_store(buf, const(value, out.dtype), [i])


def emit_allocate_shared(ctx: CodegenContext, inst: ir.AllocateShared) -> None:
    ctx.declare_shared(inst.output)


def emit_free_shared(ctx: CodegenContext, inst: ir.FreeShared) -> None:
    """Nothing to generate: the shared-memory plan already lets later tensors reuse the space."""


def emit_global_view(ctx: CodegenContext, inst: ir.GlobalView) -> None:
    ctx.declare_global_view(inst.output)


def emit_global_subview(ctx: CodegenContext, inst: ir.GlobalSubview) -> None:
    ctx.declare_global_subview(inst.output)


register(ir.AllocateRegister, emit=emit_allocate_register)
register(ir.AllocateShared, emit=emit_allocate_shared)
register(ir.FreeShared, emit=emit_free_shared)
register(ir.GlobalView, emit=emit_global_view)
register(ir.GlobalSubview, emit=emit_global_subview)
