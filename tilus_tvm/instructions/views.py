"""Views of register tensors: ``ReshapeRegister``, ``PermuteRegister``, ``SliceRegister``,
``ViewRegister``; ``SliceAssignRegister`` (``x[i, 2:4] = v``); and ``TensorItemPtr`` (the address of
a global or shared element).

Layout rule: a view's output gets the layout in which every element stays in the thread and
register that held it (:func:`free_layout`: :func:`~tilus_tvm.layout.register_ops.reshape`,
``permute``, ``local_slice``, ``split_local``/``merge_local``), and an input without a layout gets
one back from its output where that is possible. When the output has another layout (no free one
exists, or a later use fixed it), the view is a gather through shared memory.

Scratch: none for a free view; the input tile, row-major, otherwise (packed types: a byte a code).
Emitter: a free view copies register slots (nvcc removes the copies; packed types: codes cut out of
the input's words and packed into the output's); a free ``ViewRegister`` reads each thread's bits in the
output's dtype (:func:`~tilus_tvm.instructions.register_bits.copy_bits`, the emitter of the
per-thread ``RegisterView`` too); a gather writes the input row-major to shared memory (its first
replicas) and every thread reads the elements of its output slots back.
"""
from __future__ import annotations

from typing import Any, Optional

from tvm import tirx
from tvm.script.ir_builder import tirx as Tb

from tilus_tvm.backend.context import CodegenContext, const, row_major_linear, shared_offset, sync_threads
from tilus_tvm.errors import CompileError, LayoutError
from tilus_tvm.instructions.elementwise import set_layout
from tilus_tvm.instructions.convert_layout import write_row_major
from tilus_tvm.instructions.packed import bits_of
from tilus_tvm.instructions.register_bits import copy_bits, gather_codes, store_codes, stream_words
from tilus_tvm.instructions.registry import register
from tilus_tvm.ir.tensor import GlobalTensor, RegisterTensor
from tilus_tvm.ir.tensor_ops import (PermuteRegister, ReshapeRegister, SliceAssignRegister, SliceRegister,
                                     TensorItemPtr, ViewRegister, element_index_map)
from tilus_tvm.layout.register import RegisterLayout
from tilus_tvm.layout.register_ops import local_slice, merge_local, permute, reshape, split_local
from tilus_tvm import dtypes
from tilus_tvm.lowp import is_packed


# --- layout rules ----------------------------------------------------------------------------------
def _attempt(fn, *args) -> Optional[RegisterLayout]:
    try:
        return fn(*args)
    except LayoutError:
        return None


def _width_ratio(inst: ViewRegister) -> tuple[str, int]:
    """("same" | "merge" | "split", factor) between the input's and the output's element widths."""
    x_bits, out_bits = inst.x.dtype.nbits, inst.output.dtype.nbits
    if out_bits == x_bits:
        return "same", 1
    return ("merge", out_bits // x_bits) if out_bits > x_bits else ("split", x_bits // out_bits)


def free_layout(inst: Any, x_layout: RegisterLayout) -> Optional[RegisterLayout]:
    """The output layout under which ``inst`` moves no element between registers (None: there is none)."""
    out = inst.output
    if isinstance(inst, ReshapeRegister):
        return _attempt(reshape, x_layout, list(out.shape))
    if isinstance(inst, PermuteRegister):
        return permute(x_layout, list(inst.dims))
    if isinstance(inst, SliceRegister):
        if not all(isinstance(o, int) for o in inst.offsets):
            return None
        sliced = _attempt(local_slice, x_layout, list(inst.offsets), inst.extents())
        return None if sliced is None else _attempt(reshape, sliced, list(out.shape))
    if isinstance(inst, ViewRegister):
        kind, factor = _width_ratio(inst)
        return x_layout if kind == "same" else _attempt(merge_local if kind == "merge" else split_local,
                                                        x_layout, factor)
    raise TypeError(type(inst).__name__)


def source_layout(inst: Any, out_layout: RegisterLayout) -> Optional[RegisterLayout]:
    """The input layout whose free view is ``out_layout`` (None when there is none or it is not unique)."""
    x = inst.x
    if isinstance(inst, ReshapeRegister):
        return _attempt(reshape, out_layout, list(x.shape))
    if isinstance(inst, PermuteRegister):
        inverse = [0] * len(inst.dims)
        for k, d in enumerate(inst.dims):
            inverse[d] = k
        return permute(out_layout, inverse)
    if isinstance(inst, ViewRegister):
        kind, factor = _width_ratio(inst)
        if kind == "same":
            return out_layout if tuple(out_layout.shape) == tuple(x.shape) else None
        candidate = _attempt(split_local if kind == "merge" else merge_local, out_layout, factor)
        return candidate if candidate is not None and tuple(candidate.shape) == tuple(x.shape) else None
    return None  # a slice: the elements outside it could be anywhere


def propagate_view(inst: Any) -> bool:
    x, out = inst.x, inst.output
    if out.layout is None and x.layout is not None:
        layout = free_layout(inst, x.layout)
        return layout is not None and set_layout(out, layout)
    if x.layout is None and out.layout is not None:
        layout = source_layout(inst, out.layout)
        return layout is not None and set_layout(x, layout)
    return False


def is_free(inst: Any) -> bool:
    """Whether the view moves no element between threads (decided once layouts are known)."""
    return inst.output.layout == free_layout(inst, inst.x.layout)


def view_scratch_bytes(inst: Any) -> int:
    if is_free(inst):
        return 0
    return inst.x.size if is_packed(inst.x.dtype) else inst.x.dtype.storage_bytes(inst.x.size)  # packed: a byte a code


# --- emitters --------------------------------------------------------------------------------------
def emit_view(ctx: CodegenContext, inst: Any) -> None:
    if not is_free(inst):
        _gather_through_shared(ctx, inst)
    elif isinstance(inst, ViewRegister):  # the free layout keeps each thread's bits in order
        copy_bits(ctx, inst.x, inst.output)
    elif isinstance(inst, SliceRegister):
        _emit_slot_copy(ctx, inst, _slice_slots(inst))
    else:
        _emit_slot_copy(ctx, inst, None)


def _emit_slot_copy(ctx: CodegenContext, inst: Any, slots: Optional[list[int]]) -> None:
    """``out[j] = x[slots[j]]`` (``slots`` None: the identity). Packed tensors hold several slots in a
    word: their codes are cut out of ``x``'s words and packed into the output's."""
    src, dst = ctx.reg(inst.x), ctx.reg(inst.output)
    if is_packed(inst.x.dtype):
        if slots is None:
            copy_bits(ctx, inst.x, inst.output)
            return
        words, nbits = stream_words(ctx, inst.x), inst.x.dtype.nbits
        store_codes(ctx, inst.output, [bits_of(words, slot * nbits, nbits) for slot in slots])
        return
    if slots is None:
        if src.same_as(dst):
            return
        with Tb.unroll(0, inst.output.layout.local_size) as j:
            Tb.buffer_store(dst, src[j], [j])
        return
    for j, slot in enumerate(slots):
        Tb.buffer_store(dst, src[slot], [j])


def _slice_slots(inst: SliceRegister) -> list[int]:
    """The input slot of every output slot of a free slice (the same in every thread)."""
    out_layout, x_layout = inst.output.layout, inst.x.layout
    source = element_index_map(inst)
    return [x_layout.local_of(source(list(out_layout.logical(0, j)))) for j in range(out_layout.local_size)]


def _gather_through_shared(ctx: CodegenContext, inst: Any) -> None:
    """Owners write ``x`` row-major to shared memory; every thread reads its output elements back."""
    x, out = inst.x, inst.output
    offset = ctx.plan.offset_of(inst)
    if is_packed(x.dtype):  # one byte (the code) per element, as in a packed layout conversion
        gather_codes(ctx, x, out, ctx.shared_view(offset, dtypes.uint8, x.size, f"{out.name}_gather"),
                     element_index_map(inst))
        return
    scratch = ctx.shared_view(offset, x.dtype, x.size, f"{out.name}_gather")
    write_row_major(ctx, x, scratch)
    dst = ctx.reg(out)
    if isinstance(inst, ViewRegister):  # the same bytes, read as the output's dtype
        reader = ctx.shared_view(offset, out.dtype, out.size, f"{out.name}_bytes")
        position = lambda index: row_major_linear(index, out.shape)  # noqa: E731
    else:
        reader, source = scratch, element_index_map(inst)
        position = lambda index: row_major_linear(source(list(index)), x.shape)  # noqa: E731
    with Tb.unroll(0, out.layout.local_size) as j:
        Tb.buffer_store(dst, reader[position(ctx.logical(out.layout, j))], [j])
    sync_threads()


def _assign_free_layout(inst: SliceAssignRegister, dst_layout: RegisterLayout) -> Optional[RegisterLayout]:
    """The layout of a tensor ``src`` that lands in ``dst``'s sub-tile without moving between threads."""
    if not all(isinstance(o, int) for o in inst.offsets):
        return None
    sliced = _attempt(local_slice, dst_layout, list(inst.offsets), inst.extents())
    return None if sliced is None else _attempt(reshape, sliced, list(inst.src.shape))


def propagate_slice_assign(inst: SliceAssignRegister) -> bool:
    src, dst = inst.src, inst.dst
    if isinstance(src, RegisterTensor) and src.layout is None and dst.layout is not None:
        layout = _assign_free_layout(inst, dst.layout)
        return layout is not None and set_layout(src, layout)
    return False


def _slice_assign_free(inst: SliceAssignRegister) -> bool:
    return isinstance(inst.src, RegisterTensor) and inst.src.layout == _assign_free_layout(inst, inst.dst.layout)


def emit_slice_assign(ctx: CodegenContext, inst: SliceAssignRegister) -> None:
    """Free: each source register goes to the destination register that holds its element. Otherwise
    every destination register inside the sub-tile takes the scalar, or the element of the source
    (written row-major to shared memory by its owners)."""
    dst, src = inst.dst, inst.src
    if is_packed(dst.dtype):
        raise CompileError(f"{dst.describe()}[...] = ...: assigning into part of a packed {dst.dtype.name} register "
                           f"tensor is not supported; build the tile whole (register_tensor(init=...), cast, "
                           f"or a view) instead")
    dst_buf = ctx.reg(dst)
    if _slice_assign_free(inst):
        src_buf = ctx.reg(src)
        for j in range(src.layout.local_size):
            index = [o + i for o, i in zip(inst.offsets, _placed(inst, src.layout.logical(0, j)))]
            Tb.buffer_store(dst_buf, src_buf[j], [dst.layout.local_of(index)])
        return
    scratch = None
    if isinstance(src, RegisterTensor):
        scratch = ctx.shared_view(ctx.plan.offset_of(inst), src.dtype, src.size, f"{dst.name}_patch")
        sync_threads()
        with ctx.guarded(ctx.owner_condition(src.layout)):
            with Tb.unroll(0, src.layout.local_size) as i:
                Tb.buffer_store(scratch, ctx.reg(src)[i], [row_major_linear(ctx.logical(src.layout, i), src.shape)])
        sync_threads()
    extents = inst.extents()
    with Tb.unroll(0, dst.layout.local_size) as s:
        index = ctx.logical(dst.layout, s)
        relative = [i - o if not (isinstance(o, int) and o == 0) else i for i, o in zip(index, inst.offsets)]
        inside = tirx.const(True, "bool")
        for r, extent in zip(relative, extents):
            inside = tirx.And(inside, tirx.And(r >= 0, r < extent))
        if scratch is None:
            value = const(src, dst.dtype)
        else:
            value = scratch[row_major_linear([relative[d] for d in inst.dims], src.shape)]
        Tb.buffer_store(dst_buf, tirx.if_then_else(inside, value, dst_buf[s]), [s])
    if scratch is not None:
        sync_threads()


def _placed(inst: SliceAssignRegister, index: Any) -> list:
    """A sub-tile index as an index of ``dst`` relative to the offsets (0 in dropped dimensions)."""
    placed = [0] * len(inst.dst.shape)
    for d, i in zip(inst.dims, index):
        placed[d] = i
    return placed


def emit_item_ptr(ctx: CodegenContext, inst: TensorItemPtr) -> None:
    tensor = inst.tensor
    if isinstance(tensor, GlobalTensor):
        element = ctx.view(tensor)[tuple(inst.indices)]
    else:
        root = tensor.root
        element = ctx.view(root)[shared_offset(root.layout, tensor.root_coords(inst.indices))]
    Tb.bind(tirx.address_of(element), var=inst.var)


for _view_type in (ReshapeRegister, PermuteRegister, SliceRegister, ViewRegister):
    register(_view_type, emit=emit_view, propagate=propagate_view, scratch=view_scratch_bytes)
register(SliceAssignRegister, emit=emit_slice_assign, propagate=propagate_slice_assign,
         scratch=lambda inst: 0 if not isinstance(inst.src, RegisterTensor) or _slice_assign_free(inst)
         else inst.src.dtype.storage_bytes(inst.src.size))
register(TensorItemPtr, emit=emit_item_ptr)
