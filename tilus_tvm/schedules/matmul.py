"""``Matmul``: a pipelined tensor-core matmul, ``c = a @ b`` in float16 or bfloat16.

The pointers are ``~void``: the tensors' dtype is part of the specialisation and must be the
kernel's ``dtype``.

Each block computes a ``block_m x block_n`` tile of ``c``. Its ``stages``-deep pipeline keeps
``stages - 1`` pairs of ``a`` and ``b`` tiles in flight: ``copy_async`` (``cp.async``, 16 bytes a
thread, zero-filled at the matrix edges) brings them into swizzled shared memory, ``load_shared``
reads them with ``ldmatrix`` straight into ``mma.sync`` fragments, and ``dot`` accumulates in
float32 registers. The result is cast and stored, masked at the edges, so any M, N, K is correct.

    kernel = Matmul(block_m=128, block_n=128, block_k=32, warps=8, stages=4)
    kernel(m, n, k, a, b, c)          # a [m, k], b [k, n] (or [n, k] with b_layout="col"), c [m, n]
    c = matmul(a, b)                   # picks a configuration for the shape
    c = matmul(a, b, tune=True)        # the tuned configuration (docs/tuning.md)

``Matmul`` carries an ``@autotune`` space of 32 configurations (tile and warps, ``block_k``,
``stages``; ``m_size`` bucketed by powers of two) holding every configuration of the hand-picked
tables. It is ``opt_in``: ``Matmul()`` is the default configuration; ``tilus_tvm.tune(Matmul(), ...)``
or ``tilus_tvm.tune.tunable(Matmul)`` tune.
"""
from __future__ import annotations

from typing import Any, Optional

import tilus_tvm as tilus
from tilus_tvm import bfloat16, float16, float32, int32, void
from tilus_tvm.dtypes import as_dtype
from tilus_tvm.errors import LaunchError, ScriptError
from tilus_tvm.tune.library import tuned_kernel, use_tuned

# (block_m, block_n, warps): thin tiles for small m, 64x64 warp tiles for large problems
TUNED_TILES = [(16, 128, 4), (32, 128, 4), (64, 128, 4), (64, 256, 8), (128, 128, 4), (128, 128, 8), (128, 256, 8),
               (256, 128, 8)]


@tilus.autotune("block_m, block_n, warps", TUNED_TILES, bucket={"m_size": "pow2"}, opt_in=True)
@tilus.autotune("block_k", [32, 64])
@tilus.autotune("stages", [3, 4])
class Matmul(tilus.Script):
    """``c[m, n] = a[m, k] @ b[k, n]`` with float32 accumulation (see the module docstring).

    ``block_m``/``block_n``/``block_k``: the block's tile; ``warps``: warps per block (the C tile is
    split among them); ``stages``: shared-memory pipeline depth (>= 2); ``b_layout``: ``"row"`` for
    ``b`` stored [k, n], ``"col"`` for ``b`` stored [n, k] (``b = w.t()`` of a row-major ``w``).
    """

    def __init__(self, block_m: int = 128, block_n: int = 256, block_k: int = 64, warps: int = 8,
                 stages: int = 3, min_blocks: int = 1, b_layout: str = "row", dtype: Any = float16):
        super().__init__()
        dtype = as_dtype(dtype)
        if dtype not in (float16, bfloat16):
            raise ScriptError(f"Matmul: dtype must be float16 or bfloat16, got {dtype.name}")
        self.dtype = dtype
        if stages < 2:
            raise ScriptError(f"Matmul: stages must be at least 2, got {stages}")
        if b_layout not in ("row", "col"):
            raise ScriptError(f"Matmul: b_layout must be 'row' or 'col', got {b_layout!r}")
        for name, value, multiple in (("block_m", block_m, 16), ("block_n", block_n, 16), ("block_k", block_k, 16)):
            if value % multiple:
                raise ScriptError(f"Matmul: {name}={value} must be a multiple of {multiple} (the mma.sync tile)")
        self.block_m, self.block_n, self.block_k = block_m, block_n, block_k
        self.warps, self.stages, self.min_blocks, self.b_layout = warps, stages, min_blocks, b_layout

    def __call__(self, m_size: int32, n_size: int, k_size: int, a_ptr: ~void, b_ptr: ~void, c_ptr: ~void):
        bm, bn, bk, stages = self.block_m, self.block_n, self.block_k, self.stages
        self.attrs.blocks = [self.utils.ceil_div(m_size, bm), self.utils.ceil_div(n_size, bn)]
        self.attrs.warps = self.warps
        self.attrs.min_blocks_per_sm = self.min_blocks
        offset_m: int32 = bm * self.blockIdx.x
        offset_n: int32 = bn * self.blockIdx.y
        dtype = self.dtype
        col = self.b_layout == "col"
        ga, gb, gc, sa, sb = self.operands(m_size, n_size, k_size, a_ptr, b_ptr, c_ptr)
        acc = self.register_tensor(dtype=float32, shape=[bm, bn], init=0.0)
        num_k = (k_size + bk - 1) // bk
        steps = bk // 16  # mma k-steps per tile
        for s in range(stages - 1):  # prologue: the first stages - 1 tiles in flight
            self.copy_async(src=ga, dst=sa[s], offsets=[offset_m, s * bk])
            self.copy_async(src=gb, dst=sb[s], offsets=[offset_n, s * bk] if col else [s * bk, offset_n])
            self.copy_async_commit_group()
        self.copy_async_wait_group(stages - 2)
        self.sync()
        # Fragments of the next k-step are loaded (ldmatrix) before the current one is multiplied,
        # so their latency hides behind the mma of this step.
        a = self.load_shared(sa[0], offsets=[0, 0], shape=[bm, 16])
        b = self.load_shared(self.b_tile(sb[0]), offsets=[0, 0], shape=[16, bn])
        # The first loop refills a stage every iteration; the last stages - 1 iterations have no tile
        # left to fetch and commit empty groups, so the wait counts stay the same. With a static k the
        # refill loop never reaches past k, and its copies need no k mask.
        refilling = max(num_k - (stages - 1), 0)  # k_size is a compile-time int
        for refill in [True, False]:
            for k in self.range(0, refilling) if refill else self.range(refilling, num_k):
                for step in list(range(steps)):  # unrolled while translating: step is an int
                    if step == 0:  # refill the stage every thread finished reading in the last iteration
                        if refill:
                            ahead = k + stages - 1
                            self.copy_async(src=ga, dst=sa[ahead % stages], offsets=[offset_m, ahead * bk])
                            self.copy_async(src=gb, dst=sb[ahead % stages],
                                            offsets=[offset_n, ahead * bk] if col else [ahead * bk, offset_n])
                        self.copy_async_commit_group()
                    a_next, b_next = self.mma_step(sa, sb, k, step, a, b, acc)
                    a = a_next
                    b = b_next
        store_through_shared(self, acc, [sa, sb], gc, [offset_m, offset_n], dtype)


    def operands(self, m_size, n_size, k_size, a_ptr, b_ptr, c_ptr):
        """Global views of a, b and c and the ``stages``-deep shared buffers of a's and b's tiles
        (b's tiles stored [block_n, block_k] when b is column-major)."""
        dtype, stages, bm, bn, bk = self.dtype, self.stages, self.block_m, self.block_n, self.block_k
        col = self.b_layout == "col"  # b stored [n, k]: its tiles are read through a transposed view
        ga = self.global_view(a_ptr, dtype=dtype, shape=[m_size, k_size])
        gb = self.global_view(b_ptr, dtype=dtype, shape=[n_size, k_size] if col else [k_size, n_size])
        gc = self.global_view(c_ptr, dtype=dtype, shape=[m_size, n_size])
        sa = self.shared_tensor(dtype=dtype, shape=[stages, bm, bk])
        sb = self.shared_tensor(dtype=dtype, shape=[stages, bn, bk] if col else [stages, bk, bn])
        return ga, gb, gc, sa, sb

    def mma_step(self, sa, sb, k, step: int, a, b, acc):
        """k-step ``step`` of tile ``k``: load the fragments of the next step (at a tile's last step,
        after waiting for the next tile to land: its stage, first step), then ``acc += a @ b``.
        Returns the next fragments (loaded first, so the backend spreads them among the mma)."""
        stages, bm, bn = self.stages, self.block_m, self.block_n
        if step == self.block_k // 16 - 1:  # the next tile must have landed before its first fragments load
            self.copy_async_wait_group(stages - 2)
            self.sync()
            next_stage = (k + 1) % stages
            a_next = self.load_shared(sa[next_stage], offsets=[0, 0], shape=[bm, 16])
            b_next = self.load_shared(self.b_tile(sb[next_stage]), offsets=[0, 0], shape=[16, bn])
        else:
            stage = k % stages
            a_next = self.load_shared(sa[stage], offsets=[0, (step + 1) * 16], shape=[bm, 16])
            b_next = self.load_shared(self.b_tile(sb[stage]), offsets=[(step + 1) * 16, 0], shape=[16, bn])
        self.dot(a, b, acc, out=acc)
        return a_next, b_next

    def b_tile(self, stage_tile):
        """One stage of b's shared buffer as a [block_k, block_n] tile (transposed when b is column-major)."""
        return stage_tile.transpose() if self.b_layout == "col" else stage_tile


def store_through_shared(script: tilus.Script, acc: Any, pipeline: list, gc: Any, offsets: list, dtype: Any) -> None:
    """A pipelined matmul's epilogue: once the last (zero-filled) copies have landed, the pipeline's shared
    tensors give their memory to a staging tile of c. Fragments hold pairs of elements, a coalesced layout
    holds 16-byte vectors, so c leaves through shared memory with full-width stores."""
    script.copy_async_wait_all()
    script.sync()
    for tensor in pipeline:
        script.free_shared(tensor)
    sc = script.shared_tensor(dtype=dtype, shape=list(acc.shape))
    script.store_shared(sc, acc.to(dtype))
    script.sync()
    script.store_global(gc, script.load_shared(sc), offsets=offsets)


def matmul(a: Any, b: Any, out: Optional[Any] = None, splits: Optional[int] = None, *,
           tune: Optional[bool] = None) -> Any:
    """``a @ b`` for float16 or bfloat16 CUDA tensors ``a`` [m, k] and ``b`` [k, n], into ``out`` (new if None).

    ``b`` may be row-major or the transpose of a row-major [n, k] tensor (``w.t()``, as in
    ``x @ w.t()``); other strides are made contiguous first. On an H100 or H200 with at least
    ``WGMMA_MIN_ROWS`` rows and enough blocks (:func:`wgmma_tile`) it runs
    :class:`~tilus_tvm.schedules.matmul_sm90.MatmulWgmma` (Hopper's ``wgmma``). Otherwise the configuration comes from a small
    table by ``m`` (measured on an H100; see ``scripts/bench_matmul.py``), or, with ``tune=True``
    (``None``: ``tilus_tvm.tune.configure(library=...)``), from the tuning database: the first call
    of a key (n, k, dtypes, layout, the GPU, m rounded up to a power of two) tunes ``Matmul``'s space.
    For few rows and a long k, k is split over blocks
    (:class:`~tilus_tvm.schedules.matmul_splitk.MatmulSplitK`, chosen by ``choose_splits``);
    ``splits`` overrides the choice (1: never split).

        y = matmul(x, w.t())                  # x [tokens, 4096], w [14336, 4096]: y [tokens, 14336]
    """
    import torch

    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise LaunchError(f"matmul: a {list(a.shape)} and b {list(b.shape)} must be [m, k] and [k, n]")
    if a.dtype != b.dtype or a.dtype not in (torch.float16, torch.bfloat16):
        raise LaunchError(f"matmul: a and b must both be float16 or both bfloat16, got {a.dtype} and {b.dtype}")
    m, k = a.shape
    n = b.shape[1]
    if out is None:
        out = torch.empty(m, n, dtype=a.dtype, device=a.device)
    elif tuple(out.shape) != (m, n) or out.dtype != a.dtype or not out.is_contiguous():
        raise LaunchError(f"matmul: out must be a contiguous {a.dtype} tensor of shape [{m}, {n}], got "
                          f"{out.dtype} {list(out.shape)}")
    column_major = b.stride() == (1, k) and not b.is_contiguous()
    b_layout = "col" if column_major else "row"
    b_arg = b.t() if column_major else b.contiguous()
    from tilus_tvm.schedules import matmul_splitk

    capability = torch.cuda.get_device_capability(a.device) if a.is_cuda else (0, 0)
    multiprocessors = matmul_splitk.sm_count(a.device.index) if a.is_cuda else 132
    wgmma = capability == (9, 0)
    if splits is None and wgmma and wgmma_tile(m, n, multiprocessors) is not None:
        splits = 1  # MatmulWgmma's grid fills the GPU
    if splits is None:
        splits = matmul_splitk.choose_splits(m, n, k, multiprocessors) if a.is_cuda else 1
    elif isinstance(splits, bool) or not isinstance(splits, int) or splits < 1:
        raise LaunchError(f"matmul: splits must be a positive int or None, got {splits!r}")
    if splits > 1:
        kernel = matmul_splitk.split_k_kernel(m, splits, a.dtype, b_layout)
    elif use_tuned(tune, "matmul"):
        kernel = tuned_kernel(Matmul, b_layout=b_layout, dtype=bfloat16 if a.dtype == torch.bfloat16 else float16)
    else:
        kernel = kernel_for(m, a.dtype, b_layout, capability[0] >= 9, wgmma=wgmma, n=n, multiprocessors=multiprocessors)
    kernel(m, n, k, a.contiguous(), b_arg, out)
    return out


# (block_m, block_n, block_k, warps, stages, min_blocks) by the largest m it serves, measured on an
# H100 with scripts/bench_matmul.py: thin blocks while m is small (enough blocks to fill the GPU),
# 128 x 256 tiles with 64x64 warp tiles beyond. Hopper's 227 KB of shared memory would take a fourth
# stage, but once copies interleave with the mma instructions three stages are as fast or faster
# (4096^3: 466 against 463 TFLOP/s; 8192^3: 464 against 461).
# Tuning Matmul's 32-configuration space (scripts/bench_tuning.py, H100) kept these choices at 16 x
# 14336 x 4096, 4096^3, 8192^3 and 1024 x 28672 x 4096, and replaced one: at 128 x 4096 x 14336,
# 32 x 128 blocks beat 16 x 128 (runner: 0.0694 against 0.0813 ms; CUDA events 0.0804 against
# 0.0834 ms). Rows 65-128 take them on Hopper; up to 64 rows keep 16-row blocks (twice the blocks).
CONFIGS = ((128, (16, 128, 64, 4, 4, 1)), (None, (128, 256, 64, 8, 3, 1)))
HOPPER_CONFIGS = ((64, (16, 128, 64, 4, 4, 1)), (128, (32, 128, 64, 4, 4, 1)), (None, (128, 256, 64, 8, 3, 1)))
# With wgmma (sm_90a), MatmulWgmma takes over from WGMMA_MIN_ROWS rows, with the largest of WGMMA_TILES
# (block_m, block_n, block_k, stages) whose grid fills at least half the SMs; with fewer blocks Matmul's table
# (or split K) serves below 257 rows, the last tile from 257 rows. H200, TMA, b = w.t() (bench_matmul.py):
# 256 x 4096 x 4096: 64 x 128 tiles 0.0310 ms (128 blocks), 128 x 256 0.0444 (32 blocks), Matmul 0.0349;
# 256 x 11008 x 4096: 128 x 256 0.0463 (86 blocks), 64 x 256 0.0623 (172), Matmul 0.0761;
# 128 x 28672 x 4096: 128 x 256 0.0668 (112 blocks), Matmul 0.0808; 128 x 4096 x 14336 (64 blocks at most):
# MatmulWgmma 0.0924, Matmul 0.0704, split K 0.0872 -- left to the table.
WGMMA_MIN_ROWS = 65
WGMMA_TILES = ((128, 256, 64, 4), (64, 256, 64, 4), (64, 128, 64, 5))
WGMMA_CONFIG = WGMMA_TILES[0]
_KERNELS: dict = {}


def wgmma_tile(m: int, n: Optional[int] = None, multiprocessors: int = 132) -> Optional[tuple]:
    """The ``MatmulWgmma`` tile for ``m`` x ``n`` (see ``WGMMA_TILES``), or None where ``Matmul`` serves better
    (fewer than ``WGMMA_MIN_ROWS`` rows, or a grid that fills under half the SMs below 257 rows). ``n`` None:
    a wide output (the first tile)."""
    if m < WGMMA_MIN_ROWS:
        return None
    if n is None:
        return WGMMA_TILES[0]
    for tile in WGMMA_TILES:
        if -(-m // tile[0]) * -(-n // tile[1]) >= multiprocessors // 2:
            return tile
    return WGMMA_TILES[-1] if m >= 257 else None


def kernel_for(m: int, dtype: Any, b_layout: str = "row", hopper: bool = False, wgmma: bool = False,
               gated: bool = False, n: Optional[int] = None, multiprocessors: int = 132) -> Any:
    """The kernel :func:`matmul` uses for ``m`` rows (and ``n`` columns, on a GPU of ``multiprocessors``
    SMs): ``Matmul`` (``hopper``: sm_90 or newer, its table), or -- ``wgmma``: an sm_90a target, a tile of
    :func:`wgmma_tile` -- :class:`~tilus_tvm.schedules.matmul_sm90.MatmulWgmma`. Both take
    ``(m, n, k, a, b, c)``. ``gated``: ``MatmulWgmma(gated=True)`` with ``WGMMA_CONFIG``
    (``c = silu(a @ w[:n].T) * (a @ w[n:].T)``, w [2n, k])."""
    half = bfloat16 if "bfloat16" in str(dtype) else float16
    if gated and not (wgmma and b_layout == "col"):
        raise ScriptError("kernel_for: gated=True needs wgmma (an sm_90a target) and b_layout='col'")
    tile = WGMMA_CONFIG if gated else wgmma_tile(m, n, multiprocessors) if wgmma else None
    if tile is not None:
        from tilus_tvm.schedules.matmul_sm90 import MatmulWgmma

        key = ("wgmma", tile, str(half), b_layout, gated)
        if key not in _KERNELS:
            _KERNELS[key] = MatmulWgmma(*tile, dtype=half, b_layout=b_layout, gated=gated)
        return _KERNELS[key]
    table = HOPPER_CONFIGS if hopper else CONFIGS
    config = next(c for limit, c in table if limit is None or m <= limit)
    key = (config, str(dtype), b_layout)
    if key not in _KERNELS:
        _KERNELS[key] = Matmul(*config, b_layout=b_layout, dtype=half)
    return _KERNELS[key]
