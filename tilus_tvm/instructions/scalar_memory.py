"""``LoadGlobalScalar``: one element of a global tensor read into a scalar variable.

No layout rule (it defines no register tensor) and no scratch. Emitter: every thread loads
``src[indices]`` into the variable's one-element local buffer; an index outside ``src`` is the
author's error (the read is not masked: a scalar has no "outside" value).
"""
from __future__ import annotations

from tvm.script.ir_builder import tirx as Tb

from tilus_tvm.backend.context import CodegenContext
from tilus_tvm.instructions.registry import register
from tilus_tvm.ir import inst as ir


def emit_load_global_scalar(ctx: CodegenContext, inst: ir.LoadGlobalScalar) -> None:
    Tb.buffer_store(inst.buffer, ctx.view(inst.src)[tuple(inst.indices)], [0])


register(ir.LoadGlobalScalar, emit=emit_load_global_scalar)
