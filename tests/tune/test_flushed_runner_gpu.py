"""GPU: the tuner's local runner times a candidate from a flushed L2 (``measure.flushed_run_evaluator``). A
kernel whose data fits in the L2 is faster timed MetaSchedule's way, calls back to back with its data left in
the L2 by the call before, than one call at a time after a flush."""
import statistics

import pytest
import torch
from tvm.s_tir import meta_schedule as ms

from tilus_tvm.target import current_arch, tvm_target
from tilus_tvm.tune import measure

from tests.tune.fakes import TunedAddOne

pytestmark = pytest.mark.gpu


def test_candidates_are_timed_from_a_cold_l2():
    import tvm

    n = 4 * 1024 * 1024  # float32: 16 MB read and 16 MB written, within an A100's or H100's L2
    vector = torch.empty(n, dtype=torch.float32, device="meta")
    arch = current_arch()
    mod = TunedAddOne(block_n=1024, warps=4).lower(n, vector, vector, target=arch, dps=True)
    prim_func = next(iter(mod.functions.values()))
    candidate = measure.candidate_module(prim_func, {"n": n}, '{"block_n": 1024, "warps": 4}')
    rt_mod = measure.build_candidate(candidate, tvm_target(arch))
    device = tvm.cuda(0)
    args = [tvm.runtime.tensor(torch.rand(n).numpy(), device), tvm.runtime.tensor(torch.zeros(n).numpy(), device)]
    config = ms.runner.EvaluatorConfig(**measure.EVALUATOR)
    from tvm.s_tir.meta_schedule.runner.utils import run_evaluator_common

    warm = statistics.median(run_evaluator_common(rt_mod, device, config, [args]))
    cold = measure.flushed_run_evaluator(rt_mod, device, config, [args])
    assert len(cold) == measure.COLD_RUNS // 2
    # from DRAM, not the L2: slower, and slower than moving the 32 MB at 4 TB/s (faster than any DRAM here)
    assert statistics.median(cold) > 1.2 * warm, (cold, warm)
    assert min(cold) > 2 * n * 4 / 4e12, cold
    torch.testing.assert_close(torch.from_numpy(args[1].numpy()), torch.from_numpy(args[0].numpy()) + 1)
