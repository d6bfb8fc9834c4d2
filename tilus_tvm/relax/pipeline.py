"""Compiling Relax modules that contain tilus kernels.

TVM lowers the PrimFuncs of a Relax module with one TIR pipeline. Its default (``"s_tir"``) is the
one dlight-scheduled kernels need, and it miscompiles hand-written kernels that view one shared-memory
pool through typed buffers (StorageRewrite retypes the pool; CompactBufferAllocation shrinks it),
while TVM's ``"tirx"`` pipeline compiles those right but not the block-based dlight kernels. The
``"tilus"`` TIR pipeline registered here splits the module: PrimFuncs marked ``tilus.kernel`` (see
:mod:`tilus_tvm.relax.call`) go through ``"tirx"``, every other one through ``"s_tir"`` exactly as
before, and the results are merged (the finalisation passes of the two are the same). Kernels reach
it inside an empty root block, which Relax's analyses need; it is removed first
(:func:`tilus_tvm.relax.call.wrap_in_root_block`)::

    ex = tvm.compile(mod, target, tir_pipeline="tilus")        # after importing tilus_tvm.relax
    ex = tilus_tvm.relax.build(mod, "sm_90")                    # the same, plus the target from "sm_90"
"""
from __future__ import annotations

from typing import Any

from tilus_tvm.relax.call import KERNEL_ATTR, unwrap_root_block

TIR_PIPELINE = "tilus"


def is_tilus_kernel(func: Any) -> bool:
    attrs = getattr(func, "attrs", None)
    return attrs is not None and KERNEL_ATTR in attrs and bool(attrs[KERNEL_ATTR])


def split_pipeline(tilus_pipeline: Any, other_pipeline: Any) -> Any:
    """A module pass running ``tilus_pipeline`` on tilus kernels and ``other_pipeline`` on the rest."""
    import tvm

    @tvm.transform.module_pass(opt_level=0, name="tilus.SplitTIRPipeline")
    def _pipeline(mod: Any, _ctx: Any) -> Any:
        ours = {gv: f for gv, f in mod.functions.items() if is_tilus_kernel(f)}
        if not ours:
            return other_pipeline(mod)
        rest = {gv: f for gv, f in mod.functions.items() if gv not in ours}
        ours = {gv: unwrap_root_block(f) for gv, f in ours.items()}
        merged = tilus_pipeline(tvm.IRModule(ours, attrs=mod.attrs))
        if rest:
            merged.update(other_pipeline(tvm.IRModule(rest, attrs=mod.attrs)))
        return merged

    return _pipeline


def _tilus_tir_pipeline(**kwargs: Any) -> tuple:
    tirx_pipeline, _, _ = _ORIGINAL["tirx"](**kwargs)
    s_tir_pipeline, finalize_host, finalize_device = _ORIGINAL["s_tir"](**kwargs)
    return split_pipeline(tirx_pipeline, s_tir_pipeline), finalize_host, finalize_device


_ORIGINAL: dict = {}


def register() -> None:
    """Register the ``"tilus"`` TIR pipeline with TVM (done when :mod:`tilus_tvm.relax` is imported)."""
    import tvm.s_tir.pipeline  # noqa: F401 - registers "s_tir"
    from tvm.tirx import compilation_pipeline

    if not _ORIGINAL:
        _ORIGINAL.update(compilation_pipeline.PIPELINE_MAP)
    compilation_pipeline.register_tir_pipeline(TIR_PIPELINE, _tilus_tir_pipeline)


def build(mod: Any, target: Any = "sm_90", *, relax_pipeline: Any = "default") -> Any:
    """``tvm.compile`` of a Relax module holding tilus kernels for a CUDA ``target`` (``"sm_90"``, a
    ``tvm.target.Target``), with the ``"tilus"`` TIR pipeline. The executable remembers the
    architecture, which :func:`tilus_tvm.relax.export` builds the fatbin for unless told others."""
    import tvm

    from tilus_tvm.relax.call import resolve_target_arch
    from tilus_tvm.target import tvm_target

    arch = resolve_target_arch(target)
    register()
    target = target if isinstance(target, tvm.target.Target) else tvm_target(arch)
    executable = tvm.compile(mod, target=target, relax_pipeline=relax_pipeline, tir_pipeline=TIR_PIPELINE)
    executable.tilus_archs = [arch]
    return executable
