"""Tensors of the tile IR: register tiles, shared tiles and views of global memory.

Tensors are identities (``eq=False``): two tensors are the same only if they are the same object.
Python operators on register tensors (``a + 1.0``, ``a < b``) build tensor values
(:mod:`tilus_tvm.ir.values`); the frontend turns those into instructions.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Optional

from tilus_tvm.dtypes import DataType
from tilus_tvm.errors import ScriptError
from tilus_tvm.ir.values import TensorOperators, binary_value, is_scalar, is_tensor_like
from tilus_tvm.layout.register import RegisterLayout


@dataclass(eq=False)
class Tensor:
    dtype: DataType
    shape: tuple[int, ...]
    name: str = field(default="t", kw_only=True)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def __bool__(self):
        raise ScriptError(f"tensor {self.name} has no truth value; use self.where(...) or compare scalars")

    def describe(self) -> str:
        return f"{self.name}: {self.dtype.name}{list(self.shape)}"


@dataclass(eq=False, repr=False)
class RegisterTensor(TensorOperators, Tensor):
    """A tile distributed over the registers of the block's threads. ``layout`` is None until layout
    inference chooses one (unless the author gave it).

    Python operators (``a + 1.0``, ``a < b``) build :class:`~tilus_tvm.ir.values.TensorValue`s;
    they emit nothing by themselves.
    """

    layout: Optional[RegisterLayout] = None

    def __eq__(self, other):
        if is_tensor_like(other) or is_scalar(other):
            return binary_value(self, other, "eq")
        return self is other

    def __ne__(self, other):
        if is_tensor_like(other) or is_scalar(other):
            return binary_value(self, other, "ne")
        return self is not other

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        layout = f", layout={self.layout}" if self.layout is not None else ""
        return f"RegisterTensor({self.name}: {self.dtype.name}{list(self.shape)}{layout})"


@dataclass(eq=False)
class SharedTensor(Tensor):
    """A tile in the block's shared memory, addressed through a :class:`SharedLayout`."""

    layout: Any = None  # tilus_tvm.layout.shared.SharedLayout

    def __repr__(self) -> str:
        return f"SharedTensor({self.name}: {self.dtype.name}{list(self.shape)})"


@dataclass(eq=False)
class GlobalTensor:
    """A view of global memory: element ``index`` lives at ``ptr[sum(index * strides)]``.

    ``shape`` and ``strides`` are ints or scalar expressions of the kernel's run-time parameters;
    ``pointer`` names the pointer parameter whose memory this views.
    """

    dtype: DataType
    shape: tuple[Any, ...]
    strides: tuple[Any, ...]
    pointer: Any  # tilus_tvm.ir.stmt.Param
    name: str = "g"
    compact: bool = False  # strides are the row-major strides of shape (no strides were given)

    def __bool__(self):
        raise ScriptError(f"global tensor {self.name} has no truth value")

    def describe(self) -> str:
        return f"{self.name}: {self.dtype.name}{list(self.shape)} (global view of {self.pointer.name})"

    def __repr__(self) -> str:
        return f"GlobalTensor({self.describe()})"
