"""``Sync`` (``__syncthreads``) and ``Printf`` (C printf from thread 0 of each block)."""
from __future__ import annotations

from tvm.script.ir_builder import tirx as Tb

from tilus_tvm.backend.context import CodegenContext, sync_threads
from tilus_tvm.instructions.registry import register
from tilus_tvm.ir import inst as ir


def emit_printf(ctx: CodegenContext, inst: ir.Printf) -> None:
    with ctx.guarded(ctx.tx == 0):
        Tb.evaluate(Tb.cuda.printf(inst.fmt, *inst.args))


register(ir.Sync, emit=lambda ctx, inst: sync_threads())
register(ir.Printf, emit=emit_printf)
