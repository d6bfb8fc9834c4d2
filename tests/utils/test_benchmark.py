"""tilus_tvm/utils/benchmark.py: benchmark_func times GPU work; without a GPU it says so."""
import pytest
import torch

from tilus_tvm.errors import ScriptError
from tilus_tvm.utils import benchmark_func
from tilus_tvm.utils.benchmark import launch_overhead_us


@pytest.mark.parametrize("kwargs, message", [
    (dict(repeat=0), "benchmark_func: repeat must be an int >= 1, got 0"),
    (dict(warmup=-1), "benchmark_func: warmup must be an int >= 0, got -1"),
    (dict(repeat=2.0), "benchmark_func: repeat must be an int >= 1, got 2.0"),
])
def test_bad_counts_are_named(kwargs, message):
    with pytest.raises(ScriptError, match=message):
        benchmark_func(lambda: None, **kwargs)


def test_run_func_must_be_callable():
    with pytest.raises(ScriptError, match="run_func must be callable"):
        benchmark_func(42)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown without a GPU")
def test_without_a_gpu_it_says_so():
    with pytest.raises(ScriptError, match="needs a CUDA GPU"):
        benchmark_func(lambda: None)


@pytest.mark.gpu
def test_times_gpu_work_in_milliseconds():
    x = torch.randn(4096, 4096, device="cuda")
    calls = []
    small = benchmark_func(lambda: calls.append(x.add_(1.0)), warmup=2, repeat=7)
    assert len(calls) == 9 and isinstance(small, float) and small > 0
    times = benchmark_func(lambda: x @ x, warmup=1, repeat=5, median=False, clear_l2_cache=False)
    assert len(times) == 5 and all(t > 0 for t in times)
    assert sorted(times)[2] > small  # a 4096^3 product takes longer than adding to 16M floats once


def test_launch_overhead_checks_its_arguments():
    with pytest.raises(ScriptError, match="launch_overhead_us: run_func must be callable"):
        launch_overhead_us(42)
    with pytest.raises(ScriptError, match="count"):
        launch_overhead_us(lambda: None, count=0)


@pytest.mark.gpu
def test_launch_overhead_is_microseconds_per_call():
    x = torch.zeros(16, device="cuda")
    calls = []
    us = launch_overhead_us(lambda: calls.append(x.add_(1)), count=500, rounds=2, warmup=10)
    assert len(calls) == 1010 and 0 < us < 1000
