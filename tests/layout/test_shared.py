"""Shared layouts: strided offsets, swizzles and their fit checks, the bank-conflict model."""
import doctest
import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tilus_tvm.errors import LayoutError
from tilus_tvm.layout.shared import (
    BankConflicts,
    SharedLayout,
    bank_conflicts,
    shared_column_major,
    shared_padded,
    shared_row_major,
    shared_strides,
    swizzled,
)
from tilus_tvm.layout.swizzle import Swizzle


def all_offsets(layout):
    return [layout.offset(*idx) for idx in itertools.product(*(range(n) for n in layout.shape))]


# ---- constructors and offsets -----------------------------------------------------------------
def test_row_major_offsets_and_sizes():
    layout = shared_row_major(4, 8)
    assert layout.strides == (8, 1)
    assert all_offsets(layout) == list(range(32))
    assert (layout.size, layout.cosize) == (32, 32)
    assert repr(layout) == "SharedLayout(shape=[4, 8], strides=[8, 1])"


def test_column_major_offsets():
    layout = shared_column_major(4, 8)
    assert layout.strides == (1, 4)
    assert layout.offset(3, 5) == 3 + 5 * 4
    assert sorted(all_offsets(layout)) == list(range(32))
    assert shared_column_major(2, 3, 4).strides == (1, 2, 6)


def test_row_major_3d_and_tuple_index():
    layout = shared_row_major(2, 3, 4)
    assert layout.strides == (12, 4, 1)
    assert layout.offset(1, 2, 3) == layout.offset((1, 2, 3)) == 23


def test_explicit_strides():
    layout = shared_strides((4, 8), (16, 2))
    assert layout.offset(3, 7) == 3 * 16 + 7 * 2
    assert layout.cosize == 3 * 16 + 7 * 2 + 1
    assert layout.size == 32


def test_padded_layout():
    layout = shared_padded((8, 64), 8)
    assert layout.strides == (72, 1)
    assert layout.offset(2, 3) == 2 * 72 + 3
    assert layout.cosize == 7 * 72 + 64
    assert shared_padded((2, 4, 32), 8).strides == (160, 40, 1)
    assert shared_padded((8, 64), 0) == shared_row_major(8, 64)


def test_swizzled_offsets_are_a_permutation_and_match_formula():
    base = shared_row_major(16, 64)
    sw = Swizzle(3, 3, 3)
    layout = base.swizzled(sw)
    assert layout == swizzled(base, sw)
    assert repr(layout) == "SharedLayout(shape=[16, 64], strides=[64, 1], swizzle=Sw<3,3,3>)"
    for r, c in itertools.product(range(16), range(64)):
        linear = r * 64 + c
        chunk = (c // 8) ^ (r % 8)  # the 16-byte chunk moves by the row's low three bits
        assert layout.offset(r, c) == sw(linear) == (linear // 64) * 64 + chunk * 8 + c % 8
    assert sorted(all_offsets(layout)) == list(range(16 * 64))
    assert layout.cosize == 16 * 64


def test_zero_bit_swizzle_is_identity():
    layout = shared_row_major(4, 8).swizzled(Swizzle(0, 4, 3))
    assert layout.swizzle is None
    assert layout == shared_row_major(4, 8)


def test_swizzle_on_compact_layout_with_partial_span_is_accepted_when_a_permutation():
    # 12 rows = 1.5 spans of Sw<3,3,3>: offsets move only inside 64-element blocks, still a permutation
    layout = shared_row_major(12, 64).swizzled(Swizzle(3, 3, 3))
    assert sorted(all_offsets(layout)) == list(range(12 * 64))


def test_swizzle_on_padded_layout_that_stays_a_permutation_is_accepted():
    # rows of 64 padded to 128: bit 6 of the offset is never set; Sw<3,3,4> reads bits 7..9 only
    layout = shared_padded((8, 64), 64).swizzled(Swizzle(3, 3, 4))
    covered = {r * 128 + c for r in range(8) for c in range(64)}
    assert set(all_offsets(layout)) == covered


# ---- errors -----------------------------------------------------------------------------------
def test_error_strides_length_mismatch():
    with pytest.raises(LayoutError, match=r"shared_strides: shape \[4, 8\] has 2 dimensions but strides \[1\]"):
        shared_strides((4, 8), (1,))


@pytest.mark.parametrize("make, pattern", [
    (lambda: shared_row_major(4, 0), r"shared_row_major: shape entries must be positive, got \[4, 0\]"),
    (lambda: shared_column_major(-1, 2), r"shared_column_major: shape entries must be positive"),
    (lambda: shared_strides((4, 8), (8, -1)), r"shared_strides: strides must be non-negative"),
    (lambda: shared_padded((8, 64), -8), r"shared_padded: pad must be a non-negative int, got -8"),
    (lambda: shared_padded((64,), 8), r"shared_padded: shape \[64\] has one dimension"),
    (lambda: shared_row_major(4, 2.0), r"shared_row_major: shape must hold Python ints"),
    (lambda: SharedLayout((4, 8), (8,)), r"SharedLayout: shape \[4, 8\] has 2 dimensions"),
])
def test_error_bad_sizes(make, pattern):
    with pytest.raises(LayoutError, match=pattern):
        make()


def test_error_swizzle_reaches_beyond_layout():
    with pytest.raises(LayoutError, match=r"swizzled: swizzle Sw<3,3,3> does not fit layout "
                                          r"SharedLayout\(shape=\[4, 64\], strides=\[64, 1\]\): the swizzle spans 512 "
                                          r"elements .* uses offset bit\(s\) \[8\], which no offset of the "
                                          r"layout sets \(cosize 256\)"):
        shared_row_major(4, 64).swizzled(Swizzle(3, 3, 3))


def test_error_swizzle_on_padded_layout_not_a_permutation():
    with pytest.raises(LayoutError, match=r"swizzled: swizzle Sw<3,3,3> does not fit layout "
                                          r"SharedLayout\(shape=\[8, 64\], strides=\[72, 1\]\): the swizzle moves "
                                          r"offset 72 to 64"):
        shared_padded((8, 64), 8).swizzled(Swizzle(3, 3, 3))


def test_error_swizzle_on_strided_layout_not_a_permutation():
    # rows of 20 at stride 32: Sw<1,4,1> flips bit 4 on odd rows, moving column 4 to column 20
    with pytest.raises(LayoutError, match=r"swizzled: .* the swizzle moves offset 36 to 52"):
        shared_strides((32, 20), (32, 1)).swizzled(Swizzle(1, 4, 1))
    # rows of 16 at stride 32: bit 4 never varies, so the swizzle is rejected before that
    with pytest.raises(LayoutError, match=r"uses offset bit\(s\) \[4\], which no offset of the layout sets"):
        shared_strides((32, 16), (32, 1)).swizzled(Swizzle(1, 4, 1))


def test_error_swizzle_through_dataclass_constructor():
    with pytest.raises(LayoutError, match=r"SharedLayout: swizzle Sw<3,3,3> does not fit"):
        SharedLayout((8, 64), (72, 1), Swizzle(3, 3, 3))


def test_error_double_swizzle_and_bad_operands():
    layout = shared_row_major(8, 64).swizzled(Swizzle(3, 3, 3))
    with pytest.raises(LayoutError, match="swizzled: layout .* is already swizzled"):
        layout.swizzled(Swizzle(2, 3, 3))
    with pytest.raises(LayoutError, match="swizzled: expected a Swizzle"):
        shared_row_major(8, 64).swizzled((3, 3, 3))
    with pytest.raises(LayoutError, match="swizzled: expected a SharedLayout"):
        swizzled("smem", Swizzle(3, 3, 3))


def test_error_offset_rank_and_range():
    layout = shared_row_major(4, 8)
    with pytest.raises(LayoutError, match=r"offset: index \[1\] has 1 coordinates, layout .* has 2 dimensions"):
        layout.offset(1)
    with pytest.raises(LayoutError, match=r"offset: index \[4, 0\] is out of range in dimension 0"):
        layout.offset(4, 0)


# ---- properties ------------------------------------------------------------------------------
@st.composite
def swizzled_row_major(draw):
    bits = draw(st.integers(0, 3))
    base = draw(st.integers(0, 3))
    shift = draw(st.integers(max(bits, 1), 4))
    span = 1 << (bits + base + shift)
    cols = 1 << draw(st.integers(base + bits, 8))
    rows = max(1, -(-span // cols)) * draw(st.integers(1, 3))
    return shared_row_major(rows, cols), Swizzle(bits, base, shift)


@settings(max_examples=60, deadline=None)
@given(swizzled_row_major())
def test_property_swizzle_fits_iff_permutation(case):
    layout, sw = case
    linear = all_offsets(layout)
    moved = [sw(o) for o in linear]
    is_permutation = sorted(moved) == sorted(linear)
    fits = sw.bits == 0 or sw.span <= 1 << (layout.cosize - 1).bit_length()
    if fits and is_permutation:
        result = layout.swizzled(sw)
        assert all_offsets(result) == moved
        assert result.cosize == layout.cosize
    else:
        with pytest.raises(LayoutError):
            layout.swizzled(sw)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 5), min_size=1, max_size=3), st.integers(0, 4))
def test_property_padded_is_injective_and_within_cosize(shape, pad):
    if len(shape) < 2:
        shape = [2] + shape
    layout = shared_padded(shape, pad)
    offsets = all_offsets(layout)
    assert len(set(offsets)) == math.prod(shape)
    assert max(offsets) + 1 == layout.cosize


# ---- bank conflicts --------------------------------------------------------------------------
def ldmatrix_rows(num_rows=8, col=0):
    """ldmatrix phase: thread r gives the 16-byte segment at (row r, col .. col + 7) of an f16 tile."""
    return [((r, col), 8) for r in range(num_rows)]


def test_bank_conflicts_ldmatrix_row_major_64_cols_is_8_way():
    result = bank_conflicts(shared_row_major(8, 64), ldmatrix_rows(), 16)
    assert result == BankConflicts(wavefronts=8, ideal_wavefronts=1, conflict_ways=8)
    assert not result.conflict_free


def test_bank_conflicts_ldmatrix_swizzled_64_cols_is_conflict_free():
    layout = shared_row_major(8, 64).swizzled(Swizzle(3, 3, 3))
    for col in range(0, 64, 8):
        result = bank_conflicts(layout, ldmatrix_rows(col=col), 16)
        assert result == BankConflicts(wavefronts=1, ideal_wavefronts=1, conflict_ways=1)
        assert result.conflict_free


def test_bank_conflicts_32_cols():
    rows = ldmatrix_rows()
    assert bank_conflicts(shared_row_major(8, 32), rows, 16).conflict_ways == 4
    assert bank_conflicts(shared_row_major(8, 32).swizzled(Swizzle(2, 3, 3)), rows, 16).conflict_free
    assert bank_conflicts(shared_padded((8, 32), 8), rows, 16).conflict_free


def test_bank_conflicts_padded_64_cols():
    assert bank_conflicts(shared_padded((8, 64), 8), ldmatrix_rows(), 16).conflict_free


def test_bank_conflicts_full_warp_16_bytes_four_phases():
    # ldmatrix.x4 over a 16x16 tile inside a 16x64 f16 tile: lane l gives row l % 16, column (l // 16) * 8
    accesses = [((lane % 16, lane // 16 * 8), 8) for lane in range(32)]
    plain = bank_conflicts(shared_row_major(16, 64), accesses, 16)
    assert plain == BankConflicts(wavefronts=32, ideal_wavefronts=4, conflict_ways=8)
    swz = bank_conflicts(shared_row_major(16, 64).swizzled(Swizzle(3, 3, 3)), accesses, 16)
    assert swz == BankConflicts(wavefronts=4, ideal_wavefronts=4, conflict_ways=1)


def test_bank_conflicts_scalar_accesses():
    # 32 threads read one f32 column of a 32x32 f32 tile: all in bank 0 -> 32-way
    column = [((t, 0), 1) for t in range(32)]
    assert bank_conflicts(shared_row_major(32, 32), column, 32).conflict_ways == 32
    # padding by one element spreads the column over all banks
    assert bank_conflicts(shared_padded((32, 32), 1), column, 32).conflict_free
    # a row read is conflict-free; every thread reading the same word is a broadcast
    row = [((0, t), 1) for t in range(32)]
    assert bank_conflicts(shared_row_major(32, 32), row, 32) == BankConflicts(1, 1, 1)
    same = [((0, 0), 1)] * 32
    assert bank_conflicts(shared_row_major(32, 32), same, 32) == BankConflicts(1, 1, 1)


def test_bank_conflicts_8_byte_accesses_two_phases():
    # 32 threads, 4 f16 each, along one row of a 2x64... half-warp phases of 16 threads x 8 bytes
    accesses = [((t // 16, (t % 16) * 4), 4) for t in range(32)]
    result = bank_conflicts(shared_row_major(2, 64), accesses, 16)
    assert result == BankConflicts(wavefronts=2, ideal_wavefronts=2, conflict_ways=1)


def test_bank_conflicts_inactive_threads_and_empty():
    accesses = [((r, 0), 8) for r in range(4)] + [None] * 4
    assert bank_conflicts(shared_row_major(8, 64), accesses, 16).wavefronts == 4
    assert bank_conflicts(shared_row_major(8, 64), [None] * 32, 16) == BankConflicts(0, 0, 0)


def test_bank_conflicts_errors():
    layout = shared_row_major(8, 64)
    with pytest.raises(LayoutError, match="bank_conflicts: threads use different vector lengths"):
        bank_conflicts(layout, [((0, 0), 8), ((1, 0), 4)], 16)
    with pytest.raises(LayoutError, match=r"bank_conflicts: thread 0 reads 8 elements from \[0, 4\] at offsets"):
        bank_conflicts(layout, [((0, 4), 8)], 16)  # misaligned 16-byte vector
    with pytest.raises(LayoutError, match="bank_conflicts: a warp has 32 threads, got 33"):
        bank_conflicts(layout, [((0, 0), 1)] * 33, 16)
    with pytest.raises(LayoutError, match="at most 128 bits"):
        bank_conflicts(layout, [((0, 0), 16)], 16)
    with pytest.raises(LayoutError, match="beyond the last dimension"):
        bank_conflicts(layout, [((0, 60), 8)], 16)
    # a swizzle whose unit (2 elements) is smaller than the vector (8) breaks contiguity
    broken = shared_row_major(8, 64).swizzled(Swizzle(3, 1, 5))
    with pytest.raises(LayoutError, match="contiguous offsets"):
        bank_conflicts(broken, [((1, 0), 8)], 16)


def test_vector_offsets_are_offset_element_by_element():
    """bank_conflicts' vector offsets (index checked and strided once) are layout.offset of each element."""
    from tilus_tvm.layout.shared import _vector_offsets

    layouts = [shared_row_major(4, 64), shared_row_major(8, 64).swizzled(Swizzle(3, 3, 3)),
               shared_row_major(2, 4, 32).swizzled(Swizzle(2, 2, 4)), shared_padded((4, 32), 8),
               shared_row_major(8, 64).swizzled(Swizzle(3, 1, 5)), shared_column_major(16, 8)]
    for layout in layouts:
        for vec in (1, 2, 4, 8):
            for index in itertools.product(*(range(n) for n in layout.shape[:-1]), range(layout.shape[-1] - vec + 1)):
                expected = [layout.offset(*index[:-1], index[-1] + e) for e in range(vec)]
                assert _vector_offsets(layout, index, vec) == expected, (layout, index, vec)
    # a coordinate out of range before the last dimension: offset()'s error
    with pytest.raises(LayoutError, match=r"offset: index \[8, 0\] is out of range in dimension 0"):
        bank_conflicts(shared_row_major(8, 64), [((8, 0), 8)], 16)


def test_docstring_examples():
    from tilus_tvm.layout import shared as module

    results = doctest.testmod(module)
    assert results.attempted > 0 and results.failed == 0
