"""tilus-tvm: a tile-level GPU kernel language on Apache TVM."""
from tilus_tvm import layout
from tilus_tvm.errors import CompileError, LaunchError, LayoutError, ScriptError, TilusError

__version__ = "0.1.0"
