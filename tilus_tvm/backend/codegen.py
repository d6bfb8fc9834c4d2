"""Tile IR -> TVM TIR ``PrimFunc`` (non-block ``tirx`` form).

One kernel is one PrimFunc: pointer parameters are flat buffers (any tensor's storage), run-time
scalars are scalar parameters (16-bit floats as float32: TVM's CUDA launcher cannot pass a
``float16``/``bfloat16`` kernel argument, so the kernel narrows them on entry), ``blockIdx``/``threadIdx`` are bound with ``thread_extent``
attributes. Register tensors become per-thread ``local`` arrays declared at the top of the
kernel; shared tensors are typed views of one ``shared.dyn`` pool. Statements map one to one;
instructions go to the emitter registered for their type and the kernel's target
(``tilus_tvm/instructions/``).
"""
from __future__ import annotations

import contextlib
import math
from typing import Callable, Optional

from tvm import tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as Tb

from tilus_tvm.backend import cuda_source, interleave
from tilus_tvm.backend.strided import flatten_strided_views
from tilus_tvm.backend.context import CodegenContext
from tilus_tvm.ir.scalar import c_identifier, expr_dtype
from tilus_tvm.ir.stmt import (AssignScalar, BindScalar, BreakStmt, ContinueStmt, DeclareScalar, ForStmt, Function,
                               IfStmt, InstStmt, Param, SeqStmt, Stmt, WhileStmt, instructions, jumps_out)
from tilus_tvm.ir.tensor import RegisterTensor
from tilus_tvm.passes.shared_memory import SharedMemoryPlan
from tilus_tvm.instructions.tma import encode_tensor_maps

BLOCK_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z")
# TVM 0.27's launch tag for programmatic dependent launch (its spelling); its host/device split copies the
# kernel-launch-params attribute to the kernel, and its CUDA runtime launches that kernel with
# CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION (attrs.dependent_launch)
PROGRAMMATIC_LAUNCH = "tirx.use_programtic_dependent_launch"


NARROW_FLOATS = ("float16", "bfloat16")
cuda_source.install()  # string literals as UTF-8 bytes for NVRTC (backend/cuda_source.py)


def block_iter_vars() -> tuple[tirx.IterVar, ...]:
    """Fresh IterVars for blockIdx.x/y/z; the frontend hands their vars to the kernel body."""
    return tuple(tirx.IterVar(None, tirx.Var(tag, "int32"), tirx.IterVar.ThreadIndex, tag) for tag in BLOCK_TAGS)


def _emit_seq(ctx: CodegenContext, seq: SeqStmt) -> None:
    stmts, i = seq.stmts, 0
    while i < len(stmts):
        end = interleave.window_end(stmts, i)
        if end is None:
            _emit_stmt(ctx, stmts[i])
            i += 1
            continue
        _emit_interleaved(ctx, stmts[i:end], stmts[end])
        i = end + 1


def _emit_interleaved(ctx: CodegenContext, movable: list[InstStmt], dot: InstStmt) -> None:
    """Copies and shared loads spread among the mma instructions of the dot after them
    (see ``backend/interleave.py``)."""
    work = []
    for stmt in movable:
        with ctx.detached() as region:
            _emit_inst(ctx, stmt)
        work.extend(interleave.flatten(region.stmt))
    with ctx.detached() as region:
        _emit_inst(ctx, dot)
    for stmt in interleave.merge(work, interleave.flatten(region.stmt)):
        ctx.place(stmt)


def _emit_inst(ctx: CodegenContext, stmt: InstStmt) -> None:
    ctx.emit_instruction(stmt.inst)


def _emit_for(ctx: CodegenContext, stmt: ForStmt) -> None:
    start, stop, step = stmt.start, stmt.stop, stmt.step
    count = (stop - start + step - 1) // step if not (isinstance(step, int) and step == 1) else stop - start
    kind = Tb.unroll if stmt.unroll else Tb.serial
    frames = []
    if stmt.unroll and jumps_out(stmt.body):
        # TVM's UnrollLoop copies the body without its loop, leaving a break/continue outside any loop;
        # keep the loop and let nvcc unroll it (#pragma unroll) instead
        frames.append(Tb.attr(tirx.const(0, "int32"), "pragma_unroll_explicit", 0))
    frames.append(kind(0, count, dtype=expr_dtype(stmt.var)))
    with contextlib.ExitStack() as stack:
        i = [stack.enter_context(frame) for frame in frames][-1]
        value = i if (isinstance(start, int) and start == 0 and isinstance(step, int) and step == 1) \
            else start + i * step
        Tb.bind(value, var=stmt.var)
        _emit_seq(ctx, stmt.body)


def _emit_while(ctx: CodegenContext, stmt: WhileStmt) -> None:
    with Tb.While(stmt.cond):
        _emit_seq(ctx, stmt.body)


def _emit_if(ctx: CodegenContext, stmt: IfStmt) -> None:
    with Tb.If(stmt.cond):
        with Tb.Then():
            _emit_seq(ctx, stmt.then_body)
        if stmt.else_body is not None:
            with Tb.Else():
                _emit_seq(ctx, stmt.else_body)


def _emit_bind(ctx: CodegenContext, stmt: BindScalar) -> None:
    Tb.bind(stmt.value, var=stmt.var)


def _emit_declare(ctx: CodegenContext, stmt: DeclareScalar) -> None:
    Tb.add_to_parent(tirx.AllocBuffer(stmt.buffer))
    if stmt.value is not None:
        Tb.buffer_store(stmt.buffer, stmt.value, [0])


def _emit_assign_scalar(ctx: CodegenContext, stmt: AssignScalar) -> None:
    Tb.buffer_store(stmt.buffer, stmt.value, [0])


STATEMENTS: dict[type, Callable] = {
    SeqStmt: _emit_seq, InstStmt: _emit_inst, ForStmt: _emit_for, IfStmt: _emit_if, BindScalar: _emit_bind,
    DeclareScalar: _emit_declare, AssignScalar: _emit_assign_scalar, WhileStmt: _emit_while,
    BreakStmt: lambda ctx, stmt: Tb.Break(), ContinueStmt: lambda ctx, stmt: Tb.Continue(),
}


def _emit_stmt(ctx: CodegenContext, stmt: Stmt) -> None:
    STATEMENTS[type(stmt)](ctx, stmt)


def _register_tensors(func: Function) -> list[RegisterTensor]:
    seen: dict[int, RegisterTensor] = {}
    for inst in instructions(func.body):
        for t in [inst.defined, *inst.operands()]:
            if isinstance(t, RegisterTensor):
                seen.setdefault(id(t), t)
    return list(seen.values())


def generate(func: Function, plan: SharedMemoryPlan, params: Optional[list[Param]] = None,
             attrs: Optional[dict] = None) -> tirx.PrimFunc:
    """Generate the PrimFunc of ``func`` (layouts inferred, shared memory planned, ABI planned).

    ``params`` is the argument order (default: the Script's, compile-time parameters left out, then
    the workspaces of ``self.global_tensor``); ``attrs`` are extra function attributes.
    """
    from tilus_tvm.passes.kernel_abi import workspace_allocations

    thread_iv = tirx.IterVar(None, tirx.Var("threadIdx.x", "int32"), tirx.IterVar.ThreadIndex, "threadIdx.x")
    ctx = CodegenContext(func, plan, thread_iv.var)
    if params is None:
        params = [p for p in func.params if p.kind != "const"]
        params += [inst.output.pointer for inst in workspace_allocations(func)]
    with IRBuilder() as ib:
        with Tb.prim_func():
            Tb.func_name(func.name)
            narrow = []  # 16-bit float scalars: passed as float32 (module docstring), narrowed in the kernel
            for param in params:
                if param.kind == "scalar" and str(param.var.ty) in NARROW_FLOATS:
                    wide = tirx.Var(param.var.name, "float32")
                    Tb.arg(c_identifier(param.name), wide)
                    narrow.append((param.var, wide))
                elif param.kind == "scalar":
                    Tb.arg(c_identifier(param.name), param.var)
                elif param.kind == "pointer":
                    Tb.arg(c_identifier(param.name), param.buffer)
            launch = {"tirx.kernel_launch_params": [PROGRAMMATIC_LAUNCH]} if func.dependent_launch else {}
            Tb.func_attr({"tirx.noalias": True, **launch, **(attrs or {})})
            for param in params:
                if param.kind == "pointer" and param.shaped:
                    # a wide pointer's sub-views address it with int64 offsets: count it in int64 too
                    numel = math.prod([tirx.Cast("int64", s) for s in param.buffer.shape] if param.wide
                                      else param.buffer.shape)
                    flat = Tb.decl_buffer((numel,), param.buffer.dtype, data=param.buffer.data)
                    IRBuilder.name(f"{c_identifier(param.name)}_flat", flat)
                    ctx.flat_views[param.name] = flat
            encode_tensor_maps(func, ctx)  # host code: before the launch
            frames = []
            for iv, extent in zip(func.block_vars, list(func.blocks) + [1] * (3 - len(func.blocks))):
                frames.append(Tb.attr(iv, "thread_extent", extent))
            frames.append(Tb.attr(thread_iv, "thread_extent", func.num_threads))
            if func.min_blocks_per_sm is not None:  # TVM moves this into __launch_bounds__(threads, blocks)
                frames.append(Tb.attr(tirx.const(0, "int32"), "tirx.launch_bounds_min_blocks_per_sm",
                                      func.min_blocks_per_sm))
            for frame in frames:
                frame.__enter__()
            for var, wide in narrow:
                Tb.bind(tirx.Cast(str(var.ty), wide), var=var)
            if plan.size:
                ctx.pool = Tb.alloc_buffer((plan.size,), "uint8", scope="shared.dyn")
                IRBuilder.name("smem", ctx.pool)
            for tensor in _register_tensors(func):
                Tb.add_to_parent(tirx.AllocBuffer(ctx.declare_register(tensor)))
            _emit_seq(ctx, func.body)
            for frame in reversed(frames):
                frame.__exit__(None, None, None)
    func = ib.get()
    return flatten_strided_views(func) if ctx.strided_views else func
