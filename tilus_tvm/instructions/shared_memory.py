"""Shared-memory tile accesses: ``LoadShared`` and ``StoreShared``.

No layout rule of their own (the register side takes its layout from its uses; the shared side
has the layout the tensor was given or inferred). No scratch memory.

``LoadShared`` uses ``ldmatrix`` whenever the layouts allow: the output's register layout must be
an outer layout composed with an ``ldmatrix`` fragment (``divide(layout, atom.layout)`` succeeds:
x4, x2 or x1, with or without ``.trans``; mma operand layouts are), the elements 16-bit (or 8-bit
without ``.trans``), and each 16-byte row of the fragment contiguous and aligned in shared memory
(unit stride along the tile's last dimension, a swizzle that moves 16-byte units whole). Then
each warp issues one ``ldmatrix`` per outer register group, lane ``l`` passing the address of row
``l % 8`` of matrix ``l // 8``. Otherwise each thread reads the elements of its register slots.
Stores are made by the first replica of each element only.
"""
from __future__ import annotations

from typing import Any, Optional

from tvm import tirx
from tvm.script.ir_builder import tirx as Tb

from tilus_tvm.backend.context import CodegenContext, logical_index, place_tile
from tilus_tvm.errors import LayoutError
from tilus_tvm.instructions.async_copy import _divisible, shared_vectors_fit, view_prefix
from tilus_tvm.instructions.registry import register
from tilus_tvm.ir import inst as ir
from tilus_tvm.layout.atoms import LdmatrixAtom, get_ldmatrix_atom
from tilus_tvm.layout.register import RegisterLayout
from tilus_tvm.layout.register_ops import divide


def ldmatrix_plan(inst: ir.LoadShared, layout=None, analyzer: Any = None) -> Optional[tuple[LdmatrixAtom, RegisterLayout]]:
    """(atom, outer layout) when ``inst`` can load with ``ldmatrix``, else None."""
    out, src = inst.output, inst.src
    bits = out.dtype.nbits
    if bits not in (8, 16) or out.layout is None or len(out.shape) != 2 or out.layout.num_threads % 32:
        return None
    layout = layout if layout is not None else src.resolved_layout()
    row = 128 // bits  # elements of one 16-byte row
    if layout is not None:
        if inst.dims[-1] != len(src.shape) - 1 or not shared_vectors_fit(src, layout, row):
            return None
        if not _divisible(inst.offsets[-1], row, analyzer):
            return None
    for num in (4, 2, 1):
        for trans in (False, True):
            if trans and bits != 16:
                continue
            atom = get_ldmatrix_atom(num, trans, bits)
            try:
                outer = divide(out.layout, atom.layout)
            except LayoutError:
                continue
            return atom, outer
    return None


def _ldmatrix_tile_index(atom: LdmatrixAtom, outer: RegisterLayout, warp: Any, group: int, lane: Any) -> list:
    origin = logical_index(outer, warp, group) if not isinstance(warp, int) else outer.logical(warp, group)
    address = atom.lane_address(lane)
    return [o * extent + a for o, extent, a in zip(origin, atom.shape, address)]


def emit_load_shared(ctx: CodegenContext, inst: ir.LoadShared) -> None:
    out = inst.output
    buf = ctx.reg(out)
    plan = ldmatrix_plan(inst, analyzer=ctx.func.analyzer())
    if plan is not None:
        _emit_ldmatrix(ctx, inst, *plan)
        return
    with Tb.unroll(0, out.layout.local_size) as i:
        view, offset = ctx.shared_element(inst.src, place_tile(inst.offsets, inst.dims, ctx.logical(out.layout, i)))
        Tb.buffer_store(buf, view[offset], [i])


def _emit_ldmatrix(ctx: CodegenContext, inst: ir.LoadShared, atom: LdmatrixAtom, outer: RegisterLayout) -> None:
    out = inst.output
    words_per_group = atom.layout.local_size * out.dtype.nbits // 32  # = atom.num
    words = Tb.decl_buffer((out.layout.local_size * out.dtype.nbits // 32,), "uint32", data=ctx.reg(out).data,
                           scope="local")
    ldmatrix = Tb.ptx[atom.ptx]
    warp, lane = ctx.tx // 32, ctx.tx % 32
    for group in range(outer.local_size):
        tile = _ldmatrix_tile_index(atom, outer, warp, group, lane)
        view, offset = ctx.shared_element(inst.src, place_tile(inst.offsets, inst.dims, tile))
        registers = [words[group * words_per_group + j] for j in range(words_per_group)]
        Tb.evaluate(ldmatrix(*registers, view.ptr_to([offset])))


def emit_store_shared(ctx: CodegenContext, inst: ir.StoreShared) -> None:
    src = inst.src
    buf = ctx.reg(src)
    with ctx.guarded(ctx.owner_condition(src.layout)):
        with Tb.unroll(0, src.layout.local_size) as i:
            coords = place_tile(inst.offsets, inst.dims, ctx.logical(src.layout, i))
            view, offset = ctx.shared_element(inst.dst, coords)
            Tb.buffer_store(view, buf[i], [offset])


def _static(value: Any) -> int:
    return value if isinstance(value, int) else 0


def _element_requests(tensor, offsets, dims, layout: RegisterLayout) -> list:
    """Warp 0 reading or writing register slot 0 (one element per lane)."""
    prefix = view_prefix(tensor)
    lanes = []
    for lane in range(min(32, layout.num_threads)):
        index = place_tile([_static(o) for o in offsets], dims, layout.logical(lane, 0))
        lanes.append((prefix + list(index), 1))
    return [lanes]


def load_shared_accesses(inst: ir.LoadShared, layout) -> list:
    out = inst.output
    if out.layout is None:
        return []
    plan = ldmatrix_plan(inst, layout)
    if plan is None:
        return _element_requests(inst.src, inst.offsets, inst.dims, out.layout)
    atom, outer = plan
    prefix = view_prefix(inst.src)
    row = 128 // out.dtype.nbits
    lanes = []
    for lane in range(32):
        if lane >= atom.num_address_lanes:
            lanes.append(None)
            continue
        tile = _ldmatrix_tile_index(atom, outer, 0, 0, lane)
        lanes.append((prefix + list(place_tile([_static(o) for o in inst.offsets], inst.dims, tile)), row))
    return [lanes]


def store_shared_accesses(inst: ir.StoreShared, layout) -> list:
    return [] if inst.src.layout is None else _element_requests(inst.dst, inst.offsets, inst.dims, inst.src.layout)


register(ir.LoadShared, emit=emit_load_shared, shared_accesses=load_shared_accesses)
register(ir.StoreShared, emit=emit_store_shared, shared_accesses=store_shared_accesses)
