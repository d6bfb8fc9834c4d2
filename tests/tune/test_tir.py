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


@pytest.mark.slow
@pytest.mark.parametrize("pipeline", [True, False])
def test_sketches_tensorize_with_tilus_intrinsics_and_compile(pipeline):
    mod = tvm.IRModule({"main": te_matmul(512, 512, 512, "float16", "float32").with_attr("global_symbol", "main")})
    target = tir.tuning_target("sm_90")
    context = ms.TuneContext(mod=mod, target=target, space_generator=tir.space(("float16",), pipeline),
                             task_name="mm", num_threads=1)
    (sketch,) = context.generate_design_space()
    text = str(sketch.trace)
    assert 'ann_val="tilus.ms.mma_m16n8k16_f16f16f32"' in text and 'ann_val="tilus.ms.ldmatrix_x4_f16_dyn"' in text
    assert ('ann_key="software_pipeline_stage"' in text) == pipeline
    compiled = 0
    for seed in range(1, 41):  # random decisions; VerifyGPUCode rejects most (too much shared memory, threads)
        sch = tvm.s_tir.Schedule(mod, seed=seed)
        tvm.s_tir.Trace(sketch.trace.simplified(remove_postproc=True).insts, {}).apply_to_schedule(
            sch, remove_postproc=True)
        if not all(postproc.apply(sch) for postproc in context.space_generator.postprocs):
            continue
        script = sch.mod.script()
        assert "tilus.ms." not in script  # every shape was replaced by its tilus.* intrinsic
        asynchronous = '"software_pipeline_async_stages": [0]' in script
        if pipeline and not asynchronous:  # a k loop shorter than the pipeline keeps the rule's register stage
            assert "manifest_shared_memory_local_stage" in script
            continue
        assert asynchronous == pipeline and "manifest_shared_memory_local_stage" not in script
        source = tir.build(sch.mod, target).mod.imports[0].inspect_source()
        assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in source and "ldmatrix.sync.aligned" in source
        assert "extern __shared__" in source and "__shared__ " not in source.replace("extern __shared__", "")
        # the pipeline's copies: cp.async, waited for with one group still in flight (3 stages)
        assert ("cp.async.cg.shared.global" in source or "cp.async.ca.shared.global" in source) == pipeline
        assert ("cp.async.wait_group 1" in source) == pipeline
        compiled += 1
        if compiled == 2:
            break
    assert compiled >= 1


def test_async_pipeline_stages():
    """AsyncPipeline(s) puts the copies s - 1 k-steps ahead: the outer loop's five statements get stages
    (0, 0, s - 2, s - 1, s - 1), stage 0 asynchronous; fewer than 3 buffers is refused."""
    with pytest.raises(ValueError, match="stages must be at least 3"):
        tir.AsyncPipeline(2)
    mod = tvm.IRModule({"main": te_matmul(256, 256, 256, "float16", "float32").with_attr("global_symbol", "main")})
    target = tir.tuning_target("sm_80")
    assert int(target.attrs["max_shared_memory_per_block"]) == 163 * 1024  # dynamic shared memory's limit
    context = ms.TuneContext(mod=mod, target=target, space_generator=tir.space(("float16",), True, 4),
                             task_name="mm", num_threads=1)
    (sketch,) = context.generate_design_space()
    for seed in range(1, 41):
        sch = tvm.s_tir.Schedule(mod, seed=seed)
        tvm.s_tir.Trace(sketch.trace.simplified(remove_postproc=True).insts, {}).apply_to_schedule(
            sch, remove_postproc=True)
        if all(postproc.apply(sch) for postproc in context.space_generator.postprocs):
            break
    else:
        pytest.fail("no sampled schedule passed the postprocessors")
    script = sch.mod.script()
    assert '"software_pipeline_stage": [0, 0, 2, 3, 3]' in script and '"software_pipeline_order": [0, 1, 3, 2, 4]' in script
    assert "cp.async.wait_group 2" in tir.build(sch.mod, target).mod.imports[0].inspect_source()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype, stages", [("float16", 3), ("bfloat16", 4)])
def test_sampled_cp_async_schedules_match_torch(dtype, stages):
    """Random points of the space (no tuning), each in the cp.async pipeline's form, against torch."""
    import torch

    m, n, k = 512, 768, 1024
    mod = tvm.IRModule({"main": te_matmul(m, n, k, dtype, "float32").with_attr("global_symbol", "main")})
    target = tir.tuning_target(None)
    context = ms.TuneContext(mod=mod, target=target, space_generator=tir.space((dtype,), True, stages),
                             task_name="mm", num_threads=1)
    (sketch,) = context.generate_design_space()
    torch_dtype = getattr(torch, dtype)
    a = (torch.rand(m, k, device="cuda") * 2 - 1).to(torch_dtype)
    b = (torch.rand(k, n, device="cuda") * 2 - 1).to(torch_dtype)
    checked = 0
    for seed in range(1, 200):
        sch = tvm.s_tir.Schedule(mod, seed=seed)
        tvm.s_tir.Trace(sketch.trace.simplified(remove_postproc=True).insts, {}).apply_to_schedule(
            sch, remove_postproc=True)
        if not all(postproc.apply(sch) for postproc in context.space_generator.postprocs):
            continue
        if '"software_pipeline_async_stages": [0]' not in sch.mod.script():
            continue
        kernel = tir.build(sch.mod, target)["main"]
        c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float32)
        kernel(a, b, c)
        torch.testing.assert_close(c, a.float() @ b.float(), rtol=0, atol=1e-2, msg=f"seed {seed}")
        checked += 1
        if checked == 2:
            break
    assert checked == 2


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
