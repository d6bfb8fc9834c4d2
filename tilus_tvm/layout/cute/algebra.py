"""CuTe's layout algebra: coalesce, filter, complement, composition and inverses.

Semantics follow CuTe's C++ (CUTLASS >= 3.8, ``cute/layout.hpp``) and CUTLASS's reference Python
implementation ``pycute``, with every int treated as a static (compile-time) value. A layout is
a function on all non-negative ints, not only on ``[0, size)``: past its size the last mode
extends (``idx2crd`` puts the overflow there), so ``composition(Layout(4, 1), Layout(4, 2))`` is
``4:2``. Where C++ fails a ``static_assert`` we raise :class:`LayoutError` naming the operation
and its operands: a complement of a layout whose sorted stride falls inside the span of the
smaller modes (not injective), a composition whose strides or shapes do not divide the left
layout. Products and divides, built from these, are in :mod:`tilus_tvm.layout.cute.tiling`.

``strict=True`` (on ``complement``, ``composition``, ``left_inverse`` and the products and
divides) also refuses the results CuTe gives that are not what the operation promises (and
``layout(i, strict=True)`` refuses a coordinate past the size):

- ``complement`` requires each sorted stride to be a multiple of the span below it (CuTe rounds
  the gap down: ``complement((4,6):(1,6), 72)`` is ``2:36``, which leaves holes);
- ``composition`` refuses a right side whose modes, added, would carry from one mode of the left
  layout into the next (CuTe composes mode by mode; the result is then not ``lhs o rhs``).

Where we still differ from C++ or ``pycute``:

- negative strides are kept by ``Layout`` and ``coalesce`` but refused by ``complement``, the
  right side of ``composition`` and the inverses (C++ carries their signs along);
- ``composition`` takes fewer elements than a left mode has without dividing it, as ``pycute``
  does (C++'s static ``shape_div`` check is stricter there; the result is exact), and composes a
  size-1 mode of ``rhs`` whatever its stride (C++ and ``pycute`` ask that it divide ``lhs``);
- where ``pycute`` differs from C++ we follow C++: ``pycute``'s ``coalesce`` drops a trailing
  size-1 mode, stride included, so its ``composition`` does not extend such a left layout past
  its size; its ``right_inverse`` stops at a stride-0 mode (and breaks ties between equal strides
  by shape); its ``complement`` defaults the cotarget to 1 (C++: the cosize); its
  ``logical_divide`` completes the tiler up to ``size(layout)`` (C++: ``shape(layout)``); its
  ``composition`` with a tuple tiler keeps the modes of ``lhs`` past the tiler (C++ drops them);
  its ``tiled_divide`` and ``tiled_product`` unpack a rest mode that is a 1-tuple (C++ keeps it).
  The size-1 modes of a result may carry another stride than ``pycute``'s (the same function).
  ``tests/layout/test_cute_pycute.py`` checks everything else against ``pycute``.
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator, Sequence

from tilus_tvm.errors import LayoutError
from tilus_tvm.layout.cute import int_tuple as it
from tilus_tvm.layout.cute.layout import Layout, make_layout


@contextlib.contextmanager
def operation(name: str, *operands: Any) -> Iterator[None]:
    """Prefix a :class:`LayoutError` raised inside with ``name(operands)``, once."""
    try:
        yield
    except LayoutError as error:
        if str(error).startswith(name + "("):
            raise
        args = ", ".join(str(o) for o in operands)
        raise LayoutError(f"{name}({args}): {error}") from None


def as_layout(x: Any, op: str) -> Layout:
    """A layout, or an int ``n`` read as the layout ``n:1``."""
    if isinstance(x, Layout):
        return x
    if it.is_int(x):
        return Layout(int(x))
    raise LayoutError(f"{op}: expected a Layout or an int, got {x!r}")


# ---- coalesce and filter -------------------------------------------------------------------------
def _bw_coalesce(shapes: Sequence[int], strides: Sequence[int], last_shape: int, last_stride: int) -> Layout:
    """Fold the flat modes ``shapes:strides`` from the back onto ``last_shape:last_stride``: drop
    size-1 modes, merge ``s0:d0`` into a front ``s1:s0*d0``, else prepend. All size 1 gives ``1:0``."""
    front_shapes, front_strides = [last_shape], [last_stride]
    for s, d in zip(reversed(shapes), reversed(strides)):
        if s == 1:
            continue
        if front_shapes[0] == 1:
            front_shapes[0], front_strides[0] = s, d
        elif s * d == front_strides[0]:
            front_shapes[0], front_strides[0] = s * front_shapes[0], d
        else:
            front_shapes.insert(0, s)
            front_strides.insert(0, d)
    if len(front_shapes) == 1:
        return Layout(1, 0) if front_shapes[0] == 1 else Layout(front_shapes[0], front_strides[0])
    return Layout(tuple(front_shapes), tuple(front_strides))


def coalesce(layout: Layout, profile: Any = None) -> Layout:
    """The simplest layout equal to ``layout`` as a function on ``[0, size)``: flatten, drop the
    size-1 modes and merge each pair of neighbours ``s0:d0, s1:d1`` with ``d1 == s0*d0`` into
    ``s0*s1:d0``. With a tuple ``profile``, coalesce mode by mode (modes past it stay as they are).

    >>> str(coalesce(Layout((2, (1, 6)), (1, (6, 2)))))
    '12:1'
    """
    layout = as_layout(layout, "coalesce")
    if it.is_tuple(profile):
        if len(profile) > layout.rank:
            raise LayoutError(f"coalesce: profile {it.int_tuple_str(profile)} has more modes than {layout}")
        modes = [coalesce(layout[i], p) for i, p in enumerate(profile)]
        return make_layout(*modes, *list(layout)[len(profile):])
    shapes, strides = it.flatten(layout.shape), it.flatten(layout.stride)
    return _bw_coalesce(shapes[:-1], strides[:-1], shapes[-1], strides[-1])


def _coalesce_x(layout: Layout) -> tuple[tuple, tuple]:
    """Flat modes of a coalesced ``layout`` that keep its function also past ``size`` (the last
    stride survives even when its size is 1): the form composition reads its left side in."""
    shapes, strides = it.flatten(layout.shape), it.flatten(layout.stride)
    last_shape = 2 if shapes[-1] == 1 else shapes[-1]
    flat = _bw_coalesce(shapes[:-1], strides[:-1], last_shape, strides[-1])
    return it.flatten(flat.shape), it.flatten(flat.stride)


def filter_zeros(layout: Layout) -> Layout:
    """``layout`` with the size of every stride-0 mode replaced by 1."""
    shapes = tuple(1 if d == 0 else s for s, d in zip(it.flatten(layout.shape), it.flatten(layout.stride)))
    return Layout(it.unflatten(shapes, layout.shape), layout.stride)


def filter(layout: Layout, profile: Any = None) -> Layout:  # noqa: A001 - CuTe's name
    """``coalesce`` after dropping the stride-0 (broadcast) modes: the layout of the distinct
    values, in order. With a tuple ``profile``, mode by mode.

    >>> str(filter(Layout((4, 2, 3), (1, 0, 4))))
    '12:1'
    """
    layout = as_layout(layout, "filter")
    if it.is_tuple(profile):
        if len(profile) > layout.rank:
            raise LayoutError(f"filter: profile {it.int_tuple_str(profile)} has more modes than {layout}")
        modes = [filter(layout[i], p) for i, p in enumerate(profile)]
        return make_layout(*modes, *list(layout)[len(profile):])
    return coalesce(filter_zeros(layout))


# ---- complement ----------------------------------------------------------------------------------
def complement(layout: Layout, cotarget: Any = None, *, strict: bool = False) -> Layout:
    """The layout ``C`` that fills the gaps of ``layout`` up to ``cotarget``: with the modes of
    ``filter(layout)`` sorted by stride, ``s_0:d_0 < s_1:d_1 < ...``,

        C = coalesce((d_0, d_1 // (s_0*d_0), ..., ceil_div(cotarget, s_n*d_n))
                   : (1,   s_0*d_0,        ..., s_n*d_n))

    so ``C`` is ordered (strides increasing), its values avoid those of ``layout`` (but 0), and
    ``make_layout(layout, C)`` is injective. ``cotarget`` is an int or a shape (default: the
    cosize of ``layout``). Each stride must be at least the span of the smaller modes (C++'s
    "non-injective layout" check, which every non-injective layout fails). When each stride is a
    multiple of that span, ``make_layout(layout, C)`` covers ``[0, cotarget)``; otherwise the gap
    is rounded down, as in CuTe, and holes remain (``strict=True`` refuses such a layout).

    >>> str(complement(Layout(4, 2), 24))
    '(2,3):(1,8)'
    >>> str(complement(Layout((4, 6), (1, 6)), 72))
    '2:36'
    """
    layout = as_layout(layout, "complement")
    flat = filter(layout)
    if cotarget is None:
        cotarget = flat.cosize
    cotarget = it.as_int_tuple(cotarget, "cotarget", "complement")
    # filter leaves no size-1 modes, but for the 1:0 of a layout made of broadcasts only
    modes = [(s, d) for s, d in zip(it.flatten(flat.shape), it.flatten(flat.stride)) if s > 1]
    with operation("complement", layout, it.int_tuple_str(cotarget)):
        if any(d < 0 for _, d in modes):
            raise LayoutError("negative strides are not supported")
        shapes, strides = [], []
        span = 1  # every value below `span` is taken by the modes seen so far (or by C)
        for s, d in sorted(modes, key=lambda mode: mode[1]):
            if d < span:
                raise LayoutError(f"the layout is not injective: its mode {s}:{d} overlaps the modes of "
                                  f"smaller stride, which span {span}")
            if strict and d % span:
                raise LayoutError(f"stride {d} of mode {s}:{d} is not a multiple of {span}, the span of the "
                                  f"modes of smaller stride (the layout has no complement)")
            shapes.append(d // span)
            strides.append(span)
            span = s * d
        shapes.append(it.product(it.ceil_div(cotarget, span)))
        strides.append(span)
        return coalesce(Layout(tuple(shapes), tuple(strides)))


# ---- composition ---------------------------------------------------------------------------------
def composition(lhs: Any, rhs: Any, *, strict: bool = False) -> Any:
    """``lhs o rhs``: the layout ``R`` with the shape of ``rhs`` and ``R(c) = lhs(rhs(c))``, where
    ``lhs`` extends past its size through its last mode.

    ``rhs`` may be a layout (composed mode by mode over its shape), an int ``n`` (``n:1``), or a
    tuple tiler: then ``lhs`` is composed mode by mode, ``None`` keeping a mode, and the modes of
    ``lhs`` past the tiler are dropped (as in CuTe). For one mode ``s:d`` of ``rhs`` and the
    coalesced ``lhs = (s_0,...,s_n):(d_0,...,d_n)``: divide ``d`` out of the shapes from the left
    (``d`` and each ``s_i`` must divide one another), then take ``s`` elements from what remains
    (running past a mode, ``s`` must be a multiple of what that mode has left); the last mode of
    ``lhs`` extends without bound. ``lhs`` may also be a
    :class:`~tilus_tvm.layout.cute.composed.ComposedLayout` (its outer layout is composed) or any
    other callable, such as a :class:`~tilus_tvm.layout.swizzle.Swizzle` (the result is composed).

    Going mode by mode is CuTe's rule; it gives ``lhs(rhs(c))`` unless the values of different
    modes of ``rhs``, added, carry from one mode of ``lhs`` into the next: then ``R(c)`` is the
    sum over the modes of ``rhs`` of ``lhs(mode value)``. ``strict=True`` refuses that case.

    >>> str(composition(Layout((6, 2), (8, 2)), Layout((4, 3), (3, 1))))
    '((2,2),3):((24,2),8)'
    >>> str(composition(Layout((2, 2), (1, 1)), Layout((2, 2), (1, 1))))
    '(2,2):(1,1)'
    """
    from tilus_tvm.layout.cute.composed import ComposedLayout, make_composed_layout

    if isinstance(lhs, ComposedLayout):
        return ComposedLayout(lhs.inner, lhs.offset, composition(lhs.outer, rhs, strict=strict))
    if not isinstance(lhs, Layout):
        if callable(lhs):
            return make_composed_layout(lhs, 0, rhs if not it.is_int(rhs) else Layout(rhs))
        raise LayoutError(f"composition: lhs must be a Layout, a ComposedLayout or a callable, got {lhs!r}")
    if rhs is None:
        return lhs
    if isinstance(rhs, tuple):
        if len(rhs) > lhs.rank:
            raise LayoutError(f"composition({lhs}, {tiler_str(rhs)}): the tiler has more modes than the layout")
        return make_layout(*(composition(lhs[i], r, strict=strict) for i, r in enumerate(rhs)))
    if isinstance(rhs, ComposedLayout) or (not isinstance(rhs, Layout) and not it.is_int(rhs)):
        raise LayoutError(f"composition({lhs}, {rhs!r}): rhs must be a Layout, an int or a tuple tiler")
    rhs = as_layout(rhs, "composition")
    shapes, strides = _coalesce_x(lhs)
    with operation("composition", lhs, rhs):
        result = _compose(shapes, strides, rhs.shape, rhs.stride)
        if strict:
            _check_no_carries(shapes, rhs)
        return result


def _compose(shapes: tuple, strides: tuple, rhs_shape: Any, rhs_stride: Any) -> Layout:
    if it.is_tuple(rhs_shape):
        return make_layout(*(_compose(shapes, strides, s, d) for s, d in zip(rhs_shape, rhs_stride)))
    if rhs_stride == 0:
        return Layout(rhs_shape, 0)
    if len(shapes) == 1:
        return Layout(rhs_shape, rhs_stride * strides[0])
    if rhs_shape == 1:
        return Layout(1, 0)
    if rhs_stride < 0:
        raise LayoutError(f"negative stride {rhs_stride} on the right is not supported")
    # Divide the stride out of the left modes: mode i keeps s_i / rest_stride of its size.
    kept_shapes, kept_strides = [], []
    rest_stride = rhs_stride
    for s, d in zip(shapes[:-1], strides[:-1]):
        if s % rest_stride and rest_stride % s:
            raise LayoutError(f"stride {rhs_stride} does not divide the left layout: {rest_stride} and its mode "
                              f"size {s} do not divide one another")
        kept = s // rest_stride if s >= rest_stride else 1
        kept_shapes.append(kept)
        kept_strides.append(d * (s // kept))
        rest_stride = rest_stride // s if rest_stride >= s else 1
    # Take rhs_shape elements from what is left, mode by mode.
    taken = []
    rest_shape = rhs_shape
    for s in kept_shapes:
        if rest_shape > s and rest_shape % s:
            raise LayoutError(f"shape {rhs_shape} does not divide the left layout: {rest_shape} elements are left "
                              f"to take and the next mode has {s}")
        taken.append(min(s, rest_shape))
        rest_shape = rest_shape // s if rest_shape >= s else 1
    return _bw_coalesce(taken, kept_strides, rest_shape, rest_stride * strides[-1])


def _check_no_carries(shapes: tuple, rhs: Layout) -> None:
    """Composition goes mode by mode over ``rhs``, which is right only when adding the values of
    different modes of ``rhs`` never carries from one mode of the (coalesced) left layout into the
    next: for every bounded left mode, the largest digits the ``rhs`` modes put there must add up
    to less than its size. Otherwise ``lhs(rhs(c))`` is not a layout: strict composition refuses."""
    leaves = [(s, d) for s, d in zip(it.flatten(rhs.shape), it.flatten(rhs.stride)) if s > 1 and d != 0]
    if len(shapes) == 1 or len(leaves) < 2:
        return
    position = 1
    for mode, size in enumerate(shapes[:-1]):
        total = sum(_max_digit(s, d, position, size) for s, d in leaves)
        if total >= size:
            raise LayoutError(f"the modes of the right layout overlap in mode {mode} (size {size}) of the coalesced "
                              f"left layout: their largest digits there add up to {total}, so lhs(rhs(c)) is not "
                              f"the sum over the modes of rhs")
        position *= size


def _max_digit(s: int, d: int, position: int, size: int) -> int:
    """``max((i * d // position) % size for i < s)``, in closed form when the strides divide."""
    d = abs(d)
    if d % position == 0:
        step = d // position
        if step % size == 0:
            return 0
        if size % step == 0:
            return min((s - 1) * step, size - step)
    elif position % d == 0:
        return min((s - 1) * d // position, size - 1)
    return max((i * d // position) % size for i in range(s))


def tiler_str(tiler: Any) -> str:
    """A tiler as CuTe prints a tile: ``<2:1,_>``."""
    if isinstance(tiler, tuple):
        return "<" + ",".join(tiler_str(t) for t in tiler) + ">"
    return "_" if tiler is None else str(tiler)


# ---- inverses ------------------------------------------------------------------------------------
def right_inverse(layout: Layout) -> Layout:
    """The largest compact ``R`` with ``layout(R(i)) == i`` for ``i < size(R)``: in the coalesced
    layout follow the strides ``1, s_a*d_a, ...`` from mode to mode as far as they chain; ``R``
    lists those modes, each with the stride its position has in the coalesced layout. No mode of
    stride 1 gives ``1:0``.

    >>> str(right_inverse(Layout((4, 2), (2, 1))))
    '(2,4):(4,1)'
    """
    layout = as_layout(layout, "right_inverse")
    flat = coalesce(layout)
    shapes, strides = it.flatten(flat.shape), it.flatten(flat.stride)
    if any(d < 0 for d in strides):
        raise LayoutError(f"right_inverse({layout}): negative strides are not supported")
    positions = it.flatten(it.prefix_product(shapes))
    chain = []
    next_stride = 1
    while True:
        found = next((i for i, d in enumerate(strides) if d == next_stride and i not in chain), None)
        if found is None:
            break
        chain.append(found)
        next_stride = shapes[found] * strides[found]
    if not chain:
        return Layout(1, 0)
    result_shape = tuple(shapes[i] for i in chain)
    result_stride = tuple(positions[i] for i in chain)
    if len(chain) == 1:
        return Layout(result_shape[0], result_stride[0])
    return Layout(result_shape, result_stride)


def left_inverse(layout: Layout, *, strict: bool = False) -> Layout:
    """``L`` with ``L(layout(i)) == i`` for ``i < size(layout)``: the right inverse of
    ``make_layout(layout, complement(layout))``. ``layout`` must be injective. When a sorted
    stride is not a multiple of the span below it, the complement leaves holes and ``L`` inverts
    only the first modes, as in CuTe (``strict=True`` refuses such a layout).

    >>> str(left_inverse(Layout((2, 4), (4, 1))))
    '(4,2):(2,1)'
    >>> str(left_inverse(Layout((4, 6), (1, 6))))
    '4:1'
    """
    layout = as_layout(layout, "left_inverse")
    with operation("left_inverse", layout):
        return right_inverse(make_layout(layout, complement(layout, strict=strict)))
