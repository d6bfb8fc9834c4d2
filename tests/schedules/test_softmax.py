"""Softmax and OnlineSoftmax: sm_90 compilation with 16-byte accesses (CPU), errors, and (GPU) agreement
with torch.softmax on ragged row lengths, both forms, NaN-poisoned outputs."""
import re

import pytest
import torch

from tilus_tvm import float16, float32
from tilus_tvm.errors import LaunchError, ScriptError
from tilus_tvm.schedules import softmax
from tilus_tvm.schedules.softmax import OnlineSoftmax, Softmax, row_tile, softmax_kernel_for


@pytest.mark.parametrize("n,dtype,online", [(1000, torch.float16, False), (4096, torch.float32, False),
                                            (16384, torch.bfloat16, False), (32768, torch.float16, True),
                                            (5000, torch.float32, True)])
def test_softmax_compiles_with_vector_accesses(n, dtype, online):
    x = torch.empty(10, n, dtype=dtype)
    kernel = softmax_kernel_for(n, {torch.float16: float16, torch.float32: float32}.get(dtype, "bfloat16"), online)
    assert isinstance(kernel, OnlineSoftmax if online else Softmax)
    ptx = kernel.compile(10, n, x, x, target="sm_90").ptx
    assert len(re.findall(r"ld\.global\.nc\.v4", ptx)) > 0 and len(re.findall(r"st\.global\.v4", ptx)) > 0
    assert "ex2.approx" in ptx


def test_row_tile():
    for n in (1, 100, 1000, 4096, 5000, 16384, 32768):
        for bits in (16, 32):
            block_n, warps = row_tile(n, bits)
            assert block_n >= n and block_n % (warps * 32 * 128 // bits) == 0 and 1 <= warps <= 32
            assert block_n // (warps * 32) <= 32


def test_softmax_errors():
    with pytest.raises(LaunchError, match="softmax: x: the dtype must be float16, bfloat16 or float32"):
        softmax(torch.empty(4, 8, dtype=torch.int32))
    with pytest.raises(LaunchError, match="dim 2 is out of range"):
        softmax(torch.empty(4, 8), dim=2)
    with pytest.raises(LaunchError, match="out must be a torch.float32 tensor of shape \\[4, 8\\]"):
        softmax(torch.empty(4, 8), out=torch.empty(4, 9))
    with pytest.raises(ScriptError, match="block_n=100 must be a multiple"):
        Softmax(100, 4)
    with pytest.raises(ScriptError, match="dtype must be float16, bfloat16 or float32"):
        OnlineSoftmax(4096, 8, "int8")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("n", [1, 7, 1000, 1024, 4096, 5000, 16384, 20000, 32768])
@pytest.mark.parametrize("online", [None, True])
def test_softmax_matches_torch(dtype, n, online):
    torch.manual_seed(n)
    x = torch.randn(37, n, dtype=dtype, device="cuda") * 4
    out = torch.full_like(x, float("nan"))
    softmax(x, out=out, online=online)
    expected = torch.softmax(x.float(), dim=-1).to(dtype)
    assert not out.isnan().any()
    torch.testing.assert_close(out, expected, atol=1e-3 if dtype == torch.float32 else 2e-3, rtol=1e-2)


@pytest.mark.gpu
def test_softmax_other_dim_and_large_values():
    x = torch.randn(3, 300, 5, device="cuda") * 100
    torch.testing.assert_close(softmax(x, dim=1), torch.softmax(x, dim=1), atol=1e-5, rtol=1e-4)
    x = torch.randn(4, 20000, device="cuda") * 100
    torch.testing.assert_close(softmax(x), torch.softmax(x, dim=-1), atol=1e-5, rtol=1e-4)
