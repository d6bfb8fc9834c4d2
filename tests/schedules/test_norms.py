"""LayerNorm and RMSNorm: sm_90 compilation (CPU), errors naming the argument, and (GPU) agreement with
torch on ragged hidden sizes and every input dtype, NaN-poisoned outputs."""
import re

import pytest
import torch

from tilus_tvm import bfloat16, float16, float32
from tilus_tvm.errors import LaunchError, ScriptError
from tilus_tvm.schedules import layer_norm, rms_norm
from tilus_tvm.schedules.norms import LayerNorm, RMSNorm, norm_kernel_for
from tilus_tvm.schedules.softmax import row_config
from tests.schedules.kernel_resources import ptxas_resources

DTYPES = {torch.float16: float16, torch.bfloat16: bfloat16, torch.float32: float32}


def _compile(kind, hidden, dtype, rows=10):
    x = torch.empty(rows, hidden, dtype=dtype, device="meta")
    w = torch.empty(1, hidden, dtype=dtype, device="meta")
    kernel = norm_kernel_for(kind, hidden, DTYPES[dtype])
    args = (rows, hidden, 1e-5, x, w, w, x) if kind == "layer_norm" else (rows, hidden, 1e-6, x, w, x)
    return kernel, kernel.compile(*args, target="sm_90")


@pytest.mark.parametrize("kind", ["layer_norm", "rms_norm"])
@pytest.mark.parametrize("hidden,dtype", [(4096, torch.float16), (8192, torch.float16), (8192, torch.bfloat16),
                                          (5120, torch.float32), (1000, torch.float16), (32768, torch.float16)])
def test_norms_read_x_once_with_16_byte_vectors_and_no_spills(kind, hidden, dtype):
    """Every global access of x, the parameters and y is one 16-byte vector; x is read once (so
    ld.global.v4 = vectors of x + vectors of each parameter); the row sums take one shared-memory
    round each (3 barriers) when a row spans several warps; ptxas spills nothing."""
    kernel, compiled = _compile(kind, hidden, dtype)
    ptx = compiled.ptx
    vectors = kernel.config.values_per_thread * DTYPES[dtype].nbits // 128
    params = 2 if kind == "layer_norm" else 1
    assert len(re.findall(r"ld\.global\.nc\.v4", ptx)) == vectors * (1 + params)
    assert len(re.findall(r"st\.global\.v4", ptx)) == vectors
    assert not re.search(r"ld\.global(\.nc)?\.(b|u|f)(16|32)\b", ptx), "a scalar global load"
    reductions = 2 if kind == "layer_norm" else 1
    assert len(re.findall(r"shfl\.sync\.bfly", ptx)) == 5 * reductions
    barriers = len(re.findall(r"bar\.sync", ptx))
    assert barriers == (3 * reductions if kernel.config.threads_per_row > 32 else 0)
    assert "rsqrt.approx" in ptx
    used = ptxas_resources(ptx)
    assert used["spill_stores"] == 0 and used["spill_loads"] == 0, used
    assert used["registers"] <= 64  # min_blocks_per_sm: at least 1024 threads per SM


def test_norm_config_by_shape():
    """Hidden 4096 and 8192 (float16): 16-byte vectors, 32 values (64 bytes) per thread, 4 and 8 warps
    per row; short rows share a block."""
    assert norm_kernel_for("rms_norm", 4096, float16).config.threads_per_row == 128
    assert norm_kernel_for("rms_norm", 8192, float16).config.threads_per_row == 256
    short = norm_kernel_for("layer_norm", 512, float16).config
    assert short.threads_per_row == 32 and short.rows_per_block == 4
    assert norm_kernel_for("rms_norm", 4096, float16) is norm_kernel_for("rms_norm", 4096, float16)
    assert row_config(4096, 32).values_per_thread == 16
    assert norm_kernel_for("rms_norm", 32768, float16).config.threads_per_row == 1024  # x and w: 64 bytes each


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
    with pytest.raises(ScriptError, match="RMSNorm: RowConfig: block_n=100 must be a multiple"):
        RMSNorm(100, 4)
    with pytest.raises(ScriptError, match="LayerNorm: RowConfig: 96 threads per row"):
        LayerNorm(4096, 3)
    with pytest.raises(ScriptError, match="norm_kernel_for: kind must be"):
        norm_kernel_for("batch_norm", 64, float16)


# every float16 row shape (one row per warp or several, one to 32 warps per row, padded or not),
# and each other dtype at a padded and an unpadded one; 123 rows (not a multiple of rows per block)
NORM_CASES = ([(torch.float16, h) for h in (1, 64, 1000, 4096, 5120, 8192, 12288, 32768)]
              + [(torch.bfloat16, 1000), (torch.bfloat16, 8192), (torch.float32, 64), (torch.float32, 5120)])


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,hidden", NORM_CASES)
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
