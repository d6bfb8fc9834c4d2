"""Bridges between CuTe layouts and our register and shared layouts: two views of one world.

**Register layouts <-> CuTe thread-value (TV) layouts.** A CuTe TV layout is a rank-2 layout
``(thread, value) -> index`` into a tile; following CuTe (its MMA and copy atoms), the index is
the *colexicographic* (column-major) index of the tile coordinate, ``index = i0 + S0 * (i1 + S1 *
(i2 + ...))`` for a tile of shape ``(S0, S1, ...)``. The thread and value modes are read
colexicographically as well (their first leaf is the least significant). So CuTe's
``SM80_16x8x16`` A layout ``((4,8),(2,2,2)):((32,1),(16,8,128))`` over the 16x16 tile is our
``mma.sync`` A-operand register layout.

A register layout becomes a TV layout with one leaf per mode: a spatial mode is a thread leaf, a
local mode a value leaf, a replication a thread leaf of stride 0; the leaf's stride is where its
mode's digit sits in the colexicographic tile index. The way back needs the TV layout to be such
a split: its non-zero strides, sorted, must chain ``1, s0*d0, ...`` up to the tile's size (each
element held exactly once per replica), value leaves must not have stride 0, and a leaf that
spans two tile dimensions must split evenly at the boundary. Anything else raises
:class:`LayoutError`.

**Shared layouts <-> CuTe layouts.** ``SharedLayout(shape, strides, swizzle)`` is the CuTe layout
``shape:strides`` (coordinates ``(i0, i1, ...)`` agree) composed with the swizzle:
``make_composed_layout(swizzle, 0, Layout(shape, strides))``, or the plain layout when unswizzled.
Back, every top-level mode must coalesce to a single ``size:stride`` mode.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

from tilus_tvm.errors import LayoutError
from tilus_tvm.layout.cute import int_tuple as it
from tilus_tvm.layout.cute.algebra import coalesce
from tilus_tvm.layout.cute.composed import ComposedLayout, make_composed_layout
from tilus_tvm.layout.cute.layout import Layout
from tilus_tvm.layout.register import RegisterLayout
from tilus_tvm.layout.shared import SharedLayout, shared_strides, swizzled
from tilus_tvm.layout.swizzle import Swizzle


# ---- register layouts -> TV layouts -----------------------------------------------------------------
def _mode_strides(layout: RegisterLayout) -> list[int]:
    """For every mode, the colexicographic tile-index stride of one step of its digit."""
    strides = [0] * len(layout.mode_shape)
    unit = 1
    for extent, group in zip(layout.shape, layout.grouped_modes):
        inner = 1
        for m in reversed(group):           # modes of a dimension are listed major to minor
            strides[m] = unit * inner
            inner *= layout.mode_shape[m]
        unit *= extent
    return strides


def _leaves_layout(shapes: list[int], strides: list[int]) -> tuple[Any, Any]:
    if not shapes:
        return 1, 0
    if len(shapes) == 1:
        return shapes[0], strides[0]
    return tuple(shapes), tuple(strides)


def register_to_tv(layout: RegisterLayout) -> Layout:
    """The CuTe TV layout ``(thread, value) -> colexicographic tile index`` of a register layout
    (the tile shape is ``layout.shape``).

    >>> from tilus_tvm.layout.thunderkittens import base_tile
    >>> str(register_to_tv(base_tile()))
    '((4,8),(2,2,2)):((32,1),(16,8,128))'
    """
    if not isinstance(layout, RegisterLayout):
        raise LayoutError(f"register_to_tv: expected a RegisterLayout, got {layout!r}")
    mode_strides = _mode_strides(layout)

    def leaves(modes: Sequence[int]) -> tuple[Any, Any]:
        shapes, strides = [], []
        for m in reversed(modes):           # row-major lists -> colexicographic leaves
            shapes.append(layout.mode_shape[m] if m >= 0 else -m)
            strides.append(mode_strides[m] if m >= 0 else 0)
        return _leaves_layout(shapes, strides)

    thread_shape, thread_stride = leaves(layout.spatial_modes)
    value_shape, value_stride = leaves(layout.local_modes)
    return Layout((thread_shape, value_shape), (thread_stride, value_stride))


# ---- TV layouts -> register layouts -----------------------------------------------------------------
def tv_to_register(tv: Layout, tile_shape: Sequence[int]) -> RegisterLayout:
    """The register layout of a CuTe TV layout over a tile of ``tile_shape`` (see the module
    docstring for the convention and for what cannot be represented).

    >>> tv_to_register(Layout(((4, 8), (2, 2, 2)), ((32, 1), (16, 8, 128))), (16, 16)).holders(9, 10)
    [(5, 6)]
    """
    tile_shape = _tile_shape(tile_shape, tv)
    if not isinstance(tv, Layout) or tv.rank != 2:
        raise LayoutError(f"tv_to_register: expected a rank-2 CuTe layout (thread, value) -> index, got {tv!r}")
    where = f"tv_to_register({tv}, tile {list(tile_shape)})"
    threads = [(s, d) for s, d in zip(it.flatten(tv.shape[0]), it.flatten(tv.stride[0])) if s > 1]
    values = [(s, d) for s, d in zip(it.flatten(tv.shape[1]), it.flatten(tv.stride[1])) if s > 1]
    if any(d == 0 for _, d in values):
        raise LayoutError(f"{where}: a value mode has stride 0 (a thread would hold one element in two "
                          f"registers), which a register layout cannot express")
    _check_mixed_radix([leaf for leaf in threads + values if leaf[1] != 0], math.prod(tile_shape), where)

    units = [math.prod(tile_shape[:k]) for k in range(len(tile_shape))]
    pieces: dict[int, list[tuple[int, int, int]]] = {k: [] for k in range(len(tile_shape))}  # dim -> (pos, size, id)
    next_id = iter(range(10**9))

    def split(leaves: list[tuple[int, int]]) -> list[int]:
        """Leaves (colexicographic) -> piece ids, least significant first; replications as -size."""
        ids = []
        for size, stride in leaves:
            if stride == 0:
                ids.append(-size)
                continue
            for piece_size, piece_stride in _split_at_boundaries(size, stride, units, where):
                dim = max(k for k, u in enumerate(units) if u <= piece_stride)
                piece_id = next(next_id)
                pieces[dim].append((piece_stride // units[dim], piece_size, piece_id))
                ids.append(piece_id)
        return ids

    thread_ids, value_ids = split(threads), split(values)
    mode_of: dict[int, int] = {}
    mode_shape: list[int] = []
    for dim in range(len(tile_shape)):
        for _, size, piece_id in sorted(pieces[dim], reverse=True):   # major to minor
            mode_of[piece_id] = len(mode_shape)
            mode_shape.append(size)
    spatial = [mode_of[i] if i >= 0 else i for i in reversed(thread_ids)]
    local = [mode_of[i] for i in reversed(value_ids)]
    return RegisterLayout(tile_shape, mode_shape, spatial, local)


def _tile_shape(tile_shape: Any, tv: Any) -> tuple[int, ...]:
    if isinstance(tile_shape, int):
        tile_shape = (tile_shape,)
    try:
        shape = tuple(tile_shape)
    except TypeError:
        raise LayoutError(f"tv_to_register: tile_shape must be a sequence of ints, got {tile_shape!r}") from None
    if not shape or any(not it.is_int(s) or s < 1 for s in shape):
        raise LayoutError(f"tv_to_register({tv}): tile_shape must hold positive ints, got {list(shape)}")
    return tuple(int(s) for s in shape)


def _check_mixed_radix(leaves: list[tuple[int, int]], size: int, where: str) -> None:
    """The strides, sorted, must chain 1, s0*d0, ... and end at ``size``: every index once."""
    span = 1
    for s, d in sorted(leaves, key=lambda leaf: leaf[1]):
        if d < 0:
            raise LayoutError(f"{where}: negative stride {d} is not supported")
        if d != span:
            problem = "overlaps the smaller ones (an element would be held twice)" if d < span else \
                f"leaves a gap (indices {span}..{d - 1} would have no holder)"
            raise LayoutError(f"{where}: the strides are not a mixed-radix split of the tile index [0, {size}): "
                              f"mode {s}:{d} {problem}")
        span = s * d
    if span != size:
        raise LayoutError(f"{where}: the thread and value modes cover [0, {span}) but the tile has {size} "
                          f"elements")


def _split_at_boundaries(size: int, stride: int, units: list[int], where: str) -> list[tuple[int, int]]:
    """Split the leaf ``size:stride`` where it crosses from one tile dimension into the next."""
    pieces = []
    for unit in units[1:]:
        if stride < unit < stride * size:
            if unit % stride or size % (unit // stride):
                raise LayoutError(f"{where}: mode {size}:{stride} crosses a tile dimension boundary (at index "
                                  f"{unit}) without splitting evenly there")
            low = unit // stride
            pieces.append((low, stride))
            size, stride = size // low, unit
    pieces.append((size, stride))
    return pieces


# ---- shared layouts <-> CuTe layouts ----------------------------------------------------------------
def shared_to_cute(layout: SharedLayout) -> Layout | ComposedLayout:
    """``Swizzle o Layout(shape, strides)`` (or the plain layout when not swizzled).

    >>> from tilus_tvm.layout.shared import shared_row_major
    >>> str(shared_to_cute(shared_row_major(8, 64).swizzled(Swizzle(3, 3, 3))))
    'Sw<3,3,3> o 0 o (8,64):(64,1)'
    """
    if not isinstance(layout, SharedLayout):
        raise LayoutError(f"shared_to_cute: expected a SharedLayout, got {layout!r}")
    outer = Layout(tuple(layout.shape), tuple(layout.strides))
    return outer if layout.swizzle is None else make_composed_layout(layout.swizzle, 0, outer)


def cute_to_shared(layout: Layout | ComposedLayout) -> SharedLayout:
    """The shared layout of a CuTe layout, optionally composed with a :class:`Swizzle` at offset 0;
    each top-level mode must coalesce to one ``size:stride`` (that is the dimension's stride).

    >>> cute_to_shared(Layout(((2, 4), 8), ((1, 2), 8)))
    SharedLayout(shape=[8, 8], strides=[1, 8])
    """
    where = f"cute_to_shared({layout})"
    swizzle = None
    outer = layout
    if isinstance(layout, ComposedLayout):
        if not isinstance(layout.inner, Swizzle):
            raise LayoutError(f"{where}: only a Swizzle can be composed onto a shared layout, got "
                              f"{layout.inner!r}")
        if layout.offset != 0:
            raise LayoutError(f"{where}: a shared layout has no offset, got {it.int_tuple_str(layout.offset)}")
        swizzle, outer = layout.inner, layout.outer
    if not isinstance(outer, Layout):
        raise LayoutError(f"{where}: expected a Layout or Swizzle o Layout, got {layout!r}")
    shape, strides = [], []
    for i, mode in enumerate(outer):
        flat = mode if it.is_int(mode.shape) else coalesce(mode)
        if it.is_tuple(flat.shape):
            raise LayoutError(f"{where}: mode {i} ({mode}) does not coalesce to a single stride, which a shared "
                              f"layout needs")
        shape.append(flat.shape)
        strides.append(flat.stride)
    try:
        result = shared_strides(shape, strides)
        return swizzled(result, swizzle) if swizzle is not None else result
    except LayoutError as error:
        raise LayoutError(f"{where}: {error}") from None


__all__ = ["cute_to_shared", "register_to_tv", "shared_to_cute", "tv_to_register"]
