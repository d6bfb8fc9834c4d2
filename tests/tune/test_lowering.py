"""tilus_tvm.tune.lowering: candidates lowered in worker processes are the ones lowered here."""
import pytest
import torch
import tvm_ffi

import tilus_tvm as tilus
from tilus_tvm import float32, int32
from tilus_tvm.tune import lowering, tunable_of
from tilus_tvm.utils import cdiv

from tests.tune.fakes import TunedAddOne


def vector(n, offset=0):
    return torch.empty(n + offset, dtype=torch.float32, device="meta")[offset:]


def lower_here(tunable, args):
    return lambda config: tunable.instantiate(config).lower(*args, target="sm_90", dps=True)


def test_arguments_travel_with_dtype_shape_strides_and_alignment():
    a = torch.empty(8, 6, dtype=torch.float16, device="meta")
    args = (5, 2.5, True, a.t(), vector(10, offset=1))
    specs = lowering.argument_specs(args)
    rebuilt = lowering.rebuild_arguments(specs)
    assert rebuilt[:3] == [5, 2.5, True]
    for before, after in zip(args[3:], rebuilt[3:]):
        assert after.device.type == "meta" and after.dtype == before.dtype
        assert after.shape == before.shape and after.stride() == before.stride()
        assert after.data_ptr() % 16 == before.data_ptr() % 16
    assert args[4].data_ptr() % 16 == 4  # the unaligned one stays unaligned: the same specialisation
    assert lowering.argument_specs((object(),)) is None


def test_which_classes_a_worker_can_import():
    class Local(tilus.Script):
        def __call__(self, n: int32, a: ~float32):
            self.attrs.blocks = cdiv(n, 128)
            self.attrs.warps = 4

    assert lowering.importable(TunedAddOne) and not lowering.importable(Local)
    assert lowering.load_class("tests.tune.fakes:TunedAddOne") is TunedAddOne


def test_in_process_when_the_pool_does_not_pay(monkeypatch):
    """One worker, or cheap lowerings: everything is lowered here, failures with their reasons."""
    monkeypatch.setattr(lowering, "pool", lambda workers: pytest.fail("the pool was started"))
    tunable = tunable_of(TunedAddOne())
    args = (5000, vector(5000), vector(5000))
    configs = tunable.configs()
    done = []
    for workers in (1, 16):  # with 16 workers: a lowering of a few ms does not pay for starting them
        results = lowering.lower_configs(tunable, configs, args, "sm_90", workers, lower_here(tunable, args),
                                         progress=lambda: done.append(1))
        statuses = {(c["block_n"], c["warps"]): status for c, (status, _) in zip(configs, results)}
        assert statuses[(512, 1)] == lowering.FAILED and list(statuses.values()).count(lowering.OK) == 11
        reason = dict(zip(map(str, configs), results))[str({"block_n": 512, "warps": 1})][1]
        assert reason == "ScriptError: TunedAddOne: block_n=512 needs more than one warp"
    assert len(done) == 24


@pytest.mark.slow
def test_pool_lowers_the_same_modules(monkeypatch):
    monkeypatch.setattr(lowering, "MIN_POOL_WORKERS", 2)
    tunable = tunable_of(TunedAddOne(offset=3.0))
    args = (4000, vector(4000), vector(4000, offset=2))
    configs = [{"block_n": 512, "warps": 1}] + tunable.configs()[:4] + [{"block_n": 512, "warps": 1}]
    here = []

    def counted(config):
        here.append(config)
        return lower_here(tunable, args)(config)

    results = lowering.lower_configs(tunable, configs, args, "sm_90", 2, counted, pool_start_sec=0.0)
    assert here == configs[:2]  # here up to the first that lowers (timed); the rest in the workers
    assert [status for status, _ in results] == ["failed"] + ["ok"] * 4 + ["failed"]
    assert results[-1][1] == "ScriptError: TunedAddOne: block_n=512 needs more than one warp"  # from a worker
    for config, (_, mod) in zip(configs[1:5], results[1:5]):
        assert tvm_ffi.structural_equal(mod, lower_here(tunable, args)(config)), config
