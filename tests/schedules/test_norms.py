"""LayerNorm and RMSNorm: sm_90 compilation (CPU), errors naming the argument, and (GPU) agreement with
torch on ragged hidden sizes and every input dtype, NaN-poisoned outputs."""
import re

import pytest
import torch

from tilus_tvm import bfloat16, float16, float32
from tilus_tvm.errors import LaunchError, ScriptError
from tilus_tvm.schedules import layer_norm, rms_norm
from tilus_tvm.schedules.norms import LayerNorm, RMSNorm
from tilus_tvm.schedules.softmax import row_tile

DTYPES = {torch.float16: float16, torch.bfloat16: bfloat16, torch.float32: float32}


@pytest.mark.parametrize("hidden,dtype", [(4096, torch.float16), (8192, torch.bfloat16), (5120, torch.float32),
                                          (1000, torch.float16)])
def test_norms_compile_with_vector_accesses(hidden, dtype):
    x = torch.empty(10, hidden, dtype=dtype)
    w = torch.empty(1, hidden, dtype=dtype)
    block_n, warps = row_tile(hidden, DTYPES[dtype].nbits)
    for kernel, args in ((LayerNorm(block_n, warps, DTYPES[dtype]), (10, hidden, 1e-5, x, w, w, x)),
                         (RMSNorm(block_n, warps, DTYPES[dtype]), (10, hidden, 1e-6, x, w, x))):
        ptx = kernel.compile(*args, target="sm_90").ptx
        assert re.search(r"ld\.global\.nc\.v4", ptx) and re.search(r"st\.global\.v4", ptx)
        assert "rsqrt" in ptx


def test_norm_errors():
    x = torch.empty(4, 64, dtype=torch.float16)
    w = torch.empty(64, dtype=torch.float16)
    with pytest.raises(LaunchError, match=r"layer_norm: weight must be a tensor of shape \[64\]"):
        layer_norm(x, torch.empty(32, dtype=torch.float16), w)
    with pytest.raises(LaunchError, match="layer_norm: bias has dtype torch.float32, x has torch.float16"):
        layer_norm(x, w, w.float())
    with pytest.raises(LaunchError, match="give both weight and bias"):
        layer_norm(x, w)
    with pytest.raises(LaunchError, match="rms_norm: x must be contiguous"):
        rms_norm(torch.empty(64, 4, dtype=torch.float16).t(), w)
    with pytest.raises(LaunchError, match="rms_norm: x: the dtype must be"):
        rms_norm(x.to(torch.int32), w)
    with pytest.raises(LaunchError, match="rms_norm: out must be a contiguous"):
        rms_norm(x, w, out=torch.empty(4, 63, dtype=torch.float16))
    with pytest.raises(ScriptError, match="RMSNorm: block_n=100"):
        RMSNorm(100, 4)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("hidden", [1, 64, 1000, 4096, 5120, 8192, 12288])
def test_norms_match_torch(dtype, hidden):
    torch.manual_seed(hidden)
    x = (torch.randn(3, 41, hidden, device="cuda") * 3 + 1).to(dtype)
    w = torch.randn(hidden, device="cuda").to(dtype)
    b = torch.randn(hidden, device="cuda").to(dtype)
    tol = dict(atol=1e-4, rtol=1e-4) if dtype == torch.float32 else dict(atol=2e-2, rtol=2e-2)
    out = torch.full_like(x, float("nan"))
    layer_norm(x, w, b, eps=1e-5, out=out)
    expected = torch.nn.functional.layer_norm(x.float(), [hidden], w.float(), b.float(), 1e-5).to(dtype)
    assert not out.isnan().any()
    torch.testing.assert_close(out, expected, **tol)
    torch.testing.assert_close(layer_norm(x), torch.nn.functional.layer_norm(x.float(), [hidden]).to(dtype), **tol)
    out = torch.full_like(x, float("nan"))
    rms_norm(x, w, eps=1e-6, out=out)
    xf = x.float()
    expected = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()).to(dtype)
    torch.testing.assert_close(out, expected, **tol)
