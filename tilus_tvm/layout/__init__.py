"""Layout algebra: register layouts (Tilus), shared layouts and swizzles, CuTe layouts,
tensor-core operand atoms. Plain Python; only ``to_tir`` imports TVM."""
from tilus_tvm.errors import LayoutError
from tilus_tvm.layout.atoms import (
    LdmatrixAtom,
    MmaAtom,
    get_ldmatrix_atom,
    get_mma_atom,
    ldmatrix_layout,
    mma_atoms,
)
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
    interleave_local,
    permute,
    reduce,
    reshape,
    slot_permutation,
    squeeze,
    unsqueeze,
)
from tilus_tvm.layout.shared import (
    BankConflicts,
    SharedLayout,
    bank_conflicts,
    shared_column_major,
    shared_padded,
    shared_row_major,
    shared_strides,
    swizzled,
)
from tilus_tvm.layout.swizzle import Swizzle
from tilus_tvm.layout import cute, thunderkittens  # CuTe algebra as a namespace: its names would clash here
from tilus_tvm.layout.bridges import cute_to_shared, register_to_tv, shared_to_cute, tv_to_register
from tilus_tvm.layout.visualize import visualize_layout
