"""Shared-memory planning: every shared tensor and scratch area gets a byte offset in one pool.

The kernel has a single dynamic shared-memory pool (TVM's ``tirx`` pipeline allows one), carved
into typed views. Shared tensors live from ``shared_tensor`` to ``free_shared`` (or to the end of
the kernel); scratch areas (what an instruction's registry entry asks for: layout conversions
through shared memory, reductions across warps) live for one instruction. A tensor freed while
``cp.async`` copies into it may be in flight (no ``copy_async_wait_all``/``wait_group(0)`` since
the last copy) keeps its memory until such a wait. Offsets are chosen first-fit in program order,
aligned to 128 bytes so any vector access and ``ldmatrix``/``cp.async`` row is aligned, and a
swizzled tensor to its swizzle's period (at most 1024 bytes, that of 128-byte rows): ``wgmma`` applies the swizzle
to absolute shared addresses, so the software swizzle of the copies must start where the hardware's
does (the pool itself starts at shared address 0).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from tilus_tvm.errors import CompileError
from tilus_tvm.ir import inst as ir
from tilus_tvm.instructions import lookup
from tilus_tvm.ir.stmt import Function, instructions

ALIGNMENT = 128
HARDWARE_SWIZZLE_PERIOD = 1024  # bytes: 8 rows of 128 bytes, wgmma's and TMA's 128-byte swizzle


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

    def allocate(self, nbytes: int, alignment: int = ALIGNMENT) -> int:
        nbytes = -(-nbytes // ALIGNMENT) * ALIGNMENT
        start = 0
        for lo, hi in sorted(self.live):
            if start + nbytes <= lo:
                break
            start = -(-max(start, hi) // alignment) * alignment
        self.live.append((start, start + nbytes))
        self.peak = max(self.peak, start + nbytes)
        return start

    def free(self, start: int) -> None:
        self.live = [r for r in self.live if r[0] != start]


def _alignment(tensor) -> int:
    """128 bytes, or a swizzled tensor's swizzle period when that is larger, up to the 1024 bytes of the
    hardware's largest swizzle (a longer software-only period needs no alignment)."""
    swizzle = tensor.layout.swizzle
    if swizzle is None:
        return ALIGNMENT
    return max(ALIGNMENT, min(HARDWARE_SWIZZLE_PERIOD, tensor.dtype.storage_bytes(swizzle.span)))


def plan_shared_memory(func: Function, limit: Optional[int] = None) -> SharedMemoryPlan:
    plan = SharedMemoryPlan()
    arena = _Arena()
    in_flight: set[int] = set()  # tensors (roots) that cp.async copies may still be writing
    deferred: list = []  # tensors freed while copies into them were in flight
    for inst in instructions(func.body):
        if isinstance(inst, ir.AllocateShared):
            t = inst.output
            plan.offsets[id(t)] = arena.allocate(t.dtype.storage_bytes(t.layout.cosize), _alignment(t))
        elif isinstance(inst, ir.FreeShared):
            if id(inst.tensor) not in plan.offsets:
                raise CompileError(f"free_shared of {inst.tensor.describe()}, which was not allocated before")
            if id(inst.tensor) in in_flight:
                deferred.append(inst.tensor)  # its memory is reused only after the copies have landed
            else:
                arena.free(plan.offsets[id(inst.tensor)])
        elif isinstance(inst, ir.CopyAsync):
            in_flight.add(id(inst.dst.root))
        elif isinstance(inst, ir.CopyAsyncWaitAll) or (isinstance(inst, ir.CopyAsyncWaitGroup) and inst.n == 0):
            in_flight.clear()
            for tensor in deferred:
                arena.free(plan.offsets[id(tensor)])
            deferred.clear()
        else:
            need = lookup(type(inst), func.arch).scratch_bytes(inst)
            if need:
                plan.offsets[id(inst)] = arena.allocate(need)
                arena.free(plan.offsets[id(inst)])
    plan.size = arena.peak
    if limit is not None and plan.size > limit:
        raise CompileError(f"kernel {func.name} needs {plan.size} bytes of shared memory, the target allows "
                           f"{limit}; use smaller tiles or free shared tensors earlier")
    func.shared_bytes = plan.size
    return plan
