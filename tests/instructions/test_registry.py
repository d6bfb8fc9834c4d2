"""The instruction registry: one entry per (instruction, target family); a newer family's entry
serves newer targets, and adding one touches no pass."""
import pytest
import torch

from tilus_tvm.backend.context import sync_threads
from tilus_tvm.errors import CompileError
from tilus_tvm.instructions import lookup, registry
from tilus_tvm.ir import inst as ir
from tests.lang import kernels as K


def test_every_instruction_has_a_base_entry():
    for inst_type in (ir.AllocateRegister, ir.AllocateShared, ir.FreeShared, ir.GlobalView, ir.LoadGlobal,
                      ir.StoreGlobal, ir.LoadShared, ir.StoreShared, ir.Unary, ir.Binary, ir.Where, ir.Cast,
                      ir.Reduce, ir.Dot, ir.ConvertLayout, ir.Assign, ir.Sync, ir.Printf):
        assert lookup(inst_type, "sm_80").family == "sm_80"
        for arch in ("sm_90", "sm_120"):  # a newer family's entry (Cast's sm_89 cvt for fp8) may serve them
            assert registry.family_level(lookup(inst_type, arch).family) <= registry.family_level(arch)


def test_a_newer_family_serves_newer_targets_only(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    calls = []

    def emit_sync_hopper(ctx, inst):
        calls.append(ctx.func.arch)
        sync_threads()

    registry.register(ir.Sync, "sm_90", emit=emit_sync_hopper)
    assert lookup(ir.Sync, "sm_80").family == "sm_80"
    assert lookup(ir.Sync, "sm_90").family == "sm_90" and lookup(ir.Sync, "sm_100").family == "sm_90"
    kernel = K.SharedRoundTrip()  # it synchronises once
    args = (torch.empty(32, 64, dtype=torch.float16, device="meta"),) * 2
    kernel.lower(*args, target="sm_80")
    assert calls == []
    kernel.lower(*args, target="sm_90")
    assert calls and set(calls) == {"sm_90"}


def test_registering_twice_or_for_a_bad_family_is_refused(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    with pytest.raises(CompileError, match="registered twice"):
        registry.register(ir.Sync, "sm_80", emit=lambda ctx, inst: None)
    with pytest.raises(CompileError, match="must look like 'sm_80'"):
        registry.register(ir.Sync, "hopper", emit=lambda ctx, inst: None)


def test_detached_regions_can_be_placed_twice():
    from tvm import tirx
    from tvm.script.ir_builder import IRBuilder
    from tvm.script.ir_builder import tirx as Tb

    from tilus_tvm.backend.context import CodegenContext
    from tilus_tvm.ir.stmt import Function, SeqStmt
    from tilus_tvm.passes.shared_memory import SharedMemoryPlan

    func = Function("f", [], (1,), 1, SeqStmt())
    ctx = CodegenContext(func, SharedMemoryPlan(), tirx.Var("threadIdx.x", "int32"))
    buf = tirx.decl_buffer((4,), "float32", "x", scope="local")
    with IRBuilder() as builder:
        with Tb.prim_func():
            Tb.func_name("f")
            Tb.add_to_parent(tirx.AllocBuffer(buf))
            with ctx.detached() as region:
                Tb.buffer_store(buf, tirx.const(1.0, "float32"), [0])
                Tb.buffer_store(buf, tirx.const(2.0, "float32"), [1])
            ctx.place(region.stmt)
            ctx.place(region.stmt)
    text = builder.get().script()
    assert text.count("x[0] = T.float32(1.0)") == 2 and text.count("x[1] = T.float32(2.0)") == 2
