"""ThunderKittens register tiles and vectors (seed 002) as :class:`RegisterLayout` s of one warp.

A TK register tile ``rt<T2, height, width, layout>`` is ``height x width`` base tiles
``rt_base`` of 16x16 elements; each lane holds ``T2 data[4]`` per base tile, each ``data[k]`` a
packed pair of two neighbouring elements. TK's ``load`` (row layout) gives lane ``l``

    r = l / 4,  c = 2 * (l % 4)
    data[0] = (r,     c..c+1)     data[1] = (r + 8, c..c+1)
    data[2] = (r, c+8..c+9)       data[3] = (r + 8, c+8..c+9)

and we number the registers ``local = 2 * k + e`` (``e`` = which half of the pair). So element
``(i, j)`` of a row-layout base tile sits in lane ``(i % 8) * 4 + (j % 8) // 2`` and register
``4 * (j // 8) + 2 * (i // 8) + j % 2``: exactly the A operand of ``mma.sync.m16n8k16`` (f16).
The column layout is its transpose: the pair packs two neighbouring *rows*.

Base tiles of a register tile are stored ``tiles[height][width]`` (row-major), so
``rt(h, w) = local(h, w) * base_tile()``.

TK's register vectors ``rv<T2, n, inner_dim>`` hold one value per row (``col_vec``) or per column
(``row_vec``) of a tile, replicated over the lanes that share that row or column:

- ``inner_dim = 1`` (row-layout ``col_vec``): element ``x`` of every 16 in lane ``(x % 8) * 4 + q``
  for all ``q < 4``, register ``2 * (x // 16) + (x % 16) // 8``;
- ``inner_dim = 2`` (row-layout ``row_vec``): element ``x`` in lane ``p * 4 + (x % 8) // 2`` for all
  ``p < 8``, register ``4 * (x // 16) + 2 * ((x % 16) // 8) + x % 2``.

These are the layouts that reducing the tile's columns (``col_vec``) or rows (``row_vec``) gives.
"""
from __future__ import annotations

from tilus_tvm.errors import LayoutError
from tilus_tvm.layout.register import RegisterLayout, column_local, local

TILE = 16
WARP_SIZE = 32
LAYOUTS = ("row", "col")


def _check_layout(layout: str, op: str) -> None:
    if layout not in LAYOUTS:
        raise LayoutError(f"{op}: layout must be 'row' or 'col', got {layout!r}")


def _check_count(value: int, name: str, op: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise LayoutError(f"{op}: {name} must be a positive int (a count of 16-element base tiles), got {value!r}")


def base_tile(layout: str = "row") -> RegisterLayout:
    """TK's ``rt_base`` (16x16, one warp, 8 registers per lane) in the ``"row"`` or ``"col"`` layout.

    Row layout: registers ``(j // 8, i // 8)`` column-major, then lanes ``(i % 8, (j % 8) // 2)``
    row-major, then the pair half ``j % 2``. Column layout: the transpose.

    >>> base_tile().holders(9, 10)
    [(5, 6)]
    """
    _check_layout(layout, "base_tile")
    if layout == "row":
        return column_local(2, 2).spatial(8, 4).local(1, 2)
    return local(2, 2).column_spatial(4, 8).local(2, 1)


def rt(height: int, width: int, layout: str = "row") -> RegisterLayout:
    """TK's ``rt<T2, height, width, layout>``: a ``16*height x 16*width`` tile held by one warp,
    base tile ``(a, b)`` in registers ``[8 * (a * width + b), 8 * (a * width + b) + 8)``.

    >>> rt(2, 1).holders(17, 3)
    [(5, 9)]
    """
    _check_count(height, "height", "rt")
    _check_count(width, "width", "rt")
    _check_layout(layout, "rt")
    return local(height, width) * base_tile(layout)


def rv(length: int, inner_dim: int) -> RegisterLayout:
    """TK's ``rv<T2, length, inner_dim>``: ``16*length`` values, replicated across a warp.

    ``inner_dim=1``: lane ``(x % 8) * 4 + q`` (all ``q < 4``) holds ``x``, 2 registers per 16 values.
    ``inner_dim=2``: lane ``p * 4 + (x % 8) // 2`` (all ``p < 8``) holds ``x``, 4 registers per 16.

    >>> rv(1, 1).holders(9)
    [(4, 1), (5, 1), (6, 1), (7, 1)]
    """
    _check_count(length, "length", "rv")
    if inner_dim == 1:
        # modes of x: (tile, x // 8 within the tile, x % 8)
        return RegisterLayout([TILE * length], [length, 2, 8], spatial_modes=[2, -4], local_modes=[0, 1])
    if inner_dim == 2:
        # modes of x: (tile, half, x % 8 // 2, x % 2)
        return RegisterLayout([TILE * length], [length, 2, 4, 2], spatial_modes=[-8, 2], local_modes=[0, 1, 3])
    raise LayoutError(f"rv: inner_dim must be 1 or 2 (TK's packing of a vector), got {inner_dim!r}")


def rt_col_vec(height: int, layout: str = "row") -> RegisterLayout:
    """The layout of ``rt<T2, height, width, layout>::col_vec``: one value per row (a row
    reduction's result). Row layout: ``rv(height, 1)``; column layout: ``rv(height, 2)``."""
    _check_layout(layout, "rt_col_vec")
    return rv(height, 1 if layout == "row" else 2)


def rt_row_vec(width: int, layout: str = "row") -> RegisterLayout:
    """The layout of ``rt<T2, height, width, layout>::row_vec``: one value per column (a column
    reduction's result). Row layout: ``rv(width, 2)``; column layout: ``rv(width, 1)``."""
    _check_layout(layout, "rt_row_vec")
    return rv(width, 2 if layout == "row" else 1)


__all__ = ["TILE", "WARP_SIZE", "base_tile", "rt", "rt_col_vec", "rt_row_vec", "rv"]
