"""Emitters of the semaphore protocol between blocks (no tensor intrinsics: these act on one word of
global memory, not on tiles). The Script backend's ``lock_semaphore`` / ``release_semaphore``
(``tilus_tvm.instructions.workspace``) emit through them.

- :func:`emit_semaphore_wait` is TVM's ``T.cuda.wait_until`` at GPU scope: polls of
  ``ld.relaxed.gpu.global`` until the word equals the expected value, closed by one
  ``ld.acquire.gpu.global``, so what the releasing block wrote before its release is visible after.
- :func:`emit_semaphore_release` is ``__threadfence()`` (``membar.gl``) and a
  ``st.release.gpu.global.b32`` of the new value.

- :func:`emit_arrival` is ``__threadfence()`` and an ``atomicAdd`` of 1 that returns the count before it
  (a ticket: the block that draws ``total - 1`` arrived last).

All run in one thread; the caller puts the block barriers around them.
"""
from __future__ import annotations

from typing import Any

from tvm import tirx
from tvm.script.ir_builder import tirx as Tb


def emit_semaphore_wait(observed: tirx.Buffer, address: Any, expected: Any) -> tirx.Expr:
    """Wait until the int32 at ``address`` (a pointer into global memory, ``buf.ptr_to([i])``) equals
    ``expected``; ``observed`` is a one-element int32 local buffer the polls load into. Returns the
    call; wrap it in ``T.evaluate``."""
    return Tb.cuda.wait_until(observed, address, lambda current: current == expected, scope="gpu", space="global")


def emit_semaphore_release(address: Any, value: Any) -> list[tirx.Expr]:
    """A GPU-scope fence, then a release store of the int32 ``value`` to ``address``: the calls, in
    order (wrap each in ``T.evaluate``)."""
    return [Tb.cuda.thread_fence(), Tb.ptx.st.release.gpu.global_.b32(address, value)]


def emit_arrival(address: Any) -> list[tirx.Expr]:
    """A GPU-scope fence, then ``atomicAdd(address, 1)``: the calls, the last one's value the count before
    this arrival."""
    return [Tb.cuda.thread_fence(), Tb.cuda.atomic_add(address, tirx.const(1, "int32"))]
