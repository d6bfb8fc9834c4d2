"""``tilus_tvm.ir.layout.shared_layout``: Tilus's module of the shared-layout class."""
from tilus_tvm.ir.layout.ops.shared_ops import shared_layout
from tilus_tvm.layout.shared import SharedLayout

__all__ = ["SharedLayout", "shared_layout"]
