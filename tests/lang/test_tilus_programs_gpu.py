"""The Tilus-style programs of tests/lang/tilus_programs.py against torch on the GPU: fresh random data,
shapes that are not multiples of the tiles, outputs poisoned with NaN before the launch."""
import math

import pytest
import torch

import tilus_tvm as tilus
from tests.lang import tilus_programs as P

pytestmark = pytest.mark.gpu


def poisoned(*shape, dtype):
    return torch.full(shape, float("nan"), dtype=dtype, device="cuda") if dtype.is_floating_point else \
        torch.full(shape, -12345, dtype=dtype, device="cuda")


@pytest.mark.parametrize("m, n, k", [(100, 128, 96), (64, 192, 64), (257, 64, 160)])
def test_swizzled_matmul(m, n, k):
    a = torch.randn(m, k, dtype=torch.float16, device="cuda") / math.sqrt(k)
    b = torch.randn(k, n, dtype=torch.float16, device="cuda")
    c = poisoned(m, n, dtype=torch.float16)
    P.SwizzledMatmul()(m, n, k, 0.5, a, b, c)
    torch.testing.assert_close(c, (0.5 * (a.float() @ b.float())).half(), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("m, n, k", [(100, 130, 200), (128, 64, 32), (33, 257, 300)])
def test_pipelined_bf16_matmul(m, n, k):
    a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda") / math.sqrt(k)
    b = torch.randn(k, n, dtype=torch.bfloat16, device="cuda")
    c = poisoned(m, n, dtype=torch.bfloat16)
    P.PipelinedBf16Matmul()(m, n, k, a, b, c)
    torch.testing.assert_close(c, (a.float() @ b.float()).bfloat16(), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("m, n, k", [(50, 40, 128), (64, 96, 64)])
def test_int8_gemm(m, n, k):
    a = torch.randint(-128, 128, (m, k), dtype=torch.int8, device="cuda")
    b = torch.randint(-128, 128, (k, n), dtype=torch.int8, device="cuda")
    c = poisoned(m, n, dtype=torch.int32)
    P.Int8Gemm()(m, n, k, a, b, c)
    assert torch.equal(c, (a.cpu().long() @ b.cpu().long()).int().cuda())  # exact; CUDA has no int64 matmul


@pytest.mark.parametrize("n_q, n_kv", [(100, 96), (64, 256), (1, 32)])
def test_tile_attention(n_q, n_kv):
    q, k, v = (torch.randn(n, 64, dtype=torch.float16, device="cuda") for n in (n_q, n_kv, n_kv))
    o = poisoned(n_q, 64, dtype=torch.float16)
    P.TileAttention()(n_q, n_kv, q, k, v, o)
    expected = torch.softmax((q.float() @ k.float().T) / 8.0, dim=-1) @ v.float()
    torch.testing.assert_close(o.float(), expected, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("m", [20, 8, 1])
def test_row_scale(m):
    x = torch.randn(m, 256, device="cuda")
    w = torch.randn(1, 256, device="cuda")
    y = poisoned(m, 256, dtype=torch.float32)
    P.RowScale()(m, x, w, y)
    torch.testing.assert_close(y, x * w / (x.abs().sum(dim=1, keepdim=True) + 1e-6))


def test_launch_blocking_waits_for_the_kernel():
    x = torch.randn(64, 256, device="cuda")
    w = torch.randn(1, 256, device="cuda")
    y = poisoned(64, 256, dtype=torch.float32)
    kernel = P.RowScale()
    kernel(64, x, w, y)  # compiled and warm
    tilus.option.debug.launch_blocking()
    try:
        torch.cuda._sleep(50_000_000)  # keeps the stream busy: without blocking the launch returns at once
        kernel(64, x, w, y)
        assert torch.cuda.current_stream().query()  # nothing left in flight when the launch returned
    finally:
        tilus.option.debug.launch_blocking(False)
