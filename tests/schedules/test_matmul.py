"""The pipelined Matmul: what it compiles to (CPU), its shared-memory plan and swizzles, and its
results on the GPU for aligned and ragged shapes, row- and column-major b."""
import math

import pytest
import torch

from tilus_tvm.errors import ScriptError
from tilus_tvm.instructions import lookup
from tilus_tvm.ir import inst as ir
from tilus_tvm.ir.stmt import instructions
from tilus_tvm.layout.shared import bank_conflicts
from tilus_tvm.pipeline import lower_specialized, specialize
from tilus_tvm.schedules.matmul import Matmul, matmul


def meta(*shape):
    return torch.empty(*shape, dtype=torch.float16, device="meta")


def lowered(kernel, m=4096, n=4096, k=4096):
    specs, spec = specialize(kernel, (m, n, k, meta(m, k), meta(k, n), meta(m, n)), "sm_90")
    return lower_specialized(kernel, specs, spec)


@pytest.mark.parametrize("b_layout", ["row", "col"])
def test_ptx_has_cp_async_ldmatrix_and_mma(b_layout):
    z = torch.zeros(256, 256, dtype=torch.float16)
    ptx = Matmul(b_layout=b_layout).compile(256, 256, 256, z, z, z, target="sm_90").ptx
    assert "cp.async.cg.shared.global" in ptx and "cp.async.wait_group" in ptx
    assert "ldmatrix.sync.aligned.m8n8" in ptx
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in ptx
    shared_reads = [line for line in ptx.splitlines() if "ld.shared" in line]
    assert shared_reads and all(".v4." in line for line in shared_reads)  # a, b by ldmatrix; c's epilogue by 16 bytes


def test_three_stage_plan_keeps_stages_and_operands_apart():
    result = lowered(Matmul(128, 128, 32, 8, stages=3))
    shared = [inst.output for inst in instructions(result.func.body) if isinstance(inst, ir.AllocateShared)]
    assert [t.shape for t in shared] == [(3, 128, 32), (3, 32, 128), (128, 128)]
    epilogue = shared.pop()  # c's staging tile reuses the pipeline's memory once every copy has landed
    assert result.plan.offset_of(epilogue) == 0
    ranges = []
    for tensor in shared:
        start = result.plan.offset_of(tensor)
        ranges.append((start, start + tensor.dtype.storage_bytes(tensor.layout.cosize)))
        stage_bytes = tensor.dtype.storage_bytes(tensor.layout.strides[0])
        assert tensor.layout.strides[0] == math.prod(tensor.shape[1:])  # stage s starts at s * tile elements
        assert stage_bytes * 3 == ranges[-1][1] - ranges[-1][0]
    (a0, a1), (b0, b1) = sorted(ranges)
    assert a1 <= b0  # the two pipelines never share bytes
    assert result.func.shared_bytes >= a1 - a0 + b1 - b0


def test_inferred_swizzles_make_copies_and_ldmatrix_conflict_free():
    result = lowered(Matmul(128, 128, 32, 8, stages=3))
    checked = 0
    for inst in instructions(result.func.body):
        accesses = lookup(type(inst), "sm_90").shared_accesses
        if accesses is None:
            continue
        tensor = inst.src if isinstance(inst, ir.LoadShared) else inst.dst  # the shared operand
        for request in accesses(inst, tensor.resolved_layout()):
            cost = bank_conflicts(tensor.root.layout, request, tensor.dtype.nbits)
            assert cost.conflict_free, (inst, tensor.root.layout, cost)
            checked += 1
    assert checked >= 6  # cp.async stores and ldmatrix loads of a and b, c's epilogue store and load
    shared = [inst.output for inst in instructions(result.func.body) if isinstance(inst, ir.AllocateShared)]
    assert all(t.layout.swizzle is not None for t in shared)


def test_bfloat16_uses_bf16_mma_and_a_dtype_mismatch_is_named():
    from tilus_tvm import bfloat16

    z = torch.zeros(128, 128, dtype=torch.bfloat16)
    ptx = Matmul(dtype=bfloat16).compile(128, 128, 128, z, z, z, target="sm_80").ptx
    assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in ptx
    with pytest.raises(ScriptError, match="dtype float16 differs from the pointer's element type bfloat16"):
        Matmul().compile(128, 128, 128, z, z, z, target="sm_80")


def test_bad_configurations_are_refused():
    with pytest.raises(ScriptError, match="stages must be at least 2"):
        Matmul(stages=1)
    with pytest.raises(ScriptError, match="block_k=24 must be a multiple of 16"):
        Matmul(block_k=24)
    with pytest.raises(ScriptError, match="b_layout must be 'row' or 'col'"):
        Matmul(b_layout="t")


def test_matmul_function_checks_shapes():
    from tilus_tvm.errors import LaunchError

    with pytest.raises(LaunchError, match=r"must be \[m, k\] and \[k, n\]"):
        matmul(torch.zeros(4, 8, dtype=torch.float16), torch.zeros(4, 8, dtype=torch.float16))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("b_layout", ["row", "col"])
@pytest.mark.parametrize("shape", [(4096, 4096, 4096), (1, 4096, 4096), (127, 255, 63), (1000, 1000, 1000),
                                   (4095, 4097, 1031)])
def test_matmul_matches_torch(shape, b_layout, dtype):
    from tilus_tvm.dtypes import as_dtype

    m, n, k = shape
    a = torch.randn(m, k, dtype=dtype, device="cuda")
    b = torch.randn(k, n, dtype=dtype, device="cuda")
    c = torch.full((m, n), float("nan"), dtype=dtype, device="cuda")
    Matmul(b_layout=b_layout, dtype=as_dtype(dtype))(m, n, k, a, b.t().contiguous() if b_layout == "col" else b, c)
    expected = (a.float() @ b.float())
    assert not torch.isnan(c).any()
    torch.testing.assert_close(c.float(), expected, atol=0.05 * math.sqrt(k), rtol=1e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("config", [(128, 256, 32, 8, 4), (64, 128, 64, 4, 3), (16, 128, 64, 4, 2)])
def test_matmul_configurations(config):
    m, n, k = 300, 520, 200
    a = torch.randn(m, k, dtype=torch.float16, device="cuda")
    b = torch.randn(k, n, dtype=torch.float16, device="cuda")
    c = torch.full((m, n), float("nan"), dtype=torch.float16, device="cuda")
    Matmul(*config)(m, n, k, a, b, c)
    torch.testing.assert_close(c.float(), a.float() @ b.float(), atol=0.05 * math.sqrt(k), rtol=1e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 16, 77, 300])
def test_matmul_function(m):
    a = torch.randn(m, 256, dtype=torch.bfloat16, device="cuda")
    w = torch.randn(96, 256, dtype=torch.bfloat16, device="cuda")
    expected = a.float() @ w.float().t()
    torch.testing.assert_close(matmul(a, w.t()).float(), expected, atol=0.5, rtol=2e-2)  # b column-major
    torch.testing.assert_close(matmul(a, w.t().contiguous()).float(), expected, atol=0.5, rtol=2e-2)
