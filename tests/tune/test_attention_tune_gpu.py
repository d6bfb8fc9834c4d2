"""GPU: flash_attention(tune=True) tunes FlashAttention's 36 configurations at the first call of a key and
matches SDPA; a second length in the same power-of-two bucket reuses the choice."""
import pytest

from tilus_tvm.schedules import flash_attention
from tilus_tvm.tune import engine

pytestmark = pytest.mark.gpu


def test_flash_attention_tune(monkeypatch):
    import torch
    import torch.nn.functional as F

    q, k, v = (torch.randn(1, 2, 200, 64, device="cuda", dtype=torch.float16) for _ in range(3))
    out = flash_attention(q, k, v, causal=True, tune=True)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True), rtol=2e-2, atol=2e-2)

    def refuse(*args, **kwargs):
        raise AssertionError("tuned again for a key that has a choice")

    monkeypatch.setattr(engine, "_Search", refuse)
    q2, k2, v2 = (torch.randn(1, 2, 250, 64, device="cuda", dtype=torch.float16) for _ in range(3))
    torch.testing.assert_close(flash_attention(q2, k2, v2, causal=True, tune=True),
                               F.scaled_dot_product_attention(q2, k2, v2, is_causal=True), rtol=2e-2, atol=2e-2)
