"""Tensor-core operand layouts: ``mma.sync`` fragments and ``ldmatrix`` results, as register layouts.

Every layout here spreads one tile over the 32 lanes of a warp. The local slot order is the PTX
register order: slot ``i`` is the PTX fragment element ``a_i`` (``b_i``, ``c_i``), so a 32-bit
register ``r`` holds slots ``r * pack .. r * pack + pack - 1`` with ``pack = 32 // bits`` elements,
the lowest slot in the lowest bits.

With ``groupID = lane // 4`` and ``tig = lane % 4`` (thread in group), the PTX fragments are built
from one 8-row block where lane ``(groupID, tig)`` holds ``pack`` consecutive elements of row
``groupID`` -- ``spatial(8, 4).local(1, pack)`` -- or, for B, the transposed block
``column_spatial(4, 8).local(pack, 1)``. Further blocks are local repeats in front:

    A [16, k]   column_local(2, kb).spatial(8, 4).local(1, pack)     kb = k // (4 * pack)
    B [k, 8]    local(kb, 1).column_spatial(4, 8).local(pack, 1)
    C/D [16, 8] local(2, 1).spatial(8, 4).local(1, 2)              (f32, f16 and s32 alike)

``column_local(2, 2)`` numbers the four 8-row blocks of A column-major -- (rows 0-7, k low),
(rows 8-15, k low), (rows 0-7, k high), (rows 8-15, k high) -- which is the order of the registers
``a0..a3`` in PTX. B is indexed ``[k, n]`` (the math orientation; PTX's ``.col`` only says how B is
stored by the fragment).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from tilus_tvm.dtypes import as_dtype
from tilus_tvm.errors import LayoutError
from tilus_tvm.layout.register import RegisterLayout, column_local, column_spatial, compose, local, spatial

Index = Any  # an int, or a TVM PrimExpr

WARP_SIZE = 32
REGISTER_BITS = 32


def _pack(bits: int) -> int:
    return REGISTER_BITS // bits


def mma_a_layout(k: int, bits: int) -> RegisterLayout:
    """Layout of ``mma.sync.m16n8k{k}``'s A operand ``[16, k]`` with ``bits``-bit elements.

    ``column_local(2, kb).spatial(8, 4).local(1, pack)``, ``pack = 32 // bits``, ``kb = k // (4 * pack)``:
    lane ``l`` holds ``pack`` elements of row ``l // 4 (+8)`` from column ``(l % 4) * pack (+ 4 * pack)``.

    >>> mma_a_layout(16, 16).holders(9, 10)
    [(5, 6)]
    """
    pack = _pack(bits)
    k_blocks, rem = divmod(k, 4 * pack)
    if rem or k_blocks not in (1, 2):
        raise LayoutError(f"mma_a_layout: k={k} with {bits}-bit elements is not an mma.sync m16n8 shape "
                          f"(expected k = {4 * pack} or {8 * pack})")
    return column_local(2, k_blocks).spatial(8, 4).local(1, pack)


def mma_b_layout(k: int, bits: int) -> RegisterLayout:
    """Layout of ``mma.sync.m16n8k{k}``'s B operand ``[k, 8]`` (indexed ``[k, n]``).

    ``local(kb, 1).column_spatial(4, 8).local(pack, 1)``: lane ``l`` holds ``pack`` elements of column
    ``l // 4`` from row ``(l % 4) * pack (+ 4 * pack)``.

    >>> mma_b_layout(16, 16).holders(9, 3)
    [(12, 3)]
    """
    pack = _pack(bits)
    k_blocks, rem = divmod(k, 4 * pack)
    if rem or k_blocks not in (1, 2):
        raise LayoutError(f"mma_b_layout: k={k} with {bits}-bit elements is not an mma.sync m16n8 shape "
                          f"(expected k = {4 * pack} or {8 * pack})")
    return local(k_blocks, 1).column_spatial(4, 8).local(pack, 1)


def mma_c_layout() -> RegisterLayout:
    """Layout of the ``[16, 8]`` accumulator C/D of ``mma.sync.m16n8k*`` (any accumulator type).

    ``local(2, 1).spatial(8, 4).local(1, 2)`` -- the seed's ``repeat(2, 1).spatial(8, 4).repeat(1, 2)``:
    ``c0, c1`` at row ``l // 4``, columns ``(l % 4) * 2 + {0, 1}``; ``c2, c3`` eight rows below.

    >>> mma_c_layout().holders(8, 1)
    [(0, 3)]
    """
    return local(2, 1).spatial(8, 4).local(1, 2)


@dataclass(frozen=True)
class MmaAtom:
    """One warp-wide ``mma.sync.aligned.m{m}n{n}k{k}.row.col`` instruction: ``D[m, n] = A[m, k] @ B[k, n] + C``.

    ``a_layout``/``b_layout``/``c_layout`` give, for every element of A ``[m, k]``, B ``[k, n]`` and
    C/D ``[m, n]``, the lane and the local slot; slots are in PTX register order (``pack`` elements
    per 32-bit register, lowest slot in the low bits). D has the type and layout of C.

    >>> atom = get_mma_atom("float16", "float16", "float32")
    >>> atom.ptx, atom.a_regs, atom.b_regs, atom.c_regs
    ('mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32', 4, 2, 4)
    """

    name: str
    m: int
    n: int
    k: int
    a_dtype: str
    b_dtype: str
    c_dtype: str
    a_layout: RegisterLayout
    b_layout: RegisterLayout
    c_layout: RegisterLayout

    @property
    def num_threads(self) -> int:
        return WARP_SIZE

    @property
    def a_regs(self) -> int:
        """32-bit registers of A per thread."""
        return self.a_layout.local_size * as_dtype(self.a_dtype).nbits // REGISTER_BITS

    @property
    def b_regs(self) -> int:
        """32-bit registers of B per thread."""
        return self.b_layout.local_size * as_dtype(self.b_dtype).nbits // REGISTER_BITS

    @property
    def c_regs(self) -> int:
        """32-bit registers of C (and of D) per thread."""
        return self.c_layout.local_size * as_dtype(self.c_dtype).nbits // REGISTER_BITS

    @property
    def ptx_types(self) -> str:
        """The PTX type suffix ``.dtype.atype.btype.ctype`` without the leading dot, e.g. ``"f32.f16.f16.f32"``."""
        a, b, c = (as_dtype(name).ptx for name in (self.a_dtype, self.b_dtype, self.c_dtype))
        return f"{c}.{a}.{b}.{c}"

    @property
    def ptx(self) -> str:
        """The full PTX instruction name."""
        return f"mma.sync.aligned.{self.name}.row.col.{self.ptx_types}"

    @property
    def ptx_legacy_types(self) -> tuple[str, str, str]:
        """A, B and C type names as ``T.ptx_legacy.mma(shape, "row", "col", a, b, c, ...)`` takes them."""
        a, b, c = (as_dtype(name).ptx_mma for name in (self.a_dtype, self.b_dtype, self.c_dtype))
        return (a, b, c)

    def __repr__(self) -> str:
        return f"MmaAtom({self.ptx})"


def _make_atom(k: int, a_dtype: str, b_dtype: str, c_dtype: str) -> MmaAtom:
    bits = as_dtype(a_dtype).nbits
    return MmaAtom(name=f"m16n8k{k}", m=16, n=8, k=k, a_dtype=a_dtype, b_dtype=b_dtype, c_dtype=c_dtype,
                   a_layout=mma_a_layout(k, bits), b_layout=mma_b_layout(k, bits), c_layout=mma_c_layout())


def _atom_table() -> dict[tuple[str, str, str], dict[int, MmaAtom]]:
    table: dict[tuple[str, str, str], dict[int, MmaAtom]] = {}
    for a, b, c, ks in [
        ("float16", "float16", "float32", (8, 16)),
        ("float16", "float16", "float16", (8, 16)),
        ("bfloat16", "bfloat16", "float32", (8, 16)),
        *[(a, b, "int32", (16, 32)) for a in ("int8", "uint8") for b in ("int8", "uint8")],
    ]:
        table[(a, b, c)] = {k: _make_atom(k, a, b, c) for k in ks}
    return table


_ATOMS = _atom_table()


def mma_atoms() -> list[MmaAtom]:
    """Every supported ``mma.sync`` atom.

    >>> len(mma_atoms())
    14
    """
    return [atom for by_k in _ATOMS.values() for atom in by_k.values()]


def _dtype_name(dtype: Any) -> str:
    name = getattr(dtype, "name", dtype)
    return name if isinstance(name, str) else str(dtype)


def get_mma_atom(a_dtype: Any, b_dtype: Any, c_dtype: Any, k: Optional[int] = None) -> MmaAtom:
    """The ``mma.sync`` atom for ``A: a_dtype``, ``B: b_dtype``, ``C/D: c_dtype``.

    Without ``k`` the largest one is picked: ``m16n8k16`` for float16/bfloat16, ``m16n8k32`` for
    int8/uint8. Dtypes are TVM names (``"float16"``, ``"bfloat16"``, ``"int8"``, ``"uint8"``,
    ``"float32"``, ``"int32"``) or objects with such a ``.name``.

    >>> get_mma_atom("int8", "int8", "int32").name
    'm16n8k32'
    >>> get_mma_atom("bfloat16", "bfloat16", "float32", k=8).ptx
    'mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32'
    """
    key = (_dtype_name(a_dtype), _dtype_name(b_dtype), _dtype_name(c_dtype))
    by_k = _ATOMS.get(key)
    if by_k is None:
        supported = ", ".join("(" + ", ".join(combo) + ")" for combo in _ATOMS)
        raise LayoutError(f"get_mma_atom: no mma.sync atom for a_dtype={key[0]}, b_dtype={key[1]}, "
                          f"c_dtype={key[2]}; supported (a, b, c): {supported}")
    if k is None:
        return by_k[max(by_k)]
    if k not in by_k:
        raise LayoutError(f"get_mma_atom: no m16n8k{k} atom for a_dtype={key[0]}, b_dtype={key[1]}, "
                          f"c_dtype={key[2]}; k must be one of {sorted(by_k)}")
    return by_k[k]


# ---- ldmatrix ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class LdmatrixAtom:
    """``ldmatrix.sync.aligned.m8n8.x{num}[.trans].shared.b16``: ``num`` 8x8 matrices of 16-bit words.

    The tile and the matrix order (register ``j`` receives matrix ``j``):

    * x1: ``[8, 8]``;
    * x2: ``[16, 8]``, matrix 0 = rows 0-7, matrix 1 = rows 8-15;
    * x4: ``[16, 16]``, matrices (rows 0-7, cols 0-7), (rows 8-15, cols 0-7), (rows 0-7, cols 8-15),
      (rows 8-15, cols 8-15) -- the order of mma's A registers.

    The tile is indexed as it is *stored* (row = the 16-byte row whose address a lane gives), with
    or without ``.trans``. Lane ``l < 8 * num`` gives the address of row ``l % 8`` of matrix
    ``l // 8``: :meth:`lane_address` (for x4 that is tile row ``l % 16``, column ``(l // 16) * 8``);
    the other lanes' addresses are ignored.

    Without ``.trans`` lane ``t`` receives, per matrix, row ``t // 4``, columns ``2 * (t % 4) + {0, 1}``
    (``spatial(8, 4).local(1, 2)``); with ``.trans`` it receives column ``t // 4``, rows
    ``2 * (t % 4) + {0, 1}`` (``column_spatial(4, 8).local(2, 1)``). Hence x4 = mma A (k16),
    x2 = mma A (k8), x2.trans on a row-major ``[k, n]`` tile = mma B (k16), x1.trans = mma B (k8).

    ``dtype_bits=8`` views the non-transposed tile as bytes (x4: ``[16, 32]`` = the int8 mma A of k32).

    >>> atom = get_ldmatrix_atom(4, trans=True)
    >>> atom.shape, atom.lane_address(17), atom.ptx
    ((16, 16), (1, 8), 'ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16')
    """

    num: int
    trans: bool
    dtype_bits: int
    shape: tuple[int, int]
    layout: RegisterLayout

    @property
    def num_regs(self) -> int:
        """32-bit destination registers per thread (one per matrix)."""
        return self.num

    @property
    def num_address_lanes(self) -> int:
        """Lanes whose row address is used: ``8 * num``."""
        return 8 * self.num

    @property
    def ptx(self) -> str:
        return f"ldmatrix.sync.aligned.m8n8.x{self.num}{'.trans' if self.trans else ''}.shared.b16"

    @property
    def _row_blocks(self) -> int:
        return 1 if self.num == 1 else 2

    def matrix_origin(self, matrix: int) -> tuple[int, int]:
        """Tile index of the top-left element of matrix ``matrix`` (block ``(matrix % R, matrix // R)``).

        >>> get_ldmatrix_atom(4).matrix_origin(2)
        (0, 8)
        """
        if not 0 <= matrix < self.num:
            raise LayoutError(f"matrix_origin: matrix {matrix} out of range for {self.ptx} ({self.num} matrices)")
        row_blocks = self._row_blocks
        return (matrix % row_blocks * 8, matrix // row_blocks * (self.shape[1] // (self.num // row_blocks)))

    def lane_address(self, lane: Index) -> tuple[Index, Index]:
        """Tile index whose shared address lane ``lane`` passes: row ``lane % 8`` of matrix ``lane // 8``.

        Generic (ints or PrimExprs); only lanes ``< 8 * num`` matter.

        >>> get_ldmatrix_atom(2).lane_address(11)
        (11, 0)
        """
        row_blocks = self._row_blocks
        matrix_cols = self.shape[1] // (self.num // row_blocks)
        if row_blocks == 1:
            return (lane % 8, 0)
        if self.num == 2:
            return (lane % 16, 0)
        return (lane % 16, lane // 16 * matrix_cols)

    def __repr__(self) -> str:
        return f"LdmatrixAtom({self.ptx}, shape={list(self.shape)})"


def ldmatrix_layout(num: int, trans: bool = False, dtype_bits: int = 16) -> RegisterLayout:
    """Register layout of the fragment ``ldmatrix...x{num}[.trans]`` loads (see :class:`LdmatrixAtom`).

    ``outer.compose(inner)`` with ``outer`` = ``local(1, 1)`` / ``local(2, 1)`` / ``column_local(2, 2)``
    for x1 / x2 / x4 (the matrix order) and ``inner`` = ``spatial(8, 4).local(1, 32 // dtype_bits)``,
    or ``column_spatial(4, 8).local(2, 1)`` with ``.trans``.

    >>> ldmatrix_layout(4) == get_mma_atom("float16", "float16", "float32").a_layout
    True
    """
    return get_ldmatrix_atom(num, trans, dtype_bits).layout


def get_ldmatrix_atom(num: int, trans: bool = False, dtype_bits: int = 16) -> LdmatrixAtom:
    """The :class:`LdmatrixAtom` of ``ldmatrix.sync.aligned.m8n8.x{num}[.trans].shared.b16``.

    >>> get_ldmatrix_atom(2, trans=True).layout == get_mma_atom("float16", "float16", "float32").b_layout
    True
    """
    op = "get_ldmatrix_atom"
    if num not in (1, 2, 4) or isinstance(num, bool):
        raise LayoutError(f"{op}: num must be 1, 2 or 4 matrices, got {num!r}")
    if dtype_bits not in (8, 16) or isinstance(dtype_bits, bool):
        raise LayoutError(f"{op}: dtype_bits must be 16 (b16) or 8 (bytes viewed in b16 words), got {dtype_bits!r}")
    if trans and dtype_bits != 16:
        raise LayoutError(f"{op}: .trans moves 16-bit words; dtype_bits={dtype_bits} elements would be split "
                          f"(x{num}, trans=True)")
    outer = {1: local(1, 1), 2: local(2, 1), 4: column_local(2, 2)}[num]
    pack = _pack(dtype_bits)
    inner = column_spatial(4, 8).local(2, 1) if trans else spatial(8, 4).local(1, pack)
    layout = compose(outer, inner)
    return LdmatrixAtom(num=num, trans=bool(trans), dtype_bits=dtype_bits, shape=layout.shape, layout=layout)
