"""Softmax and OnlineSoftmax: sm_90 compilation with 16-byte accesses (CPU), errors, and (GPU) agreement
with torch.softmax on ragged row lengths, both forms, NaN-poisoned outputs."""
import re

import pytest
import torch

from tilus_tvm import bfloat16, float16, float32
from tilus_tvm.errors import LaunchError, ScriptError
from tilus_tvm.schedules import softmax
from tilus_tvm.schedules.softmax import OnlineSoftmax, RowConfig, Softmax, row_config, softmax_kernel_for
from tests.schedules.kernel_resources import ptxas_resources

DTYPES = {torch.float16: float16, torch.bfloat16: bfloat16, torch.float32: float32}


def _compile(n, dtype, online=None, rows=10):
    x = torch.empty(rows, n, dtype=dtype, device="meta")
    kernel = softmax_kernel_for(n, DTYPES[dtype], online)
    return kernel, kernel.compile(rows, n, x, x, target="sm_90").ptx


@pytest.mark.parametrize("n,dtype", [(1024, torch.float16), (4096, torch.float16), (8192, torch.float16),
                                     (16384, torch.bfloat16), (32768, torch.float16), (1000, torch.float16),
                                     (4096, torch.float32), (16384, torch.float32)])
def test_softmax_reads_x_once_with_16_byte_vectors_and_no_spills(n, dtype):
    """The register form: every global access is one 16-byte vector and x is read once; the two row
    reductions are shuffles plus, past one warp per row, one shared-memory round each; exp2 is one
    ex2.approx per value (two where the row is too long to keep exp2(x - max) for the write);
    ptxas spills nothing."""
    kernel, ptx = _compile(n, dtype)
    assert isinstance(kernel, Softmax)
    config = kernel.config
    vectors = config.values_per_thread * DTYPES[dtype].nbits // 128
    assert len(re.findall(r"ld\.global\.nc\.v4", ptx)) == vectors
    assert len(re.findall(r"st\.global\.v4", ptx)) == vectors
    assert len(re.findall(r"shfl\.sync\.bfly", ptx)) == 2 * 5
    assert len(re.findall(r"bar\.sync", ptx)) == (6 if config.threads_per_row > 32 else 0)
    exps = len(re.findall(r"ex2\.approx", ptx))
    assert exps == config.values_per_thread * (1 if config.values_per_thread <= 32 else 2)
    used = ptxas_resources(ptx)
    assert used["spill_stores"] == 0 and used["spill_loads"] == 0, used
    assert used["registers"] <= 64


@pytest.mark.parametrize("n,dtype", [(32768, torch.float16), (5000, torch.float32), (40000, torch.bfloat16)])
def test_online_softmax_streams_16_byte_vectors(n, dtype):
    kernel, ptx = _compile(n, dtype, online=True if n <= 32768 else None)
    assert isinstance(kernel, OnlineSoftmax)
    assert re.search(r"ld\.global\.nc\.v4", ptx) and re.search(r"st\.global\.v4", ptx)
    assert not re.search(r"ld\.global\.nc\.v2", ptx), "8-byte loads: the chunk lost its 16-byte layout"
    assert "ex2.approx" in ptx
    used = ptxas_resources(ptx)
    assert used["spill_stores"] == 0 and used["spill_loads"] == 0, used


def test_row_config():
    for n in (1, 7, 100, 1000, 1024, 4096, 5000, 8192, 16384, 20000, 32768):
        for bits in (16, 32):
            config = row_config(n, bits)
            vector = 128 // bits
            per_row = config.threads_per_row
            assert config.block_n >= n and config.block_n % (per_row * vector) == 0
            assert per_row & (per_row - 1) == 0 and per_row * config.rows_per_block == 32 * config.warps
            assert 128 <= 32 * config.warps <= 1024  # at least four warps per block
            if n * bits // 8 <= 65536:  # rows up to 64 KB: at most 128 bytes per thread
                assert config.values_per_thread * bits // 8 <= max(128, vector * bits // 8)
    assert row_config(1024, 16) == RowConfig(1024, 4, 4)  # a warp per row, four rows per block
    assert row_config(4096, 16) == RowConfig(4096, 4, 1)
    assert row_config(32768, 16) == RowConfig(32768, 16, 1)  # 64 values per thread
    assert softmax_kernel_for(32768, float16).__class__ is Softmax
    assert softmax_kernel_for(32768, float32).__class__ is OnlineSoftmax


def test_softmax_errors():
    with pytest.raises(LaunchError, match="softmax: x: the dtype must be float16, bfloat16 or float32"):
        softmax(torch.empty(4, 8, dtype=torch.int32))
    with pytest.raises(LaunchError, match="dim 2 is out of range"):
        softmax(torch.empty(4, 8), dim=2)
    with pytest.raises(LaunchError, match="out must be a torch.float32 tensor of shape \\[4, 8\\]"):
        softmax(torch.empty(4, 8), out=torch.empty(4, 9))
    with pytest.raises(ScriptError, match="Softmax: RowConfig: block_n=100 must be a multiple"):
        Softmax(100, 4)
    with pytest.raises(ScriptError, match="rows_per_block=3 must divide"):
        Softmax(1024, 4, float16, rows_per_block=3)
    with pytest.raises(ScriptError, match="dtype must be float16, bfloat16 or float32"):
        OnlineSoftmax(4096, 8, "int8")


# the register form at every float16 row shape and each other dtype at a few, padded or not; the
# online form where it is chosen (rows over 64 KB) and forced; 37 rows (not a multiple of rows per block)
SOFTMAX_CASES = ([(torch.float16, n, None) for n in (1, 7, 1000, 1024, 4096, 5000, 16384, 20000, 32768)]
                 + [(torch.bfloat16, n, None) for n in (7, 5000, 16384)]
                 + [(torch.float32, n, None) for n in (1000, 4096, 20000, 32768)]
                 + [(torch.float16, n, True) for n in (7, 5000, 32768)] + [(torch.bfloat16, 40000, None)])


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,n,online", SOFTMAX_CASES)
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
