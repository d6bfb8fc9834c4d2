"""The tuning builder compiles each candidate's CUDA code in its worker processes: the artifact the
runner loads holds a fatbin for the target (no CUDA source left for the runner to compile, one
candidate after another), and falls back to MetaSchedule's source export where no compiler is."""
import pytest
import torch
from tvm.s_tir import meta_schedule as ms

from tilus_tvm.runtime.export import CudaPayload, read_library_blob
from tilus_tvm.target import tvm_target
from tilus_tvm.tune import measure

from tests.tune.fakes import TunedAddOne

pytestmark = pytest.mark.skipif(not measure.has_device_compiler(), reason="needs nvcc or NVRTC")


def candidates(*configs):
    n = 5000
    vector = torch.empty(n, dtype=torch.float32, device="meta")
    inputs = []
    for block_n, warps in configs:
        mod = TunedAddOne(block_n=block_n, warps=warps).lower(n, vector, vector, target="sm_90", dps=True)
        prim_func = next(iter(mod.functions.values()))
        config = f'{{"block_n": {block_n}, "warps": {warps}}}'
        inputs.append(ms.builder.BuilderInput(measure.candidate_module(prim_func, {"n": n}, config),
                                              tvm_target("sm_90")))
    return inputs


def cuda_payloads(path):
    return [CudaPayload.parse(m.payload) for m in read_library_blob(path).modules if m.kind == "cuda"]


@pytest.mark.parametrize("pool", [True, False], ids=["PoolBuilder", "SerialBuilder"])
def test_artifacts_hold_compiled_code_for_the_target(pool, monkeypatch):
    if not pool:
        monkeypatch.setattr(measure, "has_worker_pool", lambda: False)
    builder = measure.default_builder(max_workers=2)
    assert isinstance(builder, measure.PoolBuilder if pool else measure.SerialBuilder)
    results = builder.build(candidates((128, 4), (256, 2)))
    for result in results:
        assert result.error_msg is None, result.error_msg
        assert result.artifact_path.endswith(".so")
        (payload,) = cuda_payloads(result.artifact_path)
        assert payload.fmt in ("fatbin", "cubin") and b"__global__" not in payload.code
        assert payload.function_names() == ["main_kernel"]
    assert len({r.artifact_path for r in results}) == 2


def test_without_a_compiler_the_runner_gets_cuda_source(monkeypatch):
    monkeypatch.setattr(measure, "has_device_compiler", lambda: False)
    monkeypatch.setattr(measure, "has_worker_pool", lambda: False)
    (result,) = measure.default_builder().build(candidates((128, 4)))
    assert result.error_msg is None and result.artifact_path.endswith(".tar")


def export_with_pid(runtime_module):
    """f_export for the pool test: the candidate's artifact, with the building process's id beside it."""
    import os

    path = measure.export_candidate(runtime_module)
    with open(path + ".pid", "w") as f:
        f.write(str(os.getpid()))
    return path


def refusing_build(mod, target):
    raise ValueError("refused by the test")


def test_the_pool_builder_keeps_its_workers_between_calls():
    """PoolBuilder builds in the lowering pool, whose processes outlive a build call (LocalBuilder
    starts new ones each call); a candidate that fails to build gets the reason, the others build."""
    import os

    builder = measure.PoolBuilder(2, f_export=export_with_pid)
    pids = []
    for _ in range(2):
        results = builder.build(candidates((128, 4), (256, 2)))
        assert all(r.error_msg is None for r in results), [r.error_msg for r in results]
        pids.append({int(open(r.artifact_path + ".pid").read()) for r in results})
    assert os.getpid() not in pids[0] and pids[1] <= pids[0]
    (failed,) = measure.PoolBuilder(2, f_build=refusing_build).build(candidates((128, 4)))
    assert failed.artifact_path is None and failed.error_msg == "ValueError: refused by the test"


def test_runner_arguments_are_filled_once_per_workload():
    import tvm

    device = tvm.cpu(0)
    small = (("TENSOR", "float32", [4, 4]), ("TENSOR", "float32", [4]))
    first = measure.reuse_arguments(device, small, 1)
    assert measure.reuse_arguments(device, small, 1) is first
    assert [tuple(a.shape) for a in first[0]] == [(4, 4), (4,)]
    other = measure.reuse_arguments(device, (("TENSOR", "float16", [8]),), 1)
    assert other is not first and [str(a.dtype) for a in other[0]] == ["float16"]
    assert measure.reuse_arguments(device, small, 1) is not first  # only the last workload's are kept


def test_the_tuner_removes_the_artifacts_it_timed(tmp_path, monkeypatch):
    """Each artifact export_candidate writes has a directory of its own, which the tuner deletes once the
    candidate is timed; an artifact of another builder is left alone."""
    import os
    import tempfile

    import tilus_tvm as tilus
    from tests.tune.fakes import ConfigRunner, FakeBuilder, add_one_seconds

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    builder = measure.SerialBuilder()
    (built,) = builder.build(candidates((128, 4)))
    assert os.path.basename(os.path.dirname(built.artifact_path)).startswith(measure.ARTIFACT_PREFIX)
    measure.remove_artifact(built.artifact_path)
    assert not os.path.exists(os.path.dirname(built.artifact_path))
    keep = tmp_path / "elsewhere" / "module.so"
    keep.parent.mkdir()
    keep.write_bytes(b"")
    measure.remove_artifact(str(keep))
    assert keep.exists()
    vector = torch.empty(5000, dtype=torch.float32, device="meta")
    result = tilus.tune(TunedAddOne(), 5000, vector, vector, target="sm_90", builder=FakeBuilder(own_directory=True),
                        runner=ConfigRunner(add_one_seconds), progress=False)
    assert result.config == {"block_n": 256, "warps": 4}
    assert not [name for name in os.listdir(tmp_path) if name.startswith(measure.ARTIFACT_PREFIX)]


class _FakeEvaluatorModule:
    """A runtime module stand-in: records what ``time_evaluator`` was asked and hands back fixed times."""

    entry_name = "main"

    def __init__(self, times):
        self.times, self.asked = times, {}

    def time_evaluator(self, func_name, dev, **kwargs):
        self.asked = dict(kwargs, func_name=func_name)

        class Result:
            results = self.times

        return lambda *args: Result()


def test_gpu_candidates_are_timed_one_call_at_a_time_from_a_flushed_l2(monkeypatch):
    import tvm
    import tvm_ffi

    assert tvm_ffi.get_global_func(measure.FLUSH_L2) is not None  # time_evaluator's f_preproc finds it by name
    from tilus_tvm.lang import arguments

    monkeypatch.setattr(arguments, "cuda_available", lambda: True)
    times = [float(t) for t in range(measure.COLD_RUNS, 0, -1)]  # 20 .. 1, a launch hiccup at 20
    module = _FakeEvaluatorModule(times)

    class Device:  # a CUDA device, here where there is none
        dlpack_device_type = tvm.cuda(0).dlpack_device_type

        def sync(self):
            pass

    device = Device()
    config = ms.runner.EvaluatorConfig(**measure.EVALUATOR)
    costs = measure.flushed_run_evaluator(module, device, config, [[]])
    assert module.asked == dict(func_name="main", number=1, repeat=measure.COLD_RUNS, min_repeat_ms=0,
                                f_preproc=measure.FLUSH_L2)
    assert costs == [float(t) for t in range(6, 16)]  # the middle half: quickest and slowest quarters dropped


def test_cpu_candidates_keep_metaschedules_evaluation():
    import tvm

    module = _FakeEvaluatorModule([1.0, 2.0, 3.0])
    config = ms.runner.EvaluatorConfig(**measure.EVALUATOR)
    assert measure.flushed_run_evaluator(module, tvm.cpu(0), config, [[]]) == [1.0, 2.0, 3.0]
    assert module.asked["min_repeat_ms"] == measure.EVALUATOR["min_repeat_ms"] and module.asked["f_preproc"] == ""


def test_the_local_runner_flushes_the_l2():
    runner = measure.default_runner()
    assert runner.f_run_evaluator is measure.flushed_run_evaluator
    assert runner.f_alloc_argument is measure.reuse_arguments
