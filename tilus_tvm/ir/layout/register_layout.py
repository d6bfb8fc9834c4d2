"""``tilus_tvm.ir.layout.register_layout``: Tilus's module of the register-layout class."""
from tilus_tvm.layout.register import RegisterLayout, register_layout
from tilus_tvm.layout.visualize import visualize_layout

__all__ = ["RegisterLayout", "register_layout", "visualize_layout"]
