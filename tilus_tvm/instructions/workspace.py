"""``AllocateGlobal`` (workspaces), ``LockSemaphore`` and ``ReleaseSemaphore``.

No layout rule, no scratch. ``AllocateGlobal`` declares the view of its workspace parameter (the
kernel ABI pass lists workspaces; the code generator appends them to the kernel's parameters).

The semaphore pair follows the usual split-K protocol (CUTLASS's serial reduction does the same):

- lock: thread 0 polls the word (``tilus_tvm.intrin.emit_semaphore_wait``: ``ld.relaxed.gpu`` polls
  closed by one ``ld.acquire.gpu``), then ``__syncthreads()`` hands the acquired view to the block;
- release: ``__syncthreads()`` (the block's stores are done), then thread 0 issues
  ``__threadfence()`` and ``st.release.gpu.global.b32`` (``tilus_tvm.intrin.emit_semaphore_release``).
"""
from __future__ import annotations

from tvm import tirx
from tvm.script.ir_builder import tirx as Tb

from tilus_tvm.backend.context import CodegenContext, const, sync_threads
from tilus_tvm.intrin.semaphore import emit_arrival, emit_semaphore_release, emit_semaphore_wait
from tilus_tvm.instructions.registry import register
from tilus_tvm.ir import inst as ir


def emit_allocate_global(ctx: CodegenContext, inst: ir.AllocateGlobal) -> None:
    ctx.declare_global_view(inst.output)


def _indices(inst) -> list:
    return [const(i, "int32") if isinstance(i, int) else i for i in inst.indices]


def _address(ctx: CodegenContext, inst) -> tirx.PrimExpr:
    return ctx.view(inst.tensor).ptr_to(_indices(inst))


def emit_lock_semaphore(ctx: CodegenContext, inst: ir.LockSemaphore) -> None:
    value = const(inst.value, "int32")
    observed = tirx.decl_buffer((1,), "int32", "semaphore_value", scope="local")
    with ctx.guarded(ctx.tx == 0):
        Tb.add_to_parent(tirx.AllocBuffer(observed))
        Tb.evaluate(emit_semaphore_wait(observed, _address(ctx, inst), value))
    sync_threads()


def emit_release_semaphore(ctx: CodegenContext, inst: ir.ReleaseSemaphore) -> None:
    sync_threads()
    with ctx.guarded(ctx.tx == 0):
        for call in emit_semaphore_release(_address(ctx, inst), const(inst.value, "int32")):
            Tb.evaluate(call)


def emit_arrive_last(ctx: CodegenContext, inst: ir.ArriveLast) -> None:
    """Barrier; thread 0: fence, ticket = atomicAdd(counter, 1), and if the ticket is ``total - 1`` a fence (what
    the others stored before their arrival is visible) and the counter back to 0; ``__syncthreads_or`` gives
    every thread thread 0's answer (and orders their later loads after its fence)."""
    fence, add = emit_arrival(_address(ctx, inst))
    last = tirx.BufferLoad(inst.buffer, [0])
    sync_threads()
    Tb.buffer_store(inst.buffer, const(0, "int32"), [0])
    with ctx.guarded(ctx.tx == 0):
        Tb.evaluate(fence)
        Tb.buffer_store(inst.buffer, tirx.Cast("int32", add == const(inst.total, "int32") - 1), [0])
        with ctx.guarded(last != 0):
            Tb.evaluate(Tb.cuda.thread_fence())
            Tb.buffer_store(ctx.view(inst.tensor), const(0, "int32"), _indices(inst))
    Tb.buffer_store(inst.buffer, tirx.Cast("int32", Tb.cuda.syncthreads_or(last != 0)), [0])


register(ir.AllocateGlobal, emit=emit_allocate_global)
register(ir.ArriveLast, emit=emit_arrive_last)
register(ir.LockSemaphore, emit=emit_lock_semaphore)
register(ir.ReleaseSemaphore, emit=emit_release_semaphore)
