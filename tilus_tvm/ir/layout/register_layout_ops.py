"""``tilus_tvm.ir.layout.register_layout_ops``: where Tilus 0.1 kept the register-layout operations
(now ``tilus_tvm.ir.layout.ops``)."""
from tilus_tvm.ir.layout.ops.register_ops import *  # noqa: F401,F403
from tilus_tvm.ir.layout.ops.register_ops import __all__  # noqa: F401
