"""Emitter of ``dot``: ``mma.sync`` atoms tiled over warps, or multiply-adds on CUDA cores.

Layout inference fixed the operand layouts from the instruction's :class:`DotConfig` (see
``passes/layout_choice.dot_layouts``), so every register slot is known at compile time:

    mma:  A slot (mi * repeat_k + ki) * a_atom + e,  B slot (ki * repeat_n + ni) * b_atom + e,
          C slot (mi * repeat_n + ni) * c_atom + e
    simt: A slot i * k + kk,  B slot kk * repeat_n + j,  C slot i * repeat_n + j
"""
from __future__ import annotations

from tvm import tirx
from tvm.script.ir_builder import tirx as Tb

from tilus_tvm.backend.context import CodegenContext, emitter
from tilus_tvm.ir import inst as ir


@emitter(ir.Dot)
def emit_dot(ctx: CodegenContext, inst: ir.Dot) -> None:
    config = inst.config
    acc = ctx.reg(inst.output)
    if inst.output is not inst.c:
        c = ctx.reg(inst.c)
        with Tb.unroll(0, inst.output.layout.local_size) as i:
            Tb.buffer_store(acc, c[i], [i])
    a, b = ctx.reg(inst.a), ctx.reg(inst.b)
    if config.kind == "mma":
        _emit_mma(config, a, b, acc)
    else:
        _emit_simt(config, a, b, acc, inst.output.dtype.name)


def _emit_mma(config: ir.DotConfig, a, b, acc) -> None:
    atom = config.atom
    a_size, b_size, c_size = atom.a_layout.local_size, atom.b_layout.local_size, atom.c_layout.local_size
    a_type, b_type, c_type = atom.ptx_legacy_types
    for ki in range(config.repeat_k):
        for mi in range(config.repeat_m):
            for ni in range(config.repeat_n):
                Tb.evaluate(Tb.ptx_legacy.mma(
                    atom.name, "row", "col", a_type, b_type, c_type,
                    a.data, (mi * config.repeat_k + ki) * a_size,
                    b.data, (ki * config.repeat_n + ni) * b_size,
                    acc.data, (mi * config.repeat_n + ni) * c_size, False))


def _emit_simt(config: ir.DotConfig, a, b, acc, acc_dtype: str) -> None:
    rm, rn, k = config.repeat_m, config.repeat_n, config.repeat_k
    with Tb.serial(0, k) as kk:
        with Tb.unroll(0, rm) as i:
            with Tb.unroll(0, rn) as j:
                product = tirx.Cast(acc_dtype, a[i * k + kk]) * tirx.Cast(acc_dtype, b[kk * rn + j])
                Tb.buffer_store(acc, acc[i * rn + j] + product, [i * rn + j])
