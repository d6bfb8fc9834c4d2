"""``tilus_tvm.ir.layout``: the layout algebra under the import path the Tilus docs use."""
from tilus_tvm.layout import *  # noqa: F401,F403
