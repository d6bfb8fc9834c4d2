"""Shared-layout operations under Tilus's module path ``tilus.ir.layout.ops.shared_ops``.

Tilus describes a shared layout by *modes*: each dimension is split into sub-dimensions, each with
its own stride, and an optional swizzle acts on the final offset:

    offset(index) = swizzle(sum(mode_index[i] * mode_strides[i]))

A :class:`~tilus_tvm.layout.shared.SharedLayout` here has one stride per dimension (plus the
swizzle), which is the case where the modes of every dimension nest -- ``mode_strides[i] ==
mode_strides[i + 1] * mode_shape[i + 1]`` inside a dimension. The functions below take Tilus's
arguments, compute in mode form, and return the strided layout; a result that needs more than one
stride per dimension is refused with a :class:`~tilus_tvm.errors.LayoutError` that says so.

:func:`shared_row_major_swizzle` always succeeds on the shapes Tilus accepts; for rows wider than
128 bytes it returns a layout with the same bank behaviour as Tilus's, not the same offsets (see its
docstring).
"""
from __future__ import annotations

import math
from typing import Any, Optional, Sequence

from tilus_tvm.errors import LayoutError
from tilus_tvm.layout.shared import SharedLayout, shared_column_major, shared_padded, shared_row_major
from tilus_tvm.layout.swizzle import Swizzle

__all__ = ["shared_column_major", "shared_compose", "shared_layout", "shared_permute", "shared_reshape",
           "shared_row_major", "shared_row_major_swizzle"]

Modes = list[tuple[int, int]]  # (size, stride) of each mode, major to minor


def _ints(values: Any, op: str, name: str, minimum: int) -> tuple[int, ...]:
    if not isinstance(values, (list, tuple)):
        raise LayoutError(f"{op}: {name} must be a list or tuple of ints, got {values!r}")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
            raise LayoutError(f"{op}: {name} must hold ints >= {minimum}, got {list(values)}")
    return tuple(values)


def _check_layout(layout: Any, op: str, name: str = "layout") -> SharedLayout:
    if not isinstance(layout, SharedLayout):
        raise LayoutError(f"{op}: {name} must be a SharedLayout, got {layout!r}")
    return layout


def _group(shape: Sequence[int], mode_shape: Sequence[int], op: str) -> list[Modes]:
    """Assign consecutive modes to the dimensions: each dimension takes modes until their product is
    its extent. Returns the mode indices of each dimension."""
    groups: list[list[int]] = []
    mode = 0
    for extent in shape:
        group, product = [], 1
        while product < extent and mode < len(mode_shape):
            group.append(mode)
            product *= mode_shape[mode]
            mode += 1
        if product != extent:
            raise LayoutError(f"{op}: mode_shape {list(mode_shape)} does not split shape {list(shape)} "
                              f"dimension by dimension (dimension of extent {extent} gets modes of product "
                              f"{product})")
        groups.append(group)
    if any(mode_shape[m] != 1 for m in range(mode, len(mode_shape))):
        raise LayoutError(f"{op}: mode_shape {list(mode_shape)} has more elements than shape {list(shape)}")
    return groups


def _strided(shape: Sequence[int], modes: Sequence[Modes], swizzle: Optional[Swizzle], op: str) -> SharedLayout:
    """The strided layout of ``shape`` whose dimension ``d`` has the modes ``modes[d]``."""
    strides: list[Optional[int]] = []
    for d, dim_modes in enumerate(modes):
        nontrivial = [(size, stride) for size, stride in dim_modes if size > 1]
        for (_, outer_stride), (inner_size, inner_stride) in zip(nontrivial, nontrivial[1:]):
            if outer_stride != inner_stride * inner_size:
                raise LayoutError(
                    f"{op}: dimension {d} of shape {list(shape)} would need modes (size, stride) {nontrivial}, "
                    f"which do not nest into one stride; tilus-tvm shared layouts have one stride per "
                    f"dimension (plus a swizzle)")
        strides.append(nontrivial[-1][1] if nontrivial else None)
    reach = 1 + sum((n - 1) * s for n, s in zip(shape, strides) if s is not None)
    # a dimension of extent 1 gets the stride of an outermost row-major dimension
    return SharedLayout(tuple(shape), tuple(reach if s is None else s for s in strides), swizzle)


def _modes_of(layout: SharedLayout) -> list[Modes]:
    return [[(n, s)] for n, s in zip(layout.shape, layout.strides)]


def shared_layout(shape: Sequence[int], mode_shape: Sequence[int], mode_strides: Sequence[int],
                  optional_swizzle: Optional[Swizzle] = None) -> SharedLayout:
    """The layout ``offset(index) = swizzle(sum(mode_index[i] * mode_strides[i]))``, where each index
    is split into the modes of its dimension (consecutive entries of ``mode_shape`` whose product is
    the extent), major to minor. The modes of each dimension must nest into one stride.

    >>> shared_layout([8, 16], [8, 4, 4], [16, 4, 1])
    SharedLayout(shape=[8, 16], strides=[16, 1])
    """
    op = "shared_layout"
    shape = _ints(shape, op, "shape", 1)
    mode_shape = _ints(mode_shape, op, "mode_shape", 1)
    mode_strides = _ints(mode_strides, op, "mode_strides", 0)
    if len(mode_shape) != len(mode_strides):
        raise LayoutError(f"{op}: mode_shape {list(mode_shape)} and mode_strides {list(mode_strides)} differ in "
                          f"length")
    groups = _group(shape, mode_shape, op)
    return _strided(shape, [[(mode_shape[m], mode_strides[m]) for m in g] for g in groups], optional_swizzle, op)


def shared_compose(lhs: SharedLayout, rhs: SharedLayout) -> SharedLayout:
    """The layout that tiles ``rhs`` tiles in the pattern of ``lhs``: for ``index[d] = a[d] *
    rhs.shape[d] + b[d]``, ``offset = lhs.offset(a) * rhs.cosize + rhs.offset(b)``; its shape is
    ``lhs.shape * rhs.shape``. ``lhs`` must not be swizzled; a swizzle of ``rhs`` is kept when it
    acts within one ``rhs`` tile (``rhs.cosize`` is a multiple of its span).

    >>> shared_compose(shared_row_major(2, 1), shared_row_major(4, 8))
    SharedLayout(shape=[8, 8], strides=[8, 1])
    """
    op = "shared_compose"
    lhs, rhs = _check_layout(lhs, op, "lhs"), _check_layout(rhs, op, "rhs")
    if lhs.ndim != rhs.ndim:
        raise LayoutError(f"{op}: lhs {lhs} and rhs {rhs} differ in rank")
    if lhs.swizzle is not None:
        raise LayoutError(f"{op}: lhs {lhs} is swizzled; only the inner layout (rhs) may be")
    tile = rhs.cosize
    if rhs.swizzle is not None and tile % rhs.swizzle.span:
        raise LayoutError(f"{op}: rhs {rhs} spans {tile} elements, not a multiple of its swizzle's span "
                          f"{rhs.swizzle.span}, so the swizzle cannot act tile by tile")
    shape = [a * b for a, b in zip(lhs.shape, rhs.shape)]
    modes = [[(a, sa * tile), (b, sb)] for a, sa, b, sb in zip(lhs.shape, lhs.strides, rhs.shape, rhs.strides)]
    return _strided(shape, modes, rhs.swizzle, op)


def shared_permute(layout: SharedLayout, dims: Sequence[int]) -> SharedLayout:
    """The layout of the permuted tensor: ``result.offset(index[dims[0]], index[dims[1]], ...)`` is
    ``layout.offset(index)``, i.e. dimension ``i`` of the result is dimension ``dims[i]``.

    >>> shared_permute(shared_row_major(4, 8), [1, 0])
    SharedLayout(shape=[8, 4], strides=[1, 8])
    """
    op = "shared_permute"
    layout = _check_layout(layout, op)
    dims = _ints(dims, op, "dims", 0)
    if sorted(dims) != list(range(layout.ndim)):
        raise LayoutError(f"{op}: dims {list(dims)} is not a permutation of 0..{layout.ndim - 1} for {layout}")
    return SharedLayout(tuple(layout.shape[d] for d in dims), tuple(layout.strides[d] for d in dims), layout.swizzle)


def shared_reshape(layout: SharedLayout, new_shape: Sequence[int]) -> SharedLayout:
    """The layout of the same storage seen with ``new_shape`` (row-major order of the logical
    elements is kept, as ``torch.reshape`` keeps it). Fails, naming the dimension, when a new
    dimension would need more than one stride (e.g. merging two dimensions that are not nested).

    >>> shared_reshape(shared_row_major(4, 8), [2, 16])
    SharedLayout(shape=[2, 16], strides=[16, 1])
    """
    op = "shared_reshape"
    layout = _check_layout(layout, op)
    new_shape = _ints(new_shape, op, "new_shape", 1)
    if math.prod(new_shape) != layout.size:
        raise LayoutError(f"{op}: new_shape {list(new_shape)} has {math.prod(new_shape)} elements, {layout} has "
                          f"{layout.size}")
    pending = [(n, s) for n, s in zip(layout.shape, layout.strides) if n > 1]  # (size, stride), major first
    modes: list[Modes] = []
    for extent in new_shape:
        dim_modes: Modes = []
        while extent > 1:
            size, stride = pending[0]
            factor = math.gcd(extent, size)
            if factor == 1:
                raise LayoutError(f"{op}: cannot reshape {layout} to {list(new_shape)}: a new dimension of "
                                  f"extent {extent} straddles an old one of extent {size}")
            dim_modes.append((factor, stride * (size // factor)))
            extent //= factor
            pending[0] = (size // factor, stride)
            if size // factor == 1:
                pending.pop(0)
        modes.append(dim_modes)
    return _strided(new_shape, modes, layout.swizzle, op)


def shared_row_major_swizzle(shape: Sequence[int], dtype_nbytes: int) -> SharedLayout:
    """A row-major layout for tiles read with ``ldmatrix`` and written with 16-byte ``cp.async``
    without bank conflicts (Tilus's ``shared_row_major_swizzle``): rows ``shape[-2]`` (a multiple of
    8) of ``shape[-1]`` elements of ``dtype_nbytes`` bytes (a multiple of 16 bytes per row); leading
    dimensions (pipeline stages) repeat the tile.

    The 16-byte chunks of each row are permuted by the row index (XOR), so that the 8 rows an
    ``ldmatrix`` reads at one column fall into 8 different bank groups:

    - rows of 16, 32, 64 or 128 bytes: exactly Tilus's layout, ``Swizzle(bits=log2(row/16),
      base=log2(16/dtype_nbytes), shift=3)`` on the row-major offset;
    - wider rows of a power-of-two number of elements: the chunks of every 128-byte segment are
      XOR-ed with the row index (``Swizzle(3, base, log2(shape[-1]) - base)``). Tilus stores each
      128-byte column block of the tile contiguously instead; the bank behaviour is the same, the
      element offsets differ;
    - other row widths: row-major, with each row padded by 16 bytes when it holds an even number of
      16-byte chunks (so consecutive rows start in different bank groups); an odd number needs none.
      ``ldmatrix`` reads stay conflict-free; a warp's 16-byte stores may meet 2-way conflicts where
      one phase of 8 stores straddles two rows (as with Tilus's layout for such widths).

    >>> shared_row_major_swizzle([64, 32], dtype_nbytes=2)
    SharedLayout(shape=[64, 32], strides=[32, 1], swizzle=Sw<2,3,3>)
    """
    op = "shared_row_major_swizzle"
    shape = _ints(shape, op, "shape", 1)
    if len(shape) < 2:
        raise LayoutError(f"{op}: shape {list(shape)} needs at least two dimensions (rows, columns)")
    if dtype_nbytes not in (1, 2, 4, 8, 16):
        raise LayoutError(f"{op}: dtype_nbytes must be 1, 2, 4, 8 or 16, got {dtype_nbytes!r}")
    rows, columns = shape[-2], shape[-1]
    row_bytes = columns * dtype_nbytes
    if rows % 8 or row_bytes % 16:
        raise LayoutError(f"{op}: shape {list(shape)} with {dtype_nbytes}-byte elements: rows ({rows}) must be a "
                          f"multiple of 8 and a row ({row_bytes} bytes) a multiple of 16 bytes")
    base = (16 // dtype_nbytes).bit_length() - 1  # log2(elements per 16-byte chunk)
    chunks = row_bytes // 16
    layout = shared_row_major(*shape)
    if chunks in (1, 2, 4, 8):
        bits = chunks.bit_length() - 1
        return layout.swizzled(Swizzle(bits, base, 3)) if bits else layout
    if columns & (columns - 1) == 0:
        return layout.swizzled(Swizzle(3, base, columns.bit_length() - 1 - base))
    if chunks % 2:
        return layout
    return shared_padded(shape, 16 // dtype_nbytes)
