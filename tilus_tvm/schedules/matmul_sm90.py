"""``MatmulWgmma``: ``c = a @ b.T``-style matmul on Hopper's warpgroup tensor cores (``wgmma``).

``b`` is stored [n, k] (an ``nn.Linear`` weight, ``x @ w.t()``; ``b_layout="col"``), so both operands
are K-major, or [k, n] (``b_layout="row"``, ``a @ b``): then its tiles are kept as 64-column chunks,
which ``wgmma`` reads MN-major. Each block computes a ``block_m x block_n`` tile of ``c`` with ``block_m / 64``
warpgroups (each 64 rows, all ``block_n`` columns). Its ``stages``-deep ring of shared-memory tiles
is read by ``wgmma`` straight from shared memory, with one group of ``wgmma`` in flight. The ring is
filled by TMA when the operands allow it (``tma=None``: both 16-byte aligned, rows of a multiple of 16
bytes), else by ``cp.async``:

    TMA (tma_load, one barrier a stage; stages - 1 tiles ahead):
    iteration k:  wait on tile k's barrier (phase k // stages % 2)
                  wgmma.fence; wgmma over tile k; commit; wait until one group of wgmma runs
                  __syncthreads (every warpgroup is done with tile k - 1); thread 0 loads tile
                  k + stages - 1 into tile k - 1's stage

    cp.async (stages - 2 tiles ahead):
    iteration k:  wait for tile k (cp.async.wait_group), fence.proxy.async, __syncthreads
                  refill the stage of tile k + stages - 2 (its last reader, tile k - 2, is done:
                  every warpgroup waited for it before this barrier)
                  wgmma.fence; wgmma over tile k; commit; wait until one group of wgmma runs

With TMA the threads issue no copies, wait on no copy groups and need no proxy fence: at 8192^3 on an
H200 it ran at 762 TFLOP/s against 621 with ``cp.async`` (cuBLAS: 752). (In the ``cp.async`` form,
issuing the wgmma before the refill's copies measured 6% slower: 606 against 645 TFLOP/s at 4096^3.)

The result is cast and stored through shared memory, masked at the edges: any M, N, K (TMA
zero-fills past the edges; without TMA, K a multiple of 8 for 16-byte copies, other K copy element
by element). Blocks run in groups of ``group_m`` tiles along m (Triton's grouped order), so that the
blocks in flight share rows of ``a`` and ``b`` in the L2.

    kernel = MatmulWgmma(block_m=128, block_n=256, block_k=64, stages=4)
    kernel(m, n, k, a, w, c)          # a [m, k], w [n, k], c [m, n]: c = a @ w.T
    MatmulWgmma(b_layout="row")(m, n, k, a, b, c)                # b [k, n]: c = a @ b

It needs an ``sm_90a`` target (an H100 or H200); :func:`tilus_tvm.schedules.matmul.matmul` takes it
there from 65 rows, with the tile :func:`tilus_tvm.schedules.matmul.wgmma_tile` picks.
"""
from __future__ import annotations

from typing import Any, Optional

import tilus_tvm as tilus
from tilus_tvm import bfloat16, float16, float32, int32, uint64, void
from tilus_tvm.dtypes import as_dtype
from tilus_tvm.errors import ScriptError
from tilus_tvm.schedules.matmul import store_through_shared

# (block_m, block_n, block_k, stages): the tuning space
TILES = [(128, 256, 64, 4), (128, 128, 64, 5), (128, 128, 64, 6), (64, 256, 64, 5), (128, 256, 32, 6),
         (256, 128, 64, 4)]


@tilus.autotune("block_m, block_n, block_k, stages", TILES, bucket={"m_size": "pow2"}, opt_in=True)
class MatmulWgmma(tilus.Script):
    """``c[m, n] = a[m, k] @ w[n, k].T`` with float32 accumulation (see the module docstring)."""

    def __init__(self, block_m: int = 128, block_n: int = 256, block_k: int = 64, stages: int = 4,
                 dtype: Any = float16, group_m: int = 16, b_layout: str = "col", tma: Optional[bool] = None,
                 gated: bool = False):
        super().__init__()
        dtype = as_dtype(dtype)
        if dtype not in (float16, bfloat16):
            raise ScriptError(f"MatmulWgmma: dtype must be float16 or bfloat16, got {dtype.name}")
        if block_m % 64 or not 64 <= block_m <= 256:
            raise ScriptError(f"MatmulWgmma: block_m={block_m} must be 64, 128, 192 or 256 (64 rows a warpgroup)")
        if block_n % 8 or not 8 <= block_n <= 256:
            raise ScriptError(f"MatmulWgmma: block_n={block_n} must be a multiple of 8 up to 256")
        if block_k not in (16, 32, 64):
            raise ScriptError(f"MatmulWgmma: block_k={block_k} must be 16, 32 or 64 (rows of at most 128 bytes)")
        if stages < 3:
            raise ScriptError(f"MatmulWgmma: stages must be at least 3 (one tile read by wgmma, one waited for, "
                              f"one in flight), got {stages}")
        if group_m < 1:
            raise ScriptError(f"MatmulWgmma: group_m must be at least 1, got {group_m}")
        if b_layout not in ("row", "col"):
            raise ScriptError(f"MatmulWgmma: b_layout must be 'row' or 'col', got {b_layout!r}")
        if b_layout == "row" and block_n % 64:
            raise ScriptError(f"MatmulWgmma: block_n={block_n} must be a multiple of 64 with b_layout='row' (b's "
                              f"tiles are read in 64-column chunks)")
        self.b_layout = b_layout
        if not (tma is None or isinstance(tma, bool)):
            raise ScriptError(f"MatmulWgmma: tma must be None (when the operands allow it), True or False, got {tma!r}")
        self.tma = tma
        if gated and (b_layout != "col" or block_n % 16):
            raise ScriptError(f"MatmulWgmma: gated=True takes b_layout='col' and block_n a multiple of 16 (half the "
                              f"tile is gate columns, half up), got b_layout={b_layout!r}, block_n={block_n}")
        self.gated = bool(gated)
        self.block_m, self.block_n, self.block_k, self.stages, self.dtype = block_m, block_n, block_k, stages, dtype
        self.group_m = group_m

    def __call__(self, m_size: int32, n_size: int, k_size: int, a_ptr: ~void, b_ptr: ~void, c_ptr: ~void):
        bm, bn, bk, stages, dtype = self.block_m, self.block_n, self.block_k, self.stages, self.dtype
        blocks_m = self.utils.ceil_div(m_size, bm)
        out_n = bn // 2 if self.gated else bn  # columns of c a block writes
        blocks_n = self.utils.ceil_div(n_size, out_n)
        self.attrs.blocks = [blocks_m * blocks_n]
        self.attrs.warps = bm // 16
        # Grouped order: consecutive blocks sweep group_m tiles of m, then move along n, so a wave of
        # blocks shares a few [bm, k] rows of a and [bn, k] rows of b in the L2 instead of streaming all of a.
        per_group = self.group_m * blocks_n
        first_m = self.blockIdx.x // per_group * self.group_m
        rows = min(blocks_m - first_m, self.group_m)
        within = self.blockIdx.x % per_group
        offset_m: int32 = bm * (first_m + within % rows)
        offset_n: int32 = out_n * (within // rows)
        ga = self.global_view(a_ptr, dtype=dtype, shape=[m_size, k_size])
        col = self.b_layout == "col"
        # gated: w stacks the gate rows [n, k] over the up rows [n, k]
        w_rows = 2 * n_size if self.gated else n_size
        gb = self.global_view(b_ptr, dtype=dtype, shape=[w_rows, k_size] if col else [k_size, n_size])
        gc = self.global_view(c_ptr, dtype=dtype, shape=[m_size, n_size])
        sa = self.shared_tensor(dtype=dtype, shape=[stages, bm, bk])
        # b's tiles: [bn, bk] (k contiguous), or [bn / 64, bk, 64] chunks of a row-major b (n contiguous)
        sb = self.shared_tensor(dtype=dtype, shape=[stages, bn, bk] if col else [stages, bn // 64, bk, 64])
        acc = self.register_tensor(dtype=float32, shape=[bm, bn], init=0.0)
        num_k = (k_size + bk - 1) // bk
        tma = self.tma
        if tma is None:  # TMA reads 16-byte aligned operands with rows of a multiple of 16 bytes
            tma = self.aligned(a_ptr) and self.aligned(b_ptr) and k_size % 8 == 0 and (col or n_size % 8 == 0)
        if tma:
            # Tile k lands in stage k % stages, signalled on its barrier. Once every warpgroup has issued
            # the wgmma of tile k and waited for that of tile k - 1 (sync), thread 0 refills tile k - 1's
            # stage with tile k + stages - 1. (Inline: the frontend parses __call__'s loops only.)
            bars = self.shared_tensor(dtype=uint64, shape=[stages])
            self.mbarrier_init(bars, arrivals=1 + len(self.b_tiles(gb, sb, 0, 0, 0)))  # one a tma_load
            for s in range(min(stages - 1, num_k)):
                self.load_tiles_tma(ga, gb, sa, sb, bars, s, offset_m, offset_n)
            refilling = max(num_k - (stages - 1), 0)
            for refill in [True, False]:
                for k in self.range(0, refilling) if refill else self.range(refilling, num_k):
                    self.mbarrier_wait(bars[k % stages], k // stages % 2)
                    self.wgmma_fence()
                    self.wgmma(sa[k % stages], sb[k % stages].transpose() if col else sb[k % stages], acc)
                    self.wgmma_commit_group()
                    self.wgmma_wait_group(1)
                    if refill:
                        self.sync()
                        self.load_tiles_tma(ga, gb, sa, sb, bars, k + stages - 1, offset_m, offset_n)
        else:
            ahead = stages - 2  # tiles in flight from global memory
            for s in range(ahead):
                self.copy_async(src=ga, dst=sa[s], offsets=[offset_m, s * bk])
                self.copy_b(gb, sb, s, s * bk, offset_n)
                self.copy_async_commit_group()
            # The first loop refills a stage every iteration; the last `ahead` iterations have no tile left
            # to fetch and commit empty groups, so the wait count stays the same (k_size is compile-time).
            refilling = max(num_k - ahead, 0)
            for refill in [True, False]:
                for k in self.range(0, refilling) if refill else self.range(refilling, num_k):
                    self.copy_async_wait_group(ahead - 1)
                    self.fence_proxy_async()
                    self.sync()
                    if refill:
                        tile = k + ahead
                        self.copy_async(src=ga, dst=sa[tile % stages], offsets=[offset_m, tile * bk])
                        self.copy_b(gb, sb, tile % stages, tile * bk, offset_n)
                    self.copy_async_commit_group()
                    self.wgmma_fence()
                    self.wgmma(sa[k % stages], sb[k % stages].transpose() if col else sb[k % stages], acc)
                    self.wgmma_commit_group()
                    self.wgmma_wait_group(1)
        self.wgmma_wait_group(0)
        if self.gated:  # c = silu(gate) * up, in float32, rounded once
            gate = acc[:, 0:out_n]
            up = acc[:, out_n:bn]
            store_through_shared(self, gate * self.sigmoid(gate) * up, [sa, sb], gc, [offset_m, offset_n], dtype)
        else:
            store_through_shared(self, acc, [sa, sb], gc, [offset_m, offset_n], dtype)

    def load_tiles_tma(self, ga, gb, sa, sb, bars, tile, offset_m, offset_n):
        """TMA loads of tile ``tile``'s a and b into stage ``tile % stages``, signalled on its barrier."""
        stage, k0 = tile % self.stages, tile * self.block_k
        self.tma_load(src=ga, dst=sa[stage], offsets=[offset_m, k0], barrier=bars[stage])
        for dst, offsets in self.b_tiles(gb, sb, stage, k0, offset_n):
            self.tma_load(src=gb, dst=dst, offsets=offsets, barrier=bars[stage])

    def copy_b(self, gb, sb, stage, k0, offset_n):
        """cp.async of b's tile for k0 into ``sb[stage]`` (:meth:`b_tiles`)."""
        for dst, offsets in self.b_tiles(gb, sb, stage, k0, offset_n):
            self.copy_async(src=gb, dst=dst, offsets=offsets)

    def b_tiles(self, gb, sb, stage, k0, offset_n) -> list:
        """``(shared destination, offsets in gb)`` of each copy that brings b's tile for k0 into ``sb[stage]``:
        one [bn, bk] tile; gated, the gate rows' [bn / 2, bk] tile over the up rows'; row-major b, bn / 64
        [bk, 64] chunks."""
        if self.gated:
            half = self.block_n // 2
            return [(sb[stage, 0:half], [offset_n, k0]),
                    (sb[stage, half:self.block_n], [gb.shape[0] // 2 + offset_n, k0])]
        if self.b_layout == "col":
            return [(sb[stage], [offset_n, k0])]
        return [(sb[stage, chunk], [k0, offset_n + chunk * 64]) for chunk in range(self.block_n // 64)]
