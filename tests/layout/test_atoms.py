"""Tensor-core atoms checked element by element against the PTX ISA fragment formulas.

The formulas below are written out from the PTX ISA sections "Matrix Fragments for mma.m16n8k8",
"... mma.m16n8k16 with floating point type", "... mma.m16n8k16 / m16n8k32 with integer type" and
"Warp-level matrix load instruction: ldmatrix", independently of the layout algebra: each gives
(row, col) of fragment element ``i`` held by ``lane``. ``groupID = lane >> 2``,
``threadID_in_group = lane % 4``.
"""
import doctest
import itertools

import pytest

from tilus_tvm.errors import LayoutError
from tilus_tvm.layout.atoms import (
    LdmatrixAtom,
    MmaAtom,
    get_ldmatrix_atom,
    get_mma_atom,
    ldmatrix_layout,
    mma_atoms,
)
from tilus_tvm.layout.register import repeat
from tilus_tvm.layout.shared import bank_conflicts, shared_row_major
from tilus_tvm.layout.swizzle import Swizzle


def gid(lane):
    return lane >> 2


def tig(lane):
    return lane % 4


# ---- PTX fragment formulas ------------------------------------------------------------------
def m16n8k8_f16_a(lane, i):  # a0..a3
    row = gid(lane) if i < 2 else gid(lane) + 8
    return row, tig(lane) * 2 + (i & 0x1)


def m16n8k8_f16_b(lane, i):  # b0, b1
    return tig(lane) * 2 + i, gid(lane)


def m16n8_c(lane, i):  # c0..c3, the same for f16, f32 and s32 accumulators
    row = gid(lane) if i < 2 else gid(lane) + 8
    return row, tig(lane) * 2 + (i & 0x1)


def m16n8k16_f16_a(lane, i):  # a0..a7
    row = gid(lane) if i in (0, 1, 4, 5) else gid(lane) + 8
    col = tig(lane) * 2 + (i & 0x1) + (8 if i >= 4 else 0)
    return row, col


def m16n8k16_f16_b(lane, i):  # b0..b3
    row = tig(lane) * 2 + (i & 0x1) + (8 if i >= 2 else 0)
    return row, gid(lane)


def m16n8k16_s8_a(lane, i):  # a0..a7
    row = gid(lane) if i < 4 else gid(lane) + 8
    return row, tig(lane) * 4 + (i & 0x3)


def m16n8k16_s8_b(lane, i):  # b0..b3
    return tig(lane) * 4 + i, gid(lane)


def m16n8k32_s8_a(lane, i):  # a0..a15
    row = gid(lane) if (i < 4 or 8 <= i < 12) else gid(lane) + 8
    col = tig(lane) * 4 + (i & 0x3) + (16 if i >= 8 else 0)
    return row, col


def m16n8k32_s8_b(lane, i):  # b0..b7
    row = tig(lane) * 4 + (i & 0x3) + (16 if i >= 4 else 0)
    return row, gid(lane)


FORMULAS = {
    8: (m16n8k8_f16_a, m16n8k8_f16_b, 4, 2),
    16: (m16n8k16_f16_a, m16n8k16_f16_b, 8, 4),
}
INT_FORMULAS = {
    16: (m16n8k16_s8_a, m16n8k16_s8_b, 8, 4),
    32: (m16n8k32_s8_a, m16n8k32_s8_b, 16, 8),
}


def check_fragment(layout, formula, shape, num_elements):
    """``layout`` puts fragment element ``i`` of ``lane`` exactly where ``formula`` says, and nothing else."""
    assert layout.shape == shape
    assert layout.num_threads == 32
    assert layout.local_size == num_elements
    assert not layout.is_replicated
    seen = set()
    for lane, i in itertools.product(range(32), range(num_elements)):
        row, col = formula(lane, i)
        assert layout.logical(lane, i) == (row, col), (lane, i)
        assert layout.holders(row, col) == [(lane, i)], (lane, i)
        seen.add((row, col))
    assert len(seen) == shape[0] * shape[1]


FLOAT_COMBOS = [("float16", "float16", "float32"), ("float16", "float16", "float16"),
                ("bfloat16", "bfloat16", "float32")]
INT_COMBOS = [(a, b, "int32") for a in ("int8", "uint8") for b in ("int8", "uint8")]


@pytest.mark.parametrize("k", [8, 16])
@pytest.mark.parametrize("dtypes", FLOAT_COMBOS)
def test_float_atoms_match_ptx_fragments(dtypes, k):
    atom = get_mma_atom(*dtypes, k=k)
    a_formula, b_formula, a_elems, b_elems = FORMULAS[k]
    assert (atom.name, atom.m, atom.n, atom.k) == (f"m16n8k{k}", 16, 8, k)
    check_fragment(atom.a_layout, a_formula, (16, k), a_elems)
    check_fragment(atom.b_layout, b_formula, (k, 8), b_elems)
    check_fragment(atom.c_layout, m16n8_c, (16, 8), 4)


@pytest.mark.parametrize("k", [16, 32])
@pytest.mark.parametrize("dtypes", INT_COMBOS)
def test_int8_atoms_match_ptx_fragments(dtypes, k):
    atom = get_mma_atom(*dtypes, k=k)
    a_formula, b_formula, a_elems, b_elems = INT_FORMULAS[k]
    check_fragment(atom.a_layout, a_formula, (16, k), a_elems)
    check_fragment(atom.b_layout, b_formula, (k, 8), b_elems)
    check_fragment(atom.c_layout, m16n8_c, (16, 8), 4)


def test_c_layout_is_the_seed_example():
    atom = get_mma_atom("float16", "float16", "float16", k=8)
    assert atom.c_layout == repeat(2, 1).spatial(8, 4).repeat(1, 2)


@pytest.mark.parametrize("dtypes, k, name, ptx_types, legacy, regs", [
    (("float16", "float16", "float32"), None, "m16n8k16", "f32.f16.f16.f32", ("fp16", "fp16", "fp32"), (4, 2, 4)),
    (("float16", "float16", "float16"), None, "m16n8k16", "f16.f16.f16.f16", ("fp16", "fp16", "fp16"), (4, 2, 2)),
    (("bfloat16", "bfloat16", "float32"), None, "m16n8k16", "f32.bf16.bf16.f32", ("bf16", "bf16", "fp32"),
     (4, 2, 4)),
    (("float16", "float16", "float32"), 8, "m16n8k8", "f32.f16.f16.f32", ("fp16", "fp16", "fp32"), (2, 1, 4)),
    (("float16", "float16", "float16"), 8, "m16n8k8", "f16.f16.f16.f16", ("fp16", "fp16", "fp16"), (2, 1, 2)),
    (("int8", "int8", "int32"), None, "m16n8k32", "s32.s8.s8.s32", ("int8", "int8", "int32"), (4, 2, 4)),
    (("uint8", "int8", "int32"), None, "m16n8k32", "s32.u8.s8.s32", ("uint8", "int8", "int32"), (4, 2, 4)),
    (("int8", "int8", "int32"), 16, "m16n8k16", "s32.s8.s8.s32", ("int8", "int8", "int32"), (2, 1, 4)),
])
def test_get_mma_atom_selection_and_names(dtypes, k, name, ptx_types, legacy, regs):
    atom = get_mma_atom(*dtypes, k=k)
    assert isinstance(atom, MmaAtom)
    assert (atom.a_dtype, atom.b_dtype, atom.c_dtype) == dtypes
    assert atom.name == name
    assert atom.ptx_types == ptx_types
    assert atom.ptx == f"mma.sync.aligned.{name}.row.col.{ptx_types}"
    assert atom.ptx_legacy_types == legacy
    assert (atom.a_regs, atom.b_regs, atom.c_regs) == regs
    assert atom.num_threads == 32
    assert repr(atom) == f"MmaAtom({atom.ptx})"


def test_get_mma_atom_accepts_dtype_objects():
    class DType:
        def __init__(self, name):
            self.name = name

    atom = get_mma_atom(DType("bfloat16"), DType("bfloat16"), DType("float32"))
    assert atom == get_mma_atom("bfloat16", "bfloat16", "float32")


def test_get_mma_atom_errors():
    with pytest.raises(LayoutError, match=r"get_mma_atom: no mma.sync atom for a_dtype=float16, b_dtype=bfloat16, "
                                          r"c_dtype=float32; supported \(a, b, c\): \(float16, float16, float32\)"):
        get_mma_atom("float16", "bfloat16", "float32")
    with pytest.raises(LayoutError, match="no mma.sync atom for a_dtype=bfloat16, b_dtype=bfloat16, c_dtype=bfloat16"):
        get_mma_atom("bfloat16", "bfloat16", "bfloat16")
    with pytest.raises(LayoutError, match="no mma.sync atom for a_dtype=float32"):
        get_mma_atom("float32", "float32", "float32")
    with pytest.raises(LayoutError, match=r"get_mma_atom: no m16n8k32 atom for a_dtype=float16.*k must be one of "
                                          r"\[8, 16\]"):
        get_mma_atom("float16", "float16", "float32", k=32)
    with pytest.raises(LayoutError, match=r"k must be one of \[16, 32\]"):
        get_mma_atom("int8", "int8", "int32", k=8)


def test_mma_atoms_lists_every_atom_once():
    atoms = mma_atoms()
    assert len(atoms) == len({a.ptx for a in atoms}) == 14


# ---- ldmatrix --------------------------------------------------------------------------------
def ldmatrix_element(lane, e, trans):
    """(row, col) inside one 8x8 matrix of the e-th 16-bit element (0 or 1) of ``lane``'s register."""
    if trans:
        return 2 * (lane % 4) + e, lane // 4
    return lane // 4, 2 * (lane % 4) + e


MATRIX_ORIGINS = {1: [(0, 0)], 2: [(0, 0), (8, 0)], 4: [(0, 0), (8, 0), (0, 8), (8, 8)]}
TILE_SHAPES = {1: (8, 8), 2: (16, 8), 4: (16, 16)}


@pytest.mark.parametrize("trans", [False, True])
@pytest.mark.parametrize("num", [1, 2, 4])
def test_ldmatrix_layouts_match_ptx(num, trans):
    atom = get_ldmatrix_atom(num, trans)
    assert isinstance(atom, LdmatrixAtom)
    assert atom.layout == ldmatrix_layout(num, trans)
    assert atom.shape == TILE_SHAPES[num]
    assert atom.num_regs == num
    assert atom.ptx == f"ldmatrix.sync.aligned.m8n8.x{num}{'.trans' if trans else ''}.shared.b16"

    def formula(lane, slot):
        matrix, e = divmod(slot, 2)  # register `matrix`, lower half first
        row, col = ldmatrix_element(lane, e, trans)
        r0, c0 = MATRIX_ORIGINS[num][matrix]
        return r0 + row, c0 + col

    check_fragment(atom.layout, formula, TILE_SHAPES[num], 2 * num)


@pytest.mark.parametrize("num", [1, 2, 4])
def test_ldmatrix_lane_addresses(num):
    atom = get_ldmatrix_atom(num)
    assert atom.num_address_lanes == 8 * num
    for matrix in range(num):
        assert atom.matrix_origin(matrix) == MATRIX_ORIGINS[num][matrix]
    for lane in range(8 * num):
        r0, c0 = MATRIX_ORIGINS[num][lane // 8]
        assert atom.lane_address(lane) == (r0 + lane % 8, c0)
    if num == 4:  # the rule kernels write: row lane % 16, column (lane // 16) * 8
        assert all(atom.lane_address(lane) == (lane % 16, lane // 16 * 8) for lane in range(32))


def test_ldmatrix_feeds_mma_operands():
    f16 = get_mma_atom("float16", "float16", "float32")
    f16_k8 = get_mma_atom("float16", "float16", "float32", k=8)
    s8 = get_mma_atom("int8", "int8", "int32")
    assert ldmatrix_layout(4) == f16.a_layout
    assert ldmatrix_layout(2) == f16_k8.a_layout
    assert ldmatrix_layout(2, trans=True) == f16.b_layout
    assert ldmatrix_layout(1, trans=True) == f16_k8.b_layout
    assert ldmatrix_layout(4, dtype_bits=8) == s8.a_layout
    assert get_ldmatrix_atom(4, dtype_bits=8).shape == (16, 32)
    assert get_ldmatrix_atom(4, dtype_bits=8).lane_address(20) == (4, 16)
    # x4.trans of a [k=16, n=16] tile: registers 0, 1 are B of columns 0-7, registers 2, 3 of columns 8-15
    x4t = ldmatrix_layout(4, trans=True)
    for lane, slot in itertools.product(range(32), range(8)):
        k, n = x4t.logical(lane, slot)
        assert f16.b_layout.holders(k, n % 8) == [(lane, slot % 4)]
        assert n // 8 == slot // 4
    # non-trans x1 of B stored [n, k] (k contiguous) gives B's fragment transposed
    x1 = ldmatrix_layout(1)
    for n, k in itertools.product(range(8), range(8)):
        assert x1.holders(n, k) == f16_k8.b_layout.holders(k, n)


def test_ldmatrix_x4_on_swizzled_tile_is_conflict_free():
    atom = get_ldmatrix_atom(4)
    accesses = [(atom.lane_address(lane), 8) for lane in range(32)]
    layout = shared_row_major(16, 64).swizzled(Swizzle(3, 3, 3))
    assert bank_conflicts(layout, accesses, 16).conflict_free
    assert not bank_conflicts(shared_row_major(16, 64), accesses, 16).conflict_free


def test_ldmatrix_errors():
    with pytest.raises(LayoutError, match="get_ldmatrix_atom: num must be 1, 2 or 4 matrices, got 3"):
        get_ldmatrix_atom(3)
    with pytest.raises(LayoutError, match=r"get_ldmatrix_atom: .trans moves 16-bit words; dtype_bits=8"):
        get_ldmatrix_atom(4, trans=True, dtype_bits=8)
    with pytest.raises(LayoutError, match="dtype_bits must be 16"):
        get_ldmatrix_atom(4, dtype_bits=32)
    with pytest.raises(LayoutError, match="matrix_origin: matrix 2 out of range"):
        get_ldmatrix_atom(2).matrix_origin(2)


def test_warp_layouts_use_32_threads_without_replication():
    for atom in mma_atoms():
        for layout in (atom.a_layout, atom.b_layout, atom.c_layout):
            assert layout.num_threads == 32 and not layout.is_replicated


def test_docstring_examples():
    from tilus_tvm.layout import atoms as module

    results = doctest.testmod(module)
    assert results.attempted > 0 and results.failed == 0
