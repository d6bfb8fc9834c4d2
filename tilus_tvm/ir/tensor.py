"""Tensors of the tile IR: register tiles, shared tiles and views of global memory.

Tensors are identities (``eq=False``): two tensors are the same only if they are the same object.
While a kernel is being transpiled, Python operators on register tensors (``a + 1.0``, ``a < b``)
emit instructions into the active builder; outside a build they keep plain object semantics.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Optional

from tilus_tvm.dtypes import DataType
from tilus_tvm.errors import ScriptError
from tilus_tvm.layout.register import RegisterLayout


def _active_builder():
    from tilus_tvm.ir.builder import current_builder

    return current_builder()


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


@dataclass(eq=False)
class RegisterTensor(Tensor):
    """A tile distributed over the registers of the block's threads. ``layout`` is None until layout
    inference chooses one (unless the author gave it)."""

    layout: Optional[RegisterLayout] = None

    # --- Python operators: each one emits an elementwise instruction --------------------------------
    def _binary(self, other: Any, op: str, reflected: bool = False) -> RegisterTensor:
        builder = _active_builder()
        if builder is None:
            return NotImplemented
        lhs, rhs = (other, self) if reflected else (self, other)
        return builder.binary(lhs, rhs, op)

    def __add__(self, other):
        return self._binary(other, "add")

    def __radd__(self, other):
        return self._binary(other, "add", reflected=True)

    def __sub__(self, other):
        return self._binary(other, "sub")

    def __rsub__(self, other):
        return self._binary(other, "sub", reflected=True)

    def __mul__(self, other):
        return self._binary(other, "mul")

    def __rmul__(self, other):
        return self._binary(other, "mul", reflected=True)

    def __truediv__(self, other):
        return self._binary(other, "div")

    def __rtruediv__(self, other):
        return self._binary(other, "div", reflected=True)

    def __floordiv__(self, other):
        return self._binary(other, "floordiv")

    def __mod__(self, other):
        return self._binary(other, "mod")

    def __lt__(self, other):
        return self._binary(other, "lt")

    def __le__(self, other):
        return self._binary(other, "le")

    def __gt__(self, other):
        return self._binary(other, "gt")

    def __ge__(self, other):
        return self._binary(other, "ge")

    def __eq__(self, other):
        if _active_builder() is None:
            return self is other
        return self._binary(other, "eq")

    def __ne__(self, other):
        if _active_builder() is None:
            return self is not other
        return self._binary(other, "ne")

    __hash__ = object.__hash__

    def __and__(self, other):
        return self._binary(other, "and")

    def __or__(self, other):
        return self._binary(other, "or")

    def __neg__(self):
        builder = _active_builder()
        if builder is None:
            return NotImplemented
        return builder.unary(self, "neg")

    def __invert__(self):
        builder = _active_builder()
        if builder is None:
            return NotImplemented
        return builder.unary(self, "not")

    def to(self, dtype: DataType) -> RegisterTensor:
        """``x.to(dtype)`` is ``self.cast(x, dtype)``."""
        builder = _active_builder()
        if builder is None:
            raise ScriptError("tensor.to(dtype) is only available inside a kernel")
        return builder.cast(self, dtype)

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
    pointer: Any  # tilus_tvm.ir.function.Param
    name: str = "g"

    def __bool__(self):
        raise ScriptError(f"global tensor {self.name} has no truth value")

    def describe(self) -> str:
        return f"{self.name}: {self.dtype.name}{list(self.shape)} (global view of {self.pointer.name})"

    def __repr__(self) -> str:
        return f"GlobalTensor({self.describe()})"
