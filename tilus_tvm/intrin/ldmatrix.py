"""``ldmatrix`` tensor intrinsics: a shared-memory tile into a warp fragment.

``tilus.ldmatrix_x{num}[_trans]_{dtype}`` copies the tile of ``get_ldmatrix_atom(num, trans)``
(``x1 [8, 8]``, ``x2 [16, 8]``, ``x4 [16, 16]``, indexed as stored) from a ``shared`` buffer into a
``[32, num * 32 / bits]`` warp fragment, element ``(i, j)`` landing on ``atom.layout``'s lane and
slot. One ``ldmatrix.sync.aligned.m8n8.x{num}[.trans].shared.b16`` per warp; lane ``t`` passes the
address of tile row/column ``atom.lane_address(t)``.

The tiles are 16-bit words: ``f16`` and ``bf16`` with and without ``.trans``, and ``s8`` (bytes
viewed two to a word, non-transposed only: ``x4_s8`` is the ``[16, 32]`` A operand of the int8
``m16n8k32`` mma). TVM's tensorize compares element types, hence one intrinsic per dtype.

What lines up with ``mma``: ``x4`` = A of ``m16n8k16``, ``x2_trans`` on a row-major ``[k, n]`` tile
= B of ``m16n8k16``, ``x4_s8`` = A of ``m16n8k32`` (``tilus_tvm.layout.atoms`` checks these).
"""
from __future__ import annotations

import dataclasses
import itertools
from typing import Any

from tvm import tirx
from tvm.script import tirx as T
from tvm.script.ir_builder import tirx as Tb

from tilus_tvm.dtypes import as_dtype
from tilus_tvm.intrin.builder import Operand, intrin_func, named
from tilus_tvm.intrin.fragment import (FRAGMENT_SCOPE, WARP_SIZE, check_dtype, element_offset, element_pointer,
                                       fragment_indices)
from tilus_tvm.intrin.registry import PREFIX, IntrinError, IntrinSpec, register
from tilus_tvm.layout.atoms import LdmatrixAtom, get_ldmatrix_atom

SHARED_SCOPE = "shared"
SHARED_SCOPES = ("shared", "shared.dyn")  # the tile's scope: static, or dynamic shared memory (``_dyn`` names)
NUMS = (1, 2, 4)
WORD_DTYPES = ("float16", "bfloat16")  # 16-bit elements: with and without .trans
BYTE_DTYPES = ("int8",)  # 8-bit elements: no .trans (it would split words)


def ldmatrix_name(num: int, trans: bool, dtype: str, scope: str = SHARED_SCOPE) -> str:
    """``tilus.ldmatrix_x4_trans_f16``; ``tilus.ldmatrix_x4_trans_f16_dyn`` reads a ``shared.dyn`` tile.

    >>> ldmatrix_name(2, True, "float16", "shared.dyn")
    'tilus.ldmatrix_x2_trans_f16_dyn'
    """
    if scope not in SHARED_SCOPES:
        raise IntrinError(f"ldmatrix_name: scope must be one of {', '.join(SHARED_SCOPES)}, got {scope!r}")
    suffix = "_dyn" if scope == "shared.dyn" else ""
    return f"{PREFIX}ldmatrix_x{num}{'_trans' if trans else ''}_{as_dtype(dtype).ptx}{suffix}"


def ldmatrix_atom(num: int, trans: bool, dtype: str) -> LdmatrixAtom:
    """The layout atom of ``ldmatrix...x{num}[.trans]`` on ``dtype`` elements."""
    return get_ldmatrix_atom(num, trans, as_dtype(dtype).nbits)


def ldmatrix_lane_offset(atom: LdmatrixAtom, lane: Any, row_stride: Any) -> Any:
    """Element offset, from the tile's first element, of the row address lane ``lane`` passes.

    ``row * row_stride + col`` with ``(row, col) = atom.lane_address(lane)``.

    >>> ldmatrix_lane_offset(get_ldmatrix_atom(4), 17, 40)
    48
    """
    row, col = atom.lane_address(lane)
    return row * row_stride + col


def emit_ldmatrix(num: int, trans: bool, frag_buf: tirx.Buffer, frag_offset: Any, smem_buf: tirx.Buffer,
                  smem_offset: Any, pointers: str = "access_ptr") -> tirx.Expr:
    """One warp's ``ldmatrix.sync.aligned.m8n8.x{num}[.trans].shared.b16``.

    This lane receives ``num`` 32-bit registers into ``frag_buf`` from element ``frag_offset`` on,
    and gives the shared address of element ``smem_offset`` of ``smem_buf`` (offsets in elements of
    each buffer, from its first element; see :func:`ldmatrix_lane_offset`). ``frag_buf`` and
    ``smem_buf`` hold the same 16- or 8-bit dtype. ``pointers`` is how ``smem_buf`` is addressed
    (``fragment.element_pointer``): ``"address_of"`` for a 1-D typed view of a byte pool. Returns
    the call (``T.ptx_legacy.ldmatrix``, which ``LowerWarpMemory`` understands for ``"warp"``
    buffers); wrap it in ``T.evaluate``.

    >>> s, f = tirx.decl_buffer((16, 16), "float16", scope="shared"), tirx.decl_buffer((8,), "float16")
    >>> emit_ldmatrix(4, False, f, 0, s, 0).op.name
    'tirx.ptx_legacy.ldmatrix'
    """
    dtype = str(smem_buf.dtype)
    if num not in NUMS:
        raise IntrinError(f"emit_ldmatrix: num must be 1, 2 or 4 matrices, got {num!r}")
    bits = as_dtype(dtype).nbits
    if bits not in (8, 16) or (trans and bits != 16):
        raise IntrinError(f"emit_ldmatrix: smem_buf {smem_buf.name!r} holds {dtype}; ldmatrix moves 16-bit "
                          f"words, so it takes 16-bit elements{'' if trans else ' or bytes'}"
                          f"{' (.trans would split bytes)' if trans and bits == 8 else ''}")
    check_dtype("emit_ldmatrix", "frag_buf", frag_buf, dtype)
    # The call takes (pointer, offset) and adds them in C, in elements of the pointer's type. The
    # access_ptr covers the whole buffer (its region is what tensorize and compaction see); an
    # address_of already points at the element.
    if pointers == "access_ptr":
        smem_ptr, smem_ptr_offset = element_pointer("emit_ldmatrix", smem_buf, 0, "r", pointers), smem_offset
    else:
        smem_ptr, smem_ptr_offset = element_pointer("emit_ldmatrix", smem_buf, smem_offset, "r", pointers), 0
    return T.ptx_legacy.ldmatrix(bool(trans), num, ".b16", frag_buf.data, element_offset(frag_buf, frag_offset),
                                 smem_ptr, smem_ptr_offset, dtype=dtype)


def ldmatrix_intrin(num: int, trans: bool, dtype: str,
                    scope: str = SHARED_SCOPE) -> tuple[tirx.PrimFunc, tirx.PrimFunc]:
    """Description and implementation of ``tilus.ldmatrix_x{num}[_trans]_{dtype}[_dyn]`` (buffers W, S;
    S in ``scope``, which tensorize matches)."""
    atom = ldmatrix_atom(num, trans, dtype)
    local = atom.layout.local_size
    fragment = Operand("W", (WARP_SIZE, local), dtype, FRAGMENT_SCOPE, "w")
    tile = Operand("S", atom.shape, dtype, scope, "r")

    def desc(W, S):
        with Tb.grid(*atom.shape) as loops:
            i, j = named("i j", loops)
            with Tb.sblock("S_warp"):
                vi, vj = named("vi vj", Tb.axis.remap("SS", [i, j]))
                Tb.buffer_store(W, S[vi, vj], fragment_indices(atom.layout, [vi, vj]))

    def impl(W, S):
        row_stride = S.strides[0]
        with Tb.thread_binding(0, WARP_SIZE, "threadIdx.x") as tx:
            named("tx", tx)
            Tb.evaluate(emit_ldmatrix(num, trans, W, tx * local, S, ldmatrix_lane_offset(atom, tx, row_stride)))

    return (intrin_func("desc", [fragment, tile], desc),
            intrin_func("impl", [fragment, dataclasses.replace(tile, strided=True)], impl))


def register_all() -> None:
    """Register every ``tilus.ldmatrix_*`` intrinsic."""
    variants = [(num, trans, dtype) for dtype in WORD_DTYPES for num in NUMS for trans in (False, True)]
    variants += [(num, False, dtype) for dtype in BYTE_DTYPES for num in NUMS]
    for (num, trans, dtype), scope in itertools.product(variants, SHARED_SCOPES):
        atom = ldmatrix_atom(num, trans, dtype)
        layout = f"atoms.get_ldmatrix_atom({num}, trans={trans}, dtype_bits={atom.dtype_bits}).layout"
        register(IntrinSpec(ldmatrix_name(num, trans, dtype, scope), atom.ptx, layout,
                            *ldmatrix_intrin(num, trans, dtype, scope)))
