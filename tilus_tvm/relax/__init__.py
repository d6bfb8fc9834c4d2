"""tilus kernels in Relax (TVM's graph-level IR).

- :func:`call`: a kernel as an ``R.call_tir`` inside ``@R.function`` / ``relax.BlockBuilder`` code.
- :class:`DispatchKernels`: a module pass rewriting matmul, softmax, layer_norm, rms_norm and
  attention to tilus kernels (:mod:`tilus_tvm.relax.patterns`), logging why any call stays on
  TVM's default path.
- :func:`build`: ``tvm.compile`` with the ``"tilus"`` TIR pipeline (registered on import), which
  lowers tilus kernels with TVM's tirx passes and everything else as before.
- :func:`export`: the executable as one ``.so`` with compiled GPU code (a fatbin for each
  architecture asked for), loadable without nvcc or NVRTC (``tilus_tvm.load``).
- :class:`QuantizedLinear` / :func:`linear_params`: weight-only quantized linears that dispatch to QuantizedMatmul.
- :func:`enable` / :func:`disable`: the switch for ``relax.frontend.nn`` users.
"""
from tilus_tvm.relax.call import RelaxError, call  # noqa: F401
from tilus_tvm.relax.dispatch import Decision, DispatchKernels, NotApplicable, NotDispatched, Pattern  # noqa: F401
from tilus_tvm.relax.quantized import QuantizedLinear, linear_params  # noqa: F401
from tilus_tvm.relax.pipeline import TIR_PIPELINE, build, register as _register_pipeline  # noqa: F401
from tilus_tvm.relax.switch import current, disable, enable, enabled  # noqa: F401
from tilus_tvm.runtime.export import export_library as export  # noqa: F401

_register_pipeline()
