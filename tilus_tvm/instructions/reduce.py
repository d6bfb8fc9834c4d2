"""``Reduce``: sum, max or min of a register tensor over one dimension.

Layout rule: the output's layout is the input's reduced over the dimension
(:func:`tilus_tvm.layout.register_ops.reduce`): the threads that held parts of one row become
replicas of its result. Scratch: none when the threads that hold parts of a row sit in one warp
at power-of-two lane strides (butterfly shuffles); one partial result per warp (per output
element) when they sit at power-of-two strides across warps; else one partial result per thread.

Emitter: per thread first, then across threads. Power-of-two thread strides (the usual case): the
lanes of a warp combine with ``__shfl_xor_sync``, then, when the row spans several warps, one
lane per warp writes its partial to shared memory (three barriers) and every thread combines the
warps' partials, placed so that it reads them with vector loads. Otherwise every thread's partial
goes through shared memory.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

from tvm import tirx
from tvm.script.ir_builder import tirx as Tb

from tilus_tvm.backend.context import CodegenContext, drop_local_dims, row_major_linear, sync_threads
from tilus_tvm.instructions.elementwise import set_layout
from tilus_tvm.instructions.registry import register
from tilus_tvm.ir import inst as ir
from tilus_tvm.ir.scalar import expr_dtype
from tilus_tvm.layout.register import RegisterLayout, row_major_ravel, row_major_unravel
from tilus_tvm.layout.register_ops import reduce

REDUCE_COMBINE = {"sum": lambda a, b: a + b, "max": tirx.max, "min": tirx.min}


def dim_spatial_positions(layout: RegisterLayout, dim: int) -> list[int]:
    """Positions in ``layout.spatial_modes`` of the modes of dimension ``dim`` (the threads a reduction
    over ``dim`` combines differ exactly in these thread-id digits)."""
    dim_modes = set(layout.grouped_modes[dim])
    return [p for p, entry in enumerate(layout.spatial_modes) if entry >= 0 and entry in dim_modes]


WARP_SIZE = 32


@dataclass(frozen=True)
class ThreadReduction:
    """How the threads that hold parts of one output element combine, when all the thread-id digits
    of the reduced dimension have power-of-two sizes and strides (so they are thread-id bits).

    ``lane_masks``: the ``__shfl_xor_sync`` masks that combine the lanes of a warp (bits below 5).
    ``warp_pieces``: (thread stride, size) of the digits above the warp (bits 5 and up); their
    product ``partials`` is how many warp partials one output element has. ``outputs_per_thread``:
    the output elements each thread holds. The functions below are generic over Python ints and
    TIR expressions, so the plan can be checked by simulation.
    """

    lane_masks: tuple[int, ...]
    warp_pieces: tuple[tuple[int, int], ...]
    lane_pieces: tuple[tuple[int, int], ...]  # (thread stride, size) of the within-warp digits
    outputs_per_thread: int = 1

    @property
    def partials(self) -> int:
        return math.prod(size for _, size in self.warp_pieces)

    def partial_index(self, thread: Any) -> Any:
        """Which of the ``partials`` warp partials of its output element ``thread`` holds."""
        return row_major_ravel([(thread // stride) % size for stride, size in self.warp_pieces],
                               [size for _, size in self.warp_pieces])

    def scratch_index(self, position: Any, part: Any, out_size: int) -> Any:
        """Where partial ``part`` of output element ``position`` (row-major in the output's shape) lives
        in the scratch area: with one output per thread, the partials of an output side by side (a
        thread reads them as vectors); else one block of the output per partial (a thread's
        consecutive outputs are written and read as vectors)."""
        if self.outputs_per_thread == 1:
            return position * self.partials + part
        return part * out_size + position

    def is_writer(self, thread: Any) -> Any:
        """Whether ``thread`` is the lane of its warp group that writes the group's partial (the one
        whose within-warp digits of the dimension are all 0)."""
        return row_major_ravel([(thread // stride) % size for stride, size in self.lane_pieces],
                               [size for _, size in self.lane_pieces]) == 0


def thread_reduction(layout: RegisterLayout, dim: int) -> Optional[ThreadReduction]:
    """The :class:`ThreadReduction` of a reduction over ``dim``, or None when some thread-id digit of
    ``dim`` has a size or stride that is not a power of two."""
    masks, warp_pieces, lane_pieces = [], [], []
    for p in dim_spatial_positions(layout, dim):
        stride, size = math.prod(layout.spatial_shape[p + 1:]), layout.spatial_shape[p]
        if size & (size - 1) or stride & (stride - 1):
            return None
        lane_end = min(stride * size, WARP_SIZE)
        if stride < lane_end:
            lane_pieces.append((stride, lane_end // stride))
            mask = stride
            while mask < lane_end:
                masks.append(mask)
                mask *= 2
        if stride * size > WARP_SIZE:
            warp_stride = max(stride, WARP_SIZE)
            warp_pieces.append((warp_stride, stride * size // warp_stride))
    _, outputs_per_thread = _reduce_groups(layout, dim)
    return ThreadReduction(tuple(masks), tuple(warp_pieces), tuple(lane_pieces), outputs_per_thread)


def reduce_partial_groups(layout: RegisterLayout, dim: int) -> int:
    """How many threads hold partial results of one output element (product of dim's spatial modes)."""
    return math.prod(layout.spatial_shape[p] for p in dim_spatial_positions(layout, dim))


def reduce_scratch_bytes(inst: ir.Reduce) -> int:
    plan = thread_reduction(inst.x.layout, inst.dim)
    if plan is not None:
        return inst.x.dtype.storage_bytes(plan.partials * inst.output.size) if plan.warp_pieces else 0
    return inst.x.dtype.storage_bytes(reduce_partial_groups(inst.x.layout, inst.dim) * inst.output.size)


def reduced_layout(inst: ir.Reduce) -> RegisterLayout:
    return reduce(inst.x.layout, [inst.dim], keepdims=inst.keepdim)


def propagate_reduce(inst: ir.Reduce) -> bool:
    if inst.output.layout is None and inst.x.layout is not None:
        return set_layout(inst.output, reduced_layout(inst))
    return False


def _reduce_groups(x_layout: RegisterLayout, dim: int) -> tuple[list[list[int]], int]:
    """For each output slot, the input slots of one thread that reduce into it (compile time)."""
    num_out = x_layout.local_size // math.prod(x_layout.mode_shape[m] for m in x_layout.local_modes
                                               if m in x_layout.grouped_modes[dim])
    groups: list[list[int]] = [[] for _ in range(num_out)]
    for i in range(x_layout.local_size):
        groups[drop_local_dims(x_layout, {dim}, i)].append(i)
    return groups, num_out


def _shuffle_xor(value, lane_mask: int):
    return Tb.call_extern(expr_dtype(value), "__shfl_xor_sync", tirx.const(0xFFFFFFFF, "uint32"), value, lane_mask, 32)


def emit_reduce(ctx: CodegenContext, inst: ir.Reduce) -> None:
    """Per thread, then across the threads that hold parts of one output row: butterfly warp shuffles,
    then (rows spanning several warps) one round through shared memory; without power-of-two thread
    strides, every thread's partial goes through shared memory."""
    x, out = inst.x, inst.output
    combine = REDUCE_COMBINE[inst.op]
    src, dst = ctx.reg(x), ctx.reg(out)
    groups, num_out = _reduce_groups(x.layout, inst.dim)
    for j, slots in enumerate(groups):
        acc = src[slots[0]]
        for s in slots[1:]:
            acc = combine(acc, src[s])
        Tb.buffer_store(dst, acc, [j])
    plan = thread_reduction(x.layout, inst.dim)
    if plan is None:
        _reduce_through_shared(ctx, inst, num_out)
        return
    for mask in plan.lane_masks:
        with Tb.unroll(0, num_out) as j:
            Tb.buffer_store(dst, combine(dst[j], _shuffle_xor(dst[j], mask)), [j])
    if plan.warp_pieces:
        _combine_warps(ctx, inst, plan, num_out)


def _combine_warps(ctx: CodegenContext, inst: ir.Reduce, plan: ThreadReduction, num_out: int) -> None:
    """One lane per warp group writes its partial; every thread then combines the ``plan.partials``
    partials of each of its outputs (placed by :meth:`ThreadReduction.scratch_index`)."""
    x, out = inst.x, inst.output
    combine = REDUCE_COMBINE[inst.op]
    dst = ctx.reg(out)
    partials = plan.partials
    scratch = ctx.shared_view(ctx.plan.offset_of(inst), x.dtype, partials * out.size, f"{out.name}_partials")
    writer = ctx.owner_condition(x.layout)
    if plan.lane_pieces:
        writer = tirx.And(writer, plan.is_writer(ctx.tx))
    part = plan.partial_index(ctx.tx)
    sync_threads()
    with ctx.guarded(writer):
        with Tb.unroll(0, num_out) as j:
            position = row_major_linear(ctx.logical(out.layout, j), out.shape)
            Tb.buffer_store(scratch, dst[j], [plan.scratch_index(position, part, out.size)])
    sync_threads()
    with Tb.unroll(0, num_out) as j:
        position = row_major_linear(ctx.logical(out.layout, j), out.shape)
        acc = scratch[plan.scratch_index(position, 0, out.size)]
        for p in range(1, partials):
            acc = combine(acc, scratch[plan.scratch_index(position, p, out.size)])
        Tb.buffer_store(dst, acc, [j])
    sync_threads()


def _reduce_through_shared(ctx: CodegenContext, inst: ir.Reduce, num_out: int) -> None:
    x, out = inst.x, inst.output
    combine = REDUCE_COMBINE[inst.op]
    dst = ctx.reg(out)
    partials = reduce_partial_groups(x.layout, inst.dim)
    scratch = ctx.shared_view(ctx.plan.offset_of(inst), x.dtype, partials * out.size, f"{out.name}_partials")
    positions = dim_spatial_positions(x.layout, inst.dim)
    digits = row_major_unravel(ctx.tx, x.layout.spatial_shape)
    part = row_major_ravel([digits[p] for p in positions], [x.layout.spatial_shape[p] for p in positions])
    sync_threads()
    with ctx.guarded(ctx.owner_condition(x.layout)):
        with Tb.unroll(0, num_out) as j:
            position = row_major_linear(ctx.logical(out.layout, j), out.shape)
            Tb.buffer_store(scratch, dst[j], [part * out.size + position])
    sync_threads()
    with Tb.unroll(0, num_out) as j:
        position = row_major_linear(ctx.logical(out.layout, j), out.shape)
        acc = scratch[position]
        for p in range(1, partials):
            acc = combine(acc, scratch[p * out.size + position])
        Tb.buffer_store(dst, acc, [j])
    sync_threads()


register(ir.Reduce, emit=emit_reduce, propagate=propagate_reduce, produced=reduced_layout, scratch=reduce_scratch_bytes)
