"""The module-level switch for ``relax.frontend.nn`` users.

    import tilus_tvm.relax as tilus_relax

    tilus_relax.enable("sm_90")                    # from here on ...
    mod, params = model.export_tvm(spec)           # ... comes back with DispatchKernels applied
    ex = tvm.compile(mod, target)                  # ... and TVM's default TIR pipeline lowers the tilus
                                                   #     kernels with tirx passes (the "tilus" pipeline)
    tilus_relax.disable()                          # both back as they were

``with tilus_relax.enabled("sm_90"): ...`` does the same for a block. While on, the switch wraps
``relax.frontend.nn.Module.export_tvm`` and routes TVM's default TIR pipeline (``"s_tir"``)
through :func:`~tilus_tvm.relax.pipeline.split_pipeline`, which leaves every PrimFunc that is not a
tilus kernel to the original ``"s_tir"`` passes. ``Module.jit`` does not go through ``export_tvm``:
export, then build.
"""
from __future__ import annotations

import contextlib
import functools
from typing import Any, Iterator, Optional

_state: dict[str, Any] = {"arch": None, "export_tvm": None, "s_tir": None}


def current() -> Optional[str]:
    """The architecture the switch dispatches for, or None when it is off."""
    return _state["arch"]


def enable(target: Any = "sm_90") -> None:
    """Turn the switch on for ``target`` (``"sm_90"``, a CUDA ``tvm.target.Target``, None: the GPU's)."""
    from tvm.relax.frontend import nn
    from tvm.tirx import compilation_pipeline

    from tilus_tvm.relax.call import resolve_target_arch
    from tilus_tvm.relax.pipeline import _tilus_tir_pipeline, register

    arch = resolve_target_arch(target)
    register()
    if _state["arch"] is None:
        original = nn.Module.export_tvm

        @functools.wraps(original)
        def export_tvm(self: Any, *args: Any, **kwargs: Any) -> Any:
            from tilus_tvm.relax.dispatch import DispatchKernels

            result = original(self, *args, **kwargs)
            if _state["arch"] is None:
                return result
            return (DispatchKernels(_state["arch"])(result[0]), *result[1:])

        _state["export_tvm"] = original
        nn.Module.export_tvm = export_tvm
        _state["s_tir"] = compilation_pipeline.PIPELINE_MAP["s_tir"]
        compilation_pipeline.PIPELINE_MAP["s_tir"] = _tilus_tir_pipeline
    _state["arch"] = arch


def disable() -> None:
    """Turn the switch off: ``export_tvm`` and the default TIR pipeline are TVM's again."""
    if _state["arch"] is None:
        return
    from tvm.relax.frontend import nn
    from tvm.tirx import compilation_pipeline

    nn.Module.export_tvm = _state["export_tvm"]
    compilation_pipeline.PIPELINE_MAP["s_tir"] = _state["s_tir"]
    _state.update(arch=None, export_tvm=None, s_tir=None)


@contextlib.contextmanager
def enabled(target: Any = "sm_90") -> Iterator[None]:
    """The switch on for the ``with`` block (restored to off afterwards when it was off before)."""
    was = current()
    enable(target)
    try:
        yield
    finally:
        if was is None:
            disable()
        else:
            enable(was)
