"""Tensors of the tile IR: register tiles, shared tiles and views of global memory.

Tensors are identities (``eq=False``): two tensors are the same only if they are the same object.
Python operators on register tensors (``a + 1.0``, ``a < b``) build tensor values
(:mod:`tilus_tvm.ir.values`); the frontend turns those into instructions.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

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
    """A tile in the block's shared memory, addressed through a :class:`SharedLayout`.

    ``layout`` is None until shared-layout inference picks one (unless the author gave it).
    ``smem[i]`` (``i`` an int or a run-time integer scalar) is a view of the sub-tensor at index ``i``
    of the leading dimension, such as one stage of a multi-stage pipeline buffer: ``base`` is the
    viewed tensor, ``index`` the position.
    """

    layout: Any = None  # tilus_tvm.layout.shared.SharedLayout
    base: Optional["SharedTensor"] = None
    index: Any = None  # a view of sub-tensor ``index`` of base's leading dimension
    perm: Optional[tuple[int, ...]] = None  # or a view of base with its dimensions permuted

    @property
    def root(self) -> "SharedTensor":
        """The allocated tensor this one views (itself when it is not a view)."""
        return self if self.base is None else self.base.root

    def view_layout(self, root_layout):
        """The layout this tensor has when its root has ``root_layout``."""
        if self.base is None:
            return root_layout
        from tilus_tvm.layout.shared import SharedLayout

        base = self.base.view_layout(root_layout)
        if self.perm is not None:
            return SharedLayout(tuple(base.shape[d] for d in self.perm), tuple(base.strides[d] for d in self.perm),
                                base.swizzle)
        return SharedLayout(base.shape[1:], base.strides[1:], base.swizzle)

    def resolved_layout(self):
        """The shared layout, a view's derived from its root's (None before inference)."""
        return None if self.root.layout is None else self.view_layout(self.root.layout)

    def root_index(self, index: Sequence[Any]) -> list:
        """The index in the root tensor of this tensor's element ``index`` (run-time indices as 0)."""
        index = list(index)
        if self.base is None:
            return index
        if self.perm is not None:
            base_index = [0] * len(index)
            for position, d in enumerate(self.perm):
                base_index[d] = index[position]
            return self.base.root_index(base_index)
        return self.base.root_index([self.index if isinstance(self.index, int) else 0] + index)

    def element_offset(self) -> Any:
        """Elements from the root tensor's first element to this view's (0 for a root)."""
        if self.base is None:
            return 0
        if self.perm is not None:
            return self.base.element_offset()
        base_layout = self.base.resolved_layout()
        stride = base_layout.strides[0]
        swizzle = base_layout.swizzle
        span = 0 if swizzle is None else 1 << (swizzle.bits + swizzle.base + max(0, swizzle.shift))
        if swizzle is not None and stride % span:
            from tilus_tvm.errors import CompileError

            raise CompileError(f"{self.describe()}: the sub-tensors of {self.base.describe()} start every {stride} "
                               f"elements, which the swizzle {swizzle} of its layout would permute across; give the "
                               f"leading dimension a stride that is a multiple of {span}")
        offset = self.index * stride if not (isinstance(self.index, int) and self.index == 0) else 0
        base = self.base.element_offset()
        return offset if isinstance(base, int) and base == 0 else base + offset

    def permute(self, dims: Sequence[int]) -> "SharedTensor":
        """A view with its dimensions reordered: dimension ``i`` of the view is dimension ``dims[i]``."""
        dims = tuple(dims)
        if sorted(dims) != list(range(len(self.shape))):
            raise ScriptError(f"{self.describe()}.permute({list(dims)}): dims must be a permutation of "
                              f"{list(range(len(self.shape)))}")
        return SharedTensor(self.dtype, tuple(self.shape[d] for d in dims), name=f"{self.name}.permute{list(dims)}",
                            base=self, perm=dims)

    def transpose(self) -> "SharedTensor":
        """The transposed view of a 2-D shared tensor (no data moves)."""
        if len(self.shape) != 2:
            raise ScriptError(f"{self.describe()}.transpose(): only 2-D tensors; use permute(dims)")
        return self.permute((1, 0))

    def __getitem__(self, index: Any) -> "SharedTensor":
        if isinstance(index, tuple):
            if len(index) != 1:
                raise ScriptError(f"{self.describe()}[...]: index one leading dimension at a time, got {index!r}")
            index = index[0]
        if len(self.shape) < 2:
            raise ScriptError(f"{self.describe()}[{index!r}]: only tensors of 2 or more dimensions have sub-tensors")
        if isinstance(index, bool) or not (isinstance(index, int) or is_scalar(index)) or isinstance(index, float):
            raise ScriptError(f"{self.describe()}[{index!r}]: the index must be an int or an integer scalar")
        if isinstance(index, int) and not 0 <= index < self.shape[0]:
            raise ScriptError(f"{self.describe()}[{index}]: index out of range for dimension 0 of size "
                              f"{self.shape[0]}")
        return SharedTensor(self.dtype, self.shape[1:], name=f"{self.name}[{index}]", base=self, index=index)

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

    def __getitem__(self, index: Any) -> "GlobalElement":
        """``g[i, j]``: one element (an int or integer scalar per dimension), whose ``item_ptr()`` is
        what :meth:`~tilus_tvm.Script.lock_semaphore` takes."""
        indices = tuple(index) if isinstance(index, tuple) else (index,)
        if len(indices) != len(self.shape):
            raise ScriptError(f"{self.describe()}[{', '.join(map(str, indices))}]: index every one of its "
                              f"{len(self.shape)} dimensions to name an element")
        for d, (i, extent) in enumerate(zip(indices, self.shape)):
            if isinstance(i, bool) or not is_scalar(i) or isinstance(i, float):
                raise ScriptError(f"{self.describe()}: index {i!r} of dimension {d} must be an int or an integer "
                                  f"scalar expression")
            if isinstance(i, int) and (i < 0 or (isinstance(extent, int) and i >= extent)):
                raise ScriptError(f"{self.describe()}: index {i} is out of range for dimension {d} of size {extent}")
        return GlobalElement(self, indices)

    def __repr__(self) -> str:
        return f"GlobalTensor({self.describe()})"


@dataclass(frozen=True, eq=False)
class GlobalElement:
    """One element ``tensor[indices...]`` of a global tensor (``g[i, j]``)."""

    tensor: GlobalTensor
    indices: tuple[Any, ...]

    @property
    def dtype(self) -> DataType:
        return self.tensor.dtype

    def item_ptr(self) -> "GlobalElement":
        """The element's address, for instructions that take a pointer to one element (the semaphore of
        :meth:`~tilus_tvm.Script.lock_semaphore`). The element itself stands for its address here: the
        buffer behind a global tensor is only fixed when the kernel is generated."""
        return self

    def describe(self) -> str:
        return f"{self.tensor.name}[{', '.join(map(str, self.indices))}] ({self.tensor.describe()})"

    def __bool__(self):
        raise ScriptError(f"global element {self.describe()} has no truth value")
