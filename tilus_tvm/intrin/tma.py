"""Hopper's tensor memory accelerator and ``mbarrier`` as TIR calls, for the Script backend
(``tilus_tvm.instructions.tma``); and ``griddepcontrol``, programmatic dependent launch's two
instructions (``tilus_tvm.instructions.grid_dependency``).

TVM 0.27 has these: its PTX builders (``T.ptx.mbarrier.*``, ``T.ptx["cp.async.bulk.tensor..."]``) write
each instruction as a small inline-assembly device function, ``T.cuda.mbarrier_wait`` spins on
``mbarrier.try_wait.parity``, and a tensor map encoded on the host (``tensormap_encode_tiled``) reaches
the kernel as a ``__grid_constant__`` parameter. This module only names the calls the backend makes.
They are not ``TensorIntrin`` registrations: a bulk copy signals a barrier that other threads wait on
later, which a tensorized block cannot describe.
"""
from __future__ import annotations

from typing import Any, Sequence

from tvm import tirx

BULK_TENSOR = "cp.async.bulk.tensor.{rank}d.shared::cluster.global.mbarrier::complete_tx::bytes"


def _T():
    from tvm.script import tirx as T

    return T


def shared_address(pointer: Any) -> Any:
    """The 32-bit shared-memory address of a generic pointer into shared memory (``address_of(...)``)."""
    return _T().cuda.cvta_generic_to_shared(pointer)


def emit_mbarrier_init(barrier: Any, arrivals: int) -> Any:
    """``mbarrier.init.shared.b64 [barrier], arrivals`` (``barrier`` a shared address)."""
    return _T().ptx.mbarrier.init.shared.b64(barrier, tirx.const(arrivals, "uint32"))


def emit_mbarrier_init_fence() -> Any:
    """``fence.mbarrier_init.release.cluster``: initialised barriers visible to the async proxy (TMA)."""
    return _T().ptx.fence.mbarrier_init.release.cluster()


def emit_mbarrier_arrive_expect_tx(barrier: Any, nbytes: int) -> Any:
    """``mbarrier.arrive.expect_tx.shared.b64 _, [barrier], nbytes``: one arrival announcing ``nbytes``."""
    return _T().ptx.mbarrier.arrive.expect_tx.shared.b64(barrier, tirx.const(nbytes, "uint32"))


def emit_mbarrier_arrive(barrier: Any) -> Any:
    """``mbarrier.arrive.shared.b64 _, [barrier]``: one arrival of this thread (release at block scope)."""
    return _T().ptx.mbarrier.arrive.shared.b64(barrier)


def emit_tma_load(destination: Any, tensor_map: Any, coordinates: Sequence[Any], barrier: Any) -> Any:
    """``cp.async.bulk.tensor.{rank}d`` of the box at ``coordinates`` (innermost first, int32) of the tensor
    map at generic address ``tensor_map`` into shared address ``destination``, completing on ``barrier``."""
    return _T().ptx[BULK_TENSOR.format(rank=len(coordinates))](destination, tensor_map, *coordinates, barrier)


def emit_mbarrier_wait(barrier: Any, phase: Any) -> Any:
    """Wait (``mbarrier.try_wait.parity`` in a loop) until the barrier at generic pointer ``barrier`` has
    completed its phase of parity ``phase``."""
    return _T().cuda.mbarrier_wait(barrier, phase)


def emit_grid_dependency_wait() -> Any:
    """``griddepcontrol.wait``: wait for the grids this launch depends on to complete, their writes visible."""
    return _T().ptx.griddepcontrol.wait()


def emit_launch_dependents() -> Any:
    """``griddepcontrol.launch_dependents``: this block lets the dependent launch after it start."""
    return _T().ptx.griddepcontrol.launch_dependents()
