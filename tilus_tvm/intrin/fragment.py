"""Warp fragments as TVM schedules see them, and the element offsets and pointers every emitter takes.

A fragment of an ``[r, c]`` tile spread over a warp by a register layout is, in a schedule, a
``"warp"``-scope buffer ``[32, local_size]``: row = lane, column = register slot. TVM's
``LowerWarpMemory`` turns it into ``local_size`` registers per lane. A schedule tiles a larger warp
buffer into such fragments with :func:`fragment_index_map`; the intrinsics' descriptions index
their fragment through :func:`fragment_indices`. Both evaluate the same ``IndexMap``
(``tilus_tvm.layout.to_tir.register_index_map`` of the atom's layout), so what the schedule
writes and what the description reads are the same expressions.

The implementations pass lane ``tx``'s fragment offset, ``tx * local_size``. In TVM 0.27
``LowerWarpMemory`` (which shrinks a warp buffer to ``local_size`` registers per lane) lowers the
accumulators -- it learns their shape from ``mma_fill`` -- but not the A/B operand buffers, because
it does not recognise ``T.ptx_legacy.ldmatrix`` (TVM's own ``mma_ldmatrix_*`` intrinsics hit the
same): each thread keeps the whole operand buffer and uses its own row of it. That is still
correct, and nvcc keeps it in registers (ptxas reports no stack frame for the tests' matmul).

Offsets given to the emitters are in elements of the buffer's dtype, counted from the buffer's
first element (its ``elem_offset`` is added here), so a ``match_buffer`` in an intrinsic's
implementation and a plain ``alloc_buffer`` in a kernel are addressed alike.

Memory operands (shared, global) are passed by pointer, built by :func:`element_pointer` in one of
two forms the caller picks with the emitters' ``pointers`` argument: ``"access_ptr"`` (the default;
what tensorize, compaction and TVM's barrier insertion understand) or ``"address_of"`` (typed
1-D views of memory allocated with another dtype, which ``tvm_access_ptr`` rejects: the Script
backend's shared tensors are views of one uint8 ``shared.dyn`` pool).
"""
from __future__ import annotations

from typing import Any, Sequence

from tvm import tirx

from tilus_tvm.intrin.registry import IntrinError
from tilus_tvm.layout.register import RegisterLayout
from tilus_tvm.layout.to_tir import register_index_map

WARP_SIZE = 32
FRAGMENT_SCOPE = "warp"


def fragment_indices(layout: RegisterLayout, index: Sequence[Any]) -> list[Any]:
    """``[lane, slot]`` of the fragment element at tile ``index`` (ints or PrimExprs).

    >>> from tilus_tvm.layout import get_mma_atom
    >>> [int(x) for x in fragment_indices(get_mma_atom("float16", "float16", "float32").c_layout, [9, 3])]
    [5, 3]
    """
    return list(register_index_map(layout).map_indices(list(index)))


def fragment_index_map(layout: RegisterLayout, index_dtype: str = "int32") -> tirx.IndexMap:
    """``IndexMap`` for ``Schedule.transform_layout`` of a warp buffer tiled by ``layout``'s tile.

    ``(i_0, ..., i_{n-1}) -> (i_0 // s_0, ..., i_{n-1} // s_{n-1}, lane, slot)`` with ``s = layout.shape``
    and ``(lane, slot) = fragment_indices(layout, [i_d % s_d])``: the buffer becomes one
    ``[32, local_size]`` fragment per tile, each laid out as the intrinsics expect.

    >>> from tilus_tvm.layout import get_mma_atom
    >>> im = fragment_index_map(get_mma_atom("float16", "float16", "float32").c_layout)
    >>> [int(x) for x in im.map_indices([25, 11])]
    [1, 1, 5, 3]
    """
    variables = [tirx.Var(f"i{d}", index_dtype) for d in range(len(layout.shape))]
    tile = [var // extent for var, extent in zip(variables, layout.shape)]
    inner = fragment_indices(layout, [var % extent for var, extent in zip(variables, layout.shape)])
    return tirx.IndexMap(variables, tile + inner, None)


def element_offset(buffer: tirx.Buffer, offset: Any) -> Any:
    """``buffer.elem_offset + offset``: an offset from the buffer's data pointer, in elements."""
    base = buffer.elem_offset
    if isinstance(base, tirx.IntImm) and base.value == 0:
        return offset
    return base + offset


def element_pointer(op: str, buffer: tirx.Buffer, offset: Any, access: str, pointers: str) -> tirx.Expr:
    """The address of element ``offset`` of ``buffer`` (from its first element), as ``pointers`` says.

    ``"access_ptr"``: ``tvm_access_ptr`` of the buffer's memory from that element on, an access
    (``access``: ``"r"`` or ``"w"``) that TVM's barrier insertion, buffer compaction and software
    pipelining see; it must name the dtype the memory was allocated with. ``"address_of"``:
    ``&buffer[offset]`` of a 1-D buffer declared over another buffer's memory -- the Script
    backend's typed views of its uint8 shared-memory pool, and its flat views of pointer parameters
    (whose ``access_ptr`` extent, a symbolic size, TVM 0.27 turns into an extra kernel parameter).
    No pass sees it as an access, so the caller places the barriers.

    >>> pool = tirx.decl_buffer((64,), "uint8", name="pool", scope="shared.dyn")
    >>> view = tirx.decl_buffer((32,), "float16", name="view", data=pool.data, scope="shared.dyn")
    >>> element_pointer("example", view, 8, "r", "address_of")
    T.address_of(view[8])
    """
    if pointers == "address_of":
        if len(buffer.shape) != 1:
            raise IntrinError(f"{op}: pointers='address_of' takes 1-D buffers (the offset is the index), "
                              f"got {buffer.name!r} of shape {list(buffer.shape)}")
        return buffer.ptr_to([offset])
    if pointers != "access_ptr":
        raise IntrinError(f"{op}: pointers must be 'access_ptr' or 'address_of', got {pointers!r}")
    return buffer.access_ptr(access, offset=offset)


def check_dtype(op: str, what: str, buffer: tirx.Buffer, expected: str) -> None:
    """Raise :class:`IntrinError` unless ``buffer`` holds ``expected`` elements."""
    if str(buffer.dtype) != expected:
        raise IntrinError(f"{op}: {what} {buffer.name!r} holds {buffer.dtype}, expected {expected}")
