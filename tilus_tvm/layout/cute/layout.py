"""CuTe layouts: a shape and a stride, both int-tuples of the same profile.

A layout is a function from coordinates to integers (seed 001, "Layout"):

    L(c) = inner_product(natural coordinate of c, stride)

Its domain is the coordinate space of ``shape``, which can be addressed three ways
(seed 001, "Coordinate space"; 0-indexed here):

- a 1-D index in ``[0, size)``, split colexicographically over the whole shape;
- an R-D coordinate, one 1-D index per top-level mode;
- an h-D coordinate, congruent to the shape.

>>> L = Layout((2, (2, 2)), (4, (1, 2)))
>>> str(L), L(5), L(1, 2), L((1, (0, 1)))
('(2,(2,2)):(4,(1,2))', 6, 6, 6)

``None`` in a coordinate keeps that mode: ``L(None, 0)`` is the layout of column 0, ``(2):(4)``.
The default stride is compact column-major (:func:`prefix_product` of the shape).

As in CuTe, a layout is defined past its size: an index beyond a mode's size is split over that
mode's sub-modes with the last one taking the overflow. Index 8 is the coordinate ``(0, 4)``, and
4 in the mode ``(2,2):(1,2)`` is ``(0, 2)``:

>>> L(8), L(0, 4)
(4, 4)

``L(c, strict=True)`` refuses such coordinates. Negative coordinates are always refused (C++ and
``pycute`` disagree on them).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

from tilus_tvm.errors import LayoutError
from tilus_tvm.layout.cute import int_tuple as it
from tilus_tvm.layout.cute.int_tuple import IntTuple


class ShapeQueries:
    """``size``, ``rank`` and ``depth`` of a layout's ``shape`` (an IntTuple)."""

    shape: IntTuple

    @property
    def size(self) -> int:
        """Number of coordinates: ``product(shape)``."""
        return it.product(self.shape)

    @property
    def rank(self) -> int:
        """Number of top-level modes (1 for an int shape)."""
        return it.rank(self.shape)

    @property
    def depth(self) -> int:
        """Nesting depth of the shape (0 for an int shape)."""
        return it.depth(self.shape)


@dataclass(frozen=True, init=False)
class Layout(ShapeQueries):
    """``Layout(shape, stride=None)``: CuTe's ``shape:stride``, with ``stride`` congruent to ``shape``.

    >>> Layout(4, 2)(3)
    6
    """

    shape: IntTuple
    stride: IntTuple

    def __init__(self, shape: Any, stride: Any = None):
        shape = it.as_int_tuple(shape, "shape", "Layout")
        if any(s < 1 for s in it.flatten(shape)):
            raise LayoutError(f"Layout: shape entries must be positive, got shape {it.int_tuple_str(shape)}")
        if stride is None:
            stride = it.prefix_product(shape)
        stride = it.as_int_tuple(stride, "stride", "Layout")
        if not it.congruent(shape, stride):
            raise LayoutError(f"Layout: shape {it.int_tuple_str(shape)} and stride {it.int_tuple_str(stride)} "
                              f"are not congruent (they must have the same nesting)")
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "stride", stride)

    # ---- queries (size, rank, depth: ShapeQueries) ---------------------------------------------
    @property
    def cosize(self) -> int:
        """One past the largest value (with strides taken by absolute value): ``L(size-1) + 1``."""
        if self.size == 0:
            return 0
        last = it.idx2crd(self.size - 1, self.shape)
        return sum(abs(d) * c for d, c in zip(it.flatten(self.stride), it.flatten(last))) + 1

    def __len__(self) -> int:
        return self.rank

    def __getitem__(self, index: int) -> Layout:
        """The sub-layout of mode ``index`` (a rank-1 int layout is its own mode 0)."""
        if not isinstance(index, int):
            raise LayoutError(f"Layout {self}: mode index must be an int, got {index!r}")
        if not -self.rank <= index < self.rank:
            raise LayoutError(f"Layout {self}: mode {index} does not exist, the layout has rank {self.rank}")
        return Layout(it.get_mode(self.shape, index), it.get_mode(self.stride, index))

    def __iter__(self) -> Iterator[Layout]:
        """The sub-layouts of the top-level modes."""
        return (self[i] for i in range(self.rank))

    # ---- the function --------------------------------------------------------------------------
    def __call__(self, *coord: Any, strict: bool = False) -> Any:
        """The value at a 1-D index, an R-D or an h-D coordinate; with ``None`` entries, the
        sub-layout they keep (see :func:`slice_`). A coordinate past a mode's size extends that
        mode's last sub-mode, as in CuTe; ``strict=True`` refuses it."""
        crd = _as_coord(coord[0] if len(coord) == 1 else tuple(coord))
        if _has_none(crd):
            return slice_(self, crd)
        check_coord(crd, self.shape, self, crd, strict=strict)
        return it.crd2idx(crd, self.shape, self.stride)

    def __str__(self) -> str:
        return f"{it.int_tuple_str(self.shape)}:{it.int_tuple_str(self.stride)}"

    def __repr__(self) -> str:
        return f"Layout({self.shape!r}, {self.stride!r})"


def _as_coord(crd: Any) -> Any:
    """Lists read as tuples, so ``L([1, 2])`` works like ``L((1, 2))``."""
    if isinstance(crd, (list, tuple)):
        return tuple(_as_coord(c) for c in crd)
    return crd


def _has_none(crd: Any) -> bool:
    return crd is None or (isinstance(crd, tuple) and any(_has_none(c) for c in crd))


def check_coord(crd: Any, shape: IntTuple, what: Any, whole: Any, strict: bool = True) -> None:
    """Raise :class:`LayoutError` unless ``crd`` addresses a point of ``shape`` (1-D, R-D or h-D);
    with ``strict=False`` an index may run past its mode's size (CuTe extends the last mode)."""
    if isinstance(crd, list):
        crd = tuple(crd)
    if it.is_tuple(crd):
        if not it.is_tuple(shape) or len(crd) != len(shape):
            raise LayoutError(f"{what}: coordinate {whole!r} does not match shape {it.int_tuple_str(shape)} "
                              f"(a coordinate is a 1-D index, one index per mode, or congruent to the shape)")
        for c, s in zip(crd, shape):
            check_coord(c, s, what, whole, strict)
        return
    if not it.is_int(crd):
        raise LayoutError(f"{what}: coordinate {whole!r} must be made of ints, got {crd!r}")
    if crd < 0:
        raise LayoutError(f"{what}: coordinate {whole!r} is out of range for shape {it.int_tuple_str(shape)} "
                          f"({crd} is negative)")
    if strict and crd >= it.product(shape):
        raise LayoutError(f"{what}: coordinate {whole!r} is out of range for shape {it.int_tuple_str(shape)} "
                          f"({crd} is not in [0, {it.product(shape)}))")


# ---- construction ---------------------------------------------------------------------------------
def make_layout(*args: Any, stride: Any = None) -> Layout:
    """``make_layout(L0, L1, ...)`` concatenates layouts into one whose mode ``i`` is ``Li``;
    ``make_layout(shape, stride=None)`` builds ``Layout(shape, stride)``.

    >>> str(make_layout(Layout(4, 2), Layout((2, 3), (1, 8))))
    '(4,(2,3)):(2,(1,8))'
    """
    if args and all(isinstance(a, Layout) for a in args):
        if stride is not None:
            raise LayoutError("make_layout: stride= is only for make_layout(shape, stride)")
        return Layout(tuple(a.shape for a in args), tuple(a.stride for a in args))
    if len(args) == 2 and stride is None and not isinstance(args[1], Layout):
        args, stride = args[:1], args[1]
    if len(args) != 1 or isinstance(args[0], Layout):
        raise LayoutError(f"make_layout: expected layouts to concatenate, or (shape, stride), got {args!r}")
    return Layout(args[0], stride)


def flatten(layout: Any) -> Any:
    """The layout with shape and stride flattened (depth at most 1); on an int-tuple, its leaves."""
    if isinstance(layout, Layout):
        return Layout(it.flatten(layout.shape), it.flatten(layout.stride))
    return it.flatten(layout)


def append(layout: Layout, rank: int, pad: Layout | None = None) -> Layout:
    """Pad ``layout`` with modes ``pad`` (default ``1:0``) up to ``rank`` modes."""
    pad = pad or Layout(1, 0)
    if layout.rank >= rank:
        return layout
    modes = list(layout) + [pad] * (rank - layout.rank)
    return make_layout(*modes)


def zip_layouts(a: Layout, b: Layout) -> Layout:
    """Mode by mode pairs: mode ``i`` of the result is ``(a[i], b[i])``."""
    if a.rank != b.rank:
        raise LayoutError(f"zip: {a} and {b} differ in rank")
    return make_layout(*(make_layout(x, y) for x, y in zip(a, b)))


# ---- slicing --------------------------------------------------------------------------------------
def slice_and_offset(layout: Layout, coord: Any) -> tuple[Layout, int]:
    """Split ``coord`` into kept modes (``None``) and fixed ones: the layout of the kept modes and
    the offset the fixed ones contribute, so ``layout(coord with kept = k) == offset + sub(k)``.
    Tuples in ``coord`` flatten one level, as in CuTe: ``slice_((A, (B, C)), (None, (None, None)))``
    has shape ``(A, B, C)``."""
    shapes: list = []
    strides: list = []

    def walk(crd: Any, shape: IntTuple, stride: IntTuple) -> int:
        if crd is None:
            shapes.append(shape)
            strides.append(stride)
            return 0
        if it.is_tuple(crd):
            if not it.is_tuple(shape) or len(crd) != len(shape):
                raise LayoutError(f"slice: coordinate {coord!r} does not match layout {layout}")
            return sum(walk(c, s, d) for c, s, d in zip(crd, shape, stride))
        check_coord(crd, shape, f"slice of {layout}", coord)
        return it.crd2idx(crd, shape, stride)

    offset = walk(coord, layout.shape, layout.stride)
    if coord is None:
        return layout, 0
    return Layout(tuple(shapes), tuple(strides)), offset


def slice_(layout: Layout, coord: Any) -> Layout:
    """The sub-layout of the modes ``coord`` marks ``None`` (the offset is dropped)."""
    return slice_and_offset(layout, coord)[0]


# ---- queries as functions (CuTe's spelling) --------------------------------------------------------
def shape(x: Any, mode: Any = None) -> IntTuple:
    """The shape of a layout (of mode ``mode``: an int or a path of ints)."""
    return _mode(x, mode).shape


def stride(x: Any, mode: Any = None) -> IntTuple:
    """The stride of a layout (of mode ``mode``)."""
    return _mode(x, mode).stride


def size(x: Any, mode: Any = None) -> int:
    """Number of elements of a layout or int-tuple (of mode ``mode``: an int or a path of ints)."""
    x = _mode(x, mode)
    return x.size if hasattr(x, "size") and not it.is_int(x) else it.product(x)


def rank(x: Any, mode: Any = None) -> int:
    x = _mode(x, mode)
    return x.rank if isinstance(x, Layout) else it.rank(x)


def depth(x: Any, mode: Any = None) -> int:
    x = _mode(x, mode)
    return x.depth if isinstance(x, Layout) else it.depth(x)


def cosize(layout: Any, mode: Any = None) -> int:
    return _mode(layout, mode).cosize


def _mode(x: Any, mode: Any) -> Any:
    if mode is None:
        return x
    for m in ([mode] if isinstance(mode, int) else mode):
        x = x[m] if isinstance(x, Layout) else it.get_mode(x, m)
    return x
