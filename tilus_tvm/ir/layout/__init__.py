"""``tilus_tvm.ir.layout``: the layout algebra under the import paths Tilus programs use.

Everything in :mod:`tilus_tvm.layout`, plus the operations of :mod:`tilus_tvm.ir.layout.ops`
(``shared_compose``, ``shared_row_major_swizzle``, ``replicated``, ...) and Tilus's module paths
``tilus_tvm.ir.layout.ops``, ``.ops.register_ops``, ``.ops.shared_ops``, ``.register_layout``,
``.register_layout_ops`` and ``.shared_layout``.
"""
# Tilus's submodules first, while no name of this package shadows them: importing a submodule binds
# its name here, and two of them (register_layout, shared_layout) share their name with a function,
# which is bound afterwards and must win (as in Tilus). Later imports of the submodules find them in
# sys.modules and leave the functions bound.
from tilus_tvm.ir.layout import ops, register_layout, register_layout_ops, shared_layout  # noqa: F401  # isort: skip

from tilus_tvm.layout import *  # noqa: F401,F403,E402
from tilus_tvm.errors import LayoutError as LayoutOperationError  # noqa: F401,E402 - Tilus's name
from tilus_tvm.ir.layout.ops import (  # noqa: F401,E402
    register_layout,
    replicated,
    shared_compose,
    shared_layout,
    shared_permute,
    shared_reshape,
    shared_row_major_swizzle,
)
