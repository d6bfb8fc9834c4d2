"""Memory-bound elementwise kernels of a transformer block: ``ResidualAdd`` and ``SwiGLU``.

Both stream [rows, n] tiles in 16-byte vectors: a block covers ``rows_per_block`` rows of ``block_n``
columns, each thread ``vectors`` 16-byte vectors a row (``n`` is compile-time; edges are masked).

    ResidualAdd:  out = x + y                                  x, y, out [rows, n]
    SwiGLU:       out = silu(x[:, :n]) * x[:, n:]              x [rows, 2n] (gate, then up), out [rows, n]

SwiGLU computes in float32 and rounds once (PyTorch's ``F.silu(gate) * up`` rounds ``silu`` to the
input dtype first). TVM's default schedule for these operators (dlight's ``Fallback``) reads
2-byte elements one at a time; on an H200 the block's residual adds ran at 1.5 TB/s and the fused
split + silu + multiply at 1.4 TB/s. These kernels are what :class:`~tilus_tvm.relax.DispatchKernels`
puts in their place.

    ResidualAdd(4096)(rows, x, y, out)
    SwiGLU(11008)(rows, gate_up, out)
"""
from __future__ import annotations

from typing import Any

import tilus_tvm as tilus
from tilus_tvm import bfloat16, float16, float32, int32, void
from tilus_tvm.dtypes import as_dtype
from tilus_tvm.errors import ScriptError
from tilus_tvm.layout import local

VECTOR_BYTES = 16


class _RowTiles(tilus.Script):
    """The tiling both kernels share: blocks of ``rows_per_block`` x ``block_n`` elements, 16-byte vectors."""

    def __init__(self, n: int, dtype: Any = float16, warps: int = 4, vectors: int = 2, rows_per_block: int = 2):
        super().__init__()
        dtype = as_dtype(dtype)
        name = type(self).__name__
        if dtype not in (float16, bfloat16, float32):
            raise ScriptError(f"{name}: dtype must be float16, bfloat16 or float32, got {dtype.name}")
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ScriptError(f"{name}: n must be a positive int, got {n!r}")
        self.n, self.dtype, self.warps, self.rows_per_block = n, dtype, warps, rows_per_block
        self.vector = VECTOR_BYTES * 8 // dtype.nbits
        self.block_n = 32 * warps * vectors * self.vector
        self.layout = local(rows_per_block, vectors).spatial(1, 32 * warps).local(1, self.vector)

    def grid(self, rows):
        self.attrs.blocks = [self.utils.ceil_div(self.n, self.block_n), self.utils.ceil_div(rows, self.rows_per_block)]
        self.attrs.warps = self.warps
        return self.blockIdx.y * self.rows_per_block, self.blockIdx.x * self.block_n


class ResidualAdd(_RowTiles):
    """``out = x + y`` over [rows, n] tensors (see the module docstring)."""

    def __call__(self, rows: int32, x_ptr: ~void, y_ptr: ~void, out_ptr: ~void):
        row, col = self.grid(rows)
        gx = self.global_view(x_ptr, dtype=self.dtype, shape=[rows, self.n])
        gy = self.global_view(y_ptr, dtype=self.dtype, shape=[rows, self.n])
        gout = self.global_view(out_ptr, dtype=self.dtype, shape=[rows, self.n])
        shape = [self.rows_per_block, self.block_n]
        x = self.load_global(gx, offsets=[row, col], shape=shape, layout=self.layout)
        y = self.load_global(gy, offsets=[row, col], shape=shape, layout=self.layout)
        self.store_global(gout, x + y, offsets=[row, col])


class SwiGLU(_RowTiles):
    """``out = silu(gate) * up`` for ``x = [gate, up]`` of [rows, 2n] (see the module docstring)."""

    def __call__(self, rows: int32, x_ptr: ~void, out_ptr: ~void):
        row, col = self.grid(rows)
        gx = self.global_view(x_ptr, dtype=self.dtype, shape=[rows, 2 * self.n])
        gout = self.global_view(out_ptr, dtype=self.dtype, shape=[rows, self.n])
        shape = [self.rows_per_block, self.block_n]
        # a gate tile past column n reads the start of up: those columns are not stored
        gate = self.load_global(gx, offsets=[row, col], shape=shape, layout=self.layout).to(float32)
        up = self.load_global(gx, offsets=[row, self.n + col], shape=shape, layout=self.layout).to(float32)
        self.store_global(gout, gate * self.sigmoid(gate) * up, offsets=[row, col])


_KERNELS: dict = {}


def elementwise_kernel_for(kind: str, n: int, dtype: Any) -> _RowTiles:
    """The ``ResidualAdd`` (``kind="add"``) or ``SwiGLU`` (``"swiglu"``) for rows of ``n`` outputs."""
    classes = {"add": ResidualAdd, "swiglu": SwiGLU}
    key = (kind, n, str(dtype))
    if key not in _KERNELS:
        _KERNELS[key] = classes[kind](n, as_dtype(str(dtype).replace("torch.", "")))
    return _KERNELS[key]
