"""Shared-memory planning: every shared tensor and scratch area gets a byte offset in one pool.

The kernel has a single dynamic shared-memory pool (TVM's ``tirx`` pipeline allows one), carved
into typed views. Shared tensors live from ``shared_tensor`` to ``free_shared`` (or to the end of
the kernel); scratch areas (layout conversions through shared memory, reductions across warps)
live for one instruction. Offsets are chosen first-fit in program order, aligned to 128 bytes so
any vector access and ``ldmatrix``/``cp.async`` row is aligned.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

from tilus_tvm.errors import CompileError
from tilus_tvm.ir import inst as ir
from tilus_tvm.ir.stmt import Function, instructions
from tilus_tvm.layout.register import RegisterLayout

ALIGNMENT = 128
# Largest dynamic shared memory per block (bytes) by compute capability major version.
SHARED_MEMORY_LIMIT = {7: 96 * 1024, 8: 163 * 1024, 9: 227 * 1024, 10: 227 * 1024, 12: 99 * 1024}


def dim_spatial_positions(layout: RegisterLayout, dim: int) -> list[int]:
    """Positions in ``layout.spatial_modes`` of the modes of dimension ``dim`` (the threads a reduction
    over ``dim`` combines differ exactly in these thread-id digits)."""
    dim_modes = set(layout.grouped_modes[dim])
    return [p for p, entry in enumerate(layout.spatial_modes) if entry >= 0 and entry in dim_modes]


def reduce_shuffle_lanes(layout: RegisterLayout, dim: int) -> Optional[list[tuple[int, int]]]:
    """The (thread stride, size) of each spatial mode of ``dim`` when all of them can be combined with
    butterfly warp shuffles (power-of-two sizes and strides, within one warp); None otherwise."""
    lanes = []
    for p in dim_spatial_positions(layout, dim):
        stride, size = math.prod(layout.spatial_shape[p + 1:]), layout.spatial_shape[p]
        if size & (size - 1) or stride & (stride - 1) or stride * size > 32:
            return None
        lanes.append((stride, size))
    return lanes


def reduce_partial_groups(layout: RegisterLayout, dim: int) -> int:
    """How many threads hold partial results of one output element (product of dim's spatial modes)."""
    return math.prod(layout.spatial_shape[p] for p in dim_spatial_positions(layout, dim))


def scratch_bytes(inst: ir.Instruction) -> int:
    """Bytes of shared scratch an instruction needs while it runs."""
    if isinstance(inst, ir.ConvertLayout):
        return inst.x.size * inst.x.dtype.nbytes
    if isinstance(inst, ir.Reduce):
        if reduce_shuffle_lanes(inst.x.layout, inst.dim) is not None:
            return 0
        return reduce_partial_groups(inst.x.layout, inst.dim) * inst.output.size * inst.x.dtype.nbytes
    return 0


@dataclass
class SharedMemoryPlan:
    offsets: dict[int, int] = field(default_factory=dict)  # id(SharedTensor or Instruction) -> byte offset
    size: int = 0

    def offset_of(self, obj) -> int:
        return self.offsets[id(obj)]


class _Arena:
    def __init__(self):
        self.live: list[tuple[int, int]] = []  # (start, end) byte ranges in use
        self.peak = 0

    def allocate(self, nbytes: int) -> int:
        nbytes = -(-nbytes // ALIGNMENT) * ALIGNMENT
        start = 0
        for lo, hi in sorted(self.live):
            if start + nbytes <= lo:
                break
            start = max(start, hi)
        self.live.append((start, start + nbytes))
        self.peak = max(self.peak, start + nbytes)
        return start

    def free(self, start: int) -> None:
        self.live = [r for r in self.live if r[0] != start]


def plan_shared_memory(func: Function, limit: Optional[int] = None) -> SharedMemoryPlan:
    plan = SharedMemoryPlan()
    arena = _Arena()
    for inst in instructions(func.body):
        if isinstance(inst, ir.AllocateShared):
            t = inst.output
            plan.offsets[id(t)] = arena.allocate(t.layout.cosize * t.dtype.nbytes)
        elif isinstance(inst, ir.FreeShared):
            if id(inst.tensor) not in plan.offsets:
                raise CompileError(f"free_shared of {inst.tensor.describe()}, which was not allocated before")
            arena.free(plan.offsets[id(inst.tensor)])
        else:
            need = scratch_bytes(inst)
            if need:
                plan.offsets[id(inst)] = arena.allocate(need)
                arena.free(plan.offsets[id(inst)])
    plan.size = arena.peak
    if limit is not None and plan.size > limit:
        raise CompileError(f"kernel {func.name} needs {plan.size} bytes of shared memory, the target allows "
                           f"{limit}; use smaller tiles or free shared tensors earlier")
    func.shared_bytes = plan.size
    return plan
