"""``tilus_tvm.ir.layout.ops``: the layout operations under the module path Tilus programs import
(``from tilus.ir.layout.ops import concat, local, reduce, shared_row_major_swizzle, spatial``).

Register-layout operations come from :mod:`tilus_tvm.layout` unchanged; shared-layout operations
take Tilus's arguments and return :class:`~tilus_tvm.layout.shared.SharedLayout` (see
:mod:`.shared_ops`).
"""
from tilus_tvm.ir.layout.ops import register_ops, shared_ops
from tilus_tvm.ir.layout.ops.register_ops import (
    auto_local_spatial,
    column_local,
    column_spatial,
    compose,
    concat,
    divide,
    flatten,
    local,
    permute,
    reduce,
    register_layout,
    replicated,
    reshape,
    spatial,
    squeeze,
    unsqueeze,
)
from tilus_tvm.ir.layout.ops.shared_ops import (
    shared_column_major,
    shared_compose,
    shared_layout,
    shared_permute,
    shared_reshape,
    shared_row_major,
    shared_row_major_swizzle,
)
