"""``MatmulSplitK``: ``c = a @ b`` for few rows and a long k, with the k dimension split over blocks.

With a small ``m`` (decode, small batches) the output has few tiles, so the plain ``Matmul`` runs
too few blocks to fill the GPU while each block walks the whole of k. Here the grid is
``(n tiles, m tiles, splits)``: block ``z`` multiplies the k tiles of its split with the same
pipeline as ``Matmul`` (``copy_async`` into swizzled shared memory, ``ldmatrix``, ``mma.sync``,
float32 accumulation), then the splits of one output tile are summed in order:

- every split stores its float32 partial tile into its slot of a workspace (``self.global_tensor``,
  not cleared) and arrives at the tile's counter (``arrive_last``: a fence and an atomic add);
- the split that arrives last adds the partial tiles of all splits, split 0 first, writes ``c`` (cast
  to float16/bfloat16) and sets the counter back to 0, so the counters (a ``requires_clean=True``
  workspace) are clean for the next launch.

The sum is deterministic (always split 0, 1, ... in float32, whichever split arrives last), and no
split waits for another (a chain of semaphores, split ``z`` waiting for ``z - 1``, made each hand-off
a release, an acquire and a round trip of the partial tile).

    kernel = MatmulSplitK(block_m=16, block_n=128, block_k=64, warps=4, stages=4, splits=8)
    kernel(m, n, k, a, b, c)       # a [m, k], b [k, n] (or [n, k] with b_layout="col"), c [m, n]
    c = matmul(a, b)               # tilus_tvm.schedules.matmul picks split-K where it pays (see choose_splits)
"""
from __future__ import annotations

import functools
from typing import Any, Optional

from tilus_tvm import bfloat16, float16, float32, int32, void
from tilus_tvm.errors import ScriptError
from tilus_tvm.schedules.matmul import Matmul

MAX_SPLITS = 65535  # CUDA's limit on gridDim.z


class MatmulSplitK(Matmul):
    """``c[m, n] = a[m, k] @ b[k, n]`` with k split over ``splits`` blocks per output tile (see the
    module docstring). The other hyper-parameters are ``Matmul``'s; ``splits`` must be in
    [1, number of k tiles] (``ceil(k / block_k)``), checked when the kernel is compiled for a k.
    """

    def __init__(self, block_m: int = 16, block_n: int = 128, block_k: int = 64, warps: int = 4, stages: int = 4,
                 splits: int = 4, b_layout: str = "row", dtype: Any = float16):
        super().__init__(block_m, block_n, block_k, warps, stages, 1, b_layout, dtype)
        if isinstance(splits, bool) or not isinstance(splits, int) or not 1 <= splits <= MAX_SPLITS:
            raise ScriptError(f"MatmulSplitK: splits must be an int in [1, {MAX_SPLITS}] (blocks along gridDim.z), "
                              f"got {splits!r}")
        self.splits = splits

    def tiles_per_split(self, k_size: int) -> int:
        """The k tiles each split multiplies (the last split may get fewer); rejects a ``splits``
        larger than the number of k tiles."""
        k_tiles = (k_size + self.block_k - 1) // self.block_k
        if self.splits > max(k_tiles, 1):
            raise ScriptError(f"MatmulSplitK: splits={self.splits} exceeds the {k_tiles} k tiles of k_size={k_size} "
                              f"(block_k={self.block_k}); use at most {max(k_tiles, 1)} splits")
        return max((k_tiles + self.splits - 1) // self.splits, 1)

    def __call__(self, m_size: int32, n_size: int, k_size: int, a_ptr: ~void, b_ptr: ~void, c_ptr: ~void):
        bm, bn, bk, stages, splits = self.block_m, self.block_n, self.block_k, self.stages, self.splits
        tiles = self.tiles_per_split(k_size)
        k_tiles = (k_size + bk - 1) // bk
        n_tiles = (n_size + bn - 1) // bn
        m_tiles = self.utils.ceil_div(m_size, bm)
        self.attrs.blocks = [n_tiles, m_tiles, splits]
        self.attrs.warps = self.warps
        offset_n: int32 = bn * self.blockIdx.x
        offset_m: int32 = bm * self.blockIdx.y
        split: int32 = self.blockIdx.z
        first_k: int32 = split * (tiles * bk)  # the split's first k element
        num_k: int32 = max(min(k_tiles - split * tiles, tiles), 0)  # k tiles of this split
        dtype = self.dtype
        col = self.b_layout == "col"
        ga, gb, gc, sa, sb = self.operands(m_size, n_size, k_size, a_ptr, b_ptr, c_ptr)
        acc = self.register_tensor(dtype=float32, shape=[bm, bn], init=0.0)
        steps = bk // 16
        # Matmul's pipeline over the split's tiles; a tile past the split's end is never copied (it
        # belongs to the next split), but every group is committed so the wait counts stay right.
        for s in range(stages - 1):
            if s < num_k:
                self.copy_async(src=ga, dst=sa[s], offsets=[offset_m, first_k + s * bk])
                self.copy_async(src=gb, dst=sb[s], offsets=[offset_n, first_k + s * bk] if col
                                else [first_k + s * bk, offset_n])
            self.copy_async_commit_group()
        self.copy_async_wait_group(stages - 2)
        self.sync()
        a = self.load_shared(sa[0], offsets=[0, 0], shape=[bm, 16])
        b = self.load_shared(self.b_tile(sb[0]), offsets=[0, 0], shape=[16, bn])
        for k in range(num_k):
            for step in list(range(steps)):
                if step == 0:
                    ahead = k + stages - 1
                    if ahead < num_k:
                        self.copy_async(src=ga, dst=sa[ahead % stages], offsets=[offset_m, first_k + ahead * bk])
                        self.copy_async(src=gb, dst=sb[ahead % stages],
                                        offsets=[offset_n, first_k + ahead * bk] if col
                                        else [first_k + ahead * bk, offset_n])
                    self.copy_async_commit_group()
                a_next, b_next = self.mma_step(sa, sb, k, step, a, b, acc)
                a = a_next
                b = b_next
        self.copy_async_wait_all()
        if splits == 1:
            self.store_global(gc, acc.to(dtype), offsets=[offset_m, offset_n])
        else:
            partials = self.global_tensor(dtype=float32, shape=[splits, m_size, n_size], requires_clean=False)
            counters = self.global_tensor(dtype=int32, shape=[m_tiles, n_tiles], requires_clean=True)
            self.store_global(partials, acc, offsets=[split, offset_m, offset_n], dims=[1, 2])
            if self.arrive_last(counters[self.blockIdx.y, self.blockIdx.x].item_ptr(), splits):
                total = self.load_global(partials, offsets=[0, offset_m, offset_n], shape=[bm, bn], dims=[1, 2],
                                         layout=acc.layout)
                for z in range(1, splits):  # a run-time loop: splits may be many
                    total = total + self.load_global(partials, offsets=[z, offset_m, offset_n], shape=[bm, bn],
                                                     dims=[1, 2], layout=acc.layout)
                self.store_global(gc, total.to(dtype), offsets=[offset_m, offset_n])


# Split-K configurations (block_m, block_n, block_k, warps, stages) by the largest m they serve:
# the block's rows cover m at once, so b is read once per split. Chosen from the shapes of the
# plain Matmul's small-m row and its 64x64 warp tiles; to be re-measured with scripts/bench_matmul.py.
SPLIT_K_CONFIGS = ((16, (16, 128, 64, 4, 4)), (32, (32, 128, 64, 4, 4)), (64, (64, 128, 64, 4, 4)),
                   (128, (128, 128, 64, 4, 3)))
# When matmul() splits k: m within the table above, k of at least SPLIT_K_MIN_K (shorter k leaves
# too little work per split to pay for the ordered reduction), and fewer output tiles than SMs.
# Then the splits bring the grid to at most SPLIT_K_BLOCKS_PER_SM blocks per SM (rounded down: a grid
# just over a wave waits for its tail -- H100, 32 output tiles: 4 splits 0.0429-0.0554 ms against
# 0.0441-0.0782 for 5 at 1, 16, 64 and 128 x 4096 x 14336; 64 tiles: 2 splits 0.156 ms against 0.167 for 3
# at 32 x 8192 x 28672), keeping at least
# SPLIT_K_MIN_TILES k tiles per split and at most SPLIT_K_MAX_SPLITS splits. One block per SM
# already keeps (stages - 1) tiles of b in flight on every SM, which a memory-bound product needs;
# more splits add partial tiles for the last split to read back.
SPLIT_K_MIN_K = 8192
SPLIT_K_BLOCKS_PER_SM = 1
SPLIT_K_MIN_TILES = 8
SPLIT_K_MAX_SPLITS = 16


def split_k_config(m: int) -> Optional[tuple[int, ...]]:
    """The split-K configuration for ``m`` rows, or None when ``m`` is beyond the table."""
    return next((config for limit, config in SPLIT_K_CONFIGS if m <= limit), None)


def choose_splits(m: int, n: int, k: int, num_sms: int) -> int:
    """How many splits :func:`~tilus_tvm.schedules.matmul.matmul` uses for an ``m x n x k`` product on
    a GPU with ``num_sms`` SMs (1: the plain ``Matmul``); see the rule above ``SPLIT_K_MIN_K``."""
    config = split_k_config(m)
    if config is None or k < SPLIT_K_MIN_K or m < 1 or n < 1:
        return 1
    block_m, block_n, block_k = config[:3]
    tiles = -(-m // block_m) * -(-n // block_n)
    if tiles >= num_sms:
        return 1
    wanted = max(1, SPLIT_K_BLOCKS_PER_SM * num_sms // tiles)  # at most one wave
    return max(1, min(wanted, -(-k // block_k) // SPLIT_K_MIN_TILES, SPLIT_K_MAX_SPLITS))


_KERNELS: dict = {}


def split_k_kernel(m: int, splits: int, dtype: Any, b_layout: str = "row") -> MatmulSplitK:
    """The ``MatmulSplitK`` for ``m`` rows with ``splits`` splits (one instance per configuration)."""
    config = split_k_config(m) or SPLIT_K_CONFIGS[-1][1]
    key = (config, splits, str(dtype), b_layout)
    if key not in _KERNELS:
        _KERNELS[key] = MatmulSplitK(*config, splits=splits, b_layout=b_layout,
                                     dtype=bfloat16 if "bfloat16" in str(dtype) else float16)
    return _KERNELS[key]


@functools.lru_cache(maxsize=None)
def sm_count(device_index: int) -> int:
    """Streaming multiprocessors of CUDA device ``device_index``."""
    import torch

    return torch.cuda.get_device_properties(device_index).multi_processor_count

