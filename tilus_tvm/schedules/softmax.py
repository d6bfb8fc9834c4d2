"""Row softmax ``y = exp(x - max(x)) / sum(exp(x - max(x)))`` of a [rows, n] matrix, float32 math.

Two kernels, both one block per row, reading float16, bfloat16 or float32 and writing the input's
dtype; ``n`` is a compile-time constant (a kernel per row length), which lets every access use
16-byte vectors:

- ``Softmax``: the row (padded to ``block_n`` columns, the padding masked to -inf) lives in
  registers; one read, one write. Used while the row fits (``block_n / threads`` <= 32 values).
- ``OnlineSoftmax``: for long rows. Pass 1 walks the row in chunks of ``chunk`` columns keeping,
  per register slot, a running maximum ``m`` and a running sum ``s`` rescaled whenever ``m`` grows
  (``s = s * exp2(m - m') + exp2(x - m')``); the slots are combined once at the end (block
  reductions through shuffles and shared memory). Pass 2 re-reads the chunks and writes
  ``exp2(x * log2(e) - M) / S``. Two reads, one write.

    y = softmax(x)            # any shape, dim=-1 (or another dim: moved last, made contiguous)
    y = softmax(x, tune=True) # the tuned configuration (docs/tuning.md)

Both kernels carry an ``opt_in`` ``@autotune`` space (``Softmax``: ``warps``, its ``block_n``
fixed by the row length; ``OnlineSoftmax``: ``chunk`` and ``warps``; ``rows`` bucketed by powers
of two) holding the hand-picked configurations.
"""
from __future__ import annotations

from typing import Any, Optional

import tilus_tvm as tilus
from tilus_tvm import bfloat16, float16, float32, int32, void
from tilus_tvm.dtypes import as_dtype
from tilus_tvm.errors import LaunchError, ScriptError
from tilus_tvm.tune.library import tuned_kernel, use_tuned

LOG2E = 1.4426950408889634
NEG_INF = float("-inf")
M_INIT = -1.0e30  # finite: a slot that saw only masked columns keeps exp2(-inf - M_INIT) = 0, never NaN
ROW_DTYPES = (float16, bfloat16, float32)
ROW_WARPS = [1, 2, 4, 8, 16, 32]  # the tuning space of the row kernels (block_n fixed by the row length)


def check_row_kernel(name: str, dtype: Any, warps: int) -> Any:
    dtype = as_dtype(dtype)
    if dtype not in ROW_DTYPES:
        raise ScriptError(f"{name}: dtype must be float16, bfloat16 or float32, got {dtype.name}")
    if not 1 <= warps <= 32:
        raise ScriptError(f"{name}: warps must be in [1, 32], got {warps}")
    return dtype


@tilus.autotune("warps", ROW_WARPS, bucket={"rows": "pow2"}, opt_in=True)
class Softmax(tilus.Script):
    """Softmax of rows of ``n`` <= ``block_n`` columns held in registers (see the module docstring)."""

    def __init__(self, block_n: int, warps: int = 4, dtype: Any = float32):
        super().__init__()
        self.dtype = check_row_kernel("Softmax", dtype, warps)
        if block_n % (32 * warps):
            raise ScriptError(f"Softmax: block_n={block_n} must be a multiple of the block's {32 * warps} threads")
        self.block_n, self.warps = block_n, warps

    def __call__(self, rows: int32, n: int, x_ptr: ~void, y_ptr: ~void):
        self.attrs.blocks = rows
        self.attrs.warps = self.warps
        row = self.blockIdx.x
        gx = self.global_view(x_ptr, dtype=self.dtype, shape=[rows, n])
        gy = self.global_view(y_ptr, dtype=self.dtype, shape=[rows, n])
        x = self.load_global(gx, offsets=[row, 0], shape=[1, self.block_n]).to(float32) * LOG2E
        if self.block_n > n:
            cols = self.register_tensor(dtype=int32, shape=[1, self.block_n], init=lambda r, c: c)
            x = self.where(cols < n, x, NEG_INF)
        e = self.exp2(x - self.max(x, dim=1, keepdim=True))
        y = e * (1.0 / self.sum(e, dim=1, keepdim=True))
        self.store_global(gy, y, offsets=[row, 0])


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
        for c in range(num_chunks):  # pass 1: running maximum and sum per register slot
            x = self.load_global(gx, offsets=[row, c * chunk], shape=[1, chunk]).to(float32) * LOG2E
            if n % chunk != 0:
                x = self.where(cols < n - c * chunk, x, NEG_INF)
            m_new = self.maximum(m, x)
            s = s * self.exp2(m - m_new) + self.exp2(x - m_new)
            m = m_new
        m_row = self.max(m, dim=1, keepdim=True)
        s_row = self.sum(s * self.exp2(m - m_row), dim=1, keepdim=True)
        inv_s = 1.0 / s_row
        for c2 in range(num_chunks):  # pass 2: normalise and write
            x2 = self.load_global(gx, offsets=[row, c2 * chunk], shape=[1, chunk]).to(float32)
            self.store_global(gy, self.exp2(x2 * LOG2E - m_row) * inv_s, offsets=[row, c2 * chunk])


# A row stays in registers while each thread holds at most this many values of it.
MAX_VALUES_PER_THREAD = 32
MAX_REGISTER_ROW = 16384  # longer rows use OnlineSoftmax (the online form)
_KERNELS: dict = {}


def row_tile(n: int, dtype_bits: int) -> tuple[int, int]:
    """(block_n, warps) for a row of ``n`` values in registers: ``n`` rounded up to whole 16-byte
    vectors of every thread, with enough warps that a thread holds 8 to 32 values."""
    vector = 128 // dtype_bits
    warps = 1
    while warps < 32 and n > warps * 32 * max(vector, 16):
        warps *= 2
    unit = warps * 32 * vector
    block_n = -(-n // unit) * unit
    while block_n // (warps * 32) > MAX_VALUES_PER_THREAD and warps < 32:
        warps *= 2
        unit = warps * 32 * vector
        block_n = -(-n // unit) * unit
    return block_n, warps


def _dtype_of(t: Any) -> Any:
    import torch

    table = {torch.float16: float16, torch.bfloat16: bfloat16, torch.float32: float32}
    if t.dtype not in table:
        raise LaunchError(f"the dtype must be float16, bfloat16 or float32, got {t.dtype}")
    return table[t.dtype]


def softmax_kernel_for(n: int, dtype: Any, online: Optional[bool] = None, tune: bool = False) -> tilus.Script:
    """The kernel :func:`softmax` uses for rows of ``n`` values (``online``: force the online form or not;
    ``tune``: the tunable instance, whose launches use the tuned configuration)."""
    dtype = as_dtype(dtype)
    online = n > MAX_REGISTER_ROW if online is None else online
    if tune:
        return tuned_kernel(OnlineSoftmax, dtype=dtype) if online else tuned_kernel(Softmax, block_n=row_tile(
            n, dtype.nbits)[0], dtype=dtype)
    if online:
        key = ("online", dtype.name)
        if key not in _KERNELS:
            _KERNELS[key] = OnlineSoftmax(4096, 8, dtype)
    else:
        block_n, warps = row_tile(n, dtype.nbits)
        key = (block_n, warps, dtype.name)
        if key not in _KERNELS:
            _KERNELS[key] = Softmax(block_n, warps, dtype)
    return _KERNELS[key]


def softmax(x: Any, dim: int = -1, out: Optional[Any] = None, online: Optional[bool] = None, *,
            tune: Optional[bool] = None) -> Any:
    """``torch.softmax(x, dim)`` for a float16, bfloat16 or float32 CUDA tensor (float32 math, the
    result in x's dtype). Rows longer than 16384 use the online form (``online`` forces a choice).
    ``tune=True`` (``None``: ``tilus_tvm.tune.configure(library=...)``) launches the tuned configuration."""
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
    moved = x.movedim(dim, -1).contiguous()
    n = moved.shape[-1]
    rows = moved.numel() // n
    last = dim % x.dim() == x.dim() - 1
    y = out if out is not None and last and out.is_contiguous() else torch.empty_like(moved)
    kernel = softmax_kernel_for(n, dtype, online, use_tuned(tune, "softmax"))
    kernel(rows, n, moved.view(rows, n), y.view(rows, n))
    if y is out:
        return out
    y = y.movedim(-1, dim)
    if out is not None:
        out.copy_(y)
        return out
    return y
