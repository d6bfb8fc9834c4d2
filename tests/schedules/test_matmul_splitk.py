"""Split-K matmul (tilus_tvm/schedules/matmul_splitk.py): what it compiles to for sm_80 and sm_90,
its errors, the rule by which matmul() picks it, and on the GPU its results against torch for
random and ragged shapes, with poisoned outputs and repeated launches over one workspace."""
import math
import re

import pytest
import torch

from tilus_tvm.errors import LaunchError, ScriptError
from tilus_tvm.ir import inst as ir
from tilus_tvm.ir.stmt import instructions
from tilus_tvm.schedules import matmul_splitk
from tilus_tvm.schedules.matmul import matmul
from tilus_tvm.schedules.matmul_splitk import MatmulSplitK, choose_splits


def meta(*shape, dtype=torch.float16):
    return torch.empty(*shape, dtype=dtype, device="meta")


def args(m, n, k, b_layout="row", dtype=torch.float16, device="meta"):
    b_shape = (k, n) if b_layout == "row" else (n, k)
    return (m, n, k, torch.empty(m, k, dtype=dtype, device=device), torch.empty(*b_shape, dtype=dtype, device=device),
            torch.empty(m, n, dtype=dtype, device=device))


@pytest.mark.parametrize("arch, b_layout, dtype", [("sm_80", "row", torch.float16), ("sm_90", "col", torch.bfloat16)])
def test_ptx_pipeline_and_ordered_reduction(arch, b_layout, dtype):
    from tilus_tvm.dtypes import as_dtype

    kernel = MatmulSplitK(16, 128, 64, 4, 3, splits=4, b_layout=b_layout, dtype=as_dtype(dtype))
    compiled = kernel.compile(*args(16, 256, 1024, b_layout, dtype, "cpu"), target=arch)
    ptx = compiled.ptx
    kind = "bf16" if dtype == torch.bfloat16 else "f16"
    assert f"mma.sync.aligned.m16n8k16.row.col.f32.{kind}.{kind}.f32" in ptx
    assert "ldmatrix.sync.aligned.m8n8" in ptx and "cp.async.cg.shared.global" in ptx
    assert not re.findall(r"ld\.acquire\.gpu\.global", ptx)  # no split waits for another
    assert len(re.findall(r"atom\.global\.add\.[us]32", ptx)) == 1 and "bar.red.or.pred" in ptx  # arrive_last
    partial, counters = compiled.abi.workspaces
    assert (partial.dtype, partial.requires_clean, counters.dtype, counters.requires_clean) == (
        "float32", False, "int32", True)
    assert eval(partial.numel, {}, {"m_size": 16}) == 4 * 16 * 256  # float32 partial sums of c, a slot a split
    assert eval(counters.numel, {}, {"m_size": 33}) == 3 * 2  # one per output tile


def test_grid_is_n_tiles_by_m_tiles_by_splits_and_one_split_needs_no_workspace():
    program = MatmulSplitK(16, 128, 64, 4, 4, splits=5).tile_program(*args(40, 300, 4096), target="sm_80")
    assert program.blocks[0] == 3 and program.blocks[2] == 5
    assert len([i for i in instructions(program.body) if isinstance(i, ir.AllocateGlobal)]) == 2
    single = MatmulSplitK(16, 128, 64, 4, 4, splits=1).tile_program(*args(40, 300, 4096), target="sm_80")
    assert not [i for i in instructions(single.body) if isinstance(i, (ir.AllocateGlobal, ir.LockSemaphore))]


@pytest.mark.parametrize("splits, message", [
    (0, r"splits must be an int in \[1, 65535\]"),
    (65536, r"splits must be an int in \[1, 65535\]"),
    (True, r"splits must be an int"),
    (2.0, r"splits must be an int"),
])
def test_bad_split_counts_are_rejected_at_construction(splits, message):
    with pytest.raises(ScriptError, match=message):
        MatmulSplitK(splits=splits)


def test_more_splits_than_k_tiles_is_rejected_when_compiled_for_k():
    with pytest.raises(ScriptError, match=r"splits=5 exceeds the 4 k tiles of k_size=200 \(block_k=64\)"):
        MatmulSplitK(splits=5).tile_program(*args(16, 128, 200), target="sm_80")


def test_inherited_configuration_checks():
    with pytest.raises(ScriptError, match=r"block_m=8 must be a multiple of 16"):
        MatmulSplitK(block_m=8)
    with pytest.raises(ScriptError, match=r"b_layout must be 'row' or 'col'"):
        MatmulSplitK(b_layout="diag")


def test_matmul_rejects_a_bad_split_argument():
    a, b = torch.randn(4, 64).half(), torch.randn(64, 8).half()
    with pytest.raises(LaunchError, match=r"matmul: splits must be a positive int or None, got 0"):
        matmul(a, b, splits=0)


@pytest.mark.parametrize("m, n, k, sms, expected", [
    (16, 4096, 14336, 132, 4),      # 32 output tiles: 4 splits fill 128 of the SMs (5 would make 1.2 waves)
    (32, 8192, 28672, 132, 2),      # 64 tiles of 32 x 128
    (128, 4096, 14336, 132, 4),     # 32 tiles of 128 x 128
    (16, 14336, 4096, 132, 1),      # k too short to pay for the reduction
    (256, 4096, 14336, 132, 1),     # m beyond the split-K table
    (64, 32768, 16384, 132, 1),     # 256 tiles: the plain kernel fills the GPU
    (1, 128, 65536, 132, 16),       # at most 16 splits
    (16, 128, 8192, 108, 16),       # 128 k tiles allow 16 splits of 8 tiles
    (16, 1024, 8192, 108, 13),      # 8 tiles on 108 SMs
])
def test_choose_splits(m, n, k, sms, expected):
    assert choose_splits(m, n, k, sms) == expected


def test_choose_splits_keeps_enough_k_per_split_and_fits_the_kernel():
    for m in (1, 16, 33, 100, 128):
        for n in (128, 1000, 4096):
            for k in (8192, 10000, 30000):
                splits = choose_splits(m, n, k, 132)
                block_k = matmul_splitk.split_k_config(m)[2]
                assert 1 <= splits <= matmul_splitk.SPLIT_K_MAX_SPLITS
                assert splits == 1 or math.ceil(k / block_k) // splits >= matmul_splitk.SPLIT_K_MIN_TILES
                matmul_splitk.split_k_kernel(m, splits, torch.float16).tiles_per_split(k)  # no error


# --- GPU ------------------------------------------------------------------------------------------

def _reference(a, b):
    return (a.float() @ b.float()).to(a.dtype)


def _random(m, n, k, dtype, b_layout, generator):
    a = torch.randn(m, k, dtype=torch.float32, device="cuda", generator=generator).to(dtype) / math.sqrt(k)
    w = torch.randn(n, k, dtype=torch.float32, device="cuda", generator=generator).to(dtype) / math.sqrt(k)
    b = w.t() if b_layout == "col" else w.t().contiguous()
    return a, b


@pytest.mark.gpu
@pytest.mark.parametrize("m, n, k, splits, b_layout, dtype", [
    (16, 256, 2048, 4, "row", torch.float16),
    (1, 130, 1000, 3, "row", torch.float16),     # ragged n and k, one row
    (37, 200, 777, 6, "col", torch.float16),     # ragged everything, three m tiles, an empty last split
    (16, 128, 64, 1, "row", torch.float16),      # a single split: no workspace
    (5, 72, 3000, 16, "col", torch.bfloat16),
])
def test_split_k_matches_torch_with_poisoned_outputs(m, n, k, splits, b_layout, dtype):
    from tilus_tvm.dtypes import as_dtype

    generator = torch.Generator(device="cuda").manual_seed(m * 7919 + n * 31 + k)
    a, b = _random(m, n, k, dtype, b_layout, generator)
    kernel = MatmulSplitK(16, 128, 64, 4, 4, splits=splits, b_layout=b_layout, dtype=as_dtype(dtype))
    c = torch.full((m, n), float("nan"), dtype=dtype, device="cuda")
    kernel(m, n, k, a, b.t() if b_layout == "col" else b, c)
    torch.testing.assert_close(c.float(), _reference(a, b).float(), rtol=2e-2, atol=2e-2)


@pytest.mark.gpu
def test_repeated_launches_reuse_a_clean_workspace_and_are_deterministic():
    kernel = MatmulSplitK(16, 128, 64, 4, 4, splits=8)
    generator = torch.Generator(device="cuda").manual_seed(11)
    results = []
    for m in (16, 40, 16, 3, 40):  # growing and shrinking m: the workspaces grow once and are reused
        a, b = _random(m, 512, 4096, torch.float16, "row", generator)
        c = torch.full((m, 512), float("nan"), dtype=torch.float16, device="cuda")
        for repeat in range(3):
            c.fill_(float("nan"))
            kernel(m, 512, 4096, a, b, c)
            if repeat == 0:
                first = c.clone()
            assert torch.equal(c, first)  # the ordered reduction gives the same bits every launch
        torch.testing.assert_close(c.float(), _reference(a, b).float(), rtol=2e-2, atol=2e-2)
        results.append(c)
    (compiled,) = kernel._tilus.kernels.values()
    semaphores = compiled.workspaces().tensors[1][torch.cuda.current_device()]
    assert int(semaphores.abs().sum()) == 0  # every launch left its semaphores at 0


@pytest.mark.gpu
@pytest.mark.parametrize("m, n, k", [(16, 4096, 8192), (100, 640, 8200)])
def test_matmul_dispatches_to_split_k_for_few_rows_and_long_k(m, n, k):
    generator = torch.Generator(device="cuda").manual_seed(m + n + k)
    a, b = _random(m, n, k, torch.float16, "col", generator)
    sms = matmul_splitk.sm_count(torch.cuda.current_device())
    assert choose_splits(m, n, k, sms) > 1
    out = torch.full((m, n), float("nan"), dtype=torch.float16, device="cuda")
    matmul(a, b, out=out)
    torch.testing.assert_close(out.float(), _reference(a, b).float(), rtol=2e-2, atol=2e-2)


def test_relax_call_is_refused_because_the_workspace_cannot_persist():
    from tvm import relax
    from tvm.script import relax as R

    import tilus_tvm.relax as tilus_relax
    from tilus_tvm.errors import RelaxError

    builder = relax.BlockBuilder()
    x = relax.Var("x", R.Tensor((16, 4096), "float16"))
    w = relax.Var("w", R.Tensor((4096, 256), "float16"))
    with builder.function("main", [x, w]):
        with pytest.raises(RelaxError, match=r"allocates a workspace with self.global_tensor.*R\.call_tir"):
            tilus_relax.call(MatmulSplitK(splits=4), 16, 256, 4096, x, w, out=R.Tensor((16, 256), "float16"),
                             target="sm_90")
        builder.emit_func_output(x)
