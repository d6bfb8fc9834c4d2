"""``FlashAttentionWgmma``: prefill attention on Hopper's warpgroup tensor cores (``wgmma``, sm_90a).

The same computation, arguments and layouts as :class:`~tilus_tvm.schedules.attention.FlashAttention`
(its module docstring has the online softmax), with both products on ``wgmma``:

    s = q @ k_tile^T     wgmma, q and k from shared memory: both K-major, in 64-column chunks of
                         head_dim (128-byte swizzled rows), one wgmma per chunk
    o = o * alpha + p @ v_tile
                         wgmma in its register-A form: p (the scores' accumulator cast to the input
                         dtype) never leaves the registers; v's tile is read MN-major, as
                         [head_dim / 64, block_kv, 64] chunks

Each warpgroup (4 warps) owns 64 query rows; ``block_q / 64`` warpgroups share the k and v tiles,
which stream through a ``stages``-deep ring (TMA or ``cp.async``, below). By default both products
are waited for before the softmax reads their results, so the tensor cores idle while it runs.

``overlap=True`` (``stages >= 3``) issues the next tile's scores before this tile's softmax, and
waits for a tile's ``p @ v`` only before the next rescale, so each warpgroup keeps one ``wgmma``
group in flight while its CUDA cores work (FlashAttention-3's intra-warpgroup pipelining; the
fences and waits pin only the accumulators not in flight, else ptxas serializes every ``wgmma``).
It is correct but measured slower on an H200: with ``cp.async``, 359-402 against 413-459 TFLOP/s at
2K-4K keys; with TMA, 296-410 against 409-537 (3 stages against 2, causal and not): both warpgroups
reach the tensor cores in the same phase, the ring needs a second barrier an iteration, and the
scores are copied from one register tile to the other. FlashAttention-3 also staggers its
warpgroups (named barriers) and loads from a producer warp, which this kernel does not do.

Tiles come by TMA (``tma=None``: when q, k and v are 16-byte aligned; one barrier a ring stage, no
load past the last tile), else by ``cp.async``. TMA took the default form from 413-459 to 497-541
TFLOP/s (non-causal, 2K-4K keys, H200).

    kernel = FlashAttentionWgmma(head_dim=128, block_q=128, block_kv=128, stages=2, causal=True)
    kernel(batch * heads, seq_q, seq_k, scale * LOG2E, q, k, v, o)

It needs an ``sm_90a`` target (an H100 or H200); :func:`~tilus_tvm.schedules.attention.flash_attention`
takes it there.
"""
from __future__ import annotations

from typing import Any, Optional

from tilus_tvm import float16, float32, int32, uint64, void
from tilus_tvm.errors import ScriptError
from tilus_tvm.schedules.attention import M_INIT, NEG_INF, FlashAttention

CHUNK = 64  # head_dim columns of one swizzled chunk (128-byte rows of 16-bit elements)


class FlashAttentionWgmma(FlashAttention):
    """Prefill attention with ``wgmma`` (see the module docstring): ``block_q`` 64, 128 or 192 query rows a
    block (one warpgroup each 64), ``block_kv`` key rows a tile (a multiple of 16 up to 256), ``stages``
    (>= 2) k/v tiles in the ring; the other arguments as :class:`FlashAttention`'s."""

    def __init__(self, head_dim: int = 128, block_q: int = 128, block_kv: int = 128, stages: int = 2,
                 causal: bool = False, dtype: Any = float16, heads: int = 0, packed_qkv: bool = False,
                 overlap: bool = False, tma: Optional[bool] = None):
        if block_q % 64 or not 64 <= block_q <= 192:
            raise ScriptError(f"FlashAttentionWgmma: block_q={block_q} must be 64, 128 or 192 (64 query rows a "
                              f"warpgroup)")
        if block_kv % 16 or not 16 <= block_kv <= 256:
            raise ScriptError(f"FlashAttentionWgmma: block_kv={block_kv} must be a multiple of 16 up to 256 (the n "
                              f"of the score product's wgmma)")
        if overlap and stages < 3:
            raise ScriptError(f"FlashAttentionWgmma: overlap needs stages >= 3 (the tile whose p @ v runs, the "
                              f"next tile's keys, and one being refilled), got {stages}")
        if not (tma is None or isinstance(tma, bool)):
            raise ScriptError(f"FlashAttentionWgmma: tma must be None (when the operands allow it), True or False, "
                              f"got {tma!r}")
        super().__init__(head_dim, block_q, block_kv, block_q // 16, stages, head_dim, causal, dtype, True, heads,
                         packed_qkv)
        self.overlap = bool(overlap)
        self.tma = tma

    def __call__(self, batch_heads: int32, seq_q: int32, seq_k: int32, scale_log2: float32,
                 q_ptr: ~void, k_ptr: ~void, v_ptr: ~void, o_ptr: ~void):
        d, bq, bkv, stages, dtype = self.head_dim, self.block_q, self.block_kv, self.stages, self.dtype
        chunks = d // CHUNK
        self.attrs.blocks = [self.utils.ceil_div(seq_q, bq), batch_heads]
        self.attrs.warps = self.warps
        bh = self.blockIdx.y
        q0: int32 = self.blockIdx.x * bq
        gq, gk, gv, go = self.views(batch_heads, seq_q, seq_k, q_ptr, k_ptr, v_ptr, o_ptr)
        sq = self.shared_tensor(dtype=dtype, shape=[chunks, bq, CHUNK])
        sk = self.shared_tensor(dtype=dtype, shape=[stages, chunks, bkv, CHUNK])
        sv = self.shared_tensor(dtype=dtype, shape=[stages, chunks, bkv, CHUNK])
        num_kv: int32 = self.utils.ceil_div(seq_k, bkv)
        if self.causal:  # the last key a row of this block sees is q0 + bq - 1
            num_kv = min(num_kv, self.utils.ceil_div(q0 + bq, bkv))
        tma = self.tma
        if tma is None:  # TMA reads 16-byte aligned tensors (their rows are: head_dim is 64 or 128)
            tma = self.aligned(q_ptr) and self.aligned(k_ptr) and self.aligned(v_ptr)
        if tma:
            # one barrier a stage of the ring (2 loads a chunk: k and v) and one for q
            bars = self.shared_tensor(dtype=uint64, shape=[stages])
            self.mbarrier_init(bars, arrivals=2 * chunks)
            q_bar = self.shared_tensor(dtype=uint64, shape=[1])
            self.mbarrier_init(q_bar, arrivals=chunks)
            for qc in list(range(chunks)):
                q_at, q_dims = self.tile(bh, 0, q0, qc * CHUNK)
                self.tma_load(src=gq, dst=sq[qc], offsets=q_at, dims=q_dims, barrier=q_bar[0])
            for s in range(stages - 1):  # prologue: the first stages - 1 k/v tiles that exist
                if s < num_kv:
                    self.load_kv(gk, gv, sk, sv, bh, s, s, bars)
            self.mbarrier_wait(q_bar[0], 0)
        else:
            for qc in list(range(chunks)):
                q_at, q_dims = self.tile(bh, 0, q0, qc * CHUNK)
                self.copy_async(src=gq, dst=sq[qc], offsets=q_at, dims=q_dims)
            for s in range(stages - 1):  # prologue: the first stages - 1 k/v tiles in flight (q joins group 0)
                self.load_kv(gk, gv, sk, sv, bh, s, s)
                self.copy_async_commit_group()
        m = self.register_tensor(dtype=float32, shape=[bq, 1], init=M_INIT)
        l = self.register_tensor(dtype=float32, shape=[bq, 1], init=0.0)
        acc = self.register_tensor(dtype=float32, shape=[bq, d], init=0.0)
        key_ids = self.register_tensor(dtype=int32, shape=[1, bkv], init=lambda row, col: col)  # masks at the edges
        query_ids = self.register_tensor(dtype=int32, shape=[bq, 1], init=lambda row, col: row)
        s_cur = self.register_tensor(dtype=float32, shape=[bq, bkv], init=0.0)
        if self.overlap:  # the scores of tile 0 before the loop; the loop computes tile j + 1's
            if tma:
                self.mbarrier_wait(bars[0], 0)
            else:
                self.copy_async_wait_group(stages - 2)
                self.fence_proxy_async()
            self.sync()
            self.wgmma_fence(pin=[s_cur])
            self.scores(sq, sk, 0, s_cur)
            self.wgmma_commit_group()
            self.wgmma_wait_group(0, pin=[s_cur])
        for j in range(num_kv):
            stage = j % stages
            if self.overlap:
                # tile j + 1 has landed (its group is the newest), visible to wgmma, for every warpgroup
                if tma:
                    if j + 1 < num_kv:  # (no tile is loaded past the last; its scores are dropped)
                        self.mbarrier_wait(bars[(j + 1) % stages], (j + 1) // stages % 2)
                else:
                    self.copy_async_wait_group(stages - 3)
                    self.fence_proxy_async()
                self.sync()
                # the next tile's scores run on the tensor cores while this tile's softmax runs (past the
                # last tile they read a zero-filled or unused stage, and are dropped)
                # (the pins name only accumulators not in flight: tile j - 1's p @ v may still run here)
                s_next = self.register_tensor(dtype=float32, shape=[bq, bkv], init=0.0)
                self.wgmma_fence(pin=[s_next])
                self.scores(sq, sk, (j + 1) % stages, s_next)
                self.wgmma_commit_group()
            elif tma:
                self.mbarrier_wait(bars[stage], j // stages % 2)  # tile j has landed
                self.sync()  # every warpgroup is done with tile j - 1's stage
                ahead = j + stages - 1  # refill the stage tile j - 1 used, if a tile is left (no load may
                if ahead < num_kv:  # still be in flight when the block exits)
                    self.load_kv(gk, gv, sk, sv, bh, ahead % stages, ahead, bars)
            else:
                self.copy_async_wait_group(stages - 2)  # tile j has landed ...
                self.fence_proxy_async()  # ... visible to wgmma ...
                self.sync()  # ... and every warpgroup is done with tile j - 1's stage
                ahead = j + stages - 1  # refill the stage tile j - 1 used (zero-filled past the keys)
                self.load_kv(gk, gv, sk, sv, bh, ahead % stages, ahead)
                self.copy_async_commit_group()
            if not self.overlap:
                s_cur = self.register_tensor(dtype=float32, shape=[bq, bkv], init=0.0)
                self.wgmma_fence()
                self.scores(sq, sk, stage, s_cur)
                self.wgmma_commit_group()
                self.wgmma_wait_group(0)
            s = s_cur * scale_log2
            kv0 = j * bkv
            if self.causal:
                if kv0 + bkv > seq_k or kv0 + bkv - 1 > q0:
                    visible = (key_ids < seq_k - kv0) & (key_ids <= query_ids + (q0 - kv0))
                    s = self.where(visible, s, NEG_INF)
            else:
                if kv0 + bkv > seq_k:
                    s = self.where(key_ids < seq_k - kv0, s, NEG_INF)
            # each step bound to a name: a name materializes its tile, while an unnamed expression
            # would be evaluated again where it is used (alpha after m is overwritten)
            m_new = self.maximum(m, self.max(s, dim=1, keepdim=True))
            p = self.exp2(s - m_new)
            alpha = self.exp2(m - m_new)
            l = l * alpha + self.sum(p, dim=1, keepdim=True)
            m = m_new
            if self.overlap:
                # tile j - 1's p @ v is done (the next scores may still run): its registers of p and acc
                # may change now
                self.wgmma_wait_group(1, pin=[acc])
            p16 = p.to(dtype)
            self.assign(acc, acc * alpha)
            self.wgmma_fence(pin=[acc] if self.overlap else None)
            self.wgmma(p16, sv[stage], acc)
            self.wgmma_commit_group()
            if self.overlap:
                # every warpgroup is past tile j - 1's p @ v: its stage takes tile j - 1 + stages
                self.sync()
                if tma:
                    if j + stages - 1 < num_kv:
                        self.load_kv(gk, gv, sk, sv, bh, (j + stages - 1) % stages, j + stages - 1, bars)
                else:
                    self.load_kv(gk, gv, sk, sv, bh, (j + stages - 1) % stages, j + stages - 1)
                    self.copy_async_commit_group()
                self.wgmma_wait_group(1, pin=[s_next])  # the next tile's scores are done (p @ v may still run)
                self.assign(s_cur, s_next)
            else:
                self.wgmma_wait_group(0)
        self.wgmma_wait_group(0)
        if not tma:
            self.copy_async_wait_all()  # the zero-filled copies past the last tile must land before exit
        inv_l = 1.0 / l
        o_at, o_dims = self.tile(bh, 3, q0)
        self.store_global(go, (acc * inv_l).to(dtype), offsets=o_at, dims=o_dims)

    def scores(self, sq, sk, stage: Any, s):
        """Issue ``s += q @ k^T`` on the key tile in ``stage`` of the ring: one ``wgmma`` per 64-column
        chunk of head_dim (the caller fences before and commits after)."""
        for c in list(range(self.head_dim // CHUNK)):
            self.wgmma(sq[c], sk[stage, c].transpose(), s)

    def load_kv(self, gk, gv, sk, sv, bh, stage: Any, tile: Any, bars=None):
        """Key/value tile ``tile`` into ``stage`` of the rings, chunk by chunk (zero-filled past the keys): by TMA
        signalling the stage's barrier of ``bars``, or (None) by ``cp.async``."""
        for c in list(range(self.head_dim // CHUNK)):
            for operand, src, ring in ((1, gk, sk), (2, gv, sv)):
                at, dims = self.tile(bh, operand, tile * self.block_kv, c * CHUNK)
                if bars is None:
                    self.copy_async(src=src, dst=ring[stage, c], offsets=at, dims=dims)
                else:
                    self.tma_load(src=src, dst=ring[stage, c], offsets=at, dims=dims, barrier=bars[stage])
