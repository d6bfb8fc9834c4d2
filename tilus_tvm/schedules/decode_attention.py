"""``DecodeAttention`` + ``DecodeCombine``: one new query token per sequence against a KV cache.

Shapes: q [batch, heads, 1, head_dim]; k_cache, v_cache [batch, heads, capacity, head_dim] with
sequence ``b`` holding ``seq_lens[b]`` valid positions (int32, 1 <= seq_lens[b] <= capacity);
head_dim 64 or 128, float16 or bfloat16. The cache may hold 2**31 elements or more: the kernel
reaches each head's ``[capacity, head_dim]`` slice through a sub-view with a 64-bit base
(``self.global_subview``), so only ``capacity * head_dim`` must fit int32.

Split-KV (flash-decoding): the grid is (splits, batch * heads); block (s, bh) reads keys
``[s * split_len, min(seq_len, (s + 1) * split_len))`` of its head in tiles of ``block_kv`` rows,
so a batch of short and long sequences spreads evenly over the GPU and a split past its sequence's
end does nothing. A decode step is bound by reading the cache, so the block works on CUDA cores and
keeps the next tiles in flight while it computes one (:class:`DecodeConfig`: in registers, or in a
``cp.async`` ring in shared memory). A tile is ``passes`` passes of ``rows`` key rows, ``lanes``
threads to a row:

    s     = rowsum(k_tile * q) (q pre-scaled by scale * log2(e); log2(lanes) shuffles)
    each row slot r of a pass keeps its own online softmax over the keys it meets, r, r + rows, ...:
    m_r' = max(m_r, s_r over the passes);  l_r = l_r * exp2(m_r - m_r') + sum exp2(s_r - m_r');
    acc_r = acc_r * exp2(m_r - m_r') + sum exp2(s_r - m_r') * v_r

so the loop has no reduction across warps; the slots are combined once at the end. With one split
the block writes the output itself; otherwise it writes its partial output (normalised) and its
log-sum-exp (base 2) to float32 workspaces and ``DecodeCombine`` (one block per head) weights the
splits by ``exp2(lse - max lse)``. Positions past ``seq_len`` are masked (scores to -inf, values
to 0) in the one tile that reaches past it, so stale cache contents, NaN included, never reach the
output.

    o = decode_attention(q, k_cache, v_cache, seq_lens)
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, Optional

import tilus_tvm as tilus
from tilus_tvm import bfloat16, float16, float32, int32, void
from tilus_tvm.dtypes import as_dtype
from tilus_tvm.errors import LaunchError, ScriptError
from tilus_tvm.lang.arguments import MAX_INDEX
from tilus_tvm.schedules.attention import HEAD_DIMS, LOG2E, M_INIT, NEG_INF, check_attention_inputs

VECTOR = 8  # elements of a 16-byte access of 16-bit elements
MAX_SPLITS = 32
MAX_SPLIT_LEN = 8192


@dataclass(frozen=True)
class DecodeConfig:
    """How :class:`DecodeAttention` reads the cache.

    - ``block_kv``: keys per tile; ``warps``: warps per block;
    - ``lanes``: threads sharing one key row (each holds ``head_dim / lanes`` of its columns, in
      16-byte vectors): fewer lanes, fewer shuffles per score but more registers for q;
    - ``stages``: 0 keeps the next tile in registers while the current one is computed (its loads
      are issued first); ``n >= 2`` keeps a ring of ``n`` tiles in shared memory filled by
      ``cp.async``, ``n - 1`` tiles in flight;
    - ``splits``: splits per head at least (more when the grid would not fill the GPU, see
      :func:`decode_split_len`); 0 takes the occupancy rule alone;
    - ``min_blocks``: blocks that must fit on an SM (``__launch_bounds__``): ptxas then keeps
      registers below ``65536 / (min_blocks * 32 * warps)``, spilling if it must; 0 lets it choose.
    """

    block_kv: int = 32
    warps: int = 4
    lanes: int = 8
    stages: int = 0
    splits: int = 0
    min_blocks: int = 0

    @staticmethod
    def parse(text: str) -> "DecodeConfig":
        """``"block_kv,warps,lanes,stages,splits,min_blocks"`` (trailing fields may be left out: defaults)."""
        values = [int(v) for v in text.split(",")]
        names = [f.name for f in fields(DecodeConfig)]
        if not 1 <= len(values) <= len(names):
            raise ValueError(f"a decode config is {','.join(names)}, got {text!r}")
        return DecodeConfig(**dict(zip(names, values)))


# The configuration per head_dim (see DecodeConfig), chosen from the compiled code, not yet from GPU
# timings: for sm_90, head_dim 128 takes 78-80 registers and 50 KB of shared memory (four blocks an SM,
# two 16 KB tiles each in flight), head_dim 64 takes 64 registers and 33 KB (six blocks, three 8 KB
# tiles), no spills. ``scripts/bench_attention.py --decode-configs`` times others against SDPA.
DECODE_CONFIGS = {
    64: DecodeConfig(block_kv=32, warps=4, lanes=4, stages=4),
    128: DecodeConfig(block_kv=32, warps=4, lanes=8, stages=3),
}


class DecodeAttention(tilus.Script):
    """One split of decode attention for every (split, batch * head) (see the module docstring).

    ``split_len``: keys per split (a multiple of ``block_kv``); the other hyper-parameters are
    :class:`DecodeConfig`'s.
    """

    def __init__(self, head_dim: int = 128, block_kv: int = 32, warps: int = 4, split_len: int = 512,
                 dtype: Any = float16, lanes: int = 8, stages: int = 0, min_blocks: int = 0):
        super().__init__()
        dtype = as_dtype(dtype)
        if dtype not in (float16, bfloat16):
            raise ScriptError(f"DecodeAttention: dtype must be float16 or bfloat16, got {dtype.name}")
        if head_dim not in HEAD_DIMS:
            raise ScriptError(f"DecodeAttention: head_dim must be one of {HEAD_DIMS}, got {head_dim}")
        if not 1 <= warps <= 16:
            raise ScriptError(f"DecodeAttention: warps={warps} must be in [1, 16]")
        vectors = head_dim // VECTOR
        if lanes not in (1, 2, 4, 8, 16, 32) or vectors % lanes:
            raise ScriptError(f"DecodeAttention: lanes={lanes} must be a power of two dividing the {vectors} "
                              f"16-byte vectors of a row (head_dim {head_dim})")
        rows = warps * 32 // lanes
        if block_kv % rows:
            raise ScriptError(f"DecodeAttention: block_kv={block_kv} must be a multiple of the {rows} rows one "
                              f"pass of {warps} warps covers with {lanes} lanes a row")
        if split_len % block_kv:
            raise ScriptError(f"DecodeAttention: split_len={split_len} must be a multiple of block_kv={block_kv}")
        if stages == 1 or stages < 0:
            raise ScriptError(f"DecodeAttention: stages={stages} must be 0 (registers) or at least 2 (cp.async)")
        self.head_dim, self.block_kv, self.warps, self.split_len, self.dtype = head_dim, block_kv, warps, split_len, dtype
        if not 0 <= min_blocks <= 32:
            raise ScriptError(f"DecodeAttention: min_blocks={min_blocks} must be in [0, 32] (0: no bound)")
        self.lanes, self.stages, self.min_blocks = lanes, stages, min_blocks

    def __call__(self, batch_heads: int32, heads: int32, capacity: int32, num_splits: int32, scale_log2: float32,
                 q_ptr: ~void, k_ptr: ~void, v_ptr: ~void, seq_lens_ptr: ~int32, o_part_ptr: ~float32,
                 lse_ptr: ~float32, out_ptr: ~void):
        d, bkv, dtype, stages = self.head_dim, self.block_kv, self.dtype, self.stages
        layouts = DecodeLayouts.make(bkv, d, self.warps, self.lanes)
        rows, passes = layouts.rows, layouts.passes
        self.attrs.blocks = [num_splits, batch_heads]
        self.attrs.warps = self.warps
        if self.min_blocks:
            self.attrs.min_blocks_per_sm = self.min_blocks
        split = self.blockIdx.x
        bh = self.blockIdx.y
        gq = self.global_view(q_ptr, dtype=dtype, shape=[batch_heads, d])
        gk = self.global_view(k_ptr, dtype=dtype, shape=[batch_heads, capacity, d])
        gv = self.global_view(v_ptr, dtype=dtype, shape=[batch_heads, capacity, d])
        k_head = self.global_subview(gk, [bh])  # [capacity, d] from a 64-bit base: the cache may pass 2**31
        v_head = self.global_subview(gv, [bh])
        glens = self.global_view(seq_lens_ptr, dtype=int32, shape=[batch_heads // heads])
        seq_len = self.load_scalar(glens, [bh // heads])
        start: int32 = split * self.split_len
        stop: int32 = min(seq_len, start + self.split_len)
        num_tiles: int32 = self.utils.ceil_div(max(stop - start, 0), bkv)
        # loads ahead of the split's last tile re-read that tile (cached) rather than the next split's keys
        last: int32 = start + max(num_tiles - 1, 0) * bkv
        q = self.load_global(gq, offsets=[bh, 0], shape=[1, d], layout=layouts.q).to(float32) * scale_log2
        key_ids = self.register_tensor(dtype=int32, shape=[bkv, 1], layout=layouts.scores, init=lambda row, col: row)
        m = self.register_tensor(dtype=float32, shape=[1, rows, 1], layout=layouts.state, init=M_INIT)
        l = self.register_tensor(dtype=float32, shape=[1, rows, 1], layout=layouts.state, init=0.0)
        acc = self.register_tensor(dtype=float32, shape=[1, rows, d], layout=layouts.acc, init=0.0)
        if num_tiles > 0:
            if stages == 0:
                k = self.load_global(k_head, offsets=[start, 0], shape=[bkv, d], layout=layouts.tile)
                v = self.load_global(v_head, offsets=[start, 0], shape=[bkv, d], layout=layouts.tile)
            else:
                sk = self.shared_tensor(dtype=dtype, shape=[stages, bkv, d])
                sv = self.shared_tensor(dtype=dtype, shape=[stages, bkv, d])
                for s in range(stages - 1):  # prologue: the first stages - 1 tiles in flight
                    ahead0 = min(start + s * bkv, last)
                    self.copy_async(src=k_head, dst=sk[s], offsets=[ahead0, 0])
                    self.copy_async(src=v_head, dst=sv[s], offsets=[ahead0, 0])
                    self.copy_async_commit_group()
            for t in range(num_tiles):
                kv0 = start + t * bkv
                if stages == 0:  # the next tile's loads go out before this tile's math
                    k_next = self.load_global(k_head, offsets=[min(kv0 + bkv, last), 0], shape=[bkv, d],
                                              layout=layouts.tile)
                    v_next = self.load_global(v_head, offsets=[min(kv0 + bkv, last), 0], shape=[bkv, d],
                                              layout=layouts.tile)
                else:
                    self.copy_async_wait_group(stages - 2)  # tile t has landed ...
                    self.sync()  # ... and every thread is done with tile t - 1's stage, refilled here
                    ahead = min(kv0 + (stages - 1) * bkv, last)
                    self.copy_async(src=k_head, dst=sk[(t + stages - 1) % stages], offsets=[ahead, 0])
                    self.copy_async(src=v_head, dst=sv[(t + stages - 1) % stages], offsets=[ahead, 0])
                    self.copy_async_commit_group()
                    k = self.load_shared(sk[t % stages], layout=layouts.tile)
                    v = self.load_shared(sv[t % stages], layout=layouts.tile)
                s = self.sum(k.to(float32) * q, dim=1, keepdim=True)
                values = v.to(float32)
                if kv0 + bkv > stop:  # the split's last tile reaches past its keys: mask them
                    valid = key_ids < stop - kv0
                    s = self.where(valid, s, NEG_INF)
                    values = self.where(valid, values, 0.0)
                s = self.reshape(s, [passes, rows, 1])
                m_new = self.maximum(m, self.max(s, dim=0, keepdim=True))
                p = self.exp2(s - m_new)
                alpha = self.exp2(m - m_new)
                l = l * alpha + self.sum(p, dim=0, keepdim=True)
                acc = acc * alpha + self.sum(p * self.reshape(values, [passes, rows, d]), dim=0, keepdim=True)
                m = m_new
                if stages == 0:
                    k = k_next
                    v = v_next
            if stages != 0:
                self.copy_async_wait_all()  # the copies ahead of the last tile land before the block exits
        m_all = self.max(m, dim=1, keepdim=True)
        weight = self.exp2(m - m_all)
        l_all = self.sum(l * weight, dim=1, keepdim=True)
        o = self.sum(acc * weight, dim=1, keepdim=True) * (1.0 / self.where(l_all > 0.0, l_all, 1.0))
        if num_splits == 1:  # the block saw every key: no combine step
            go = self.global_view(out_ptr, dtype=dtype, shape=[batch_heads, d])
            self.store_global(go, self.reshape(o, [1, d]).to(dtype), offsets=[bh, 0])
        else:
            gpart = self.global_view(o_part_ptr, dtype=float32, shape=[batch_heads, num_splits, d])
            glse = self.global_view(lse_ptr, dtype=float32, shape=[batch_heads, num_splits, 1])
            self.store_global(gpart, o, offsets=[bh, split, 0])
            self.store_global(glse, m_all + self.log2(l_all), offsets=[bh, split, 0])


@dataclass(frozen=True)
class DecodeLayouts:
    """The register layouts of :class:`DecodeAttention`: ``tile`` for a [block_kv, head_dim] k or v
    tile (16-byte vectors, ``lanes`` threads to a row, ``rows`` rows a pass, ``passes`` passes, each
    row's vectors interleaved over its lanes so a warp's access is contiguous); ``scores`` its row
    sums [block_kv, 1]; ``q`` its column view [1, head_dim]; ``state`` and ``acc`` the per-slot
    softmax state [1, rows, 1] and accumulator [1, rows, head_dim] (the tile viewed as [passes, rows,
    head_dim], reduced over the passes: a reduction inside each thread)."""

    tile: Any
    scores: Any
    q: Any
    state: Any
    acc: Any
    rows: int
    passes: int

    @staticmethod
    def make(block_kv: int, head_dim: int, warps: int, lanes: int) -> "DecodeLayouts":
        from tilus_tvm.layout.register import compose, local, spatial
        from tilus_tvm.layout.register_ops import reduce, reshape

        rows = warps * 32 // lanes
        passes = block_kv // rows
        tile = compose(compose(local(passes, head_dim // VECTOR // lanes), spatial(rows, lanes)), local(1, VECTOR))
        acc = reduce(reshape(tile, [passes, rows, head_dim]), [0], keepdims=True)
        return DecodeLayouts(tile, reduce(tile, [1], keepdims=True), reduce(tile, [0], keepdims=True),
                             reduce(acc, [2], keepdims=True), acc, rows, passes)


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


_KERNELS: dict = {}


def decode_split_len(capacity: int, batch_heads: int, block_kv: int = 32, sms: int = 132, splits: int = 0) -> int:
    """Keys per split: enough splits for about four blocks per SM, at least ``splits`` (a
    :class:`DecodeConfig`'s), at most MAX_SPLIT_LEN keys each (so the longest sequences of a batch of
    mixed lengths spread over several blocks instead of finishing alone), at most MAX_SPLITS splits,
    at least ``4 * block_kv`` keys each, a multiple of ``block_kv``."""
    wanted = max(1, splits, min(MAX_SPLITS, math.ceil(4 * sms / batch_heads)), math.ceil(capacity / MAX_SPLIT_LEN))
    split = max(4 * block_kv, math.ceil(capacity / wanted))
    split = max(split, math.ceil(capacity / MAX_SPLITS))
    return math.ceil(split / block_kv) * block_kv


def decode_attention(q: Any, k_cache: Any, v_cache: Any, seq_lens: Any, scale: Optional[float] = None,
                     out: Optional[Any] = None, split_len: Optional[int] = None,
                     config: Optional[DecodeConfig] = None) -> Any:
    """Attention of one query token per sequence over its first ``seq_lens[b]`` cached keys/values.

    ``q`` [batch, heads, 1, head_dim]; ``k_cache``/``v_cache`` [batch, heads, capacity, head_dim]
    (any size: only ``capacity * head_dim`` must stay below 2**31); ``seq_lens`` [batch] integers on
    q's device (each in [1, capacity]; int64 is converted). Equal to
    ``scaled_dot_product_attention(q, k[:, :, :n], v[:, :, :n])`` per sequence. ``scale`` defaults to
    ``1 / sqrt(head_dim)``. ``config`` (default ``DECODE_CONFIGS[head_dim]``) and ``split_len``
    (keys per split, a multiple of ``config.block_kv``; default :func:`decode_split_len`) choose the
    kernel. Raises :class:`LaunchError` naming the bad argument.
    """
    import torch

    check_attention_inputs("decode_attention", q, k_cache, v_cache, ("q", "k_cache", "v_cache"))
    batch, heads, one, head_dim = q.shape
    if one != 1:
        raise LaunchError(f"decode_attention: q must hold one token per sequence, [batch, heads, 1, head_dim]; "
                          f"got shape {list(q.shape)}")
    capacity = k_cache.shape[2]
    if capacity * head_dim > MAX_INDEX:
        raise LaunchError(f"decode_attention: a head's cache holds capacity * head_dim = {capacity} * {head_dim} "
                          f"elements; the kernel indexes inside a head with int32, at most {MAX_INDEX}")
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
    config = config or DECODE_CONFIGS[head_dim]
    if not isinstance(config, DecodeConfig):
        raise LaunchError(f"decode_attention: config must be a DecodeConfig, got {type(config).__name__}")
    batch_heads = batch * heads
    if split_len is None:
        sms = 132
        if q.is_cuda:
            from tilus_tvm.schedules.matmul_splitk import sm_count

            sms = sm_count(q.device.index)
        split_len = decode_split_len(capacity, batch_heads, config.block_kv, sms, config.splits)
    elif split_len < 1 or split_len % config.block_kv:
        raise LaunchError(f"decode_attention: split_len={split_len} must be a positive multiple of block_kv="
                          f"{config.block_kv}")
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
    split_kernel, combine_kernel = decode_kernels_for(head_dim, split_len, q.dtype, config)
    out_flat = out.view(batch_heads, head_dim)
    split_kernel(batch_heads, heads, capacity, num_splits, scale * LOG2E, q.view(batch_heads, head_dim),
                 k_cache.view(batch_heads, capacity, head_dim), v_cache.view(batch_heads, capacity, head_dim),
                 seq_lens, o_part, lse, out_flat)
    if num_splits > 1:
        combine_kernel(batch_heads, num_splits, o_part, lse, out_flat)
    return out


def decode_kernels_for(head_dim: int, split_len: int, dtype: Any,
                       config: Optional[DecodeConfig] = None) -> tuple[DecodeAttention, DecodeCombine]:
    """The two kernels :func:`decode_attention` launches."""
    config = config or DECODE_CONFIGS[head_dim]
    key = (head_dim, split_len, str(dtype), config)
    if key not in _KERNELS:
        tile_dtype = bfloat16 if "bfloat16" in str(dtype) else float16
        _KERNELS[key] = (DecodeAttention(head_dim, config.block_kv, config.warps, split_len, tile_dtype,
                                         config.lanes, config.stages, config.min_blocks),
                         DecodeCombine(head_dim, MAX_SPLITS, tile_dtype))
    return _KERNELS[key]
