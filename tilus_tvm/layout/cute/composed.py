"""Composed layouts (seed 003): a transformation applied after an offset after a layout.

    R(c) := (inner o offset o outer)(c) = inner(offset + outer(c))

``outer`` is the layout the user sees (it gives the shape, and tiling applies to it); ``offset``
is an int, or an int-tuple added coordinate by coordinate when ``outer`` yields coordinates (an
identity layout); ``inner`` is a :class:`Layout`, a :class:`~tilus_tvm.layout.swizzle.Swizzle`
or any Python callable. A swizzled shared-memory layout is ``make_composed_layout(Swizzle(3, 3, 3),
0, Layout((8, 64), (64, 1)))``; a gather is ``make_composed_layout(lambda i: index[i], 0, ...)``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from tilus_tvm.errors import LayoutError
from tilus_tvm.layout.cute import int_tuple as it
from tilus_tvm.layout.cute.int_tuple import IntTuple
from tilus_tvm.layout.cute.layout import Layout, ShapeQueries, _as_coord, check_coord


@dataclass(frozen=True, init=False)
class IdentityLayout(ShapeQueries):
    """The layout that maps every coordinate of ``shape`` to itself, as a natural (h-D) tuple;
    CuTe's ``make_identity_layout``, whose strides are the basis elements ``1@i``.

    >>> IdentityLayout((8, 4))(9)
    (1, 1)
    """

    shape: IntTuple

    def __init__(self, shape: Any):
        shape = it.as_int_tuple(shape, "shape", "make_identity_layout")
        if any(s < 1 for s in it.flatten(shape)):
            raise LayoutError(f"make_identity_layout: shape entries must be positive, got {it.int_tuple_str(shape)}")
        object.__setattr__(self, "shape", shape)

    def __call__(self, *coord: Any, strict: bool = False) -> tuple:
        """The natural coordinate of ``coord``; past the size the last mode takes the overflow, as
        for any layout (``strict=True`` refuses it)."""
        crd = _as_coord(coord[0] if len(coord) == 1 else tuple(coord))
        check_coord(crd, self.shape, f"IdentityLayout {self}", crd, strict=strict)
        natural = it.idx2crd(crd, self.shape)
        return natural if it.is_tuple(natural) else (natural,)

    def __str__(self) -> str:
        def basis(shape: IntTuple, path: tuple) -> str:
            if it.is_tuple(shape):
                return "(" + ",".join(basis(s, path + (i,)) for i, s in enumerate(shape)) + ")"
            return "1@" + "@".join(map(str, path or (0,)))
        return f"{it.int_tuple_str(self.shape)}:{basis(self.shape, ())}"

    __repr__ = __str__


def make_identity_layout(shape: Any) -> IdentityLayout:
    """The identity layout of ``shape``: coordinate ``c`` maps to ``c`` (natural, as a tuple).

    >>> make_identity_layout((2, 3))(1, 2)
    (1, 2)
    """
    return IdentityLayout(shape)


@dataclass(frozen=True)
class ComposedLayout:
    """``R(c) = inner(offset + outer(c))``; shape, size and rank are those of ``outer``.

    >>> R = ComposedLayout(lambda c: (c[0], c[1] + 1), (1, 0), IdentityLayout((8, 4)))
    >>> R(0)
    (1, 1)
    """

    inner: Callable[[Any], Any]
    offset: Any
    outer: Any

    def __post_init__(self):
        if not callable(self.inner):
            raise LayoutError(f"make_composed_layout: inner must be a Layout, a Swizzle or a callable, "
                              f"got {self.inner!r}")
        if not callable(self.outer) or not hasattr(self.outer, "shape"):
            raise LayoutError(f"make_composed_layout: outer must be a layout (Layout, identity or composed), "
                              f"got {self.outer!r}")
        object.__setattr__(self, "offset", it.as_int_tuple(self.offset, "offset", "make_composed_layout"))

    @property
    def shape(self) -> IntTuple:
        return self.outer.shape

    @property
    def size(self) -> int:
        return it.product(self.outer.shape)

    @property
    def rank(self) -> int:
        return it.rank(self.outer.shape)

    @property
    def depth(self) -> int:
        return it.depth(self.outer.shape)

    def __call__(self, *coord: Any) -> Any:
        return self.inner(add_offset(self.offset, self.outer(*coord), self))

    def __str__(self) -> str:
        inner = self.inner
        name = str(inner) if isinstance(inner, (Layout, ComposedLayout, IdentityLayout)) or _is_swizzle(inner) \
            else getattr(inner, "__name__", repr(inner))
        return f"{name} o {it.int_tuple_str(self.offset)} o {self.outer}"


def _is_swizzle(x: Any) -> bool:
    from tilus_tvm.layout.swizzle import Swizzle

    return isinstance(x, Swizzle)


def add_offset(offset: IntTuple, value: Any, where: Any) -> Any:
    """``offset + value``: ints add; tuples add coordinate by coordinate; a zero offset leaves any
    value (a coordinate, a tensor element) as it is."""
    if it.is_tuple(offset):
        if not isinstance(value, tuple) or len(value) != len(offset):
            raise LayoutError(f"ComposedLayout {where}: offset {it.int_tuple_str(offset)} does not match "
                              f"the outer layout's value {value!r}")
        return tuple(add_offset(o, v, where) for o, v in zip(offset, value))
    if offset == 0:
        return value
    if isinstance(value, tuple):
        raise LayoutError(f"ComposedLayout {where}: int offset {offset} cannot be added to coordinate {value!r}")
    return offset + value


def make_composed_layout(inner: Any, offset: Any, outer: Any) -> ComposedLayout:
    """``inner o offset o outer`` (seed 003): ``R(c) = inner(offset + outer(c))``.

    >>> def inner(c):
    ...     x, y = c
    ...     return x, y + 1
    >>> make_composed_layout(inner, (1, 0), make_identity_layout((8, 4)))(0)
    (1, 1)
    """
    if it.is_int(outer) or isinstance(outer, tuple):
        outer = Layout(outer)
    return ComposedLayout(inner, offset, outer)
