"""tilus_tvm.tune.engine: keys, database reuse, failures, budgets and the cost model (CPU, fake runner)."""
import logging
import math

import pytest
import torch

import tilus_tvm as tilus
from tilus_tvm.errors import ScriptError
from tilus_tvm.tune import TuningError, configure, decorator, tunable_of

from tests.tune.fakes import (ConfigRunner, FakeBuilder, TunedAddOne, TunedScale, add_one_seconds, scale_seconds)


def vector(n):
    return torch.empty(n, dtype=torch.float32, device="meta")


def test_tunes_once_then_reads_the_database():
    builder, runner = FakeBuilder(), ConfigRunner(add_one_seconds)
    a = vector(5000)
    first = tilus.tune(TunedAddOne(), 5000, a, a, target="sm_90", builder=builder, runner=runner, progress=False)
    assert first.tuned and first.config == {"block_n": 256, "warps": 4}
    assert len(builder.built) == 11 and len(runner.runs) == 11
    decorator._CHOSEN.clear()  # as in a new process: only the database knows
    second = tilus.tune(TunedAddOne(), 5000, a, a, target="sm_90", builder=builder, runner=runner, progress=False)
    assert not second.tuned and second.config == first.config
    assert len(builder.built) == 11 and len(runner.runs) == 11
    assert [t.seconds for t in second.trials] == [t.seconds for t in first.trials]
    assert "database" in second.table()


def test_compile_of_a_tunable_uses_the_choice():
    configure(builder=FakeBuilder(), runner=ConfigRunner(add_one_seconds), progress=False)
    try:
        a = vector(4096)
        mod = TunedAddOne().lower(4096, a, a, target="sm_90")  # tunes (defaults from configure), then lowers
        assert "blockIdx.x" in mod.script()
        assert "T.launch_thread(\"threadIdx.x\", 128)" in mod.script() or "128" in mod.script()
        kernel = TunedAddOne().compile(4096, a, a, target="sm_90")
        assert kernel.num_threads == 128 and "__launch_bounds__(128" in kernel.cuda_source
    finally:
        configure()


def test_keys_separate_shapes_dtypes_targets_and_fixed_arguments():
    tunable = tunable_of(TunedAddOne())
    key = tilus.tune.engine.tuning_key(tunable, (5000, vector(5000), vector(5000)), "sm_90")
    assert key.fields["scalars"] == {"n": 5000} and key.scalars == {"n": 5000}
    other_n = tilus.tune.engine.tuning_key(tunable, (6000, vector(6000), vector(6000)), "sm_90")
    other_arch = tilus.tune.engine.tuning_key(tunable, (5000, vector(5000), vector(5000)), "sm_80")
    other_init = tilus.tune.engine.tuning_key(tunable_of(TunedAddOne(offset=2.0)), (5000, vector(5000), vector(5000)),
                                              "sm_90")
    assert len({key.json, other_n.json, other_arch.json, other_init.json}) == 4
    pinned = tilus.tune.engine.tuning_key(tunable_of(TunedAddOne(warps=2)), (5000, vector(5000), vector(5000)), "sm_90")
    assert pinned.json == key.json  # pinning narrows the space; the records are shared


def test_buckets_share_one_tuning():
    @tilus.autotune("block_n", [64, 128, 256], bucket={"n": "pow2"})
    @tilus.autotune("warps", [2, 4])
    class Bucketed(TunedAddOne.__mro__[0]):  # the same kernel, its own space
        pass

    runner = ConfigRunner(add_one_seconds)
    first = tilus.tune(Bucketed(), 3000, vector(3000), vector(3000), target="sm_90", builder=FakeBuilder(),
                       runner=runner, progress=False)
    assert first.key.fields["scalars"] == {"n": 4096} and len(runner.runs) == 6
    second = tilus.tune(Bucketed(), 4000, vector(4000), vector(4000), target="sm_90", builder=FakeBuilder(),
                        runner=runner, progress=False)
    assert not second.tuned and len(runner.runs) == 6

    @tilus.autotune("warps", [2, 4], bucket={"m": "pow2"})
    class WrongBucket(TunedAddOne.__mro__[0]):
        pass

    with pytest.raises(ScriptError, match="buckets m, which are not run-time scalar parameters of its __call__ \\(n\\)"):
        tilus.tune(WrongBucket(block_n=64), 10, vector(10), vector(10), target="sm_90")


def test_failures_are_skipped_with_reasons(caplog):
    def build_fails(config):
        return "LocalBuilder: ptxas error : Entry function uses too much shared data" if config["block_n"] == 64 else None

    def launch_fails(config):
        return None if config["warps"] == 2 else add_one_seconds(config)

    caplog.set_level(logging.INFO, logger="tilus_tvm.tune")
    result = tilus.tune(TunedAddOne(), 5000, vector(5000), vector(5000), target="sm_90", builder=FakeBuilder(build_fails),
                        runner=ConfigRunner(launch_fails), progress=False)
    assert result.config == {"block_n": 256, "warps": 4}
    reasons = {(t.config["block_n"], t.config["warps"]): t.error for t in result.trials if not t.ok}
    assert reasons[(64, 1)] == "build: LocalBuilder: ptxas error : Entry function uses too much shared data"
    assert reasons[(128, 2)] == "run: CUDA error: too many resources requested for launch"
    assert reasons[(512, 1)] == "lowering: ScriptError: TunedAddOne: block_n=512 needs more than one warp"
    assert len(reasons) == 7  # block_n=64 (3), warps=2 with block_n 128, 256, 512 (3), 512 on 1 warp
    skipped = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    assert len(skipped) == 7 and all("\n" not in line for line in skipped)
    assert any("TunedAddOne: skipped block_n=64, warps=1 -- build: LocalBuilder: ptxas error" in line
               for line in skipped)
    lines = result.table().splitlines()
    assert lines[1].split()[:2] == ["256", "4"] and lines[1].endswith("best")
    assert all("skipped: " in line for line in lines[-7:])


def test_all_failing_lists_every_reason():
    with pytest.raises(TuningError) as info:
        tilus.tune(TunedAddOne(warps=1), 5000, vector(5000), vector(5000), target="sm_90",
                   builder=FakeBuilder(lambda config: f"nvcc: error {config['block_n']}"),
                   runner=ConfigRunner(add_one_seconds), progress=False)
    message = str(info.value)
    assert message.startswith("TunedAddOne: no configuration could be built and timed for {")
    for line in ("block_n=64, warps=1: build: nvcc: error 64", "block_n=256, warps=1: build: nvcc: error 256",
                 "block_n=512, warps=1: lowering: ScriptError: TunedAddOne: block_n=512 needs more than one warp"):
        assert line in message
    # failures alone do not count as a choice: the next call tries again
    result = tilus.tune(TunedAddOne(warps=1), 5000, vector(5000), vector(5000), target="sm_90", builder=FakeBuilder(),
                        runner=ConfigRunner(add_one_seconds), progress=False)
    assert result.tuned and result.config == {"block_n": 256, "warps": 1}


def test_phases_are_timed():
    """The result says where the search's time went: each builder and runner call is counted in its phase."""
    builder, runner = FakeBuilder(delay=0.2), ConfigRunner(add_one_seconds, delay=0.3)
    result = tilus.tune(TunedAddOne(), 5000, vector(5000), vector(5000), target="sm_90", builder=builder, runner=runner,
                        progress=False)
    assert sorted(result.phases) == ["building", "cost model", "lowering", "timing"]
    assert len(builder.calls) == 2 == len(runner.calls)  # batches of 2 x the builder's 4 workers: 8, then 3
    assert 0.4 <= result.phases["building"] < 0.4 + 0.5 and 0.6 <= result.phases["timing"] < 0.6 + 0.5
    assert result.phases["lowering"] > 0 and result.phases["cost model"] == 0  # no cost model: all were measured
    assert result.elapsed >= sum(result.phases.values())
    described = tilus.tune.engine.describe_phases(result.phases)
    assert "building 0.4 s, timing 0.6 s" in described and "cost model" not in described
    again = tilus.tune(TunedAddOne(), 5000, vector(5000), vector(5000), target="sm_90", builder=builder, runner=runner,
                       progress=False)
    assert not again.tuned and again.phases == {}


def test_budget_and_growing_it():
    runner = ConfigRunner(add_one_seconds)
    options = dict(target="sm_90", builder=FakeBuilder(), runner=runner, progress=False, cost_model="random")
    first = tilus.tune(TunedAddOne(), 5000, vector(5000), vector(5000), max_trials=4, **options)
    assert len(runner.runs) == 4 and sum(t.ok for t in first.trials) == 4
    again = tilus.tune(TunedAddOne(), 5000, vector(5000), vector(5000), max_trials=4, **options)
    assert not again.tuned and len(runner.runs) == 4
    more = tilus.tune(TunedAddOne(), 5000, vector(5000), vector(5000), max_trials=8, **options)
    assert more.tuned and len(runner.runs) == 8  # only the 4 new ones were measured
    assert len({tuple(c.items()) for c in runner.runs}) == 8


@pytest.mark.slow
def test_cost_model_ranks_untried_configurations():
    """A space of 270 configurations, 40 measured: XGBoost over PerStoreFeature features of the lowered
    kernels, trained on each batch's times, steers the later batches to the optimum."""
    x = torch.empty(4096, 1024, dtype=torch.float32, device="meta")
    runner = ConfigRunner(scale_seconds)
    result = tilus.tune(TunedScale(), 4096, x, x, target="sm_90", builder=FakeBuilder(), runner=runner, max_trials=40,
                        progress=False, seed=0)
    configs = tunable_of(TunedScale()).configs()
    assert len(configs) == 270 and len(runner.runs) == 40
    ranked = sorted(configs, key=scale_seconds)
    rank = {tuple(c.items()): i for i, c in enumerate(ranked)}
    assert rank[tuple(result.config.items())] <= 2  # the optimum or next to it, from 15% of the space
    batches = [runner.runs[i:i + 8] for i in range(0, 40, 8)]
    mean_rank = [sum(rank[tuple(c.items())] for c in batch) / len(batch) for batch in batches]
    # The first batch is a random sample (about the middle of the ranking); the model's are far better.
    assert 60 < mean_rank[0] < 210
    assert max(mean_rank[1:]) < 100 and min(mean_rank[1:]) < 60, mean_rank


def test_parallel_workers_option_sizes_the_tuner(monkeypatch):
    """The tuner lowers and builds on tilus_tvm.option's parallel_workers processes, unless the tuning
    options say how many (configure(workers=))."""
    from tilus_tvm import option
    from tilus_tvm.tune import engine

    sizes = []
    monkeypatch.setattr(engine, "_default_builder", lambda workers: sizes.append(workers) or FakeBuilder())
    option.parallel_workers(3)
    try:
        for n in (5000, 6000):
            if n == 6000:
                configure(workers=2)
            tilus.tune(TunedAddOne(), n, vector(n), vector(n), target="sm_90", runner=ConfigRunner(add_one_seconds),
                       progress=False)
    finally:
        option.set_option("parallel_workers", None)
        configure()
    assert sizes == [3, 2]
