"""check_dependent_chain's checks that need no GPU: a chain whose reference overflows or vanishes, and calls that
differ with and without a dependent launch, are refused before any CUDA graph is captured. (The whole check runs
on the GPU in tests/schedules/test_quantized_matmul_gpu.py::test_dependent_launches_in_a_row.)"""
import pytest
import torch

from tilus_tvm.utils import check_dependent_chain


def doubling(x, out, dependent):
    flat, values = out.view(-1), (x * 2).reshape(-1)
    count = min(flat.numel(), values.numel())
    flat[:count] = values[:count]
    flat[count:] = 0


def test_a_reference_that_vanishes_is_refused():
    with pytest.raises(AssertionError, match="overflowed or vanished"):
        check_dependent_chain(doubling, torch.zeros(2, 4), 8, calls=3)


def test_a_call_that_reads_stale_activations_is_caught():
    seen = []

    def stale_when_dependent(x, out, dependent):  # with "dependent launch" it reads the activations it saw first
        seen.append(x.clone())
        doubling(seen[0] if dependent else x, out, dependent)

    for n in (8, 2):  # (outputs wider than the activations, and narrower: zeros after them)
        seen.clear()
        with pytest.raises(AssertionError, match="one by one, gave other bits"):
            check_dependent_chain(stale_when_dependent, torch.ones(2, 4), n, calls=3)
