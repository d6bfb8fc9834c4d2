"""FlashAttention and decode attention: sm_90 compilation and PTX (CPU), input errors before any launch,
and (GPU) agreement with torch's scaled_dot_product_attention on ragged shapes, causal edges, NaN-poisoned
outputs and stale KV-cache contents."""
import math
import re

import pytest
import torch

from tilus_tvm import bfloat16, float16
from tilus_tvm.errors import LaunchError, ScriptError
from tilus_tvm.schedules import decode_attention, flash_attention
from tilus_tvm.schedules.attention import LOG2E, FlashAttention
from tilus_tvm.lang import arguments
from tilus_tvm.schedules.decode_attention import (DECODE_CONFIGS, DecodeAttention, DecodeCombine, DecodeConfig,
                                                  DecodeLayouts, decode_split_len)
from tests.schedules.kernel_resources import ptxas_resources


def count(ptx: str, instruction: str) -> int:
    return len(re.findall(re.escape(instruction), ptx))


@pytest.mark.parametrize("head_dim,causal,dtype", [(128, False, float16), (128, True, float16),
                                                   (64, True, bfloat16)])
def test_flash_attention_compiles_to_mma_and_cp_async(head_dim, causal, dtype):
    torch_dtype = torch.float16 if dtype is float16 else torch.bfloat16
    q = torch.empty(6, 100, head_dim, dtype=torch_dtype)
    k = torch.empty(6, 77, head_dim, dtype=torch_dtype)
    kernel = FlashAttention(head_dim=head_dim, causal=causal, dtype=dtype)
    ptx = kernel.compile(6, 100, 77, 0.1, q, k, k, q, target="sm_90").ptx
    assert count(ptx, "mma.sync.aligned.m16n8k16") > 0
    assert count(ptx, "cp.async.cg.shared.global") > 0 and count(ptx, "cp.async.wait_group") > 0
    assert count(ptx, "ldmatrix") > 0 and count(ptx, "ex2.approx") > 0
    # p stays in registers (its C fragments are the A fragments of p @ v) and row reductions are
    # warp shuffles: the only barriers are the pipeline's.
    assert count(ptx, "bar.sync") <= 2
    assert count(ptx, "shfl.sync.bfly") > 0


DECODE_VARIANTS = [  # (head_dim, config): the table's choices, the register pipeline, larger blocks
    (128, DECODE_CONFIGS[128]), (64, DECODE_CONFIGS[64]), (128, DecodeConfig(32, 4, 8, 0)),
    (128, DecodeConfig(32, 8, 8, 0)), (128, DecodeConfig(16, 4, 8, 4)), (128, DecodeConfig(16, 4, 8, 0, min_blocks=6)),
]


@pytest.mark.parametrize("head_dim,config", DECODE_VARIANTS)
def test_decode_kernel_pipelines_the_cache_beyond_int32(head_dim, config):
    """A [32 * 32, 32768, head_dim] cache (2**31 elements and more, on the meta device): no layout
    conversion, each head's base in 64-bit arithmetic, the next tiles' loads issued before this tile's
    math (registers: before the loop's first shuffle; shared memory: cp.async stages ahead), no spills."""
    bh, capacity, splits = 1024, 32768, 1
    q = torch.empty(bh, head_dim, dtype=torch.float16)
    k = torch.empty(bh, capacity, head_dim, dtype=torch.float16, device="meta")
    lens = torch.empty(32, dtype=torch.int32)
    part, lse = torch.empty(bh, splits, head_dim), torch.empty(bh, splits, 1)
    args = (bh, 32, capacity, splits, 0.1, q, k, k, lens, part, lse, q)
    kernel = DecodeAttention(head_dim, config.block_kv, config.warps, capacity, float16, config.lanes, config.stages,
                             config.min_blocks)
    program = str(kernel.tile_program(*args, target="sm_90"))
    assert "convert_layout" not in program and "load_global_scalar" in program
    assert program.count("global_subview(") == 2
    compiled = kernel.compile(*args, target="sm_90")
    spans = {p.name: p.index_span for p in compiled.abi.params if p.kind == "tensor"}
    assert spans == {"q_ptr": None, "k_ptr": f"(capacity * {head_dim})", "v_ptr": f"(capacity * {head_dim})",
                     "seq_lens_ptr": None, "o_part_ptr": None, "lse_ptr": None, "out_ptr": None}
    bound = arguments.bind(compiled.specs, args, "DecodeAttention", require_cuda=False)
    arguments.check_index_range("DecodeAttention", compiled.specs, compiled.abi.params, bound)
    if config.min_blocks:
        assert f"__launch_bounds__({config.warps * 32}, {config.min_blocks})" in compiled.cuda_source
    ptx = compiled.ptx
    assert "mul.lo.s64" in ptx  # int64(bh) * capacity: the head's base
    layouts = DecodeLayouts.make(config.block_kv, head_dim, config.warps, config.lanes)
    tile_loads = layouts.passes * head_dim // 8 // config.lanes  # 16-byte vectors of k (or v) per thread
    if config.stages == 0:
        first_shuffle = ptx.index("shfl.sync")
        q_loads = head_dim // 8 // config.lanes
        # q, the first tile, then the loop's loads of the next tile, all before the loop's first shuffle
        assert count(ptx[:first_shuffle], "ld.global.nc.v4") == q_loads + 4 * tile_loads
    else:
        assert count(ptx, "cp.async.cg.shared.global") >= 2 * tile_loads * 2  # the prologue's and the loop's
        assert count(ptx, f"cp.async.wait_group {config.stages - 2}") == 1
    resources = ptxas_resources(ptx)
    assert resources["spill_stores"] == 0 and resources["spill_loads"] == 0
    DecodeCombine(head_dim).compile(bh, 4, torch.empty(bh, 4, head_dim), torch.empty(bh, 4, 1), q, target="sm_90")


def test_decode_split_len():
    for capacity, bh in ((1024, 1024), (32768, 1024), (32768, 8), (100, 1)):
        split = decode_split_len(capacity, bh)
        assert split % 32 == 0 and math.ceil(capacity / split) <= 32
    assert decode_split_len(8192, 1024) == 8192  # 1024 blocks fill 132 SMs: one split
    assert decode_split_len(32768, 1024) == 8192  # at most MAX_SPLIT_LEN keys a block
    assert decode_split_len(8192, 1024, splits=4) == 2048  # a config asking for more
    assert decode_split_len(8192, 8) == 256  # few heads: up to 32 splits, 4 blocks per SM


def test_decode_config():
    assert DecodeConfig.parse("16,8,4,2") == DecodeConfig(block_kv=16, warps=8, lanes=4, stages=2)
    assert DecodeConfig.parse("32,4,8,3,2,4") == DecodeConfig(32, 4, 8, 3, splits=2, min_blocks=4)
    with pytest.raises(ValueError, match="a decode config is block_kv,warps,lanes,stages,splits,min_blocks"):
        DecodeConfig.parse("1,2,3,4,5,6,7")
    for head_dim, config in DECODE_CONFIGS.items():  # every table entry is a valid kernel
        DecodeAttention(head_dim, config.block_kv, config.warps, 4 * config.block_kv, float16, config.lanes,
                        config.stages, config.min_blocks)


@pytest.mark.parametrize("kwargs,match", [
    (dict(lanes=3), "lanes=3 must be a power of two dividing the 16 16-byte vectors"),
    (dict(lanes=32), "lanes=32 must be a power of two dividing the 16 16-byte vectors"),
    (dict(block_kv=8), "block_kv=8 must be a multiple of the 16 rows one pass of 4 warps covers with 8 lanes"),
    (dict(stages=1), "stages=1 must be 0 \\(registers\\) or at least 2 \\(cp.async\\)"),
    (dict(split_len=100), "split_len=100 must be a multiple of block_kv=32"),
    (dict(min_blocks=33), "min_blocks=33 must be in \\[0, 32\\]"),
])
def test_decode_attention_bad_configuration(kwargs, match):
    with pytest.raises(ScriptError, match=match):
        DecodeAttention(**kwargs)


@pytest.mark.parametrize("kwargs,match", [
    (dict(head_dim=96), "head_dim must be one of"),
    (dict(block_q=48), "block_q=48 must be a multiple"),
    (dict(stages=1), "stages must be at least 2"),
    (dict(dtype="float32"), "dtype must be float16 or bfloat16"),
])
def test_flash_attention_bad_configuration(kwargs, match):
    with pytest.raises(ScriptError, match=match):
        FlashAttention(**kwargs)


def _qkv(b=2, h=3, sq=33, sk=45, d=64, dtype=torch.float16, device="cpu"):
    return (torch.empty(b, h, sq, d, dtype=dtype, device=device), torch.empty(b, h, sk, d, dtype=dtype, device=device),
            torch.empty(b, h, sk, d, dtype=dtype, device=device))


def test_flash_attention_input_errors_name_the_argument():
    q, k, v = _qkv()
    with pytest.raises(LaunchError, match="v has dtype torch.bfloat16"):
        flash_attention(q, k, v.bfloat16())
    with pytest.raises(LaunchError, match=r"k \[2, 3, 45, 64\] and v \[2, 3, 44, 64\]"):
        flash_attention(q, k, v[:, :, :44].contiguous())
    with pytest.raises(LaunchError, match="q .* and k .* must agree in batch, heads and head_dim"):
        flash_attention(q, k[:, :2].contiguous(), v[:, :2].contiguous())
    with pytest.raises(LaunchError, match="head_dim .* must be one of"):
        flash_attention(*_qkv(d=96))
    with pytest.raises(LaunchError, match="q, k and v must share one layout"):
        flash_attention(q, k.transpose(1, 2).contiguous().transpose(1, 2), v)
    with pytest.raises(LaunchError, match="k must be contiguous .* or the .transpose"):
        flash_attention(q, k[:, :, ::2], v[:, :, ::2])
    with pytest.raises(LaunchError, match="q must be float16 or bfloat16"):
        flash_attention(q.float(), k, v)
    with pytest.raises(LaunchError, match="q must be 4-D"):
        flash_attention(q[0], k, v)


def test_decode_attention_input_errors_name_the_argument():
    q, k, v = _qkv(sq=1, sk=64)
    lens = torch.full((2,), 64, dtype=torch.int32)
    with pytest.raises(LaunchError, match="q must hold one token"):
        decode_attention(_qkv(sq=2)[0], k, v, lens)
    with pytest.raises(LaunchError, match="seq_lens must be a 1-D tensor of 2 lengths"):
        decode_attention(q, k, v, lens[:1])
    with pytest.raises(LaunchError, match="seq_lens must be an int32"):
        decode_attention(q, k, v, lens.float())
    with pytest.raises(LaunchError, match="v_cache has dtype torch.bfloat16"):
        decode_attention(q, k, v.bfloat16(), lens)
    with pytest.raises(LaunchError, match="split_len=48 must be a positive multiple of block_kv=32"):
        decode_attention(q, k, v, lens, split_len=48)
    with pytest.raises(LaunchError, match="config must be a DecodeConfig, got tuple"):
        decode_attention(q, k, v, lens, config=(32, 4, 8, 3))
    huge = torch.empty(1, 1, 2**25, 64, dtype=torch.float16, device="meta")
    with pytest.raises(LaunchError, match=r"capacity \* head_dim = 33554432 \* 64 elements; the kernel indexes "
                                          r"inside a head with int32"):
        decode_attention(torch.empty(1, 1, 1, 64, dtype=torch.float16, device="meta"), huge, huge,
                         torch.ones(1, dtype=torch.int32, device="meta"))


# --- GPU ------------------------------------------------------------------------------------------------
def reference(q, k, v, causal, scale=None):
    return torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal,
                                                            scale=scale).to(q.dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("seq_q,seq_k", [(1, 1), (64, 64), (100, 77), (77, 300), (257, 129), (1000, 1000)])
def test_flash_attention_matches_torch(dtype, causal, head_dim, seq_q, seq_k):
    torch.manual_seed(seq_q * 7 + seq_k)
    q = torch.randn(2, 3, seq_q, head_dim, dtype=dtype, device="cuda")
    k = torch.randn(2, 3, seq_k, head_dim, dtype=dtype, device="cuda")
    v = torch.randn(2, 3, seq_k, head_dim, dtype=dtype, device="cuda")
    out = torch.full_like(q, float("nan"))
    flash_attention(q, k, v, causal=causal, out=out)
    expected = reference(q, k, v, causal)
    assert not out.isnan().any()
    tol = 2e-2 if dtype == torch.float16 else 4e-2
    torch.testing.assert_close(out, expected, atol=tol, rtol=tol)


def test_seq_major_layouts_compile_without_transposes():
    """heads=H reads [batch, seq, H, d] rows (the row stride is H * d), packed_qkv the thirds of a QKV tensor."""
    qkv = torch.empty(2, 100, 3 * 4, 128, dtype=torch.float16)
    o = torch.empty(2, 100, 4, 128, dtype=torch.float16)
    for kwargs, tensors in ((dict(heads=4), (o, o, o, o)), (dict(heads=4, packed_qkv=True), (qkv, qkv, qkv, o))):
        ptx = FlashAttention(causal=True, **kwargs).compile(8, 100, 100, 0.1, *tensors, target="sm_90").ptx
        assert count(ptx, "cp.async.cg.shared.global") > 0 and count(ptx, "mma.sync.aligned.m16n8k16") > 0
    with pytest.raises(ScriptError, match="packed_qkv .* needs heads > 0"):
        FlashAttention(packed_qkv=True)


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seq", [1, 77, 300])
def test_seq_major_and_packed_qkv_match_torch(causal, seq):
    """q, k, v as transposes of [B, S, H, D] tensors (flash_attention reads them in place), and the thirds of one
    [B, S, 3, H, D] tensor (the kernel with packed_qkv), against SDPA."""
    torch.manual_seed(seq)
    batch, heads, d = 2, 3, 128
    qkv = torch.randn(batch, seq, 3, heads, d, dtype=torch.float16, device="cuda")
    q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))  # [B, H, S, D] views, not contiguous
    expected = reference(q, k, v, causal)
    out = flash_attention(q.contiguous().transpose(1, 2).contiguous().transpose(1, 2),
                          k.transpose(1, 2).contiguous().transpose(1, 2),
                          v.transpose(1, 2).contiguous().transpose(1, 2), causal=causal)
    assert out.transpose(1, 2).is_contiguous()  # written in the inputs' [B, S, H, D] layout
    torch.testing.assert_close(out, expected, atol=2e-2, rtol=2e-2)
    o = torch.full((batch, seq, heads, d), float("nan"), dtype=torch.float16, device="cuda")
    packed = FlashAttention(head_dim=d, causal=causal, heads=heads, packed_qkv=True)
    flat = qkv.view(batch, seq, 3 * heads, d)
    packed(batch * heads, seq, seq, LOG2E / math.sqrt(d), flat, flat, flat, o)
    torch.testing.assert_close(o.transpose(1, 2), expected, atol=2e-2, rtol=2e-2)


def test_q_from_shared_memory_reloads_its_fragments_every_key_tile():
    q = torch.empty(6, 300, 128, dtype=torch.float16)
    kept = FlashAttention(block_q=128, warps=8).compile(6, 300, 300, 0.1, q, q, q, q, target="sm_90").ptx
    reloaded = FlashAttention(block_q=128, warps=4, q_in_registers=False).compile(
        6, 300, 300, 0.1, q, q, q, q, target="sm_90").ptx
    # q's 8 fragments (16 columns each) load once outside the loop when kept, every tile when not
    assert count(reloaded, "ldmatrix.sync.aligned.m8n8.x4.shared.b16") > count(kept, "ldmatrix.sync.aligned.m8n8.x4.shared.b16")


@pytest.mark.gpu
@pytest.mark.parametrize("config", [(128, 64, 8, 2, 32, True), (128, 64, 4, 2, 32, False), (64, 32, 4, 3, 64, False)])
@pytest.mark.parametrize("causal", [False, True])
def test_flash_attention_configurations(config, causal):
    bq, bkv, warps, stages, out_chunk, q_in_registers = config
    q = torch.randn(2, 3, 300, 128, dtype=torch.float16, device="cuda")
    k = torch.randn(2, 3, 333, 128, dtype=torch.float16, device="cuda")
    v = torch.randn(2, 3, 333, 128, dtype=torch.float16, device="cuda")
    out = torch.full_like(q, float("nan"))
    kernel = FlashAttention(128, bq, bkv, warps, stages, out_chunk, causal, q_in_registers=q_in_registers)
    scale = 1 / math.sqrt(128)
    kernel(6, 300, 333, scale * LOG2E, q.view(6, 300, 128), k.view(6, 333, 128), v.view(6, 333, 128),
           out.view(6, 300, 128))
    torch.testing.assert_close(out, reference(q, k, v, causal), atol=2e-2, rtol=2e-2)


@pytest.mark.gpu
def test_flash_attention_causal_edges_and_scale():
    """A key just past the diagonal carries a huge value: any leak shows."""
    q = torch.randn(1, 2, 130, 128, dtype=torch.float16, device="cuda")
    k = torch.randn(1, 2, 130, 128, dtype=torch.float16, device="cuda")
    v = torch.randn(1, 2, 130, 128, dtype=torch.float16, device="cuda")
    v[:, :, 64] = 1000.0  # first key of the second tile: rows 0..63 must not see it
    out = flash_attention(q, k, v, causal=True, scale=0.05)
    torch.testing.assert_close(out, reference(q, k, v, True, 0.05), atol=2e-2, rtol=2e-2)
    assert out[:, :, :64].abs().max() < 10


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("config", [None, DecodeConfig(32, 4, 8, 0), DecodeConfig(32, 8, 8, 0),
                                    DecodeConfig(16, 4, 8, 4)])
@pytest.mark.parametrize("split_len", [None, 3008])  # many splits and DecodeCombine; one split
def test_decode_attention_matches_torch(dtype, head_dim, config, split_len):
    torch.manual_seed(head_dim)
    batch, heads, capacity = 5, 4, 3000
    lens = torch.tensor([1, 31, 32, 1000, 2999], dtype=torch.int32, device="cuda")
    q = torch.randn(batch, heads, 1, head_dim, dtype=dtype, device="cuda")
    k = torch.randn(batch, heads, capacity, head_dim, dtype=dtype, device="cuda")
    v = torch.randn(batch, heads, capacity, head_dim, dtype=dtype, device="cuda")
    for b in range(batch):  # stale cache entries past each length: NaN must not leak
        k[b, :, lens[b]:] = float("nan")
        v[b, :, lens[b]:] = float("nan")
    out = torch.full_like(q, float("nan"))
    decode_attention(q, k, v, lens, out=out, split_len=split_len, config=config)
    assert not out.isnan().any()
    for b in range(batch):
        n = int(lens[b])
        expected = reference(q[b:b + 1], k[b:b + 1, :, :n], v[b:b + 1, :, :n], False)
        torch.testing.assert_close(out[b:b + 1], expected, atol=2e-2, rtol=2e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("split_len", [None, 1048640])  # 32 splits a head; one
def test_decode_attention_cache_beyond_int32(split_len):
    """A cache just past 2**31 elements: 2 x 8 x (2**20 + 64) x 128 float16, 4.3 GB each for k and v;
    the last head of the second sequence lies past element 2**31. One key per head carries q itself
    (a score near 90): the output is that key's value, so a wrong address shows as an O(1) error."""
    batch, heads, capacity, head_dim = 2, 8, 2**20 + 64, 128
    assert batch * heads * capacity * head_dim > 2**31
    if torch.cuda.mem_get_info()[0] < 24 * 2**30:
        pytest.skip("needs 24 GiB of free GPU memory (the cache and the float32 reference)")
    torch.manual_seed(0)
    lens = torch.tensor([700001, capacity], dtype=torch.int32, device="cuda")
    q = torch.randn(batch, heads, 1, head_dim, dtype=torch.float16, device="cuda")
    k = torch.randn(batch, heads, capacity, head_dim, dtype=torch.float16, device="cuda")
    v = torch.randn(batch, heads, capacity, head_dim, dtype=torch.float16, device="cuda")
    for b, needle in ((0, 699999), (1, capacity - 3)):  # (1, 7, capacity - 3) is element 2**31 + 1.2e5 of k
        k[b, :, needle] = q[b, :, 0] * 8
    k[0, :, 700001:] = float("nan")
    v[0, :, 700001:] = float("nan")
    out = decode_attention(q, k, v, lens, split_len=split_len)
    for b in range(batch):
        n = int(lens[b])
        expected = reference(q[b:b + 1], k[b:b + 1, :, :n], v[b:b + 1, :, :n], False)
        torch.testing.assert_close(out[b:b + 1], expected, atol=2e-2, rtol=2e-2)
    assert (out[1, 7, 0].float() - v[1, 7, capacity - 3].float()).abs().max() < 2e-2


@pytest.mark.gpu
def test_decode_attention_small_splits():
    q = torch.randn(2, 2, 1, 128, dtype=torch.float16, device="cuda")
    k = torch.randn(2, 2, 700, 128, dtype=torch.float16, device="cuda")
    v = torch.randn(2, 2, 700, 128, dtype=torch.float16, device="cuda")
    lens = torch.tensor([700, 333], dtype=torch.int64, device="cuda")
    out = decode_attention(q, k, v, lens, split_len=128, scale=0.2)
    for b in range(2):
        n = int(lens[b])
        expected = reference(q[b:b + 1], k[b:b + 1, :, :n], v[b:b + 1, :, :n], False, 0.2)
        torch.testing.assert_close(out[b:b + 1], expected, atol=2e-2, rtol=2e-2)


def test_log2e():
    assert abs(LOG2E - 1 / math.log(2)) < 1e-12
