"""Int-tuples: the nested tuples of ints that CuTe shapes, strides and coordinates are made of.

An int-tuple is an ``int`` or a (possibly empty) tuple of int-tuples: ``(2, (3, 4))``. Its
*profile* is its nesting structure; two int-tuples are *congruent* when their profiles agree.
Orderings are colexicographic, as in CuTe: the first (leftmost) mode is the fastest-varying.

    product((2, (3, 4)))          = 24
    prefix_product((2, (3, 4)))   = (1, (2, 6))          exclusive, colexicographic
    idx2crd(5, (2, (3, 4)))       = (1, (2, 0))          5 = 1 + 2*2
    crd2idx((1, (2, 0)), (2, (3, 4))) = 5

Every function here is pure and works on Python ints only.
"""
from __future__ import annotations

import math
import numbers
from typing import Any, Union

from tilus_tvm.errors import LayoutError

IntTuple = Union[int, tuple]


def is_int(x: Any) -> bool:
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def is_tuple(x: Any) -> bool:
    return isinstance(x, tuple)


def as_int_tuple(value: Any, what: str, op: str) -> IntTuple:
    """``value`` (ints, lists and tuples, nested) as an int-tuple of Python ints."""
    if is_int(value):
        return int(value)
    if isinstance(value, (tuple, list)):
        return tuple(as_int_tuple(v, what, op) for v in value)
    raise LayoutError(f"{op}: {what} must be an int or a nested tuple of ints, got {value!r}")


def int_tuple_str(t: IntTuple) -> str:
    """CuTe's notation without spaces: ``(2,(3,4))``; a 1-tuple prints as ``(4)``."""
    if is_tuple(t):
        return "(" + ",".join(int_tuple_str(x) for x in t) + ")"
    return str(t)


# ---- structure ----------------------------------------------------------------------------------
def flatten(t: IntTuple) -> tuple:
    """The leaves of ``t`` in order, as a flat tuple: ``flatten((2, (3, 4))) = (2, 3, 4)``."""
    if is_tuple(t):
        return tuple(leaf for x in t for leaf in flatten(x))
    return (t,)


def rank(t: IntTuple) -> int:
    """Number of top-level modes: 1 for an int."""
    return len(t) if is_tuple(t) else 1


def depth(t: IntTuple) -> int:
    """Nesting depth: 0 for an int, ``1 + max(depth(x))`` for a tuple."""
    if is_tuple(t):
        return 1 + max((depth(x) for x in t), default=0)
    return 0


def congruent(a: IntTuple, b: IntTuple) -> bool:
    """Whether ``a`` and ``b`` have the same profile."""
    if is_tuple(a) and is_tuple(b):
        return len(a) == len(b) and all(congruent(x, y) for x, y in zip(a, b))
    return not is_tuple(a) and not is_tuple(b)


def unflatten(flat: tuple, profile: IntTuple) -> IntTuple:
    """Inverse of :func:`flatten`: give the leaves ``flat`` the profile of ``profile``."""
    leaves = iter(flat)

    def build(p: IntTuple) -> IntTuple:
        return tuple(build(x) for x in p) if is_tuple(p) else next(leaves)

    result = build(profile)
    if next(leaves, None) is not None:
        raise LayoutError(f"unflatten: {flat} has more leaves than the profile {int_tuple_str(profile)}")
    return result


def get_mode(t: IntTuple, index: int) -> IntTuple:
    """Mode ``index`` of ``t``; an int is its own (only) mode 0."""
    if is_tuple(t):
        return t[index]
    if index in (0, -1):
        return t
    raise LayoutError(f"mode {index} does not exist in rank-1 int-tuple {t}")


# ---- arithmetic ---------------------------------------------------------------------------------
def product(t: IntTuple) -> int:
    """Product of all leaves; 1 for the empty tuple."""
    return math.prod(flatten(t)) if is_tuple(t) else t


def product_each(t: IntTuple) -> IntTuple:
    """The product of each top-level mode: ``product_each((2, (3, 4))) = (2, 12)``."""
    return tuple(product(x) for x in t) if is_tuple(t) else t


def inner_product(a: IntTuple, b: IntTuple) -> int:
    """``sum(a_i * b_i)`` over the leaves of two congruent int-tuples."""
    if is_tuple(a):
        if not is_tuple(b) or len(a) != len(b):
            raise LayoutError(f"inner_product: {int_tuple_str(a)} and {int_tuple_str(b)} are not congruent")
        return sum(inner_product(x, y) for x, y in zip(a, b))
    if is_tuple(b):
        raise LayoutError(f"inner_product: {int_tuple_str(a)} and {int_tuple_str(b)} are not congruent")
    return a * b


def prefix_product(t: IntTuple, init: int = 1) -> IntTuple:
    """Exclusive colexicographic prefix product, congruent to ``t``:
    ``prefix_product((2, (3, 4))) = (1, (2, 6))``. It is CuTe's compact column-major stride."""
    if not is_tuple(t):
        return init
    result = []
    for x in t:
        result.append(prefix_product(x, init))
        init *= product(x)
    return tuple(result)


def shape_div(a: IntTuple, b: IntTuple) -> IntTuple:
    """Division for shapes: ``a / b`` where one of the two divides the other, rounded away from
    zero (so ``shape_div(2, 8) = 1``). A tuple ``a`` divided by an int is folded left to right:
    ``shape_div((4, 5, 6), 40) = (1, 1, 3)``; tuple by tuple is element-wise; int by tuple divides
    by the product."""
    if is_tuple(a):
        if is_tuple(b):
            if len(a) != len(b):
                raise LayoutError(f"shape_div: {int_tuple_str(a)} and {int_tuple_str(b)} differ in rank")
            return tuple(shape_div(x, y) for x, y in zip(a, b))
        result = []
        for x in a:
            result.append(shape_div(x, b))
            b = shape_div(b, product(x))
        return tuple(result)
    if is_tuple(b):
        return shape_div(a, product(b))
    if a % b != 0 and b % a != 0:
        raise LayoutError(f"shape_div: neither of {a} and {b} divides the other")
    return a // b if abs(a) >= abs(b) else (1 if (a < 0) == (b < 0) else -1)


def ceil_div(a: IntTuple, b: IntTuple) -> IntTuple:
    """Rounded-up division; a tuple ``a`` divided by an int is folded left to right:
    ``ceil_div((3, 5), 2) = (2, 5)`` (the first mode absorbs the 2, rounding up)."""
    if is_tuple(a):
        if is_tuple(b):
            if len(b) > len(a):
                raise LayoutError(f"ceil_div: {int_tuple_str(b)} has more modes than {int_tuple_str(a)}")
            b = b + (1,) * (len(a) - len(b))
            return tuple(ceil_div(x, y) for x, y in zip(a, b))
        result = []
        for x in a:
            result.append(ceil_div(x, b))
            b = ceil_div(b, product(x))
        return tuple(result)
    if is_tuple(b):
        return ceil_div(a, product(b))
    return -(-a // b)


# ---- coordinates --------------------------------------------------------------------------------
def idx2crd(idx: IntTuple, shape: IntTuple) -> IntTuple:
    """The natural (hierarchical) coordinate of ``idx`` in ``shape``, colexicographically; a tuple
    ``idx`` is refined mode by mode. The last mode absorbs whatever is left, as in CuTe:
    ``idx2crd(5, (2, (3, 4))) = (1, (2, 0))``."""
    if is_tuple(idx):
        if not is_tuple(shape) or len(idx) != len(shape):
            raise LayoutError(f"idx2crd: coordinate {int_tuple_str(idx)} does not match shape "
                              f"{int_tuple_str(shape)}")
        return tuple(idx2crd(i, s) for i, s in zip(idx, shape))
    if not is_tuple(shape):
        return idx
    result = []
    for k, s in enumerate(shape):
        if k == len(shape) - 1:
            result.append(idx2crd(idx, s))
        else:
            result.append(idx2crd(idx % product(s), s))
            idx //= product(s)
    return tuple(result)


def crd2idx(crd: IntTuple, shape: IntTuple, stride: IntTuple | None = None) -> int:
    """``inner_product(natural coordinate of crd, stride)``; ``stride`` defaults to the compact
    colexicographic one, so ``crd2idx`` is then the 1-D index of ``crd``. ``crd`` may be a 1-D
    index, an R-D or an h-D coordinate (any refinement of the shape's profile)."""
    if stride is None:
        stride = prefix_product(shape)
    if is_tuple(crd):
        if not is_tuple(shape) or len(crd) != len(shape):
            raise LayoutError(f"crd2idx: coordinate {int_tuple_str(crd)} does not match shape "
                              f"{int_tuple_str(shape)}")
        return sum(crd2idx(c, s, d) for c, s, d in zip(crd, shape, stride))
    if not is_tuple(shape):
        return crd * stride
    total = 0
    for k, (s, d) in enumerate(zip(shape, stride)):
        if k == len(shape) - 1:
            total += crd2idx(crd, s, d)
        else:
            total += crd2idx(crd % product(s), s, d)
            crd //= product(s)
    return total


def zip2_by(t: IntTuple, guide: Any) -> tuple:
    """Regroup ``t`` by ``guide``: every leaf of ``guide`` (an int, a layout, anything but a tuple)
    points at a rank-2 mode ``(a, b)`` of ``t``; the ``a``'s are gathered into the first mode and
    the ``b``'s (followed by the modes of ``t`` that ``guide`` does not reach) into the second.

    ``zip2_by(((2, 3), (4, 5)), (0, 0)) = ((2, 4), (3, 5))``
    """
    if is_tuple(guide):
        if not is_tuple(t) or len(t) < len(guide):
            raise LayoutError(f"zip2_by: {int_tuple_str(t)} has fewer modes than the tiler")
        split = [zip2_by(x, g) for x, g in zip(t, guide)]
        return tuple(s[0] for s in split), tuple(s[1] for s in split) + tuple(t[len(guide):])
    if not is_tuple(t) or len(t) != 2:
        raise LayoutError(f"zip2_by: expected a rank-2 mode (tile, rest), got {int_tuple_str(t)}")
    return t
