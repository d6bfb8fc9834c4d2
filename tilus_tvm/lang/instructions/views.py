"""View instructions of ``tilus_tvm.Script``: reinterpret, reshape, squeeze, unsqueeze, flatten,
transpose and permute register tensors; reshape shared tensors.

A view moves no data when the layouts allow it: layout inference gives the result the layout in
which every element stays in the thread and register that held it (``reshape`` of a ``[64, 16]``
tile held as ``local(4, 1).spatial(16, 8).local(1, 2)`` is a ``[1024]`` tile in the same
registers). Where no such layout exists, or a later use fixed another one, the view goes through
shared memory. Subscripts of register tensors (``x[0]``, ``x[:, 2:4]``) are views too (see
:meth:`tilus_tvm.ir.values.TensorOperators.__getitem__`).
"""
from __future__ import annotations

import math
from typing import Any, Optional, Sequence

from tilus_tvm.dtypes import DataType
from tilus_tvm.errors import ScriptError
from tilus_tvm.ir.tensor import RegisterTensor, SharedTensor
from tilus_tvm.ir.tensor_ops import (normalize_dims, permute_value, reshape_value, squeeze_value, transpose_value,
                                     unsqueeze_value, view_value)
from tilus_tvm.lang.instructions.memory import InstructionBase, check_layout, check_shape
from tilus_tvm.layout.register import RegisterLayout


class ViewInstructions(InstructionBase):
    """``view``, ``reshape``, ``squeeze``, ``unsqueeze``, ``flatten``, ``transpose``, ``permute``,
    ``reshape_shared``."""

    def _view(self, op: str, value: Any, out: Optional[RegisterTensor]) -> RegisterTensor:
        return self._builder(op).materialize(value, out)

    def view(self, x: RegisterTensor, *, layout: Optional[RegisterLayout] = None, dtype: Optional[DataType] = None,
             out: Optional[RegisterTensor] = None) -> RegisterTensor:
        """The bits of ``x`` reinterpreted as ``dtype`` (and/or in ``layout``); nothing is converted.

        With ``layout``: every thread's registers, concatenated from slot 0 up (little-endian), are
        read in the new layout and dtype, so ``x.dtype.nbits * x.layout.local_size`` must equal
        ``dtype.nbits * layout.local_size`` and both layouts must span the same threads (as Tilus's
        ``view``): checked here when x's layout is known, else when the kernel is compiled. The result
        has ``layout.shape``. Any widths work: ``float16`` pairs <-> ``int32``, ``int32`` words <-> 8
        ``uint4b`` codes or 4 ``uint8``, ``int32`` words <-> 16 ``float6_e3m2`` codes per 3 words.

        Without ``layout``: the tile's row-major bytes are read as ``dtype``, the last dimension
        scaled by the ratio of the widths: a ``float16[m, 16]`` tile viewed as ``uint32`` is
        ``uint32[m, 8]`` whose element ``(i, j)`` holds elements ``(i, 2j)`` (low half) and
        ``(i, 2j + 1)`` (high half). It is free when each thread holds such pairs in consecutive
        registers (layout inference arranges it), else it goes through shared memory.

        Packed low-precision types (sub-byte integers and floats, 8-bit floats) are always viewed per
        thread: without ``layout`` only at the same width (``uint8`` as ``float8_e4m3``: x's shape and
        layout); give ``layout`` when the width changes. bool is rejected.

        ``out``: a register tensor of the result's dtype and shape to write, as the other ``out=``
        forms; for a per-thread view it has no layout yet or the view's (``layout``, or x's when none
        was given).

        >>> packed = self.view(x, dtype=uint32)              # float16[64, 16] -> uint32[64, 8]  # doctest: +SKIP
        >>> y = self.view(acc, layout=other, dtype=float32)  # same bits per thread             # doctest: +SKIP
        >>> q = self.view(words, dtype=uint4b, layout=mma_a)  # int32 words -> 8 codes each     # doctest: +SKIP
        """
        if layout is None and dtype is None:
            raise ScriptError("view: give a dtype, a layout or both")
        builder = self._builder("view")
        if layout is not None:
            check_layout("view", layout, tuple(getattr(layout, "shape", ())), builder.num_threads)
        return builder.materialize(view_value(x, dtype, layout), out)

    def reshape(self, x: RegisterTensor, shape: Sequence[int], *, out: Optional[RegisterTensor] = None
                ) -> RegisterTensor:
        """``x`` read row-major under ``shape`` (same number of elements; one entry may be -1), like
        ``torch.reshape``. Free when the layout can be reshaped (each new dimension boundary falls
        between or evenly inside the layout's modes), else through shared memory.

        >>> flat = self.reshape(x, [1024])   # [64, 16] -> [1024]   # doctest: +SKIP
        """
        return self._view("reshape", reshape_value(x, shape), out)

    def squeeze(self, x: RegisterTensor, dim: Any, *, out: Optional[RegisterTensor] = None) -> RegisterTensor:
        """Remove the size-1 dimension(s) ``dim`` (an int or a list; negative from the end). Always free.

        >>> row = self.squeeze(self.sum(x, dim=0, keepdim=True), dim=0)   # [1, n] -> [n]   # doctest: +SKIP
        """
        return self._view("squeeze", squeeze_value(x, dim), out)

    def unsqueeze(self, x: RegisterTensor, dim: Any, *, out: Optional[RegisterTensor] = None) -> RegisterTensor:
        """Insert size-1 dimension(s) at ``dim`` (positions in the result). Always free.

        >>> column = self.unsqueeze(v, dim=1)   # [m] -> [m, 1]   # doctest: +SKIP
        """
        return self._view("unsqueeze", unsqueeze_value(x, dim), out)

    def flatten(self, x: RegisterTensor, start_dim: int = 0, end_dim: int = -1, *,
                out: Optional[RegisterTensor] = None) -> RegisterTensor:
        """Merge dimensions ``start_dim..end_dim`` (inclusive) into one, like ``torch.flatten``: a
        :meth:`reshape`, always free."""
        builder = self._builder("flatten")
        x = builder.materialize(x)
        if not isinstance(x, RegisterTensor):
            raise ScriptError(f"flatten: x must be a register tensor, got {x!r}")
        start, end = (normalize_dims("flatten", d, len(x.shape))[0] for d in (start_dim, end_dim))
        if start > end:
            raise ScriptError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim} for {x.describe()}")
        size = 1
        for s in x.shape[start:end + 1]:
            size *= s
        return builder.materialize(reshape_value(x, list(x.shape[:start]) + [size] + list(x.shape[end + 1:]),
                                                 "flatten"), out)

    def transpose(self, x: RegisterTensor, *, out: Optional[RegisterTensor] = None) -> RegisterTensor:
        """The transpose of a 2-D register tensor: element ``(i, j)`` is ``x[j, i]``. Free: every element
        stays in its register, only the layout's dimensions swap (a tensor in an mma operand layout
        becomes one in the transposed layout).

        >>> bt = self.transpose(b)   # [k, n] -> [n, k]   # doctest: +SKIP
        """
        return self._view("transpose", transpose_value(x), out)

    def permute(self, x: RegisterTensor, dims: Sequence[int], *, out: Optional[RegisterTensor] = None
                ) -> RegisterTensor:
        """Reorder the dimensions: dimension ``k`` of the result is dimension ``dims[k]`` of ``x`` (like
        ``torch.permute``). Free, as :meth:`transpose`."""
        return self._view("permute", permute_value(x, dims), out)

    def reshape_shared(self, tensor: SharedTensor, shape: Sequence[int]) -> SharedTensor:
        """A view of a shared tensor read row-major under ``shape`` (same number of elements): no data
        moves. The tensor's layout must be row-major and compact (a swizzle is kept: it acts on the
        same offsets), which the layouts the compiler picks are; a strided or sliced layout is
        rejected when the kernel is compiled.

        >>> flat = self.reshape_shared(smem, [64 * 64])   # [64, 64] -> [4096]   # doctest: +SKIP
        """
        self._builder("reshape_shared")
        if not isinstance(tensor, SharedTensor):
            raise ScriptError(f"reshape_shared: tensor must be a shared tensor, got {tensor!r}")
        shape = check_shape("reshape_shared", shape)
        if math.prod(shape) != math.prod(tensor.shape):
            raise ScriptError(f"reshape_shared: cannot view {tensor.describe()} ({math.prod(tensor.shape)} elements) "
                              f"as shape {list(shape)} ({math.prod(shape)} elements)")
        return SharedTensor(tensor.dtype, shape, name=f"{tensor.name}.reshape{list(shape)}", base=tensor,
                            reshaped=True)
