"""FlashAttentionWgmma: both products on wgmma (sm_90a), against SDPA on the GPU."""
import math
import re

import pytest
import torch

from tilus_tvm import bfloat16, float16
from tilus_tvm.errors import ScriptError
from tilus_tvm.schedules.attention import LOG2E
from tilus_tvm.schedules.attention_sm90 import FlashAttentionWgmma


@pytest.mark.parametrize("head_dim, block_q, block_kv, stages, overlap", [
    (128, 128, 128, 3, True), (64, 64, 64, 3, True), (128, 64, 128, 2, False)])
def test_compiles_to_wgmma_with_p_in_registers(head_dim, block_q, block_kv, stages, overlap):
    z = torch.zeros(2, 512, head_dim, dtype=torch.float16)
    kernel = FlashAttentionWgmma(head_dim, block_q, block_kv, stages, causal=True, overlap=overlap)
    code = kernel.compile(2, 512, 512, 0.1, z, z, z, z, target="sm_90a").ptx
    shared_a = re.findall(rf"wgmma.mma_async.sync.aligned.m64n{block_kv}k16.f32.f16.f16 \{{[^}}]*\}}, %rd", code)
    register_a = re.findall(rf"wgmma.mma_async.sync.aligned.m64n{head_dim}k16.f32.f16.f16 \{{[^}}]*\}}, \{{", code)
    # q @ k^T: q and k from shared memory, one per 16 columns of head_dim (overlapped: tile 0's before the loop)
    assert len(shared_a) == head_dim // 16 * (2 if overlap else 1)
    assert len(register_a) == block_kv // 16  # p @ v: p from registers, one per 16 keys
    assert "st.shared" not in code.replace("st.shared.v4.b32 [%r", "")  # p reaches the second wgmma in registers
    assert ".local" not in code


def test_bad_configurations_are_refused():
    with pytest.raises(ScriptError, match="block_q=96 must be 64, 128 or 192"):
        FlashAttentionWgmma(block_q=96)
    with pytest.raises(ScriptError, match="block_kv=24 must be a multiple of 16 up to 256"):
        FlashAttentionWgmma(block_kv=24)
    with pytest.raises(ScriptError, match="head_dim must be one of"):
        FlashAttentionWgmma(head_dim=96)
    with pytest.raises(ScriptError, match="overlap needs stages >= 3"):
        FlashAttentionWgmma(stages=2, overlap=True)
    with pytest.raises(ScriptError, match="tma must be None"):
        FlashAttentionWgmma(tma=1)


def test_tiles_load_with_tma_when_the_operands_allow():
    """tma=None: q, k and v by TMA (one barrier a ring stage, one for q) when aligned, else cp.async."""
    z = torch.zeros(2, 512, 128, dtype=torch.float16)
    code = FlashAttentionWgmma(causal=True).compile(2, 512, 512, 0.1, z, z, z, z, target="sm_90a").ptx
    assert code.count("cp.async.bulk.tensor.3d") == 2 + 2 * 2 + 2 * 2  # q; k and v in the prologue and loop
    assert "cp.async.cg.shared.global" not in code and "mbarrier.try_wait.parity" in code
    shifted = torch.zeros(2 * 512 * 128 + 8, dtype=torch.float16)[4:4 + 2 * 512 * 128].view(2, 512, 128)
    code = FlashAttentionWgmma(causal=True).compile(2, 512, 512, 0.1, shifted, z, z, z, target="sm_90a").ptx
    assert "cp.async.bulk.tensor" not in code and "cp.async.cg.shared.global" in code  # q element by element
    code = FlashAttentionWgmma(tma=False).compile(2, 512, 512, 0.1, z, z, z, z, target="sm_90a").ptx
    assert "cp.async.bulk.tensor" not in code and "cp.async.cg.shared.global" in code


def _reference(q, k, v, causal):
    return torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)


@pytest.mark.gpu
@pytest.mark.parametrize("head_dim, block_q, block_kv, stages, overlap, tma", [
    (128, 128, 128, 3, True, None), (128, 128, 64, 4, True, None), (64, 64, 128, 3, True, None),
    (128, 128, 128, 2, False, None), (128, 128, 128, 2, False, False), (64, 192, 64, 3, False, True),
    (128, 128, 128, 3, True, False)])
@pytest.mark.parametrize("seq_q, seq_k", [(512, 512), (300, 517), (1, 77), (129, 1000)])
@pytest.mark.parametrize("causal", [False, True])
def test_matches_sdpa(head_dim, block_q, block_kv, stages, overlap, tma, seq_q, seq_k, causal):
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("wgmma needs sm_90a")
    torch.manual_seed(seq_q + seq_k + head_dim)
    batch, heads = 2, 3
    q = torch.randn(batch, heads, seq_q, head_dim, dtype=torch.float16, device="cuda")
    k = torch.randn(batch, heads, seq_k, head_dim, dtype=torch.float16, device="cuda")
    v = torch.randn(batch, heads, seq_k, head_dim, dtype=torch.float16, device="cuda")
    o = torch.full_like(q, float("nan"))
    bh = batch * heads
    kernel = FlashAttentionWgmma(head_dim, block_q, block_kv, stages, causal=causal, overlap=overlap, tma=tma)
    kernel(bh, seq_q, seq_k, LOG2E / math.sqrt(head_dim), q.view(bh, seq_q, head_dim), k.view(bh, seq_k, head_dim),
           v.view(bh, seq_k, head_dim), o.view(bh, seq_q, head_dim))
    torch.testing.assert_close(o.float(), _reference(q, k, v, causal), rtol=0, atol=2e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize("tma", [None, False])
def test_seq_major_heads_and_packed_qkv_bf16(packed, tma):
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("wgmma needs sm_90a")
    torch.manual_seed(5)
    batch, seq, heads, d = 2, 333, 4, 128
    if packed:
        qkv = torch.randn(batch, seq, 3, heads, d, dtype=torch.bfloat16, device="cuda")
        q, k, v = qkv.unbind(2)
        args = (qkv, qkv, qkv)
    else:
        q, k, v = (torch.randn(batch, seq, heads, d, dtype=torch.bfloat16, device="cuda") for _ in range(3))
        args = (q, k, v)
    o = torch.full((batch, seq, heads, d), float("nan"), dtype=torch.bfloat16, device="cuda")
    kernel = FlashAttentionWgmma(d, 128, 128, 3, causal=True, dtype=bfloat16, heads=heads, packed_qkv=packed, tma=tma)
    kernel(batch * heads, seq, seq, LOG2E / math.sqrt(d), *args, o)
    expected = _reference(*(t.transpose(1, 2) for t in (q, k, v)), True).transpose(1, 2)
    torch.testing.assert_close(o.float(), expected, rtol=0, atol=3e-2)


def test_defaults():
    kernel = FlashAttentionWgmma()
    assert (kernel.dtype, kernel.stages, kernel.overlap, kernel.tma) == (float16, 2, False, None)
