"""tilus_tvm.tune.tir: MetaSchedule's MultiLevelTilingTensorCore schedules a TE matmul onto the tilus.* intrinsics."""
import pytest
import tvm
from tvm.s_tir import meta_schedule as ms

import tilus_tvm as tilus
import tilus_tvm.intrin as intrin
from tilus_tvm.tune import tir

from tests.intrin.matmul import te_matmul


def test_group_names_shapes_of_tilus_intrinsics():
    group = tir.intrin_group("float16")
    assert group == {"init": "tilus.ms.mma_fill_m16n8_f32", "load_a": "tilus.ms.ldmatrix_x4_f16_dyn",
                     "load_b": "tilus.ms.ldmatrix_x2_trans_f16_dyn", "compute": "tilus.ms.mma_m16n8k16_f16f16f32",
                     "store": "tilus.ms.mma_store_m16n8_f32_shared_dyn"}
    real = tir.real_names()
    assert real["tilus.ms.mma_m16n8k16_bf16bf16f32"] == "tilus.mma_m16n8k16_bf16bf16f32"
    assert set(real.values()) <= set(intrin.names())


def _context(m, n, k, dtype="float16", pipeline=True, stages=4, arch="sm_90"):
    mod = tvm.IRModule({"main": te_matmul(m, n, k, dtype, "float32").with_attr("global_symbol", "main")})
    return ms.TuneContext(mod=mod, target=tir.tuning_target(arch), space_generator=tir.space((dtype,), pipeline, stages),
                          task_name="mm", num_threads=1)


def _main_loop(source: str) -> str:
    """The CUDA of the pipelined k loop (the outer k loop of the sketch), header to closing brace."""
    loop = source[source.index("for (int ax2_0_0"):]
    depth = 0
    for end, char in enumerate(loop):
        depth += {"{": 1, "}": -1}.get(char, 0)
        if char == "}" and depth == 0:
            return loop[:end + 1]
    raise AssertionError("the k loop has no closing brace")


# (i tiles, j tiles, k tiles) of a 512^3 matmul, in mma atoms: 128x128 blocks of 2x2 warps of 64x64, k 32;
# 128x256 blocks of 2x4 warps of 64x64, k 64
TILINGS_512 = [([4, 1, 2, 1, 4], [1, 4, 2, 2, 4], [16, 2, 1]), ([4, 1, 2, 1, 4], [1, 2, 4, 2, 4], [8, 4, 1])]


@pytest.mark.slow
@pytest.mark.parametrize("pipeline", [True, False])
def test_sketches_tensorize_with_tilus_intrinsics_and_compile(pipeline):
    context = _context(512, 512, 512, pipeline=pipeline)
    (sketch,) = context.generate_design_space()
    text = str(sketch.trace)
    assert 'ann_val="tilus.ms.mma_m16n8k16_f16f16f32"' in text and 'ann_val="tilus.ms.ldmatrix_x4_f16_dyn"' in text
    assert ('ann_key="software_pipeline_stage"' in text) == pipeline
    for seed, (ti, tj, tk) in enumerate(TILINGS_512, start=1):  # the copies' vectors and the unroll step random
        scheduled = tir.fixed_schedule(context, ti, tj, tk, seed=seed)
        assert scheduled is not None
        script = scheduled.script()
        assert "tilus.ms." not in script  # every shape was replaced by its tilus.* intrinsic
        assert ('"software_pipeline_async_stages": [0]' in script) == pipeline
        assert "manifest_shared_memory_local_stage" not in script
        source = tir.build(scheduled, context.target).mod.imports[0].inspect_source()
        assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in source and "ldmatrix.sync.aligned" in source
        assert "extern __shared__" in source and "__shared__ " not in source.replace("extern __shared__", "")
        # the pipeline's copies: cp.async, 4 stages, waited for with one group in flight after refill_after_wait
        assert ("cp.async.cg.shared.global" in source or "cp.async.ca.shared.global" in source) == pipeline
        assert ("cp.async.wait_group 1" in source) == pipeline
        if pipeline:
            assert _main_loop(source).count("__syncthreads()") == 1


def test_async_pipeline_stages():
    """AsyncPipeline(s) puts the copies s - 1 k-steps ahead: the outer loop's five statements get stages
    (0, 0, s - 2, s - 1, s - 1), stage 0 asynchronous; fewer than 3 buffers is refused."""
    with pytest.raises(ValueError, match="stages must be at least 3"):
        tir.AsyncPipeline(2)
    context = _context(256, 256, 256, stages=4, arch="sm_80")
    assert int(context.target.attrs["max_shared_memory_per_block"]) == 163 * 1024  # dynamic shared memory's limit
    scheduled = tir.fixed_schedule(context, [2, 1, 2, 1, 4], [1, 2, 2, 2, 4], [8, 2, 1])
    script = scheduled.script()
    assert '"software_pipeline_stage": [0, 0, 2, 3, 3]' in script and '"software_pipeline_order": [0, 1, 3, 2, 4]' in script
    loop = _main_loop(tir.build(scheduled, context.target, refill_after_wait=False).mod.imports[0].inspect_source())
    assert "cp.async.wait_group 2" in loop or "wait_group_2()" in loop


@pytest.mark.parametrize("stages", [3, 4, 5])
def test_refill_after_wait_leaves_one_barrier_a_k_step(stages):
    """TVM's pipeline syncs twice a k-step (before the copies overwrite a slot, and after the wait);
    refill_after_wait issues the copies after the second barrier and waits one group less, from 4 stages
    on. With 3 it leaves the loop alone: the moved wait would drain every copy before the mma."""
    context = _context(512, 512, 512, stages=stages)
    scheduled = tir.fixed_schedule(context, *TILINGS_512[0], seed=3)
    before = _main_loop(tir.build(scheduled, context.target, refill_after_wait=False).mod.imports[0].inspect_source())
    after = _main_loop(tir.build(scheduled, context.target).mod.imports[0].inspect_source())
    assert before.count("__syncthreads()") == 2 and f"wait_group_{stages - 2}()" in before
    if stages == 3:
        assert after == before
        return
    assert after.count("__syncthreads()") == 1 and f"wait_group_{stages - 3}()" in after
    # the wait and the barrier come first, then the copies and their commit, then the reads
    order = [after.index(marker) for marker in (f"wait_group_{stages - 3}()", "__syncthreads()", "cp_async_legacy",
                                                "commit_group", "ldmatrix")]
    assert order == sorted(order)


def test_refill_after_wait_ignores_other_loops():
    """Loops not of the pipeline's form come out of the pass unchanged (the dlight schedule of a matmul,
    whose copies are synchronous, and a plain TIR kernel)."""
    from tvm.script import tirx as T

    @T.prim_func
    def scale(a: T.handle, b: T.handle):
        A = T.match_buffer(a, (1024,), "float32")
        B = T.match_buffer(b, (1024,), "float32")
        bx = T.launch_thread("blockIdx.x", 8)
        tx = T.launch_thread("threadIdx.x", 128)
        tile = T.alloc_shared((128,), "float32")
        for i in range(4):
            tile[tx] = A[bx * 128 + tx] * T.float32(i)
            T.tvm_storage_sync("shared")
            B[bx * 128 + tx] = tile[127 - tx]
            T.tvm_storage_sync("shared")

    mod = tvm.IRModule({"main": scale.with_attr("global_symbol", "main")})
    tvm.ir.assert_structural_equal(tir.refill_after_wait(mod), mod)


def test_tiling_limits():
    """TilingLimits keeps tilings of 4-8 warps with 64x32-64x64 warp tiles and k tiles of 32-64 (tiles in
    mma atoms of 16 rows, 8 columns, 16 deep), and what small extents allow."""
    allowed = tir.tiling_allowed
    assert allowed([32, 1, 2, 1, 4], [1, 16, 4, 2, 4], [128, 2, 1])  # 4096^3, 128x256 of 2x4 warps of 64x64
    assert allowed([16, 1, 4, 1, 4], [1, 32, 2, 2, 4], [64, 4, 1])  # 256x128 of 4x2 warps of 64x64, k 64
    assert not allowed([64, 1, 1, 1, 4], [1, 64, 1, 2, 4], [128, 2, 1])  # 1 warp
    assert not allowed([32, 1, 2, 1, 4], [1, 16, 8, 2, 4], [128, 2, 1])  # 16 warps
    assert not allowed([64, 2, 2, 1, 1], [1, 64, 4, 1, 2], [128, 2, 1])  # 16x16 warp tiles
    assert not allowed([8, 2, 2, 2, 4], [1, 64, 4, 1, 2], [128, 2, 1])  # 128x16 warp tiles: too thin
    assert not allowed([1, 1, 1, 64, 4], [1, 16, 4, 2, 4], [128, 2, 1])  # 4096-row warp tiles
    assert not allowed([32, 1, 2, 1, 4], [1, 16, 4, 2, 4], [16, 16, 1])  # k tile 256
    assert not allowed([64, 1, 2, 1, 2], [1, 64, 2, 1, 4], [128, 2, 1])  # 32x32 warp tiles (6 ldmatrix, 8 mma)
    # small extents: 64x64 (4 atoms by 8): 4 warps of 32x32 is what there is; 32x32: one warp; k 16
    assert allowed([1, 1, 2, 2, 1], [1, 1, 2, 4, 1], [2, 2, 1])
    assert allowed([1, 1, 1, 2, 1], [1, 1, 1, 4, 1], [1, 1, 1])
    assert not allowed([1, 1, 2, 2, 1], [1, 1, 1, 8, 1], [2, 2, 1])  # 2 warps where 4 fit
    context = _context(512, 512, 512)
    assert tir.fixed_schedule(context, [8, 1, 1, 1, 4], [1, 8, 1, 2, 4], [16, 2, 1]) is None  # 1 warp: rejected
    with pytest.raises(ValueError, match=r"j_tiles must be 5 factors whose product is 64 .*got \[1, 8, 2, 4\]"):
        tir.fixed_schedule(context, [4, 1, 2, 1, 4], [1, 8, 2, 4], [16, 2, 1])
    with pytest.raises(ValueError, match=r"k_tiles must be 3 factors whose product is 32"):
        tir.fixed_schedule(context, [4, 1, 2, 1, 4], [1, 4, 2, 2, 4], [16, 4, 1])


@pytest.mark.gpu
@pytest.mark.parametrize("dtype, stages", [("float16", 3), ("bfloat16", 4), ("float16", 5)])
def test_cp_async_schedules_match_torch(dtype, stages):
    """Points of the space (no tuning; the copies' vectors and the unroll step random), each in the
    cp.async pipeline's form, with and without refill_after_wait, against torch."""
    import torch

    m, n, k = 512, 768, 1024
    context = _context(m, n, k, dtype, True, stages, arch=None)
    torch_dtype = getattr(torch, dtype)
    a = (torch.rand(m, k, device="cuda") * 2 - 1).to(torch_dtype)
    b = (torch.rand(k, n, device="cuda") * 2 - 1).to(torch_dtype)
    # 128x256 blocks of 2x4 warps of 64x64, k 32; 128x64 blocks of 2x2 warps of 64x32, k 64
    for seed, (ti, tj, tk) in enumerate([([4, 1, 2, 1, 4], [1, 3, 4, 2, 4], [32, 2, 1]),
                                         ([4, 1, 2, 2, 2], [1, 12, 2, 1, 4], [16, 4, 1])], start=1):
        scheduled = tir.fixed_schedule(context, ti, tj, tk, seed=seed)
        assert '"software_pipeline_async_stages": [0]' in scheduled.script()
        for refill in (True, False):
            kernel = tir.build(scheduled, context.target, refill_after_wait=refill)["main"]
            c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float32)
            kernel(a, b, c)
            torch.testing.assert_close(c, a.float() @ b.float(), rtol=0, atol=1e-2, msg=f"{ti} {tj} {tk} {refill}")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype, pipeline, stages", [("float16", True, 3), ("bfloat16", False, 3)])
def test_tune_tir_matches_torch(tmp_path, dtype, pipeline, stages):
    import torch

    m = n = k = 1024
    func = te_matmul(m, n, k, dtype, "float32")
    database = tilus.tune_tir(func, None, work_dir=str(tmp_path), max_trials_global=16, num_trials_per_iter=16, seed=1,
                              software_pipeline=pipeline, stages=stages)
    scheduled = tir.compile_best(database, func, None)
    assert scheduled is not None
    executable = tir.build(scheduled, None)
    torch_dtype = getattr(torch, dtype)
    a = (torch.rand(m, k, device="cuda") * 2 - 1).to(torch_dtype)
    b = (torch.rand(k, n, device="cuda") * 2 - 1).to(torch_dtype)
    c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float32)
    executable["main"](a, b, c)
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=0, atol=1e-2)


def test_meta_schedule_logging_survives_a_foreign_handler(tmp_path):
    """An unnamed handler on MetaSchedule's logger breaks TVM 0.27's create_loggers (a second tune_tir
    in one process hit it on the GPU host); tune_tir detaches such handlers while it runs."""
    import logging

    from tvm.s_tir.meta_schedule import logging as ms_logging

    from tilus_tvm.tune.tir import _meta_schedule_logging

    logger = logging.getLogger("tvm.s_tir.meta_schedule")
    foreign = logging.NullHandler()
    logger.addHandler(foreign)
    try:
        params = [{"logger_name": "tvm.s_tir.meta_schedule.logging.task_0", "log_dir": str(tmp_path)}]
        with pytest.raises(AttributeError):
            ms_logging.create_loggers(str(tmp_path), params)
        with _meta_schedule_logging():
            ms_logging.create_loggers(str(tmp_path), params)
        assert foreign in logger.handlers
    finally:
        logger.removeHandler(foreign)
