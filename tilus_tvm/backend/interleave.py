"""Spreading independent memory work through the tensor-core instructions of a following ``dot``.

Why: a kernel step such as ``copy_async(...); load_shared(next fragments); dot(a, b, acc)`` emits
its cp.async and ldmatrix instructions as one block before the step's ``mma.sync`` run. All of
them are ``asm volatile``, so the CUDA compiler keeps that order, and while a warp spends a few
hundred cycles computing addresses and issuing copies it feeds the tensor pipe nothing. The warps
of a block leave the same barrier together, so they all reach their copy block at the same time
and the pipe idles (measured on an H100: ~140 instructions without an ``mma`` in every k-tile of
the 128x256 ``Matmul``). Placing those instructions between the ``mma`` instructions keeps the
pipe fed while they issue.

What may move: a run of ``CopyAsync``, ``CopyAsyncCommitGroup`` and ``LoadShared`` instructions
directly before a tensor-core ``Dot`` that reads none of the registers they write. The ``Dot``
touches only registers, the moved instructions only memory and their own registers, so
reordering them against the ``mma`` instructions cannot change any value. The moved
instructions keep their order among themselves (a commit still follows its copies).
"""
from __future__ import annotations

from typing import Optional

from tvm import tirx

from tilus_tvm.ir import inst as ir
from tilus_tvm.ir.stmt import InstStmt, Stmt

MOVABLE = (ir.CopyAsync, ir.CopyAsyncCommitGroup, ir.LoadShared)


def window_end(stmts: list[Stmt], start: int) -> Optional[int]:
    """Index of the tensor-core ``Dot`` that ends a run of movable instructions starting at ``start``,
    or None when ``stmts[start:]`` does not begin such a window."""
    end = start
    while end < len(stmts) and isinstance(stmts[end], InstStmt) and isinstance(stmts[end].inst, MOVABLE):
        end += 1
    if end == start or end == len(stmts) or not isinstance(stmts[end], InstStmt):
        return None
    dot = stmts[end].inst
    if type(dot) is not ir.Dot or dot.config is None or dot.config.kind != "mma":
        return None
    written = {id(s.inst.defined) for s in stmts[start:end] if s.inst.defined is not None}
    if any(id(t) in written for t in (dot.a, dot.b, dot.c, dot.output)):
        return None
    return end


def flatten(stmt: tirx.Stmt) -> list[tirx.Stmt]:
    """The top-level statements of a detached region, nested sequences opened."""
    if isinstance(stmt, tirx.SeqStmt):
        return [piece for s in stmt.seq for piece in flatten(s)]
    return [stmt]


def merge(work: list[tirx.Stmt], mma: list[tirx.Stmt]) -> list[tirx.Stmt]:
    """``mma`` with the ``work`` statements spread evenly between them, both in their own order.

    Work piece ``j`` goes before mma statement ``floor(j * len(mma) / len(work))``: the first piece
    leads (its latency is the longest to hide), the rest follow at even spacing.

    >>> merge(["w0", "w1"], ["m0", "m1", "m2", "m3"])
    ['w0', 'm0', 'm1', 'w1', 'm2', 'm3']
    """
    slots: dict[int, list] = {}
    for j, piece in enumerate(work):
        slots.setdefault(j * len(mma) // len(work), []).append(piece)
    merged = []
    for i, stmt in enumerate(mma):
        merged.extend(slots.get(i, []))
        merged.append(stmt)
    return merged
