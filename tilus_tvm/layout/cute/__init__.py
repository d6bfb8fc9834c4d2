"""CuTe's layout algebra in Python, 0-indexed (``import tilus_tvm.cute as cute``).

- :mod:`.int_tuple`: shapes, strides and coordinates as nested int tuples
- :mod:`.layout`: ``Layout`` (``shape:stride``), coordinates, slicing, concatenation
- :mod:`.algebra`: coalesce, filter, complement, composition, right/left inverse
- :mod:`.tiling`: products, divides, ``local_tile`` and ``local_partition``
- :mod:`.composed`: ``ComposedLayout`` (``inner o offset o outer``) and identity layouts
- :mod:`.printing`: ``print_layout`` tables

Results are CuTe's (C++ ``cute/layout.hpp``, checked against CUTLASS's ``pycute``); the operations
take ``strict=True`` to refuse the results that are not what they promise (see :mod:`.algebra`).
"""
from tilus_tvm.layout.cute.algebra import (
    coalesce,
    complement,
    composition,
    filter,
    filter_zeros,
    left_inverse,
    right_inverse,
)
from tilus_tvm.layout.cute.composed import (
    ComposedLayout,
    IdentityLayout,
    make_composed_layout,
    make_identity_layout,
)
from tilus_tvm.layout.cute.int_tuple import (
    ceil_div,
    congruent,
    crd2idx,
    idx2crd,
    inner_product,
    is_int,
    is_tuple,
    prefix_product,
    product,
    product_each,
    shape_div,
)
from tilus_tvm.layout.cute.layout import (
    Layout,
    append,
    cosize,
    depth,
    flatten,
    make_layout,
    rank,
    shape,
    size,
    slice_,
    slice_and_offset,
    stride,
)
from tilus_tvm.layout.cute.printing import format_layout, print_layout
from tilus_tvm.layout.cute.tiling import (
    blocked_product,
    flat_divide,
    flat_product,
    local_partition,
    local_tile,
    logical_divide,
    logical_product,
    raked_product,
    tiled_divide,
    tiled_product,
    zipped_divide,
    zipped_product,
)
from tilus_tvm.layout.swizzle import Swizzle

__all__ = [
    "ComposedLayout", "IdentityLayout", "Layout", "Swizzle",
    "append", "blocked_product", "ceil_div", "coalesce", "complement", "composition", "congruent", "cosize",
    "crd2idx", "depth", "filter", "filter_zeros", "flat_divide", "flat_product", "flatten", "format_layout",
    "idx2crd", "inner_product", "is_int", "is_tuple", "left_inverse", "local_partition", "local_tile",
    "logical_divide", "logical_product", "make_composed_layout", "make_identity_layout", "make_layout",
    "prefix_product", "print_layout", "product", "product_each", "raked_product", "rank", "right_inverse",
    "shape", "shape_div", "size", "slice_", "slice_and_offset", "stride", "tiled_divide", "tiled_product",
    "zipped_divide", "zipped_product",
]
