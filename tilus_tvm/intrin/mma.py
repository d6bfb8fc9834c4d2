"""``mma.sync`` tensor intrinsics and their accumulator companions (fill, store).

For an atom ``D[m, n] = A[m, k] @ B[k, n] + C`` (``tilus_tvm.layout.atoms.MmaAtom``) three kinds of
intrinsic are registered, all over warp fragments (``fragment.py``):

``tilus.mma_{atom}``
    ``C[lane_c, slot_c] += A[lane_a, slot_a] * B[lane_b, slot_b]`` over ``i < m, j < n, kk < k``, the
    fragment indices from ``atom.a_layout`` / ``b_layout`` / ``c_layout``; products are cast to C's
    dtype when A's differs. Emits one ``mma.sync.aligned.m{m}n{n}k{k}.row.col`` per warp.
``tilus.mma_fill_m{m}n{n}_{c}``
    ``C[lane, slot] = 0`` for every element of the ``[m, n]`` accumulator.
``tilus.mma_store_m{m}n{n}_{c}_{scope}``
    ``D[i, j] = C[lane, slot]``: the accumulator to a ``global`` or ``shared`` tile; lane ``t``
    writes the ``local_size`` elements ``atom.c_layout.logical(t, slot)`` names.

``{atom}`` is ``m16n8k16_f16f16f32``: shape, then the A, B and C types as PTX spells them.

The emitters (:func:`emit_mma`, :func:`emit_mma_fill`, :func:`emit_mma_store`) build the TIR each
implementation uses, and are what a kernel generator calls for the same instruction. ``emit_mma``
and ``emit_mma_fill`` address fragments by (buffer, element offset), as their calls take pointers;
the store is plain buffer stores and takes index lists.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Sequence, Union

from tvm import tirx
from tvm.script import tirx as T
from tvm.script.ir_builder import tirx as Tb

from tilus_tvm.dtypes import as_dtype
from tilus_tvm.intrin.builder import Operand, intrin_func, named
from tilus_tvm.intrin.fragment import FRAGMENT_SCOPE, WARP_SIZE, check_dtype, element_offset, fragment_indices
from tilus_tvm.intrin.registry import PREFIX, IntrinError, IntrinSpec, register
from tilus_tvm.layout.atoms import MmaAtom, get_mma_atom, mma_atoms
from tilus_tvm.layout.to_tir import register_inverse_index_map

STORE_SCOPES = ("global", "shared", "shared.dyn")

AtomLike = Union[MmaAtom, str]


def atom_key(atom: MmaAtom) -> str:
    """``m16n8k16_f16f16f32``: the atom's shape and its A, B, C types in PTX spelling.

    >>> atom_key(get_mma_atom("int8", "int8", "int32"))
    'm16n8k32_s8s8s32'
    """
    a, b, c = (as_dtype(name).ptx for name in (atom.a_dtype, atom.b_dtype, atom.c_dtype))
    return f"{atom.name}_{a}{b}{c}"


def resolve_atom(atom: AtomLike) -> MmaAtom:
    """An :class:`MmaAtom` from itself, its key (``"m16n8k16_f16f16f32"``) or its intrinsic name.

    >>> resolve_atom("tilus.mma_m16n8k16_bf16bf16f32").ptx
    'mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32'
    """
    if isinstance(atom, MmaAtom):
        return atom
    if not isinstance(atom, str):
        raise IntrinError(f"resolve_atom: expected an MmaAtom or its name, got {atom!r}")
    key = atom[len(PREFIX + "mma_"):] if atom.startswith(PREFIX + "mma_") else atom
    for candidate in mma_atoms():
        if atom_key(candidate) == key:
            return candidate
    known = ", ".join(sorted(atom_key(a) for a in mma_atoms()))
    raise IntrinError(f"resolve_atom: no mma atom named {atom!r}; known: {known}")


def _short(dtype: str) -> str:
    return as_dtype(dtype).ptx


def mma_name(atom: AtomLike) -> str:
    """``tilus.mma_m16n8k16_f16f16f32``."""
    return f"{PREFIX}mma_{atom_key(resolve_atom(atom))}"


def mma_fill_name(atom: AtomLike) -> str:
    """``tilus.mma_fill_m16n8_f32``: zero an atom's accumulator."""
    atom = resolve_atom(atom)
    return f"{PREFIX}mma_fill_m{atom.m}n{atom.n}_{_short(atom.c_dtype)}"


def mma_store_name(atom: AtomLike, scope: str) -> str:
    """``tilus.mma_store_m16n8_f32_global``: an atom's accumulator to a ``scope`` tile (``shared.dyn``:
    ``..._shared_dyn``)."""
    atom = resolve_atom(atom)
    if scope not in STORE_SCOPES:
        raise IntrinError(f"mma_store_name: scope must be one of {', '.join(STORE_SCOPES)}, got {scope!r}")
    return f"{PREFIX}mma_store_m{atom.m}n{atom.n}_{_short(atom.c_dtype)}_{scope.replace('.', '_')}"


# ---- emitters ---------------------------------------------------------------------------------
def emit_mma(atom: AtomLike, a_buf: tirx.Buffer, a_offset: Any, b_buf: tirx.Buffer, b_offset: Any,
             c_buf: tirx.Buffer, c_offset: Any) -> tirx.Expr:
    """One warp's ``mma.sync``: ``C += A @ B`` on the fragments of this lane at the given offsets.

    Each offset (elements of that buffer, from its first element) is where this lane's registers of
    the operand start: ``atom.a_regs`` 32-bit registers of A, ``b_regs`` of B, ``c_regs`` of C, in
    PTX register order (``atom.a_layout`` etc.). C is read and written in place (D = C). Returns the
    call (``T.ptx_legacy.mma``, which ``LowerWarpMemory`` also understands for ``"warp"`` buffers);
    wrap it in ``T.evaluate``.

    >>> from tvm.script.ir_builder import tirx as Tb
    >>> a, b, c = (tirx.decl_buffer((n,), d) for n, d in ((8, "float16"), (4, "float16"), (4, "float32")))
    >>> emit_mma("m16n8k16_f16f16f32", a, 0, b, 0, c, 0).op.name
    'tirx.ptx_legacy.mma'
    """
    atom = resolve_atom(atom)
    for what, buffer, dtype in (("a_buf", a_buf, atom.a_dtype), ("b_buf", b_buf, atom.b_dtype),
                                ("c_buf", c_buf, atom.c_dtype)):
        check_dtype("emit_mma", what, buffer, dtype)
    a_type, b_type, c_type = atom.ptx_legacy_types
    return T.ptx_legacy.mma(atom.name, "row", "col", a_type, b_type, c_type,
                            a_buf.data, element_offset(a_buf, a_offset),
                            b_buf.data, element_offset(b_buf, b_offset),
                            c_buf.data, element_offset(c_buf, c_offset), False)


def emit_mma_fill(atom: AtomLike, c_buf: tirx.Buffer, c_offset: Any) -> tirx.Expr:
    """Zero this lane's ``atom.c_layout.local_size`` accumulator elements starting at ``c_offset``.

    Returns the call (``T.cuda.mma_fill_legacy``); wrap it in ``T.evaluate``. Not plain stores:
    ``LowerWarpMemory`` reads a warp buffer's registers per lane from this call's constant, whereas
    from stores it must find the lane's coefficient in the index, which ``CommonSubexprElim`` (run
    before it in the s_tir pipeline) has hidden in a temporary by then.
    """
    atom = resolve_atom(atom)
    check_dtype("emit_mma_fill", "c_buf", c_buf, atom.c_dtype)
    return T.cuda.mma_fill_legacy(atom.c_layout.local_size, c_buf.data, element_offset(c_buf, c_offset),
                                  dtype=atom.c_dtype)


def _check_rank(op: str, what: str, index: Sequence[Any], buffer: tirx.Buffer, at_least: int = 1) -> None:
    if len(index) != len(buffer.shape) or len(index) < at_least:
        raise IntrinError(f"{op}: {what} {list(index)} must have one coordinate per dimension of {buffer.name!r} "
                          f"(shape {list(buffer.shape)}){f', at least {at_least}' if at_least > 1 else ''}")


def emit_mma_store(atom: AtomLike, lane: Any, c_buf: tirx.Buffer, c_index: Sequence[Any], dst_buf: tirx.Buffer,
                   dst_index: Sequence[Any]) -> tirx.Stmt:
    """Lane ``lane`` writes its accumulator elements into the ``[m, n]`` tile of ``dst_buf`` at ``dst_index``.

    ``c_index`` is the index of this lane's slot 0 in ``c_buf`` (slot ``s`` is at the last
    coordinate ``+ s``); ``dst_index`` the tile's top-left element (rows and columns are its last
    two coordinates). Slot ``s`` goes to ``atom.c_layout.logical(lane, s)``. Returns the stores as
    one statement (add it with ``T.add_to_parent``).

    >>> c, d = tirx.decl_buffer((4,), "float32"), tirx.decl_buffer((16, 8), "float32")
    >>> len(emit_mma_store("m16n8k16_f16f16f32", 5, c, [0], d, [0, 0]))
    4
    """
    atom = resolve_atom(atom)
    check_dtype("emit_mma_store", "c_buf", c_buf, atom.c_dtype)
    check_dtype("emit_mma_store", "dst_buf", dst_buf, atom.c_dtype)
    _check_rank("emit_mma_store", "c_index", c_index, c_buf)
    _check_rank("emit_mma_store", "dst_index", dst_index, dst_buf, at_least=2)
    position = register_inverse_index_map(atom.c_layout)
    stores = []
    for slot in range(atom.c_layout.local_size):
        row, col = position.map_indices([lane, slot])
        value = tirx.BufferLoad(c_buf, [*c_index[:-1], c_index[-1] + slot])
        stores.append(tirx.BufferStore(dst_buf, value, [*dst_index[:-2], dst_index[-2] + row, dst_index[-1] + col]))
    return tirx.SeqStmt(stores)


# ---- tensor intrinsics ------------------------------------------------------------------------
def _fragment(name: str, layout, dtype: str, access: str) -> Operand:
    return Operand(name, (WARP_SIZE, layout.local_size), dtype, FRAGMENT_SCOPE, access)


def mma_intrin(atom: MmaAtom) -> tuple[tirx.PrimFunc, tirx.PrimFunc]:
    """Description and implementation of ``tilus.mma_{atom}`` (buffers A, B, C)."""
    operands = [_fragment("A", atom.a_layout, atom.a_dtype, "r"), _fragment("B", atom.b_layout, atom.b_dtype, "r"),
                _fragment("C", atom.c_layout, atom.c_dtype, "rw")]
    a_local, b_local, c_local = (atom.a_layout.local_size, atom.b_layout.local_size, atom.c_layout.local_size)

    def widen(value):
        return value if atom.a_dtype == atom.c_dtype else tirx.Cast(atom.c_dtype, value)

    def desc(A, B, C):
        with Tb.grid(atom.m, atom.n, atom.k) as loops:
            i, j, k = named("i j k", loops)
            with Tb.sblock("C"):
                vi, vj, vk = named("vi vj vk", Tb.axis.remap("SSR", [i, j, k]))
                a_lane, a_slot = fragment_indices(atom.a_layout, [vi, vk])
                b_lane, b_slot = fragment_indices(atom.b_layout, [vk, vj])
                c_lane, c_slot = fragment_indices(atom.c_layout, [vi, vj])
                product = widen(A[a_lane, a_slot]) * widen(B[b_lane, b_slot])
                Tb.buffer_store(C, C[c_lane, c_slot] + product, [c_lane, c_slot])

    def impl(A, B, C):
        with Tb.thread_binding(0, WARP_SIZE, "threadIdx.x") as tx:
            named("tx", tx)
            Tb.evaluate(emit_mma(atom, A, tx * a_local, B, tx * b_local, C, tx * c_local))

    read_order = ("C", "A", "B")  # as the update block C = C + A * B reads them
    return (intrin_func("desc", operands, desc, read_order), intrin_func("impl", operands, impl, read_order))


def mma_fill_intrin(atom: MmaAtom) -> tuple[tirx.PrimFunc, tirx.PrimFunc]:
    """Description and implementation of ``tilus.mma_fill_m{m}n{n}_{c}`` (buffer C)."""
    operands = [_fragment("C", atom.c_layout, atom.c_dtype, "w")]

    def desc(C):
        with Tb.grid(atom.m, atom.n) as loops:
            i, j = named("i j", loops)
            with Tb.sblock("C_fill"):
                vi, vj = named("vi vj", Tb.axis.remap("SS", [i, j]))
                Tb.buffer_store(C, tirx.const(0, atom.c_dtype), fragment_indices(atom.c_layout, [vi, vj]))

    def impl(C):
        with Tb.thread_binding(0, WARP_SIZE, "threadIdx.x") as tx:
            named("tx", tx)
            Tb.evaluate(emit_mma_fill(atom, C, tx * atom.c_layout.local_size))

    return intrin_func("desc", operands, desc), intrin_func("impl", operands, impl)


def mma_store_intrin(atom: MmaAtom, scope: str) -> tuple[tirx.PrimFunc, tirx.PrimFunc]:
    """Description and implementation of ``tilus.mma_store_m{m}n{n}_{c}_{scope}`` (buffers C, D)."""
    fragment = _fragment("C", atom.c_layout, atom.c_dtype, "r")
    tile = Operand("D", (atom.m, atom.n), atom.c_dtype, scope, "w")

    def desc(C, D):
        with Tb.grid(atom.m, atom.n) as loops:
            i, j = named("i j", loops)
            with Tb.sblock("C_store"):
                vi, vj = named("vi vj", Tb.axis.remap("SS", [i, j]))
                lane, slot = fragment_indices(atom.c_layout, [vi, vj])
                Tb.buffer_store(D, C[lane, slot], [vi, vj])

    def impl(C, D):
        with Tb.thread_binding(0, WARP_SIZE, "threadIdx.x") as tx:
            named("tx", tx)
            Tb.add_to_parent(emit_mma_store(atom, tx, C, [tx, 0], D, [0, 0]))

    return (intrin_func("desc", [fragment, tile], desc),
            intrin_func("impl", [fragment, dataclasses.replace(tile, strided=True)], impl))


# The atoms registered as tensor intrinsics (the layout package knows more; emit_mma takes any).
REGISTERED_ATOMS = (
    get_mma_atom("float16", "float16", "float32", k=16),
    get_mma_atom("bfloat16", "bfloat16", "float32", k=16),
    get_mma_atom("float16", "float16", "float16", k=16),
    get_mma_atom("int8", "int8", "int32", k=32),
)


def register_all() -> None:
    """Register the mma, fill and store intrinsics of :data:`REGISTERED_ATOMS`."""
    accumulators: dict[str, MmaAtom] = {}
    for atom in REGISTERED_ATOMS:
        layouts = f"atoms.get_mma_atom({atom.a_dtype!r}, {atom.b_dtype!r}, {atom.c_dtype!r}, k={atom.k})"
        register(IntrinSpec(mma_name(atom), atom.ptx, layouts + ".a/b/c_layout", *mma_intrin(atom)))
        accumulators.setdefault(atom.c_dtype, atom)
    for c_dtype, atom in accumulators.items():
        layout = f"atoms.get_mma_atom(...).c_layout ({c_dtype} accumulator)"
        register(IntrinSpec(mma_fill_name(atom), "none (zeroes the registers)", layout, *mma_fill_intrin(atom)))
        for scope in STORE_SCOPES:
            register(IntrinSpec(mma_store_name(atom, scope), f"none (plain st.{scope})", layout,
                                *mma_store_intrin(atom, scope)))
