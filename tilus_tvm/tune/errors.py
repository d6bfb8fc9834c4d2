"""The tuner's exception type (no TVM, no torch)."""
from tilus_tvm.errors import TilusError


class TuningError(TilusError, RuntimeError):
    """No configuration of a tuned kernel could be built and timed, or tuning was misconfigured."""
