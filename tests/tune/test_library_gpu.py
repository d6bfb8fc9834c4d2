"""GPU: the library functions (matmul, the row kernels, quantized_matmul) with tune=True tune their
kernel's space at the first call of a key, compute the right result, and launch the choice for later
calls of the key without tuning again."""
import pytest

from tilus_tvm.schedules import layer_norm, matmul, rms_norm, softmax
from tilus_tvm.tune import engine

pytestmark = pytest.mark.gpu


@pytest.fixture
def no_more_tuning(monkeypatch):
    """Call it to make any further search fail the test."""
    def refuse(*args, **kwargs):
        raise AssertionError("tuned again for a key that has a choice")

    return lambda: monkeypatch.setattr(engine, "_Search", refuse)


def test_matmul_tune(no_more_tuning):
    import torch

    k, n = 512, 256
    w = (torch.rand(n, k, device="cuda") - 0.5).half()
    x = (torch.rand(200, k, device="cuda") - 0.5).half()
    y = matmul(x, w.t(), tune=True)  # b column-major: Matmul(b_layout="col")'s space, m bucketed to 256
    torch.testing.assert_close(y.float(), x.float() @ w.float().t(), rtol=1e-2, atol=2e-2)
    no_more_tuning()
    x2 = (torch.rand(250, k, device="cuda") - 0.5).half()  # the same bucket
    torch.testing.assert_close(matmul(x2, w.t(), tune=True).float(), x2.float() @ w.float().t(), rtol=1e-2, atol=2e-2)


def test_row_kernels_tune(no_more_tuning):
    import torch
    import torch.nn.functional as F

    x = torch.randn(100, 4096, device="cuda", dtype=torch.float16)
    w = torch.randn(4096, device="cuda", dtype=torch.float16)
    bias = torch.randn(4096, device="cuda", dtype=torch.float16)
    torch.testing.assert_close(rms_norm(x, w, 1e-6, tune=True), F.rms_norm(x, [4096], w, 1e-6), rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(layer_norm(x, w, bias, 1e-5, tune=True), F.layer_norm(x, [4096], w, bias, 1e-5),
                               rtol=1e-2, atol=1e-2)
    s = torch.randn(64, 1000, device="cuda")
    torch.testing.assert_close(softmax(s, tune=True), torch.softmax(s, -1), rtol=1e-5, atol=1e-6)
    no_more_tuning()
    x2 = torch.randn(120, 4096, device="cuda", dtype=torch.float16)  # rows 100 and 120: one bucket
    torch.testing.assert_close(rms_norm(x2, w, 1e-6, tune=True), F.rms_norm(x2, [4096], w, 1e-6), rtol=1e-2,
                               atol=1e-2)


def test_quantized_matmul_tune(no_more_tuning):
    """QuantizedMatmul's space (the tiles the constructor accepts with the hand table's path and split, 8 warps x 4
    units and the ring row among them) tuned for 8-bit weights at 3 rows; 4 rows share the bucket and launch the
    choice."""
    import math

    import torch

    from tilus_tvm.schedules.quantized_matmul import dequantize, pack_weight, quantized_matmul

    k, n = 1024, 512
    generator = torch.Generator().manual_seed(0)
    packed = pack_weight(torch.randint(0, 256, (k, n), generator=generator).float().cuda(), "uint8", 128).to("cuda")
    scales = (torch.rand(k // 128, n, generator=generator) + 0.5).div(math.sqrt(k)).half().cuda()
    reference = dequantize(packed, scales)
    for rows in (3, 4):
        a = torch.randn(rows, k, generator=generator).half().cuda()
        out = quantized_matmul(a, packed, scales, tune=True)
        expected = a.float() @ reference
        torch.testing.assert_close(out.float(), expected, rtol=2e-2, atol=2e-2 * expected.abs().max().item())
        no_more_tuning()
