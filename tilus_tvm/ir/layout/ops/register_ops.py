"""Register-layout operations under Tilus's module path ``tilus.ir.layout.ops.register_ops``.

Every function is :mod:`tilus_tvm.layout`'s own (same names, same signatures, same results as
Tilus's), plus :func:`replicated`. ``left_divide`` is not provided (see docs/tilus_compat.md).
"""
from __future__ import annotations

from tilus_tvm.errors import LayoutError
from tilus_tvm.layout.register import (
    RegisterLayout,
    column_local,
    column_spatial,
    compose,
    local,
    register_layout,
    spatial,
)
from tilus_tvm.layout.register_ops import (
    auto_local_spatial,
    concat,
    divide,
    flatten,
    permute,
    reduce,
    reshape,
    squeeze,
    unsqueeze,
)

__all__ = ["auto_local_spatial", "column_local", "column_spatial", "compose", "concat", "divide", "flatten",
           "local", "permute", "reduce", "register_layout", "replicated", "reshape", "spatial", "squeeze",
           "unsqueeze"]


def replicated(*shape: int, num_workers: int) -> RegisterLayout:
    """A layout in which each of ``num_workers`` threads holds the whole tile of ``shape`` (in
    row-major local order): ``thread(index) = any of 0..num_workers-1``, ``local(index) = the
    row-major offset of index``.

    >>> replicated(2, 3, num_workers=4).holders(1, 2)
    [(0, 5), (1, 5), (2, 5), (3, 5)]
    """
    if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1:
        raise LayoutError(f"replicated: num_workers must be a positive int, got {num_workers!r}")
    tile = local(*shape)
    return register_layout(tile.shape, tile.mode_shape, [-num_workers] if num_workers > 1 else [], tile.local_modes)
