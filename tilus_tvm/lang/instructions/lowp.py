"""``self.view`` of packed low-precision data: a register tensor's storage read as another dtype, shape
and layout (no data moves).

The conversions between types are ``self.cast`` (:mod:`tilus_tvm.instructions.cast`); this module
is the other half of working with low-precision data in registers: reinterpreting bits, e.g. 16
bytes loaded as ``int32`` words seen as 32 ``uint4b`` codes laid out for an ``mma`` operand.
"""
from __future__ import annotations

from typing import Any, Optional

from tilus_tvm import dtypes
from tilus_tvm.dtypes import DataType
from tilus_tvm.errors import ScriptError
from tilus_tvm.ir import inst as ir
from tilus_tvm.ir.tensor import RegisterTensor
from tilus_tvm.layout.register import RegisterLayout
from tilus_tvm.lang.instructions.memory import InstructionBase, check_layout


class LowPrecisionInstructions(InstructionBase):
    """The per-thread bit view that ``self.view`` uses when a packed low-precision type is involved."""

    def _view_packed(self, x: RegisterTensor, *, dtype: Optional[DataType] = None,
                     layout: Optional[RegisterLayout] = None) -> RegisterTensor:
        """The register tensor ``x`` seen as ``dtype`` (default: x's) with ``layout`` (shape =
        ``layout.shape``): every thread keeps its bits; slot ``s`` of the view is bits
        ``[s*N, (s+1)*N)`` (``N`` the view's bit width) of the thread's slots of ``x`` laid end to end,
        slot 0 lowest. Works for every dtype, the packed sub-byte types and 8-bit floats included
        (``int32`` words <-> 8 ``uint4b`` codes, ``float16`` pairs <-> ``int32``...).

        ``layout`` may be left out when ``dtype`` has x's bit width: the view then has x's shape and
        layout. The layouts must spread over the same threads and give each thread as many bits
        (``layout.local_size * N == x.layout.local_size * x.dtype.nbits``): checked here when x's
        layout is known, else when the kernel is compiled.

        >>> w = self.load_global(gw, offsets=[0, 0, 0], shape=[4, 128, 4], layout=words)    # doctest: +SKIP
        >>> q = self.view(w, dtype=uint4b, layout=mma_a_layout)   # 128 codes per thread   # doctest: +SKIP
        """
        builder = self._builder("view")
        x = builder.materialize(x)
        if not isinstance(x, RegisterTensor):
            raise ScriptError(f"view: x must be a register tensor, got {x!r}")
        dtype = x.dtype if dtype is None else dtypes.as_dtype(dtype)
        if layout is None:
            if dtype.nbits != x.dtype.nbits:
                raise ScriptError(f"view: {x.describe()} as {dtype.name} changes the element width "
                                  f"({x.dtype.nbits} -> {dtype.nbits} bits), so the view needs layout=... "
                                  f"(a RegisterLayout giving each thread {x.dtype.nbits}/{dtype.nbits} times "
                                  f"as many slots)")
            shape, layout = x.shape, x.layout
        else:
            if not isinstance(layout, RegisterLayout):
                raise ScriptError(f"view: layout must be a RegisterLayout, got {layout!r}")
            shape = tuple(layout.shape)
            check_layout("view", layout, shape, builder.num_threads)
            if x.layout is not None:
                _check_bits(x, dtype, layout)
        out = builder.new_register(dtype, shape, layout)
        builder.emit(ir.RegisterView(out, x))
        return out


def _check_bits(x: RegisterTensor, dtype: DataType, layout: RegisterLayout) -> None:
    if layout.num_threads != x.layout.num_threads:
        raise ScriptError(f"view: layout {layout} spreads over {layout.num_threads} threads, {x.describe()} "
                          f"(layout {x.layout}) over {x.layout.num_threads}; a view keeps every bit in its thread")
    in_bits, out_bits = x.layout.local_size * x.dtype.nbits, layout.local_size * dtype.nbits
    if in_bits != out_bits:
        raise ScriptError(f"view: each thread holds {in_bits} bits of {x.describe()} ({x.layout.local_size} slots "
                          f"of {x.dtype.nbits} bits) but layout {layout} gives {layout.local_size} slots of "
                          f"{dtype.nbits} bits = {out_bits}")
