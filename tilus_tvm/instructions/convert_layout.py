"""``ConvertLayout``: copy a register tensor into another layout (inserted by layout inference
where an operand's layout differs from the one its instruction needs).

Scratch: the whole tile, row-major, in shared memory. Emitter: the owners of each element write it
at its row-major position, then every thread reads the elements of its new slots back.
"""
from __future__ import annotations

from tvm.script.ir_builder import tirx as Tb

from tilus_tvm.backend.context import CodegenContext, row_major_linear, sync_threads
from tilus_tvm.instructions import register_bits
from tilus_tvm.instructions.registry import register
from tilus_tvm.ir import inst as ir
from tilus_tvm.lowp import is_packed


def emit_convert_layout(ctx: CodegenContext, inst: ir.ConvertLayout) -> None:
    """Through shared memory: owners write every element at its row-major position, all read back."""
    src, out = inst.x, inst.output
    if is_packed(src.dtype):  # one byte per code: register_bits.py
        return register_bits.emit_packed_convert_layout(ctx, inst)
    scratch = ctx.shared_view(ctx.plan.offset_of(inst), src.dtype, src.size, f"{out.name}_scratch")
    write_row_major(ctx, src, scratch)
    dst_buf = ctx.reg(out)
    with Tb.unroll(0, out.layout.local_size) as i:
        position = row_major_linear(ctx.logical(out.layout, i), out.shape)
        Tb.buffer_store(dst_buf, scratch[position], [i])
    sync_threads()


def write_row_major(ctx: CodegenContext, tensor, scratch) -> None:
    """The owners of each element of the register ``tensor`` store it at its row-major position in
    ``scratch`` (a shared buffer of the tensor's dtype), between two barriers: the scratch may overlap
    memory other threads were still reading, and every thread reads it back after."""
    src = ctx.reg(tensor)
    sync_threads()
    with ctx.guarded(ctx.owner_condition(tensor.layout)):
        with Tb.unroll(0, tensor.layout.local_size) as i:
            Tb.buffer_store(scratch, src[i], [row_major_linear(ctx.logical(tensor.layout, i), tensor.shape)])
    sync_threads()


register(ir.ConvertLayout, emit=emit_convert_layout,
         scratch=lambda inst: (register_bits.convert_scratch_bytes(inst) if is_packed(inst.x.dtype)
                               else inst.x.dtype.storage_bytes(inst.x.size)))
