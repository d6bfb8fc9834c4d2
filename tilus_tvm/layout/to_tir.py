"""Layouts as TVM ``IndexMap``s, the form the lowering indexes buffers through.

The only module of ``tilus_tvm.layout`` that imports TVM. Each map evaluates the layout's own
generic mapping (written with ``+ * // % ^ & >>``) on TVM variables, so the IndexMap and the Python
layout agree by construction; the tests evaluate both at every point anyway. The resulting
expressions are simplified under the bounds of the map's domain (``0 <= i_d < shape[d]``, threads
and slots in range), so a map is exact on its domain, which is where the lowering uses it.
"""
from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import tvm
from tvm import tirx

from tilus_tvm.errors import LayoutError
from tilus_tvm.layout.register import RegisterLayout
from tilus_tvm.layout.shared import SharedLayout


def register_index_map(layout: RegisterLayout, index_dtype: str = "int32") -> tirx.IndexMap:
    """``IndexMap``: logical index -> ``(thread, local)`` of the first replica.

    ``(i_0, ..., i_{n-1}) -> (layout.thread_of(i, replica=0), layout.local_of(i))``. For a layout
    without replication the map is a bijection and carries :func:`register_inverse_index_map` as
    its pre-defined inverse.

    >>> from tilus_tvm.layout import spatial
    >>> [int(x) for x in register_index_map(spatial(8, 4).local(1, 2)).map_indices([3, 5])]
    [14, 1]
    """
    _check(layout, RegisterLayout, "register_index_map")
    inverse = None if layout.is_replicated else register_inverse_index_map(layout, index_dtype)

    def mapping(*index):
        return [layout.thread_of(index, 0), layout.local_of(index)]

    return _index_map(_logical_names(layout.shape), layout.shape, mapping, index_dtype, inverse)


def register_inverse_index_map(layout: RegisterLayout, index_dtype: str = "int32") -> tirx.IndexMap:
    """``IndexMap``: ``(thread, local)`` -> the logical index that register holds (``layout.logical``).

    Every replica of an element maps back to the same logical index.

    >>> from tilus_tvm.layout import spatial
    >>> [int(x) for x in register_inverse_index_map(spatial(8, 4).local(1, 2)).map_indices([14, 1])]
    [3, 5]
    """
    _check(layout, RegisterLayout, "register_inverse_index_map")

    def mapping(thread, local):
        return list(layout.logical(thread, local))

    return _index_map(["thread", "local"], [layout.num_threads, layout.local_size], mapping, index_dtype)


def shared_index_map(layout: SharedLayout, index_dtype: str = "int32") -> tirx.IndexMap:
    """``IndexMap``: logical index -> ``[offset]`` in elements, swizzle included.

    ``(i_0, ..., i_{n-1}) -> (swizzle(sum(i_d * strides[d])),)``.

    >>> from tilus_tvm.layout.shared import shared_row_major
    >>> from tilus_tvm.layout.swizzle import Swizzle
    >>> [int(x) for x in shared_index_map(shared_row_major(8, 64).swizzled(Swizzle(3, 3, 3))).map_indices([1, 8])]
    [64]
    """
    _check(layout, SharedLayout, "shared_index_map")

    def mapping(*index):
        return [layout.offset(*index)]

    return _index_map(_logical_names(layout.shape), layout.shape, mapping, index_dtype)


def _check(layout, expected: type, op: str) -> None:
    if not isinstance(layout, expected):
        raise LayoutError(f"{op}: expected a {expected.__name__}, got {layout!r}")


def _logical_names(shape: Sequence[int]) -> list[str]:
    return [f"i{d}" for d in range(len(shape))]


def _index_map(names: Sequence[str], extents: Sequence[int], mapping: Callable[..., list[Any]], index_dtype: str,
               inverse: Optional[tirx.IndexMap] = None) -> tirx.IndexMap:
    """An IndexMap over fresh variables ``names`` in ``[0, extents)``, its results simplified under those bounds."""
    variables = [tirx.Var(name, index_dtype) for name in names]
    analyzer = tvm.sym.Analyzer()
    for var, extent in zip(variables, extents):
        analyzer.bind(var, tvm.ir.Range(0, extent))
    final = [analyzer.simplify(tirx.const(x, index_dtype) if isinstance(x, int) else x)
             for x in mapping(*variables)]
    return tirx.IndexMap(variables, final, inverse)
