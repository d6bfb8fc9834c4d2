"""``DecodeAttention`` + ``DecodeCombine``: one new query token per sequence against a KV cache.

Shapes: q [batch, heads, 1, head_dim]; k_cache, v_cache [batch, heads, capacity, head_dim] with
sequence ``b`` holding ``seq_lens[b]`` valid positions (int32, 1 <= seq_lens[b] <= capacity);
head_dim 64 or 128, float16 or bfloat16.

Split-KV (flash-decoding): the grid is (splits, batch * heads); block (s, bh) reads keys
``[s * split_len, min(seq_len, (s + 1) * split_len))`` of its head in tiles of ``block_kv`` rows,
so a batch of short and long sequences spreads evenly over the GPU and a split past its sequence's
end exits at once. A decode step is bound by reading the cache, so the block works on CUDA cores:

    s     = rowsum(k_tile * q) (q pre-scaled by scale * log2(e); 16-lane shuffles)
    each row slot r of the tile keeps its own online softmax over keys r, r + block_kv, ...:
    m_r' = max(m_r, s_r);  l_r = l_r * exp2(m_r - m_r') + exp2(s_r - m_r');  acc_r = acc_r * ... + p_r * v_r

so the loop has no reduction across warps; the slots are combined once at the end. The block
writes its partial output (normalised) and its log-sum-exp (base 2) to float32 workspaces;
``DecodeCombine`` (one block per head) weights the splits by ``exp2(lse - max lse)``.
Positions past ``seq_len`` are masked (scores to -inf, values to 0), so stale cache contents,
NaN included, never reach the output.

    o = decode_attention(q, k_cache, v_cache, seq_lens)
"""
from __future__ import annotations

import math
from typing import Any, Optional

import tilus_tvm as tilus
from tilus_tvm import bfloat16, float16, float32, int32, void
from tilus_tvm.dtypes import as_dtype
from tilus_tvm.errors import LaunchError, ScriptError
from tilus_tvm.schedules.attention import HEAD_DIMS, LOG2E, M_INIT, NEG_INF, check_attention_inputs


class DecodeAttention(tilus.Script):
    """One split of decode attention for every (split, batch * head) (see the module docstring).

    ``split_len``: keys per split (a multiple of ``block_kv``); ``block_kv``: keys per tile.
    """

    def __init__(self, head_dim: int = 128, block_kv: int = 32, warps: int = 4, split_len: int = 512,
                 dtype: Any = float16):
        super().__init__()
        dtype = as_dtype(dtype)
        if dtype not in (float16, bfloat16):
            raise ScriptError(f"DecodeAttention: dtype must be float16 or bfloat16, got {dtype.name}")
        if head_dim not in HEAD_DIMS:
            raise ScriptError(f"DecodeAttention: head_dim must be one of {HEAD_DIMS}, got {head_dim}")
        if split_len % block_kv:
            raise ScriptError(f"DecodeAttention: split_len={split_len} must be a multiple of block_kv={block_kv}")
        self.head_dim, self.block_kv, self.warps, self.split_len, self.dtype = head_dim, block_kv, warps, split_len, dtype

    def __call__(self, batch_heads: int32, heads: int32, capacity: int32, num_splits: int32, scale_log2: float32,
                 q_ptr: ~void, k_ptr: ~void, v_ptr: ~void, seq_lens_ptr: ~int32, o_part_ptr: ~float32,
                 lse_ptr: ~float32):
        d, bkv, dtype = self.head_dim, self.block_kv, self.dtype
        self.attrs.blocks = [num_splits, batch_heads]
        self.attrs.warps = self.warps
        split = self.blockIdx.x
        bh = self.blockIdx.y
        gq = self.global_view(q_ptr, dtype=dtype, shape=[batch_heads, d])
        gk = self.global_view(k_ptr, dtype=dtype, shape=[batch_heads, capacity, d])
        gv = self.global_view(v_ptr, dtype=dtype, shape=[batch_heads, capacity, d])
        glens = self.global_view(seq_lens_ptr, dtype=int32, shape=[batch_heads // heads])
        gpart = self.global_view(o_part_ptr, dtype=float32, shape=[batch_heads, num_splits, d])
        glse = self.global_view(lse_ptr, dtype=float32, shape=[batch_heads, num_splits, 1])
        seq_len = self.load_scalar(glens, [bh // heads])
        start: int32 = split * self.split_len
        stop: int32 = min(seq_len, start + self.split_len)
        num_tiles: int32 = self.utils.ceil_div(max(stop - start, 0), bkv)
        # One layout for the k, v and accumulator tiles (16-byte loads of k and v), their row and
        # column reductions for the per-row state and q: no layout conversion in the loop.
        tile, rows, cols = decode_layouts(bkv, d, self.warps)
        q = self.load_global(gq, offsets=[bh, 0], shape=[1, d], layout=cols).to(float32) * scale_log2
        key_ids = self.register_tensor(dtype=int32, shape=[bkv, 1], layout=rows, init=lambda row, col: row)
        m = self.register_tensor(dtype=float32, shape=[bkv, 1], layout=rows, init=M_INIT)
        l = self.register_tensor(dtype=float32, shape=[bkv, 1], layout=rows, init=0.0)
        acc = self.register_tensor(dtype=float32, shape=[bkv, d], layout=tile, init=0.0)
        for t in range(num_tiles):
            kv0 = start + t * bkv
            k = self.load_global(gk, offsets=[bh, kv0, 0], shape=[bkv, d], layout=tile)
            v = self.load_global(gv, offsets=[bh, kv0, 0], shape=[bkv, d], layout=tile)
            valid = key_ids < stop - kv0
            s = self.where(valid, self.sum(k.to(float32) * q, dim=1, keepdim=True), NEG_INF)
            m_new = self.maximum(m, s)
            p = self.exp2(s - m_new)
            alpha = self.exp2(m - m_new)
            l = l * alpha + p
            acc = acc * alpha + p * self.where(valid, v.to(float32), 0.0)
            m = m_new
        m_all = self.max(m, dim=0, keepdim=True)
        weight = self.exp2(m - m_all)
        l_all = self.sum(l * weight, dim=0, keepdim=True)
        o = self.sum(acc * weight, dim=0, keepdim=True) / self.where(l_all > 0.0, l_all, 1.0)
        self.store_global(gpart, o, offsets=[bh, split, 0], dims=[1, 2])
        self.store_global(glse, m_all + self.log2(l_all), offsets=[bh, split, 0], dims=[1, 2])


def decode_layouts(block_kv: int, head_dim: int, warps: int) -> tuple:
    """(tile, rows, cols): the coalesced 16-bit layout of a [block_kv, head_dim] tile, and it reduced
    over its columns ([block_kv, 1]) and over its rows ([1, head_dim])."""
    from tilus_tvm.layout.register_ops import reduce
    from tilus_tvm.passes.layout_choice import default_layout

    tile = default_layout([block_kv, head_dim], 16, warps * 32)
    return tile, reduce(tile, [1], keepdims=True), reduce(tile, [0], keepdims=True)


class DecodeCombine(tilus.Script):
    """``out[bh] = sum_s w_s * o_part[bh, s] / sum_s w_s`` with ``w_s = exp2(lse[bh, s] - max_s lse)``,
    one block per (batch, head); ``max_splits`` (compile time) bounds ``num_splits``."""

    def __init__(self, head_dim: int = 128, max_splits: int = 32, dtype: Any = float16):
        super().__init__()
        self.head_dim, self.max_splits, self.dtype = head_dim, max_splits, as_dtype(dtype)

    def __call__(self, batch_heads: int32, num_splits: int32, o_part_ptr: ~float32, lse_ptr: ~float32,
                 out_ptr: ~void):
        d, splits = self.head_dim, self.max_splits
        self.attrs.blocks = batch_heads
        self.attrs.warps = 4
        bh = self.blockIdx.x
        gpart = self.global_view(o_part_ptr, dtype=float32, shape=[batch_heads, num_splits, d])
        glse = self.global_view(lse_ptr, dtype=float32, shape=[batch_heads, num_splits, 1])
        go = self.global_view(out_ptr, dtype=self.dtype, shape=[batch_heads, d])
        split_ids = self.register_tensor(dtype=int32, shape=[splits, 1], init=lambda row, col: row)
        lse = self.load_global(glse, offsets=[bh, 0, 0], shape=[splits, 1])
        lse = self.where(split_ids < num_splits, lse, NEG_INF)
        top = self.maximum(self.max(lse, dim=0, keepdim=True), M_INIT)
        weight = self.exp2(lse - top)
        total = self.sum(weight, dim=0, keepdim=True)
        part = self.load_global(gpart, offsets=[bh, 0, 0], shape=[splits, d])
        o = self.sum(part * weight, dim=0, keepdim=True) / self.where(total > 0.0, total, 1.0)
        self.store_global(go, o, offsets=[bh, 0])


MAX_SPLITS = 32
_KERNELS: dict = {}


def decode_split_len(capacity: int, batch_heads: int, block_kv: int = 32, sms: int = 132) -> int:
    """Keys per split: enough splits for about four blocks per SM, at most MAX_SPLITS, at least
    ``4 * block_kv`` keys each, a multiple of ``block_kv``."""
    wanted = max(1, min(MAX_SPLITS, math.ceil(4 * sms / batch_heads)))
    split = max(4 * block_kv, math.ceil(capacity / wanted))
    split = max(split, math.ceil(capacity / MAX_SPLITS))
    return math.ceil(split / block_kv) * block_kv


def decode_attention(q: Any, k_cache: Any, v_cache: Any, seq_lens: Any, scale: Optional[float] = None,
                     out: Optional[Any] = None, split_len: Optional[int] = None) -> Any:
    """Attention of one query token per sequence over its first ``seq_lens[b]`` cached keys/values.

    ``q`` [batch, heads, 1, head_dim]; ``k_cache``/``v_cache`` [batch, heads, capacity, head_dim];
    ``seq_lens`` [batch] integers on q's device (each in [1, capacity]; int64 is converted). Equal to
    ``scaled_dot_product_attention(q, k[:, :, :n], v[:, :, :n])`` per sequence. ``scale`` defaults to
    ``1 / sqrt(head_dim)``. Raises :class:`LaunchError` naming the bad argument.
    """
    import torch

    check_attention_inputs("decode_attention", q, k_cache, v_cache, ("q", "k_cache", "v_cache"))
    batch, heads, one, head_dim = q.shape
    if one != 1:
        raise LaunchError(f"decode_attention: q must hold one token per sequence, [batch, heads, 1, head_dim]; "
                          f"got shape {list(q.shape)}")
    capacity = k_cache.shape[2]
    if not isinstance(seq_lens, torch.Tensor) or seq_lens.dim() != 1 or seq_lens.shape[0] != batch:
        raise LaunchError(f"decode_attention: seq_lens must be a 1-D tensor of {batch} lengths (q's batch), got "
                          f"{seq_lens.shape if isinstance(seq_lens, torch.Tensor) else type(seq_lens).__name__}")
    if seq_lens.dtype not in (torch.int32, torch.int64) or seq_lens.device != q.device:
        raise LaunchError(f"decode_attention: seq_lens must be an int32 (or int64) tensor on {q.device}, got "
                          f"{seq_lens.dtype} on {seq_lens.device}")
    seq_lens = seq_lens.to(torch.int32).contiguous()
    scale = 1.0 / math.sqrt(head_dim) if scale is None else float(scale)
    if not scale > 0:
        raise LaunchError(f"decode_attention: scale must be positive, got {scale}")
    batch_heads = batch * heads
    split_len = split_len or decode_split_len(capacity, batch_heads)
    num_splits = math.ceil(capacity / split_len)
    if num_splits > MAX_SPLITS:
        raise LaunchError(f"decode_attention: split_len={split_len} makes {num_splits} splits of capacity "
                          f"{capacity}; at most {MAX_SPLITS}")
    if out is None:
        out = torch.empty_like(q)
    elif out.shape != q.shape or out.dtype != q.dtype or not out.is_contiguous():
        raise LaunchError(f"decode_attention: out must be a contiguous {q.dtype} tensor of shape {list(q.shape)}")
    o_part = torch.empty(batch_heads, num_splits, head_dim, dtype=torch.float32, device=q.device)
    lse = torch.empty(batch_heads, num_splits, 1, dtype=torch.float32, device=q.device)
    split_kernel, combine_kernel = decode_kernels_for(head_dim, split_len, q.dtype)
    split_kernel(batch_heads, heads, capacity, num_splits, scale * LOG2E, q.view(batch_heads, head_dim),
                 k_cache.view(batch_heads, capacity, head_dim), v_cache.view(batch_heads, capacity, head_dim),
                 seq_lens, o_part, lse)
    combine_kernel(batch_heads, num_splits, o_part, lse, out.view(batch_heads, head_dim))
    return out


def decode_kernels_for(head_dim: int, split_len: int, dtype: Any) -> tuple[DecodeAttention, DecodeCombine]:
    """The two kernels :func:`decode_attention` launches."""
    key = (head_dim, split_len, str(dtype))
    if key not in _KERNELS:
        tile_dtype = bfloat16 if "bfloat16" in str(dtype) else float16
        _KERNELS[key] = (DecodeAttention(head_dim, 32, 4, split_len, tile_dtype),
                         DecodeCombine(head_dim, MAX_SPLITS, tile_dtype))
    return _KERNELS[key]
