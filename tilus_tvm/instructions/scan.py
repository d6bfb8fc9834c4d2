"""``Scan``: prefix sum, product, max, min, and, or or xor of a register tensor along one dimension.

Layout rule: the scanned dimension's modes must be spatial first, then local (:func:`scan_layout`):
each thread then holds, for every row it touches, one contiguous run of the row, and the threads
along the row hold consecutive runs in the order of their *rank* (their digits of the dimension's
spatial modes). The output has the input's layout; an input in another layout is converted, and
an output given another layout is converted after.

Emitter: (1) every thread scans its runs in registers; (2) the threads of a row scan their run
totals: with ``__shfl_sync`` steps (Kogge-Stone over the rank) when they sit in one warp, else
through shared memory (each thread combines the totals of the ranks before its own); (3) every
element is combined with the total of the runs before its thread's. Scratch: one total per
thread and run group, only when a row spans warps.
"""
from __future__ import annotations

import math
from typing import Any

from tvm import tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as Tb

from tilus_tvm import dtypes
from tilus_tvm.backend.context import CodegenContext, sync_threads
from tilus_tvm.instructions.elementwise import set_layout
from tilus_tvm.instructions.registry import register
from tilus_tvm.ir.scalar import expr_dtype
from tilus_tvm.ir.tensor_ops import Scan
from tilus_tvm.layout.register import RegisterLayout, row_major_ravel, row_major_unravel

WARP_SIZE = 32


def scan_layout(layout: RegisterLayout, dim: int) -> RegisterLayout:
    """``layout`` with the modes of dimension ``dim`` reordered spatial first, then local (each kind in
    its original order); threads and registers keep their digits. Equal to ``layout`` when it is so."""
    group = layout.grouped_modes[dim]
    spatial = {m for m in layout.spatial_modes if m >= 0}
    order = [m for m in group if m in spatial] + [m for m in group if m not in spatial]
    number = {old: group[0] + k for k, old in enumerate(order)}
    renumber = lambda m: number.get(m, m) if m >= 0 else m  # noqa: E731
    mode_shape = list(layout.mode_shape)
    for old in order:
        mode_shape[number[old]] = layout.mode_shape[old]
    return RegisterLayout(layout.shape, mode_shape, [renumber(m) for m in layout.spatial_modes],
                          [renumber(m) for m in layout.local_modes])


def propagate_scan(inst: Scan) -> bool:
    x, out = inst.x, inst.output
    if out.layout is None and x.layout is not None:
        return set_layout(out, scan_layout(x.layout, inst.dim))
    if x.layout is None and out.layout is not None:
        return set_layout(x, scan_layout(out.layout, inst.dim))
    return False


class _Plan:
    """How one thread's registers and the block's threads take part in a scan of ``layout`` along ``dim``."""

    def __init__(self, layout: RegisterLayout, dim: int):
        group = set(layout.grouped_modes[dim])
        # the dimension's spatial digits, in mode order (major first): the thread's rank along the row
        positions = sorted((m, p) for p, m in enumerate(layout.spatial_modes) if m >= 0 and m in group)
        self.rank_positions = [p for _, p in positions]
        self.rank_sizes = [layout.spatial_shape[p] for p in self.rank_positions]
        self.ranks = math.prod(self.rank_sizes)
        self.thread_strides = [math.prod(layout.spatial_shape[p + 1:]) for p in self.rank_positions]
        self.other_positions = [p for p in range(len(layout.spatial_modes)) if p not in self.rank_positions]
        # register slots by run group (the other local digits), in order along the dimension
        run_modes = [m for m in layout.grouped_modes[dim] if m in layout.local_modes]
        runs: dict[int, list[tuple[int, int]]] = {}
        for slot in range(layout.local_size):
            digits = dict(zip(layout.local_modes, row_major_unravel(slot, layout.local_shape)))
            position = row_major_ravel([digits[m] for m in run_modes], [layout.mode_shape[m] for m in run_modes])
            others = [m for m in layout.local_modes if m not in run_modes]
            key = row_major_ravel([digits[m] for m in others], [layout.mode_shape[m] for m in others])
            runs.setdefault(key, []).append((position, slot))
        self.runs = [[slot for _, slot in sorted(runs[key])] for key in sorted(runs)]
        self.in_warp = all(stride * size <= WARP_SIZE for stride, size in zip(self.thread_strides, self.rank_sizes))

    def rank(self, layout: RegisterLayout, thread: Any) -> Any:
        digits = row_major_unravel(thread, layout.spatial_shape)
        return row_major_ravel([digits[p] for p in self.rank_positions], self.rank_sizes)

    def others(self, layout: RegisterLayout, thread: Any) -> Any:
        """The thread's index among the rows' thread groups (its digits other than the rank's)."""
        digits = row_major_unravel(thread, layout.spatial_shape)
        return row_major_ravel([digits[p] for p in self.other_positions],
                               [layout.spatial_shape[p] for p in self.other_positions])

    def thread_of_rank(self, layout: RegisterLayout, thread: Any, rank: Any) -> Any:
        """The thread of the same row group as ``thread`` with rank ``rank``."""
        old = row_major_unravel(self.rank(layout, thread), self.rank_sizes)
        new = row_major_unravel(rank, self.rank_sizes)
        for o, n, stride in zip(old, new, self.thread_strides):
            thread = thread + (n - o) * stride
        return thread


def combiner(op: str, dtype) -> Any:
    if op in ("and", "or", "xor") and dtype is dtypes.boolean:
        return {"and": tirx.And, "or": tirx.Or, "xor": tirx.NE}[op]
    return {"add": lambda a, b: a + b, "mul": lambda a, b: a * b, "max": tirx.max, "min": tirx.min,
            "and": tirx.bitwise_and, "or": tirx.bitwise_or, "xor": tirx.bitwise_xor}[op]


def identity(op: str, dtype) -> Any:
    """The value ``e`` with ``op(e, v) == v``."""
    name = dtype.tvm_name
    if dtype is dtypes.boolean:
        return tirx.const(op == "and", "bool")
    if op in ("max", "min"):
        if dtype.is_float:
            inf = tirx.infinity(name)
            return -inf if op == "max" else inf
        return tirx.min_value(name) if op == "max" else tirx.max_value(name)
    if op == "and":
        return tirx.const(-1 if dtype.signed else (1 << dtype.nbits) - 1, name)
    return tirx.const(1 if op == "mul" else 0, name)


def _local(name: str, size: int, dtype: str):
    buffer = Tb.alloc_buffer((size,), dtype, scope="local")
    IRBuilder.name(name, buffer)
    return buffer


def _shuffle(value: Any, lane: Any):
    return Tb.call_extern(expr_dtype(value), "__shfl_sync", tirx.const(0xFFFFFFFF, "uint32"), value, lane, WARP_SIZE)


def emit_scan(ctx: CodegenContext, inst: Scan) -> None:
    x, out = inst.x, inst.output
    layout = x.layout
    plan = _Plan(layout, inst.dim)
    combine, zero = combiner(inst.op, x.dtype), identity(inst.op, x.dtype)
    src, dst = ctx.reg(x), ctx.reg(out)
    totals = _local(f"{out.name}_totals", len(plan.runs), x.dtype.tvm_name)
    # 1. each thread scans its runs; totals[g] is run g's total
    for g, slots in enumerate(plan.runs):
        Tb.buffer_store(dst, src[slots[0]], [slots[0]])
        for previous, slot in zip(slots, slots[1:]):
            Tb.buffer_store(dst, combine(dst[previous], src[slot]), [slot])
        Tb.buffer_store(totals, dst[slots[-1]], [g])
        if inst.exclusive:
            for previous, slot in reversed(list(zip(slots, slots[1:]))):
                Tb.buffer_store(dst, dst[previous], [slot])
            Tb.buffer_store(dst, zero, [slots[0]])
    if plan.ranks == 1:
        return
    # 2. totals[g] becomes the combination of the totals of the ranks before this thread's
    if plan.in_warp:
        _exclusive_over_lanes(ctx, inst, plan, totals, combine, zero)
    else:
        _exclusive_through_shared(ctx, inst, plan, totals, combine, zero)
    # 3. every element takes in the runs before its thread's
    for g, slots in enumerate(plan.runs):
        for slot in slots:
            Tb.buffer_store(dst, combine(totals[g], dst[slot]), [slot])


def _exclusive_over_lanes(ctx: CodegenContext, inst: Scan, plan: _Plan, totals, combine, zero) -> None:
    """Kogge-Stone over the rank with warp shuffles (every lane shuffles, so the full mask is right),
    then one shuffle from the previous rank."""
    layout = inst.x.layout
    rank = plan.rank(layout, ctx.tx)
    received = _local(f"{inst.output.name}_received", 1, inst.x.dtype.tvm_name)
    step = 1
    while step < plan.ranks:
        source = plan.thread_of_rank(layout, ctx.tx, tirx.Select(rank >= step, rank - step, rank)) % WARP_SIZE
        for g in range(len(plan.runs)):
            Tb.buffer_store(received, _shuffle(totals[g], source), [0])
            Tb.buffer_store(totals, tirx.Select(rank >= step, combine(received[0], totals[g]), totals[g]), [g])
        step *= 2
    source = plan.thread_of_rank(layout, ctx.tx, tirx.Select(rank >= 1, rank - 1, rank)) % WARP_SIZE
    for g in range(len(plan.runs)):
        Tb.buffer_store(received, _shuffle(totals[g], source), [0])
        Tb.buffer_store(totals, tirx.Select(rank >= 1, received[0], zero), [g])


def _exclusive_through_shared(ctx: CodegenContext, inst: Scan, plan: _Plan, totals, combine, zero) -> None:
    """Each thread stores its totals; each combines those of the lower ranks of its row group."""
    layout = inst.x.layout
    groups = len(plan.runs)
    scratch = ctx.shared_view(ctx.plan.offset_of(inst), inst.x.dtype, layout.num_threads * groups,
                              f"{inst.output.name}_partials")
    rank, others = plan.rank(layout, ctx.tx), plan.others(layout, ctx.tx)
    base = others * groups * plan.ranks
    sync_threads()  # the scratch may overlap memory other threads were still reading
    with ctx.guarded(ctx.tx < layout.num_threads if layout.num_threads < ctx.func.num_threads
                     else tirx.const(True, "bool")):
        for g in range(groups):
            Tb.buffer_store(scratch, totals[g], [base + g * plan.ranks + rank])
    sync_threads()
    for g in range(groups):
        Tb.buffer_store(totals, zero, [g])
        with Tb.serial(0, rank) as r:
            Tb.buffer_store(totals, combine(totals[g], scratch[base + g * plan.ranks + r]), [g])
    sync_threads()


def scan_scratch_bytes(inst: Scan) -> int:
    plan = _Plan(inst.x.layout, inst.dim)
    if plan.ranks == 1 or plan.in_warp:
        return 0
    return inst.x.dtype.storage_bytes(inst.x.layout.num_threads * len(plan.runs))


register(Scan, emit=emit_scan, propagate=propagate_scan,
         required=lambda inst: [(inst.x, scan_layout(inst.output.layout, inst.dim))],
         produced=lambda inst: scan_layout(inst.output.layout, inst.dim), scratch=scan_scratch_bytes)
