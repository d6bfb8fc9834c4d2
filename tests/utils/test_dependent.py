"""check_dependent_chain's checks that need no GPU: a chain whose reference overflows or vanishes, and calls that
differ with and without a dependent launch, are refused before any CUDA graph is captured. (The whole check runs
on the GPU in tests/schedules/test_quantized_matmul_gpu.py::test_dependent_launches_in_a_row.)"""
import pytest
import torch

from tilus_tvm.utils import check_dependent_chain


def doubling(x, out, dependent):
    out.view(-1)[:x.numel()] = (x * 2).view(-1)
    out.view(-1)[x.numel():] = 0


def test_a_reference_that_vanishes_is_refused():
    outs = [torch.empty(2, 8) for _ in range(3)]
    with pytest.raises(AssertionError, match="overflowed or vanished"):
        check_dependent_chain(doubling, outs, torch.zeros(2, 4))


def test_a_call_that_reads_stale_activations_is_caught():
    seen = []

    def stale_when_dependent(x, out, dependent):  # with "dependent launch" it reads the activations it saw first
        seen.append(x.clone())
        doubling(seen[0] if dependent else x, out, dependent)

    outs = [torch.empty(2, 8) for _ in range(3)]
    with pytest.raises(AssertionError, match="one by one, gave other bits"):
        check_dependent_chain(stale_when_dependent, outs, torch.ones(2, 4))
