"""Shared-memory tile accesses: ``LoadShared`` and ``StoreShared``.

No layout rule of their own (the register side takes its layout from its uses; the shared side
has the layout the tensor was given or inferred). No scratch memory.

``LoadShared`` uses ``ldmatrix`` whenever the layouts allow: the output's register layout must be
an outer layout composed with an ``ldmatrix`` fragment (``divide(layout, atom.layout)`` succeeds:
x4, x2 or x1, with or without ``.trans``; mma operand layouts are), the elements 16-bit (or 8-bit
without ``.trans``), and each 16-byte row of the fragment contiguous and aligned in shared memory
(unit stride along the tile's last dimension, a swizzle that moves 16-byte units whole). Then
each warp issues one ``ldmatrix`` per outer register group, lane ``l`` passing the address of row
``l % 8`` of matrix ``l // 8``. A batch of tiles (dimensions before the last two, held by the outer
layout alone, say over groups of warps) loads the same way, each ``ldmatrix`` within one tile.
Otherwise each thread reads the elements of its register slots.
Stores are made by the first replica of each element only.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

from tvm import tirx
from tvm.script.ir_builder import tirx as Tb

from tilus_tvm import intrin
from tilus_tvm.backend.context import CodegenContext, logical_index, place_tile
from tilus_tvm.errors import LayoutError
from tilus_tvm.instructions.async_copy import _divisible, _static
from tilus_tvm.instructions import packed_memory
from tilus_tvm.instructions.registry import register
from tilus_tvm.ir import inst as ir
from tilus_tvm.layout.atoms import get_ldmatrix_atom
from tilus_tvm.layout.register import RegisterLayout, column_spatial, compose, local, spatial
from tilus_tvm.layout.register_ops import divide, permute, unsqueeze
from tilus_tvm.lowp import is_packed


@dataclass(frozen=True)
class LdmatrixPlan:
    """How a ``LoadShared`` runs as ``ldmatrix``: ``atom`` and the ``outer`` layout with
    ``compose(outer, atom.layout)`` = the output layout, both indexed as the tile is stored;
    ``transposed`` when the stored 16-byte rows run along the tile's first dimension (a tile read
    through ``smem.transpose()``), so stored index ``(i, j)`` is tile index ``(j, i)``."""

    atom: Any  # LdmatrixAtom or ReorderedLdmatrix
    outer: RegisterLayout
    transposed: bool
    lead: int = 0  # dimensions before the last two (a batch of tiles): the outer layout's alone

    def tile_index(self, warp: Any, group: int, lane: Any) -> list:
        """The tile index whose address ``lane`` of ``warp`` passes for register group ``group``."""
        if isinstance(warp, int):
            origin = self.outer.logical(warp, group)
        else:
            origin = logical_index(self.outer, warp, group)
        address = (0,) * self.lead + tuple(self.atom.lane_address(lane))
        extents = (1,) * self.lead + tuple(self.atom.shape)
        stored = [o * extent + a for o, extent, a in zip(origin, extents, address)]
        return stored[:self.lead] + stored[self.lead:][::-1] if self.transposed else stored


@dataclass(frozen=True)
class ReorderedLdmatrix:
    """``ldmatrix`` with its 8x8 matrices in another order over the stored tile.

    Which matrix lands in register ``j`` is only a matter of which rows lanes ``8j .. 8j+7``
    address, so the same instruction serves fragments whose registers run over the matrices in
    another order: here the 2x2 blocks of an x4 tile in row-major order (matrix ``j`` at block row
    ``j // 2``, block column ``j % 2``; the standard atom is column-major), or the two matrices of
    an x2 tile side by side. A b operand read through a transposed view needs it.
    """

    num: int
    trans: bool
    shape: tuple[int, int]
    layout: RegisterLayout
    block_cols: int  # matrices per block row

    @property
    def num_address_lanes(self) -> int:
        return 8 * self.num

    def lane_address(self, lane: Any) -> tuple[Any, Any]:
        matrix = lane // 8
        return (matrix // self.block_cols * 8 + lane % 8, matrix % self.block_cols * 8)


def _atoms(num: int, trans: bool, bits: int) -> list:
    """The standard ``ldmatrix`` atom, then its reorderings (see :class:`ReorderedLdmatrix`)."""
    atom = get_ldmatrix_atom(num, trans, bits)
    found = [atom]
    if num == 4 or num == 2:
        pack = 32 // bits
        inner = column_spatial(4, 8).local(2, 1) if trans else spatial(8, 4).local(1, pack)
        blocks = local(2, 2) if num == 4 else local(1, 2)
        layout = compose(blocks, inner)
        found.append(ReorderedLdmatrix(num, trans, tuple(layout.shape), layout, 2))
    return found


def _rows_fit(src, layout, dim: int, offset: Any, row: int, analyzer: Any) -> bool:
    """Whether rows of ``row`` elements along ``dim`` of ``src`` are contiguous and 16-byte aligned."""
    strides = layout.strides
    if strides[dim] != 1 or any(s % row for d, s in enumerate(strides) if d != dim) or layout.shape[dim] % row:
        return False
    if layout.swizzle is not None and (1 << layout.swizzle.base) % row:
        return False
    if src.base is not None and src.root.layout is not None and not _divisible(src.element_offset(), row, analyzer):
        return False
    return _divisible(offset, row, analyzer)


def ldmatrix_plan(inst: ir.LoadShared, layout=None, analyzer: Any = None) -> Optional[LdmatrixPlan]:
    """How ``inst`` loads with ``ldmatrix`` (``layout``: the source's shared layout, default its own),
    or None when it cannot."""
    out, src = inst.output, inst.src
    bits = out.dtype.nbits
    if bits not in (8, 16) or out.layout is None or len(out.shape) < 2 or out.layout.num_threads % 32:
        return None
    lead = len(out.shape) - 2  # (a batch of tiles: each ldmatrix within one of them)
    layout = layout if layout is not None else src.resolved_layout()
    row = 128 // bits  # elements of one 16-byte row
    orientations = []
    for transposed, tile_dim in ((False, 1), (True, 0)):
        dim = inst.dims[lead + tile_dim]
        if layout is None or _rows_fit(src, layout, dim, inst.offsets[dim], row, analyzer):
            orientations.append(transposed)
    for transposed in orientations:
        stored_layout = permute(out.layout, list(range(lead)) + [lead + 1, lead]) if transposed else out.layout
        for num in (4, 2, 1):
            for trans in (False, True):
                if trans and bits != 16:
                    continue
                for atom in _atoms(num, trans, bits):
                    try:
                        outer = divide(stored_layout, unsqueeze(atom.layout, list(range(lead))) if lead
                                       else atom.layout)
                    except LayoutError:
                        continue
                    return LdmatrixPlan(atom, outer, transposed, lead)
    return None


def emit_load_shared(ctx: CodegenContext, inst: ir.LoadShared) -> None:
    out = inst.output
    if is_packed(out.dtype):  # sub-byte types and 8-bit floats: bit arithmetic, in packed_memory.py
        return packed_memory.emit_load_shared(ctx, inst)
    buf = ctx.reg(out)
    plan = ldmatrix_plan(inst, analyzer=ctx.func.analyzer())
    if plan is not None:
        _emit_ldmatrix(ctx, inst, plan)
        return
    width = shared_vector_width(out.layout, inst.src, inst.offsets, inst.dims, ctx.func.analyzer())
    vectors = _vector_view(ctx, inst.src, width)
    with Tb.unroll(0, out.layout.local_size // width) as j:
        coords = place_tile(inst.offsets, inst.dims, ctx.logical(out.layout, j * width))
        _, offset = ctx.shared_element(inst.src, coords)
        Tb.buffer_store(buf, vectors[offset // width], [_lanes(j * width, width)])


def _emit_ldmatrix(ctx: CodegenContext, inst: ir.LoadShared, plan: LdmatrixPlan) -> None:
    registers = ctx.reg(inst.output)
    slots_per_group = plan.atom.layout.local_size  # this lane's elements of one ldmatrix
    warp, lane = ctx.tx // 32, ctx.tx % 32
    for group in range(plan.outer.local_size):
        tile = plan.tile_index(warp, group, lane)
        view, offset = ctx.shared_element(inst.src, place_tile(inst.offsets, inst.dims, tile))
        # view: a typed view of the uint8 pool, which tvm_access_ptr rejects, hence address_of
        Tb.evaluate(intrin.emit_ldmatrix(plan.atom.num, plan.atom.trans, registers, group * slots_per_group,
                                         view, offset, pointers="address_of"))


def emit_store_shared(ctx: CodegenContext, inst: ir.StoreShared) -> None:
    src = inst.src
    if is_packed(src.dtype):
        return packed_memory.emit_store_shared(ctx, inst)
    buf = ctx.reg(src)
    width = shared_vector_width(src.layout, inst.dst, inst.offsets, inst.dims, ctx.func.analyzer())
    vectors = _vector_view(ctx, inst.dst, width)
    with ctx.guarded(ctx.owner_condition(src.layout)):
        with Tb.unroll(0, src.layout.local_size // width) as j:
            coords = place_tile(inst.offsets, inst.dims, ctx.logical(src.layout, j * width))
            _, offset = ctx.shared_element(inst.dst, coords)
            Tb.buffer_store(vectors, buf[_lanes(j * width, width)], [offset // width])


def shared_vector_width(layout: RegisterLayout, tensor, offsets, dims, analyzer: Any = None,
                        shared_layout: Any = None) -> int:
    """Elements per vector access between registers of ``layout`` and a shared tile (1: scalar).

    The register slots ``v*j .. v*j+v-1`` must be consecutive elements along the tile's last
    dimension (the layout's innermost local mode is that dimension's innermost mode), and those
    elements contiguous and ``v``-aligned in shared memory, swizzle included. At most 16 bytes.
    """
    if not layout.local_modes:
        return 1
    inner = layout.local_modes[-1]
    if layout.grouped_modes[len(layout.shape) - 1][-1:] != (inner,):
        return 1
    shared_layout = shared_layout if shared_layout is not None else tensor.resolved_layout()
    width = math.gcd(layout.mode_shape[inner], max(1, 128 // tensor.dtype.nbits))
    while width > 1:
        if _rows_fit(tensor, shared_layout, dims[-1], offsets[dims[-1]], width, analyzer):
            return width
        width //= 2
    return 1


def _lanes(first: Any, width: int) -> Any:
    return first if width == 1 else tirx.Ramp(first, 1, width)


def _vector_view(ctx: CodegenContext, tensor, width: int):
    """The shared tensor's memory as elements of ``width``-lane vectors (the tensor's own view when 1).

    A swizzled offset is not an affine index, so TVM would gather a ``Ramp`` over it element by
    element; a vector-typed view indexed by ``offset // width`` loads or stores the whole vector.
    """
    view = ctx.view(tensor.root)
    if width == 1:
        return view
    dtype = tensor.dtype.tvm_name or tensor.dtype.name
    vectors = Tb.decl_buffer((view.shape[0] // width,), f"{dtype}x{width}", data=view.data,
                             elem_offset=view.elem_offset // width, scope="shared.dyn")
    return vectors



def _element_requests(tensor, offsets, dims, layout: RegisterLayout, shared_layout) -> list:
    """Warp 0 reading or writing its first register vector (slots 0 .. width-1, one vector per lane)."""
    width = shared_vector_width(layout, tensor, offsets, dims, shared_layout=shared_layout)
    lanes = []
    for lane in range(min(32, layout.num_threads)):
        index = place_tile([_static(o) for o in offsets], dims, layout.logical(lane, 0))
        lanes.append((tensor.root_index(index), width))
    return [lanes]


def load_shared_accesses(inst: ir.LoadShared, layout) -> list:
    out = inst.output
    if out.layout is None:
        return []
    plan = ldmatrix_plan(inst, layout)
    if plan is None:
        return _element_requests(inst.src, inst.offsets, inst.dims, out.layout, layout)
    row = 128 // out.dtype.nbits
    lanes = []
    for lane in range(32):
        if lane >= plan.atom.num_address_lanes:
            lanes.append(None)
            continue
        index = place_tile([_static(o) for o in inst.offsets], inst.dims, plan.tile_index(0, 0, lane))
        lanes.append((inst.src.root_index(index), row))
    return [lanes]


def store_shared_accesses(inst: ir.StoreShared, layout) -> list:
    if inst.src.layout is None:
        return []
    return _element_requests(inst.dst, inst.offsets, inst.dims, inst.src.layout, layout)


register(ir.LoadShared, emit=emit_load_shared, shared_accesses=load_shared_accesses)
register(ir.StoreShared, emit=emit_store_shared, shared_accesses=store_shared_accesses)
