"""Tensors of the tile IR: register tiles, shared tiles and views of global memory.

Tensors are identities (``eq=False``): two tensors are the same only if they are the same object.
Python operators on register tensors (``a + 1.0``, ``a < b``) build tensor values
(:mod:`tilus_tvm.ir.values`); the frontend turns those into instructions.
"""
from __future__ import annotations

import functools
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
    # or the sub-tile of base at ``slice_offsets`` (one per base dimension) along ``slice_dims``
    slice_offsets: Optional[tuple[Any, ...]] = None
    slice_dims: Optional[tuple[int, ...]] = None
    reshaped: bool = False  # or base read row-major under this tensor's shape (base must be row-major)

    @property
    def root(self) -> "SharedTensor":
        """The allocated tensor this one views (itself when it is not a view)."""
        return self if self.base is None else self.base.root

    def view_layout(self, root_layout):
        """The layout this tensor has when its root has ``root_layout``."""
        if self.base is None:
            return root_layout
        base = self.base.view_layout(root_layout)
        if self.reshaped:
            if tuple(base.strides) != _row_major(base.shape):
                from tilus_tvm.errors import CompileError

                raise CompileError(f"reshape_shared: {self.base.describe()} has layout {base}, which is not "
                                   f"row-major and compact; only such a layout can be read under another shape")
            return _view_shared_layout(self.shape, _row_major(self.shape), base.swizzle)
        if self.slice_offsets is not None:
            return _view_shared_layout(self.shape, tuple(base.strides[d] for d in self.slice_dims), base.swizzle)
        if self.perm is not None:
            return _view_shared_layout(tuple(base.shape[d] for d in self.perm), tuple(base.strides[d] for d in self.perm),
                                       base.swizzle)
        return _view_shared_layout(base.shape[1:], base.strides[1:], base.swizzle)

    def resolved_layout(self):
        """The shared layout, a view's derived from its root's (None before inference)."""
        return None if self.root.layout is None else self.view_layout(self.root.layout)

    def root_index(self, index: Sequence[Any]) -> list:
        """The index in the root tensor of this tensor's element ``index`` (run-time indices as 0)."""
        index = list(index)
        if self.base is None:
            return index
        if self.reshaped:
            return self.base.root_index(_reshaped_index(index, self.shape, self.base.shape))
        if self.perm is not None:
            base_index = [0] * len(index)
            for position, d in enumerate(self.perm):
                base_index[d] = index[position]
            return self.base.root_index(base_index)
        if self.slice_offsets is not None:
            base_index = [o if isinstance(o, int) else 0 for o in self.slice_offsets]
            for d, i in zip(self.slice_dims, index):
                base_index[d] += i
            return self.base.root_index(base_index)
        return self.base.root_index([self.index if isinstance(self.index, int) else 0] + index)

    def root_coords(self, index: Sequence[Any]) -> list:
        """The exact index in the root tensor of this tensor's element ``index`` (ints or expressions)."""
        index = list(index)
        if self.base is None:
            return index
        if self.reshaped:
            base_index = _reshaped_index(index, self.shape, self.base.shape)
        elif self.perm is not None:
            base_index = [0] * len(index)
            for position, d in enumerate(self.perm):
                base_index[d] = index[position]
        elif self.slice_offsets is not None:
            base_index = list(self.slice_offsets)
            for d, i in zip(self.slice_dims, index):
                base_index[d] = i if isinstance(base_index[d], int) and base_index[d] == 0 else base_index[d] + i
        else:
            base_index = [self.index] + index
        return self.base.root_coords(base_index)

    def linear_in_root(self) -> bool:
        """Whether this view's offsets are its own layout's offsets shifted by :meth:`element_offset`
        (so ``offset(c) = resolved_layout().offset(c) + element_offset()``). A sub-tile or sub-tensor
        that a swizzle would permute across is not: its offsets are computed in the root
        (:meth:`root_coords`)."""
        if self.base is None:
            return True
        if not self.base.linear_in_root():
            return False
        if self.slice_offsets is None and self.index is None:
            return True  # a permutation or a reshape: the same offsets
        base_layout = self.base.resolved_layout()
        swizzle = base_layout.swizzle
        if swizzle is None:
            return True
        if self.slice_offsets is not None:
            offsets, kept = self.slice_offsets, self.slice_dims
        else:
            offsets, kept = (self.index,) + (0,) * (len(base_layout.shape) - 1), range(1, len(base_layout.shape))
        static = 0
        for o, stride in zip(offsets, base_layout.strides):
            if isinstance(o, int):
                static += o * stride
            elif stride % swizzle.span:
                return False  # a run-time offset that does not move by whole swizzle periods
        return _shifts_through(swizzle, static, tuple(self.shape), tuple(base_layout.strides[d] for d in kept))

    def element_offset(self) -> Any:
        """Elements from the root tensor's first element to this view's (0 for a root)."""
        if self.base is None:
            return 0
        if self.perm is not None or self.reshaped:
            return self.base.element_offset()
        if self.slice_offsets is not None:
            base_layout = self.base.resolved_layout()
            offset: Any = self.base.element_offset()
            for o, stride in zip(self.slice_offsets, base_layout.strides):
                if not (isinstance(o, int) and o == 0):
                    term = o * stride
                    offset = term if isinstance(offset, int) and offset == 0 else offset + term
            return offset
        stride = self.base.resolved_layout().strides[0]
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

    def item_ptr(self, *indices: Any) -> Any:
        """The address of element ``indices`` (none for a one-element tensor such as ``smem[i, j]``): a
        pointer scalar (``half*``) once bound or passed to an instruction. ``~smem[i, j]`` is the same."""
        from tilus_tvm.ir.tensor_ops import item_pointer

        return item_pointer(self, indices)

    def __invert__(self) -> Any:
        return self.item_ptr()

    def __iter__(self):
        raise ScriptError(f"shared tensor {self.describe()} cannot be iterated over or unpacked; index it (smem[i])")

    def __getitem__(self, index: Any) -> "SharedTensor":
        """A view: ``smem[i]`` (a sub-tensor of the leading dimension, ``i`` a run-time scalar too),
        ``smem[:, 16:32]`` (a sub-tile; slices need a compile-time length), ``smem[i, j]`` (one
        element, for :meth:`item_ptr`). Int indices drop their dimension."""
        items = index if isinstance(index, tuple) else (index,)
        if len(items) != 1 or len(self.shape) < 2 or isinstance(items[0], slice) or items[0] is Ellipsis:
            from tilus_tvm.ir.tensor_ops import parse_index

            offsets, dims, extents = parse_index(self.describe(), self.shape, index)
            name = f"{self.name}[{', '.join(_index_text(i) for i in items)}]"
            return SharedTensor(self.dtype, tuple(extents), name=name, base=self, slice_offsets=tuple(offsets),
                                slice_dims=tuple(dims))
        index = items[0]
        if isinstance(index, bool) or not (isinstance(index, int) or is_scalar(index)) or isinstance(index, float):
            raise ScriptError(f"{self.describe()}[{index!r}]: the index must be an int or an integer scalar")
        if isinstance(index, int) and not 0 <= index < self.shape[0]:
            raise ScriptError(f"{self.describe()}[{index}]: index out of range for dimension 0 of size "
                              f"{self.shape[0]}")
        return SharedTensor(self.dtype, self.shape[1:], name=f"{self.name}[{index}]", base=self, index=index)

    def __repr__(self) -> str:
        return f"SharedTensor({self.name}: {self.dtype.name}{list(self.shape)})"


def _row_major(shape: Sequence[int]) -> tuple[int, ...]:
    strides, running = [], 1
    for extent in reversed(shape):
        strides.append(running)
        running *= extent
    return tuple(reversed(strides))


def _reshaped_index(index: Sequence[Any], shape: Sequence[int], base_shape: Sequence[int]) -> list:
    """The index of ``base_shape`` with the same row-major position as ``index`` in ``shape``."""
    from tilus_tvm.layout.register import row_major_ravel, row_major_unravel

    return row_major_unravel(row_major_ravel(list(index), list(shape)), list(base_shape))


def _index_text(item: Any) -> str:
    if isinstance(item, slice):
        return f"{'' if item.start is None else item.start}:{'' if item.stop is None else item.stop}"
    return "..." if item is Ellipsis else str(item)


def _view_shared_layout(shape, strides, swizzle):
    """The layout of a sub-tile view: the root's strides and swizzle. The swizzle acts on offsets in the
    root, so it need not permute the view's own offsets, which the SharedLayout constructor checks;
    the check is skipped for such views."""
    from tilus_tvm.errors import LayoutError
    from tilus_tvm.layout.shared import SharedLayout

    try:
        return SharedLayout(tuple(shape), tuple(strides), swizzle)
    except LayoutError:
        layout = object.__new__(SharedLayout)
        for name, value in (("shape", tuple(shape)), ("strides", tuple(strides)), ("swizzle", swizzle)):
            object.__setattr__(layout, name, value)
        return layout


@functools.lru_cache(maxsize=256)
def _shifts_through(swizzle, base: int, shape: tuple, strides: tuple) -> bool:
    """Whether ``swizzle(base + x) == base + swizzle(x)`` for every offset ``x`` of the strided box."""
    offsets = [0]
    for extent, stride in zip(shape, strides):
        offsets = [o + i * stride for o in offsets for i in range(extent)]
    return all(swizzle(base + x) == base + swizzle(x) for x in offsets)


@dataclass(eq=False)
class GlobalTensor:
    """A view of global memory: element ``index`` lives at ``ptr[sum(index * strides)]``.

    ``shape`` and ``strides`` are ints or scalar expressions of the kernel's run-time parameters;
    ``pointer`` names the pointer parameter whose memory this views. Indices are int32.

    A *sub-view* (``parent`` set, made by ``Script.global_subview``) is ``parent[leading...]``: the
    parent's trailing dimensions, starting at the element whose offset ``sum(leading * parent
    strides)`` is computed in int64 arithmetic (:meth:`base_offset`). Only the indices inside the
    sub-view are int32, so the parent may span more than 2**31 elements.
    """

    dtype: DataType
    shape: tuple[Any, ...]
    strides: tuple[Any, ...]
    pointer: Any  # tilus_tvm.ir.stmt.Param
    name: str = "g"
    compact: bool = False  # strides are the row-major strides of shape (no strides were given)
    parent: Optional["GlobalTensor"] = None  # a sub-view: the view it was indexed from
    leading: tuple[Any, ...] = ()  # a sub-view: the parent's leading indices it fixes

    @property
    def is_subview(self) -> bool:
        return self.parent is not None

    @property
    def base_strides(self) -> tuple[Any, ...]:
        """The strides that place a sub-view's first element (the parent's, of its leading indices):
        an alignment holds for the sub-view only if it holds for them too; () for a view of a pointer."""
        return tuple(self.parent.strides[:len(self.leading)]) if self.parent is not None else ()

    @property
    def span(self) -> Any:
        """Elements from the first to the last, inclusive: ``1 + sum((extent - 1) * stride)``."""
        return 1 + sum(((extent - 1) * stride for extent, stride in zip(self.shape, self.strides)), 0)

    def base_offset(self) -> Any:
        """A sub-view's first element, in elements from the pointer, as an int64 expression:
        ``sum(int64(i) * int64(stride))`` over the leading indices. A compact parent's strides are
        rebuilt from its shape in int64, so no int32 product of extents can overflow first."""
        from tvm import tirx

        def wide(value: Any) -> Any:
            return tirx.const(value, "int64") if isinstance(value, int) else tirx.Cast("int64", value)

        parent = self.parent
        if parent.compact:
            strides, running = [], tirx.const(1, "int64")
            for extent in reversed(parent.shape):
                strides.append(running)
                running = running * wide(extent)
            strides = strides[::-1]
        else:
            strides = [wide(s) for s in parent.strides]
        offset = tirx.const(0, "int64")
        for index, stride in zip(self.leading, strides):
            offset = offset + wide(index) * stride
        return offset

    def leading_guard(self) -> Any:
        """A sub-view's condition ``0 <= i < extent`` on its leading indices (accesses are masked
        with it, as with the view's own shape); True for a view of a pointer."""
        from tvm import tirx

        cond = tirx.const(True, "bool")
        if self.parent is not None:
            for index, extent in zip(self.leading, self.parent.shape):
                index = tirx.const(index, "int32") if isinstance(index, int) else index
                cond = tirx.And(cond, tirx.And(index >= 0, index < extent))
        return cond

    def __bool__(self):
        raise ScriptError(f"global tensor {self.name} has no truth value")

    def item_ptr(self, *indices: Any) -> Any:
        """The address of element ``indices`` (``T*`` in global memory): a pointer scalar once bound or
        passed to an instruction. ``~g[i, j]`` is the same."""
        from tilus_tvm.ir.tensor_ops import item_pointer

        return item_pointer(self, indices)

    def __getitem__(self, index: Any) -> Any:
        """``g[i, j]`` (one index per dimension): the element, whose address is ``~g[i, j]`` or
        ``g[i, j].item_ptr()``."""
        from tilus_tvm.ir.tensor_ops import GlobalElement

        return GlobalElement(self, tuple(index) if isinstance(index, tuple) else (index,))

    def __iter__(self):
        raise ScriptError(f"global tensor {self.describe()} cannot be iterated over or unpacked")

    def describe(self) -> str:
        if self.parent is not None:
            return (f"{self.name}: {self.dtype.name}{list(self.shape)} (global sub-view {self.parent.name}"
                    f"{list(self.leading)} of {self.pointer.name})")
        return f"{self.name}: {self.dtype.name}{list(self.shape)} (global view of {self.pointer.name})"

    def __repr__(self) -> str:
        return f"GlobalTensor({self.describe()})"
