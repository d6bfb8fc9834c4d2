"""Programmatic dependent launch (Hopper): ``GridDependencyWait`` and ``LaunchDependents`` (sm_90).

A kernel compiled with ``attrs.dependent_launch`` is launched with CUDA's programmatic stream
serialization (TVM 0.27's launch tag ``tirx.use_programtic_dependent_launch``, which its CUDA runtime
turns into ``CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION``; ``backend/codegen.py`` asks for
it). It may then start while the kernel before it on the stream still runs, as soon as every block
of that kernel has executed ``griddepcontrol.launch_dependents`` or exited, and each of its threads
waits at ``griddepcontrol.wait`` until that kernel has completed and its writes are visible. What a
thread does before the wait overlaps the kernel before: loads of data nothing on the stream writes
(weights), barrier set-up. Both instructions come from TVM's PTX builders (its ``griddepcontrol``,
through ``tilus_tvm.intrin.tma``); without a dependent launch both do nothing.
"""
from __future__ import annotations

from tvm.script.ir_builder import tirx as Tb

from tilus_tvm.instructions.registry import register
from tilus_tvm.intrin import tma as ptx
from tilus_tvm.ir import inst as ir

FAMILY = "sm_90"


def emit_grid_dependency_wait(ctx, inst: ir.GridDependencyWait) -> None:
    Tb.evaluate(ptx.emit_grid_dependency_wait())


def emit_launch_dependents(ctx, inst: ir.LaunchDependents) -> None:
    Tb.evaluate(ptx.emit_launch_dependents())


register(ir.GridDependencyWait, FAMILY, emit=emit_grid_dependency_wait)
register(ir.LaunchDependents, FAMILY, emit=emit_launch_dependents)
