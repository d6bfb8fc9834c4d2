"""Shared-memory tile accesses: ``LoadShared`` and ``StoreShared``.

No layout rule of their own (the register side takes its layout from its uses; the shared side
has the layout the tensor was created with). No scratch memory. Emitter: each thread reads or
writes the elements of its register slots at the offsets the shared layout (swizzle included)
gives; stores are made by the first replica of each element only.
"""
from __future__ import annotations

from tvm.script.ir_builder import tirx as Tb

from tilus_tvm.backend.context import CodegenContext, place_tile, shared_offset
from tilus_tvm.instructions.registry import register
from tilus_tvm.ir import inst as ir


def _shared_offset(ctx: CodegenContext, tensor, offsets, dims, tile_index):
    return shared_offset(tensor.layout, place_tile(offsets, dims, tile_index))


def emit_load_shared(ctx: CodegenContext, inst: ir.LoadShared) -> None:
    out = inst.output
    view = ctx.view(inst.src)
    buf = ctx.reg(out)
    with Tb.unroll(0, out.layout.local_size) as i:
        offset = _shared_offset(ctx, inst.src, inst.offsets, inst.dims, ctx.logical(out.layout, i))
        Tb.buffer_store(buf, view[offset], [i])


def emit_store_shared(ctx: CodegenContext, inst: ir.StoreShared) -> None:
    src = inst.src
    view = ctx.view(inst.dst)
    buf = ctx.reg(src)
    with ctx.guarded(ctx.owner_condition(src.layout)):
        with Tb.unroll(0, src.layout.local_size) as i:
            offset = _shared_offset(ctx, inst.dst, inst.offsets, inst.dims, ctx.logical(src.layout, i))
            Tb.buffer_store(view, buf[i], [offset])


register(ir.LoadShared, emit=emit_load_shared)
register(ir.StoreShared, emit=emit_store_shared)
