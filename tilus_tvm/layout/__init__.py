"""Layout algebra: register layouts (Tilus), shared layouts and swizzles, CuTe layouts,
tensor-core operand atoms. Plain Python; only ``to_tir`` imports TVM."""
from tilus_tvm.errors import LayoutError
from tilus_tvm.layout.register import (
    RegisterLayout,
    column_local,
    column_repeat,
    column_spatial,
    compose,
    local,
    register_layout,
    repeat,
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
from tilus_tvm.layout.swizzle import Swizzle
from tilus_tvm.layout.visualize import visualize_layout
