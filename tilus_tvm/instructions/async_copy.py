"""Asynchronous copies from global to shared memory: ``CopyAsync`` (``cp.async``) and its group
instructions ``CopyAsyncCommitGroup``, ``CopyAsyncWaitGroup``, ``CopyAsyncWaitAll``.

No layout rule (no registers are involved) and no scratch. The copy's thread assignment: by
default the tile is cut into vectors along its last dimension, numbered row-major, and thread ``t``
copies vectors ``t, t + T, t + 2T, ...`` (T threads), so a warp reads consecutive global memory.
With a register layout (``copy_async(..., layout=)``) each thread copies the elements it would hold
in a register tensor of that layout, a vector of its consecutive slots at a time, so that it can
read them back after its own ``cp.async.wait_group`` without a barrier.

Vector size: 16 bytes (``cp.async.cg``) when the global addresses of every vector are 16-byte
aligned (unit stride along the tile's last dimension, the other strides, the offset and the
pointer's alignment are multiples of the vector) and the shared layout keeps each vector
contiguous and aligned; else 8 or 4 bytes (``cp.async.ca``). Elements outside the global tensor
are zero-filled through ``cp.async``'s source-size operand. When not even 4 bytes can be aligned
(an odd row length of a 16-bit tensor), the copy is made element by element with ordinary loads
and stores: slower, synchronous, and correct.

The shared-memory planner keeps a tensor allocated while copies into it may be in flight (see
``passes/shared_memory.py``).
"""
from __future__ import annotations

import math
from typing import Any

from tvm import sym, tirx
from tvm.script.ir_builder import tirx as Tb

from tilus_tvm import intrin
from tilus_tvm.backend.context import CodegenContext, const, place_tile
from tilus_tvm.instructions.registry import register
from tilus_tvm.ir import inst as ir
from tilus_tvm.layout.register import row_major_unravel

CP_ASYNC_BYTES = (16, 8, 4)


def _divisible(value: Any, width: int, analyzer: Any = None) -> bool:
    if isinstance(value, int):
        return value % width == 0
    modular = (analyzer or sym.Analyzer()).modular_set(value)
    return modular.coeff % width == 0 and modular.base % width == 0


def shared_vectors_fit(tensor, layout, width: int) -> bool:
    """Whether vectors of ``width`` elements along the last dimension of ``tensor`` (a shared tensor or
    view, with ``layout``) are contiguous and ``width``-aligned in shared memory."""
    if layout.strides[-1] != 1 or any(s % width for s in layout.strides[:-1]) or layout.shape[-1] % width:
        return False
    if layout.swizzle is not None and (1 << layout.swizzle.base) % width:
        return False
    if tensor.base is None or tensor.root.layout is None:  # a root, or a view scored during inference
        return True
    return _divisible(tensor.element_offset(), width)


def _static(value: Any) -> int:
    """A compile-time coordinate, or 0 for a run-time one (to model one representative access)."""
    return value if isinstance(value, int) else 0


def copy_vector(inst: ir.CopyAsync, aligned_pointer: bool, layout=None, analyzer: Any = None) -> int:
    """Elements per ``cp.async`` of ``inst`` (0: no cp.async is possible, copy element by element)."""
    src, dst = inst.src, inst.dst
    layout = layout if layout is not None else dst.resolved_layout()
    global_dim = inst.dims[-1]
    stride = src.strides[global_dim]
    if not aligned_pointer or not (stride == 1 or (isinstance(stride, tirx.IntImm) and stride.value == 1)):
        return 0
    for nbytes in CP_ASYNC_BYTES:
        width = nbytes * 8 // src.dtype.nbits
        if width < 1 or nbytes * 8 % src.dtype.nbits:
            continue
        if dst.shape[-1] % width:
            continue
        strides = [s for d, s in enumerate(src.strides) if d != global_dim]
        strides += src.base_strides  # a sub-view's first element
        if not all(_divisible(v, width, analyzer) for v in [inst.offsets[global_dim], *strides]):
            continue
        if shared_vectors_fit(dst, layout, width):
            return width
    return 0


def _vector_grid(inst: ir.CopyAsync, width: int) -> list[int]:
    shape = list(inst.dst.shape)
    shape[-1] //= width
    return shape


def _tile_index(inst: ir.CopyAsync, vector: Any, width: int) -> list[Any]:
    index = row_major_unravel(vector, _vector_grid(inst, width))
    index[-1] = index[-1] * width
    return index


def thread_vector(inst: ir.CopyAsync, aligned_pointer: bool, layout=None, analyzer: Any = None) -> int:
    """Elements per ``cp.async`` of ``inst`` when each thread copies its slots of ``inst.layout``
    (0: element by element): the layout's vector along a unit-stride dimension, cut to a cp.async
    size whose vectors stay contiguous and aligned in shared memory."""
    from tilus_tvm.instructions.global_memory import vector_width  # (global_memory imports this module)

    if not aligned_pointer:
        return 0
    width = vector_width(inst.layout, inst.src, inst.offsets, inst.dims, analyzer)
    layout = layout if layout is not None else inst.dst.resolved_layout()
    while width >= 1:
        if width * inst.src.dtype.nbits // 8 in CP_ASYNC_BYTES and shared_vectors_fit(inst.dst, layout, width):
            return width
        width //= 2
    return 0


def emit_copy_async(ctx: CodegenContext, inst: ir.CopyAsync) -> None:
    aligned = ctx.func.aligned(inst.src.pointer)
    if inst.layout is not None:  # each thread copies its slots of the layout, a vector at a time
        layout = inst.layout
        width = thread_vector(inst, aligned, analyzer=ctx.func.analyzer())
        step = max(width, 1)
        inside_layout = ctx.tx < layout.num_threads if layout.num_threads < ctx.func.num_threads else \
            tirx.const(True, "bool")
        with ctx.guarded(inside_layout):
            for j in range(layout.local_size // step):
                _copy_vector(ctx, inst, list(ctx.logical(layout, j * step)), width)
        return
    width = copy_vector(inst, aligned, analyzer=ctx.func.analyzer())
    step = max(width, 1)
    num_vectors = math.prod(_vector_grid(inst, step))
    threads = ctx.func.num_threads
    rounds = -(-num_vectors // threads)
    for r in range(rounds):  # unrolled here: each round is its own statement, free to interleave
        vector = r * threads + ctx.tx
        with ctx.guarded(vector < num_vectors if num_vectors % threads else tirx.const(True, "bool")):
            _copy_vector(ctx, inst, _tile_index(inst, vector, step), width)


def _copy_vector(ctx: CodegenContext, inst: ir.CopyAsync, tile: list, width: int) -> None:
    """One ``cp.async`` of ``width`` elements from the tile element ``tile`` on (0: one element, copied
    synchronously), zero-filling what lies outside ``src``."""
    src = inst.src
    global_dim = inst.dims[-1]
    coords = place_tile(inst.offsets, inst.dims, tile)
    buffer, offset = ctx.shared_element(inst.dst, tile)
    inside = src.leading_guard()  # True for a view of a pointer
    for d, (c, extent) in enumerate(zip(coords, src.shape)):
        if d != global_dim or width == 0:
            inside = tirx.And(inside, tirx.And(c >= 0, c < extent))
    if width == 0:
        _copy_element(ctx, inst, coords, inside, buffer, offset)
        return
    last = coords[global_dim]
    inside = tirx.And(inside, last >= 0)
    valid = tirx.Max(tirx.Min(src.shape[global_dim] - last, width), 0)
    src_bytes = tirx.Select(inside, valid * (src.dtype.nbits // 8), 0)
    safe = [tirx.Select(inside, c, 0) for c in coords]  # never form an address outside the tensor
    linear = sum((c * s for c, s in zip(safe, src.strides)), 0)
    nbytes = width * src.dtype.nbits // 8
    # both buffers are 1-D views (of the uint8 pool, of the pointer): addressed as &view[i]
    Tb.evaluate(intrin.emit_cp_async(nbytes, buffer, offset, ctx.flat_view(src), linear,
                                     cache="cg" if nbytes == 16 else "ca", src_size=src_bytes,
                                     pointers="address_of"))


def _copy_element(ctx: CodegenContext, inst: ir.CopyAsync, coords, inside, buffer, offset) -> None:
    view = ctx.view(inst.src)
    value = tirx.if_then_else(inside, tirx.BufferLoad(view, [tirx.Select(inside, c, 0) for c in coords]),
                              const(0, inst.src.dtype))
    Tb.buffer_store(buffer, value, [offset])


def copy_async_accesses(inst: ir.CopyAsync, layout) -> list:
    """Warp 0's first two rounds of vector stores into ``inst.dst`` (for the bank-conflict model)."""
    if inst.layout is not None:  # warp 0's first two vectors of its layout slots
        width = thread_vector(inst, True, layout) or 1
        lanes = range(min(32, inst.layout.num_threads))
        return [[(inst.dst.root_index(list(inst.layout.logical(lane, j * width))), width) for lane in lanes]
                for j in range(min(2, inst.layout.local_size // width))]
    width = copy_vector(inst, True, layout) or 1
    grid = _vector_grid(inst, width)
    num_vectors = math.prod(grid)
    requests = []
    for start in (0, 32):
        lanes = []
        for lane in range(32):
            vector = start + lane
            if vector >= num_vectors:
                lanes.append(None)
                continue
            lanes.append((inst.dst.root_index([_static(v) for v in _tile_index(inst, vector, width)]),
                          width))
        requests.append(lanes)
    return requests


register(ir.CopyAsync, emit=emit_copy_async, shared_accesses=copy_async_accesses)
register(ir.CopyAsyncCommitGroup, emit=lambda ctx, inst: Tb.evaluate(intrin.emit_cp_async_commit_group()))
register(ir.CopyAsyncWaitGroup, emit=lambda ctx, inst: Tb.evaluate(intrin.emit_cp_async_wait_group(inst.n)))
register(ir.CopyAsyncWaitAll, emit=lambda ctx, inst: Tb.evaluate(intrin.emit_cp_async_wait_all()))
