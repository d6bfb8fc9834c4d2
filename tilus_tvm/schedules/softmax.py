"""Row softmax ``y = exp(x - max(x)) / sum(exp(x - max(x)))`` of a [rows, n] matrix, float32 math.

Two kernels reading float16, bfloat16 or float32 and writing the input's dtype; ``n`` is a
compile-time constant (a kernel per row length), which lets every access use 16-byte vectors:

- ``Softmax``: rows held in registers (:class:`RowConfig`: ``rows_per_block`` rows per block, each
  over ``threads_per_row`` threads; the padding columns masked to -inf). One read, one write;
  the row maximum and sum are reductions of warp shuffles plus, for rows over several warps, one
  shared-memory round. Rows up to 64 KB (32768 16-bit values). The row stays in registers in x's
  own dtype (half the registers of float32 for 16-bit types, so more rows are in flight per SM);
  ``exp2`` is recomputed for the write when a thread holds more than 32 values rather than kept.
- ``OnlineSoftmax``: for longer rows. Pass 1 walks the row in chunks of ``chunk`` columns keeping,
  per register slot, a running maximum ``m`` and a running sum ``s`` rescaled whenever ``m`` grows
  (``s = s * exp2(m - m') + exp2(x - m')``); the slots are combined once at the end. Pass 2
  re-reads the chunks (mostly from L2) and writes ``exp2(x * log2(e) - M) / S``. Two reads, one
  write; both passes load the next chunk while computing on the current one.

    y = softmax(x)            # any shape, dim=-1 (or another dim: moved last, made contiguous)
    y = softmax(x, tune=True) # the tuned configuration (docs/tuning.md)

Both kernels carry an ``opt_in`` ``@autotune`` space (``Softmax``: ``warps`` and ``rows_per_block``,
its ``block_n`` fixed by the row length; ``OnlineSoftmax``: ``chunk`` and ``warps``; ``rows`` bucketed by powers
of two) holding the hand-picked configurations.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import tilus_tvm as tilus
from tilus_tvm import bfloat16, float16, float32, int32, void
from tilus_tvm.dtypes import as_dtype
from tilus_tvm.errors import LaunchError, ScriptError
from tilus_tvm.layout import RegisterLayout, local
from tilus_tvm.tune.library import tuned_kernel, use_tuned

LOG2E = 1.4426950408889634
NEG_INF = float("-inf")
M_INIT = -1.0e30  # finite: a slot that saw only masked columns keeps exp2(-inf - M_INIT) = 0, never NaN
ROW_DTYPES = (float16, bfloat16, float32)
ROW_WARPS = [1, 2, 4, 8, 16, 32]  # the tuning space of the row kernels (block_n fixed by the row length)
ROWS_PER_BLOCK = [1, 2, 4, 8]  # with warps: combinations leaving a row fewer than 32 threads are skipped

VECTOR_BITS = 128  # one global access per 16 bytes
TARGET_ROW_BYTES_PER_THREAD = 64  # threads per row grow (to 512) until a thread holds at most this
MAX_ROW_BYTES_PER_THREAD = 128  # at 512 threads per row: 64 KB rows stay in registers
MIN_BLOCK_THREADS = 128  # short rows: several rows per block
KEEP_EXP_VALUES = 32  # Softmax keeps exp2(x - max) for the write up to this many values per thread


def check_row_kernel(name: str, dtype: Any, warps: int) -> Any:
    dtype = as_dtype(dtype)
    if dtype not in ROW_DTYPES:
        raise ScriptError(f"{name}: dtype must be float16, bfloat16 or float32, got {dtype.name}")
    if not 1 <= warps <= 32:
        raise ScriptError(f"{name}: warps must be in [1, 32], got {warps}")
    return dtype


@dataclass(frozen=True)
class RowConfig:
    """How a row kernel spreads its rows: a block of ``warps`` warps holds ``rows_per_block`` rows of
    ``block_n`` columns (the row length padded to whole 16-byte vectors of every thread); each row
    lies on ``threads_per_row`` consecutive threads (a power of two), which hold 16-byte vectors
    ``threads_per_row`` vectors apart, so every load instruction of a warp reads contiguous memory."""

    block_n: int
    warps: int
    rows_per_block: int = 1

    def __post_init__(self):
        threads = 32 * self.warps
        if self.rows_per_block < 1 or threads % self.rows_per_block:
            raise ScriptError(f"RowConfig: rows_per_block={self.rows_per_block} must divide the block's {threads} "
                              f"threads")
        per_row = threads // self.rows_per_block
        if per_row & (per_row - 1):
            raise ScriptError(f"RowConfig: {per_row} threads per row ({threads} threads / rows_per_block="
                              f"{self.rows_per_block}) must be a power of two")
        if self.block_n % per_row:
            raise ScriptError(f"RowConfig: block_n={self.block_n} must be a multiple of the {per_row} threads "
                              f"per row")

    @property
    def threads_per_row(self) -> int:
        return 32 * self.warps // self.rows_per_block

    @property
    def values_per_thread(self) -> int:
        return self.block_n // self.threads_per_row

    def layout(self, dtype_bits: int) -> RegisterLayout:
        """The register layout of a [rows_per_block, block_n] tile: 16-byte vectors (or whatever a
        thread's share allows), thread ``t`` of a row holding vectors ``t, t + threads_per_row, ...``."""
        vector = max(1, min(VECTOR_BITS // dtype_bits, self.values_per_thread))
        repeats = self.values_per_thread // vector
        return local(1, repeats).spatial(self.rows_per_block, self.threads_per_row).local(1, vector)

    def min_blocks_per_sm(self) -> int:
        """Blocks per SM to ask of the compiler: at least 1024 threads' worth (64 registers per thread)."""
        return max(1, 1024 // (32 * self.warps))


def row_config(n: int, dtype_bits: int, max_bytes_per_thread: int = MAX_ROW_BYTES_PER_THREAD) -> RowConfig:
    """The :class:`RowConfig` for rows of ``n`` values: threads per row the power of two that gives each
    thread at most ``TARGET_ROW_BYTES_PER_THREAD`` bytes (from one 16-byte vector each, at most a
    warp, up to 512 threads; 1024 only past ``max_bytes_per_thread``), and enough rows per block
    for ``MIN_BLOCK_THREADS`` threads.

    >>> row_config(4096, 16), row_config(1024, 16).rows_per_block, row_config(32768, 16).values_per_thread
    (RowConfig(block_n=4096, warps=4, rows_per_block=1), 4, 64)
    """
    if n < 1:
        raise ScriptError(f"row_config: n must be positive, got {n}")
    vector = VECTOR_BITS // dtype_bits
    row_bytes = n * dtype_bits // 8
    threads = 1
    while threads < 32 and threads * vector < n:
        threads *= 2
    while threads < 512 and row_bytes > threads * TARGET_ROW_BYTES_PER_THREAD:
        threads *= 2
    if row_bytes > threads * max_bytes_per_thread:
        threads = 1024
    unit = threads * vector
    block_n = -(-n // unit) * unit
    rows_per_block = max(1, MIN_BLOCK_THREADS // threads)
    return RowConfig(block_n, threads * rows_per_block // 32, rows_per_block)


def fits_in_registers(n: int, dtype_bits: int) -> bool:
    """Whether :class:`Softmax` keeps rows of ``n`` values in registers (at most 64 KB a row)."""
    return n * dtype_bits // 8 <= 512 * MAX_ROW_BYTES_PER_THREAD


@tilus.autotune("warps", ROW_WARPS, bucket={"rows": "pow2"}, opt_in=True)
@tilus.autotune("rows_per_block", ROWS_PER_BLOCK)
class Softmax(tilus.Script):
    """Softmax of rows of ``n`` <= ``block_n`` columns held in registers (see the module docstring);
    ``rows_per_block`` rows per block, each over ``32 * warps / rows_per_block`` threads."""

    def __init__(self, block_n: int, warps: int = 4, dtype: Any = float32, rows_per_block: int = 1):
        super().__init__()
        self.dtype = check_row_kernel("Softmax", dtype, warps)
        try:
            self.config = RowConfig(block_n, warps, rows_per_block)
        except ScriptError as exc:
            raise ScriptError(f"Softmax: {exc}") from None
        self.block_n, self.warps, self.rows_per_block = block_n, warps, rows_per_block

    def __call__(self, rows: int32, n: int, x_ptr: ~void, y_ptr: ~void):
        config = self.config
        self.attrs.blocks = self.utils.ceil_div(rows, config.rows_per_block)
        self.attrs.warps = self.warps
        self.attrs.min_blocks_per_sm = config.min_blocks_per_sm()
        row = self.blockIdx.x * config.rows_per_block
        gx = self.global_view(x_ptr, dtype=self.dtype, shape=[rows, n])
        gy = self.global_view(y_ptr, dtype=self.dtype, shape=[rows, n])
        x = self.load_global(gx, offsets=[row, 0], shape=[config.rows_per_block, self.block_n],
                             layout=config.layout(self.dtype.nbits))
        padded = self.block_n > n
        if padded:  # the padding columns read as 0: mask them out of the maximum and the sum
            cols = self.register_tensor(dtype=int32, shape=[config.rows_per_block, self.block_n],
                                        init=lambda r, c: c)
            row_max = self.max(self.where(cols < n, x.to(float32), NEG_INF), dim=1, keepdim=True) * LOG2E
        else:
            row_max = self.max(x.to(float32), dim=1, keepdim=True) * LOG2E
        # every use converts x anew: only x, in its own dtype, stays in registers across the reductions
        e = self.exp2(x.to(float32) * LOG2E - row_max)  # one FFMA and one ex2 per value
        if padded:
            e = self.where(cols < n, e, 0.0)
        inv_sum = 1.0 / self.sum(e, dim=1, keepdim=True)
        if config.values_per_thread > KEEP_EXP_VALUES:  # recompute rather than hold e across the sum
            e = self.exp2(x.to(float32) * LOG2E - row_max)
        self.store_global(gy, e * inv_sum, offsets=[row, 0])


@tilus.autotune("chunk", [1024, 2048, 4096, 8192], bucket={"rows": "pow2"}, opt_in=True)
@tilus.autotune("warps", [4, 8, 16])
class OnlineSoftmax(tilus.Script):
    """Softmax of rows of any length ``n``, in ``chunk``-column pieces (see the module docstring)."""

    def __init__(self, chunk: int = 4096, warps: int = 8, dtype: Any = float32):
        super().__init__()
        self.dtype = check_row_kernel("OnlineSoftmax", dtype, warps)
        if chunk % (32 * warps):
            raise ScriptError(f"OnlineSoftmax: chunk={chunk} must be a multiple of the block's {32 * warps} threads")
        self.chunk, self.warps = chunk, warps

    def __call__(self, rows: int32, n: int, x_ptr: ~void, y_ptr: ~void):
        chunk = self.chunk
        self.attrs.blocks = rows
        self.attrs.warps = self.warps
        row = self.blockIdx.x
        gx = self.global_view(x_ptr, dtype=self.dtype, shape=[rows, n])
        gy = self.global_view(y_ptr, dtype=self.dtype, shape=[rows, n])
        num_chunks = (n + chunk - 1) // chunk
        cols = self.register_tensor(dtype=int32, shape=[1, chunk], init=lambda r, c: c)
        m = self.register_tensor(dtype=float32, shape=[1, chunk], init=M_INIT)
        s = self.register_tensor(dtype=float32, shape=[1, chunk], init=0.0)
        # each pass loads chunk c + 1 while it computes on chunk c (the load past the last chunk is
        # masked off entirely: it reads nothing)
        x_next = self.load_global(gx, offsets=[row, 0], shape=[1, chunk])
        for c in range(num_chunks):  # pass 1: running maximum and sum per register slot
            x = x_next.to(float32) * LOG2E
            x_next = self.load_global(gx, offsets=[row, (c + 1) * chunk], shape=[1, chunk])
            if n % chunk != 0:
                x = self.where(cols < n - c * chunk, x, NEG_INF)
            m_new = self.maximum(m, x)
            s = s * self.exp2(m - m_new) + self.exp2(x - m_new)
            m = m_new
        m_row = self.max(m, dim=1, keepdim=True)
        s_row = self.sum(s * self.exp2(m - m_row), dim=1, keepdim=True)
        inv_s = 1.0 / s_row
        x_next = self.load_global(gx, offsets=[row, 0], shape=[1, chunk])
        for c2 in range(num_chunks):  # pass 2: normalise and write
            x2 = x_next.to(float32) * LOG2E
            x_next = self.load_global(gx, offsets=[row, (c2 + 1) * chunk], shape=[1, chunk])
            self.store_global(gy, self.exp2(x2 - m_row) * inv_s, offsets=[row, c2 * chunk])


_KERNELS: dict = {}


def _dtype_of(t: Any) -> Any:
    import torch

    table = {torch.float16: float16, torch.bfloat16: bfloat16, torch.float32: float32}
    if t.dtype not in table:
        raise LaunchError(f"the dtype must be float16, bfloat16 or float32, got {t.dtype}")
    return table[t.dtype]


def softmax_kernel_for(n: int, dtype: Any, online: Optional[bool] = None, tune: bool = False) -> tilus.Script:
    """The kernel :func:`softmax` uses for rows of ``n`` values (``online``: force the online form or not;
    ``tune``: the tunable instance, whose launches use the tuned configuration). Memoised on the
    arguments: :func:`softmax` calls it on every launch."""
    request = (n, dtype, online, tune)
    kernel = _KERNELS.get(request)
    if kernel is not None:
        return kernel
    dtype = as_dtype(dtype)
    online = not fits_in_registers(n, dtype.nbits) if online is None else online
    if tune:
        _KERNELS[request] = tuned_kernel(OnlineSoftmax, dtype=dtype) if online else \
            tuned_kernel(Softmax, block_n=row_config(n, dtype.nbits).block_n, dtype=dtype)
        return _KERNELS[request]
    if online:
        key = ("online", dtype.name)
        if key not in _KERNELS:
            _KERNELS[key] = OnlineSoftmax(4096, 8, dtype)
    else:
        config = row_config(n, dtype.nbits)
        key = (config, dtype.name)
        if key not in _KERNELS:
            _KERNELS[key] = Softmax(config.block_n, config.warps, dtype, config.rows_per_block)
    _KERNELS[request] = _KERNELS[key]
    return _KERNELS[key]


def softmax(x: Any, dim: int = -1, out: Optional[Any] = None, online: Optional[bool] = None, *,
            tune: Optional[bool] = None) -> Any:
    """``torch.softmax(x, dim)`` for a float16, bfloat16 or float32 CUDA tensor (float32 math, the
    result in x's dtype). Rows over 64 KB (32768 16-bit or 16384 float32 values) use the online
    form (``online`` forces a choice). ``tune=True`` (``None``: ``tilus_tvm.tune.configure(library=...)``)
    launches the tuned configuration."""
    import torch

    if not isinstance(x, torch.Tensor):
        raise LaunchError(f"softmax: x must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() == 0 or x.numel() == 0:
        raise LaunchError(f"softmax: x must be a non-empty tensor with at least one dimension, got {list(x.shape)}")
    if not -x.dim() <= dim < x.dim():
        raise LaunchError(f"softmax: dim {dim} is out of range for x of shape {list(x.shape)}")
    try:
        dtype = _dtype_of(x)
    except LaunchError as exc:
        raise LaunchError(f"softmax: x: {exc}") from None
    if out is not None and (out.shape != x.shape or out.dtype != x.dtype):
        raise LaunchError(f"softmax: out must be a {x.dtype} tensor of shape {list(x.shape)}, got "
                          f"{out.dtype} {list(out.shape)}")
    last = dim % x.dim() == x.dim() - 1
    moved = x if last and x.is_contiguous() else x.movedim(dim, -1).contiguous()
    n = moved.shape[-1]
    rows = moved.numel() // n
    y = out if out is not None and last and out.is_contiguous() else torch.empty_like(moved)
    kernel = softmax_kernel_for(n, dtype, online, use_tuned(tune, "softmax"))
    if moved.dim() == 2:  # no views to make: a few microseconds less per call on small inputs
        kernel(rows, n, moved, y)
    else:
        kernel(rows, n, moved.view(rows, n), y.view(rows, n))
    if y is out:
        return out
    y = y.movedim(-1, dim)
    if out is not None:
        out.copy_(y)
        return out
    return y
