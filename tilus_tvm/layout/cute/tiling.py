"""Products, divides and partitions: tiling built from complement and composition.

A *tiler* is a layout, an int ``n`` (the layout ``n:1``), ``None`` (leave the mode alone), or a
tuple of tilers applied mode by mode (modes of the layout past the tuple are kept). Products
repeat a block over a tiler; divides split a layout into tiles and the arrangement of the tiles.

Every product and divide takes ``strict=True``, passed on to the ``complement`` and
``composition`` it is built from (see :mod:`tilus_tvm.layout.cute.algebra`): by default the
results are CuTe's; strictly, a result that is not what the operation promises is refused.
"""
from __future__ import annotations

from typing import Any, Callable

from tilus_tvm.errors import LayoutError
from tilus_tvm.layout.cute import int_tuple as it
from tilus_tvm.layout.cute.algebra import as_layout, coalesce, complement, composition, operation, tiler_str
from tilus_tvm.layout.cute.layout import Layout, append, make_layout, slice_, slice_and_offset, zip_layouts


def _by_mode(layout: Layout, tiler: Any, op: Callable, name: str, strict: bool) -> Layout | None:
    """Apply ``op`` mode by mode for a tuple tiler; ``None`` when ``tiler`` is not a tuple."""
    if not isinstance(tiler, tuple):
        return None
    if len(tiler) > layout.rank:
        raise LayoutError(f"{name}({layout}, {tiler_str(tiler)}): the tiler has {len(tiler)} modes, the layout "
                          f"only {layout.rank}")
    modes = [op(layout[i], t, strict=strict) for i, t in enumerate(tiler)]
    return make_layout(*modes, *list(layout)[len(tiler):])


def _unzip(layout: Layout, tiler: Any) -> Layout:
    """CuTe's ``tile_unzip``: gather the tile modes of a by-mode result into mode 0 and the rest
    modes into mode 1 (see :func:`~tilus_tvm.layout.cute.int_tuple.zip2_by`)."""
    return Layout(it.zip2_by(layout.shape, tiler), it.zip2_by(layout.stride, tiler))


def _keep_all(mode: Layout) -> Any:
    """The slice coordinate that keeps every sub-mode of ``mode`` and lifts them one level up
    (CuTe's ``repeat<rank>(_)``: a single ``_`` for a rank-1 mode)."""
    return tuple([None] * mode.rank) if it.is_tuple(mode.shape) and mode.rank > 1 else None


def _unpack(layout: Layout, first: bool) -> Layout:
    """Flatten mode 1 (and mode 0 when ``first``) of a rank-2 layout one level into the top."""
    return slice_(layout, (_keep_all(layout[0]) if first else None, _keep_all(layout[1])))


# ---- products ------------------------------------------------------------------------------------
def logical_product(block: Layout, tiler: Any, *, strict: bool = False) -> Layout:
    """``(block, complement(block, size(block)*cosize(tiler)) o tiler)``: the block, then the
    tiler's arrangement of copies of it, each copy placed where the block leaves room.

    >>> str(logical_product(Layout((2, 2), (1, 2)), Layout((3, 4), (4, 1))))
    '((2,2),(3,4)):((1,2),(16,4))'
    """
    block = as_layout(block, "logical_product")
    if tiler is None:
        return block
    by_mode = _by_mode(block, tiler, logical_product, "logical_product", strict)
    if by_mode is not None:
        return by_mode
    tiler = as_layout(tiler, "logical_product")
    with operation("logical_product", block, tiler):
        rest = complement(block, block.size * tiler.cosize, strict=strict)
        return make_layout(block, composition(rest, tiler, strict=strict))


def zipped_product(block: Layout, tiler: Any, *, strict: bool = False) -> Layout:
    """``logical_product`` with the block modes gathered in mode 0 and the tiler modes in mode 1."""
    return _unzip(logical_product(block, tiler, strict=strict), tiler)


def tiled_product(block: Layout, tiler: Any, *, strict: bool = False) -> Layout:
    """``zipped_product`` with mode 1 unpacked: ``((block...), t0, t1, ...)``."""
    return _unpack(zipped_product(block, tiler, strict=strict), first=False)


def flat_product(block: Layout, tiler: Any, *, strict: bool = False) -> Layout:
    """``zipped_product`` with both modes unpacked: ``(b0, b1, ..., t0, t1, ...)``."""
    return _unpack(zipped_product(block, tiler, strict=strict), first=True)


def _rank_sensitive_product(block: Layout, tiler: Layout, name: str, block_first: bool,
                            coalesce_result: bool, strict: bool) -> Layout:
    block, tiler = as_layout(block, name), as_layout(tiler, name)
    rank = max(block.rank, tiler.rank)
    with operation(name, block, tiler):
        product = logical_product(append(block, rank), append(tiler, rank), strict=strict)
        inner, outer = (product[0], product[1]) if block_first else (product[1], product[0])
        if rank == 1:  # both modes are ints: zip them into the single mode
            zipped = Layout(((inner.shape, outer.shape),), ((inner.stride, outer.stride),))
        else:
            zipped = zip_layouts(inner, outer)
        return coalesce(zipped, (1,) * rank) if coalesce_result else zipped


def blocked_product(block: Layout, tiler: Layout, coalesce_result: bool = False, *, strict: bool = False) -> Layout:
    """Mode by mode ``(block_i, tiler_i)`` of the logical product: copies of the block laid side
    by side as the tiler says; rank ``max(rank(block), rank(tiler))`` (the lower-rank operand is
    padded with ``1:0`` modes).

    The result keeps the ``(block_i, tiler_i)`` structure, as seed 001 shows it. CuTe's C++
    coalesces each mode as well; ``coalesce_result=True`` does that (the same function):

    >>> str(blocked_product(Layout((2, 2), (1, 2)), Layout((3, 4), (4, 1))))
    '((2,3),(2,4)):((1,16),(2,4))'
    >>> str(blocked_product(Layout((2, 2), (1, 2)), Layout((3, 4), (4, 1)), coalesce_result=True))
    '((2,3),8):((1,16),2)'
    """
    return _rank_sensitive_product(block, tiler, "blocked_product", True, coalesce_result, strict)


def raked_product(block: Layout, tiler: Layout, coalesce_result: bool = False, *, strict: bool = False) -> Layout:
    """Mode by mode ``(tiler_i, block_i)`` of the logical product: the copies of the block
    interleaved, each block element spread over the tiler. ``coalesce_result`` as in
    :func:`blocked_product`.

    >>> str(raked_product(Layout((2, 2), (1, 2)), Layout((3, 4), (4, 1))))
    '((3,2),(4,2)):((16,1),(4,2))'
    """
    return _rank_sensitive_product(block, tiler, "raked_product", False, coalesce_result, strict)


# ---- divides -------------------------------------------------------------------------------------
def logical_divide(layout: Layout, tiler: Any, *, strict: bool = False) -> Layout:
    """``layout o (tiler, complement(tiler, shape(layout)))``: mode 0 walks one tile (the
    elements the tiler picks), mode 1 walks from tile to tile.

    >>> str(logical_divide(Layout(16, 1), Layout(4, 2)))
    '(4,(2,2)):(2,(1,8))'
    """
    layout = as_layout(layout, "logical_divide")
    if tiler is None:
        return layout
    by_mode = _by_mode(layout, tiler, logical_divide, "logical_divide", strict)
    if by_mode is not None:
        return by_mode
    tiler = as_layout(tiler, "logical_divide")
    with operation("logical_divide", layout, tiler):
        rest = complement(tiler, layout.shape, strict=strict)
        return composition(layout, make_layout(tiler, rest), strict=strict)


def zipped_divide(layout: Layout, tiler: Any, *, strict: bool = False) -> Layout:
    """``logical_divide`` with the tile modes gathered in mode 0 and the rest in mode 1:
    ``((tile...), (rest...))``."""
    return _unzip(logical_divide(layout, tiler, strict=strict), tiler)


def tiled_divide(layout: Layout, tiler: Any, *, strict: bool = False) -> Layout:
    """``zipped_divide`` with mode 1 unpacked: ``((tile...), r0, r1, ...)``."""
    return _unpack(zipped_divide(layout, tiler, strict=strict), first=False)


def flat_divide(layout: Layout, tiler: Any, *, strict: bool = False) -> Layout:
    """``zipped_divide`` with both modes unpacked: ``(t0, t1, ..., r0, r1, ...)``."""
    return _unpack(zipped_divide(layout, tiler, strict=strict), first=True)


# ---- partitions ----------------------------------------------------------------------------------
def local_tile(layout: Layout, tiler: Any, coord: Any, *, strict: bool = False) -> tuple[Layout, int]:
    """Tile number ``coord`` of ``layout``: ``zipped_divide(layout, tiler)`` sliced at ``coord`` in
    its rest mode. Returns ``(tile_layout, offset)``: element ``c`` of the tile is at
    ``offset + tile_layout(c)`` (CuTe moves a tensor's pointer by ``offset``).

    >>> sub, offset = local_tile(Layout((8, 6)), (2, 3), (1, 1))
    >>> str(sub), offset
    ('(2,3):(1,8)', 26)
    """
    tiled = zipped_divide(layout, tiler, strict=strict)
    with operation("local_tile", layout, tiler_str(tiler), coord):
        tile_keep, rest = _keep_all(tiled[0]), tiled[1]
        if isinstance(coord, tuple):
            if not it.is_tuple(rest.shape):
                coord = coord[0] if len(coord) == 1 else coord
            elif len(coord) < rest.rank:
                coord = coord + (None,) * (rest.rank - len(coord))
        return slice_and_offset(tiled, (tile_keep, coord))


def local_partition(layout: Layout, tile: Layout, index: int, *, strict: bool = False) -> tuple[Layout, int]:
    """The elements of ``layout`` that thread ``index`` of the thread layout ``tile`` owns: tile
    ``layout`` by the shape of ``tile``; thread ``index`` sits at the coordinate ``c`` of ``tile``
    with ``tile(c) == index`` (``tile`` compact) and takes element ``c`` of every tile. Returns
    ``(partition_layout, offset)`` as :func:`local_tile` does.

    >>> sub, offset = local_partition(Layout((4, 4)), Layout((2, 2)), 3)
    >>> str(sub), offset
    ('(2,2):(2,8)', 5)
    """
    layout, tile = as_layout(layout, "local_partition"), as_layout(tile, "local_partition")
    with operation("local_partition", layout, tile, index):
        if not it.is_int(index) or not 0 <= index < tile.size:
            raise LayoutError(f"thread index {index!r} is out of range [0, {tile.size})")
        tiled = zipped_divide(layout, it.product_each(tile.shape), strict=strict)
        coord = _coord_of_index(index, tile)
        return slice_and_offset(tiled, (coord, _keep_all(tiled[1])))


def _coord_of_index(index: int, tile: Layout) -> Any:
    """Per top-level mode of ``tile``, the 1-D coordinate ``c`` with ``tile(c) == index``."""
    def natural(shape: Any, stride: Any) -> Any:
        if it.is_tuple(shape):
            return tuple(natural(s, d) for s, d in zip(shape, stride))
        return 0 if stride == 0 else (index // abs(stride)) % shape
    hier = natural(tile.shape, tile.stride)
    if not it.is_tuple(tile.shape):
        return hier
    return tuple(it.crd2idx(c, s) for c, s in zip(hier, tile.shape))

