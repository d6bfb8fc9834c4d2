"""tilus_tvm.layout.cute.algebra: coalesce, filter, complement, composition, inverses.

Seed 001's examples (0-indexed), then each operation checked against its definition, exhaustively
on small flat layouts and with hypothesis on hierarchical ones.
"""
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tilus_tvm.cute as cute
from tilus_tvm.errors import LayoutError
from tilus_tvm.layout.cute import int_tuple as it

L = cute.Layout


# ---- generators ----------------------------------------------------------------------------------
def flat_layouts(shapes, strides, max_rank):
    """Every flat layout of rank 1..max_rank with modes from ``shapes`` x ``strides``."""
    out = [L(s, d) for s in shapes for d in strides]
    for rank in range(2, max_rank + 1):
        for modes in itertools.product(itertools.product(shapes, strides), repeat=rank):
            out.append(L(tuple(s for s, _ in modes), tuple(d for _, d in modes)))
    return out


@st.composite
def nestings(draw, leaves):
    """Group a flat tuple of leaves into a random profile of depth <= 3."""
    leaves = list(leaves)
    if len(leaves) == 1 and draw(st.booleans()):
        return leaves[0]
    groups = []
    while leaves:
        k = draw(st.integers(1, len(leaves)))
        chunk, leaves = leaves[:k], leaves[k:]
        groups.append(chunk[0] if len(chunk) == 1 else tuple(chunk))
    return tuple(groups)


@st.composite
def layouts(draw, max_rank=4, max_shape=4, max_stride=24):
    """Any layout: hierarchical shape, arbitrary non-negative strides."""
    rank = draw(st.integers(1, max_rank))
    shapes = draw(st.lists(st.integers(1, max_shape), min_size=rank, max_size=rank))
    strides = draw(st.lists(st.integers(0, max_stride), min_size=rank, max_size=rank))
    profile = draw(nestings(range(rank)))
    return L(it.unflatten(tuple(shapes), profile), it.unflatten(tuple(strides), profile))


@st.composite
def injective_layouts(draw, max_rank=4, max_shape=4):
    """Layouts that have a complement: modes whose strides, in sorted order, are multiples of the
    span of the smaller ones; listed in a random order and nested at random."""
    rank = draw(st.integers(1, max_rank))
    shapes = draw(st.lists(st.integers(1, max_shape), min_size=rank, max_size=rank))
    gaps = draw(st.lists(st.integers(1, 3), min_size=rank, max_size=rank))
    strides, span = [], 1
    for s, g in zip(shapes, gaps):
        strides.append(span * g)
        span = span * g * s
    order = draw(st.permutations(range(rank)))
    shapes, strides = tuple(shapes[i] for i in order), tuple(strides[i] for i in order)
    profile = draw(nestings(range(rank)))
    return L(it.unflatten(shapes, profile), it.unflatten(strides, profile))


def values(layout):
    return [layout(i) for i in range(layout.size)]


def extended(layout, index):
    """CuTe's layout function past its size: the last mode absorbs the rest of the index."""
    return it.crd2idx(index, layout.shape, layout.stride)


def compatible(a, b):
    """Shape ``a`` is compatible with ``b``: same size at every leaf of ``a``."""
    if it.is_tuple(a):
        return it.is_tuple(b) and len(a) == len(b) and all(compatible(x, y) for x, y in zip(a, b))
    return a == it.product(b)


# ---- seed 001 ------------------------------------------------------------------------------------
def test_seed_coalesce():
    layout = L((2, (1, 6)), (1, (6, 2)))
    assert str(layout) == "(2,(1,6)):(1,(6,2))"
    assert str(cute.coalesce(layout)) == "12:1"


def test_seed_complement():
    assert str(cute.complement(L(4, 2), 24)) == "(2,3):(1,8)"
    whole = cute.make_layout(L(4, 2), cute.complement(L(4, 2), 24))
    assert str(whole) == "(4,(2,3)):(2,(1,8))"
    # "gather every 4 elements at even indices to a tile": the table of the seed, 0-indexed
    assert [[whole(r, c) for c in range(6)] for r in range(4)] == [
        [0, 1, 8, 9, 16, 17], [2, 3, 10, 11, 18, 19], [4, 5, 12, 13, 20, 21], [6, 7, 14, 15, 22, 23]]


def test_cute_docs_composition_and_complement_examples():
    # the examples on the seed's Julia documentation page (MoYe), in CuTe's terms
    assert cute.composition(L(20, 2), L((4, 5), (1, 4))) == L((4, 5), (2, 8))
    assert cute.composition(L(20, 2), L((4, 5), (5, 1))) == L((4, 5), (10, 2))
    assert cute.complement(L(4, 1), 24) == L(6, 4)
    assert cute.complement(L(6, 4), 24) == L(4, 1)


# ---- coalesce and filter -------------------------------------------------------------------------
SMALL_FLAT = flat_layouts([1, 2, 3, 4], [0, 1, 2, 4, 6], max_rank=3)


def test_coalesce_preserves_the_function_exhaustive():
    for layout in SMALL_FLAT:
        result = cute.coalesce(layout)
        assert result.size == layout.size
        assert result.depth <= 1
        assert values(result) == values(layout), layout
        shapes, strides = it.flatten(result.shape), it.flatten(result.stride)
        assert all(s > 1 for s in shapes) or result == L(1, 0)
        assert all(s0 * d0 != d1 for s0, d0, d1 in zip(shapes, strides, strides[1:])), result


@settings(max_examples=300, deadline=None)
@given(layouts())
def test_coalesce_preserves_the_function(layout):
    assert values(cute.coalesce(layout)) == values(layout)


@settings(max_examples=150, deadline=None)
@given(layouts(max_rank=4), st.data())
def test_coalesce_by_mode_keeps_the_modes(layout, data):
    profile = tuple([1] * data.draw(st.integers(1, layout.rank)))
    result = cute.coalesce(layout, profile)
    assert result.rank == layout.rank
    for mode, original in zip(result, layout):
        assert values(mode) == values(original)
        assert mode.size == original.size


def test_coalesce_by_mode_example():
    layout = L(((2, 2), (2, 3)), ((1, 2), (4, 12)))
    assert str(cute.coalesce(layout, (1, 1))) == "(4,(2,3)):(1,(4,12))"
    assert str(cute.coalesce(layout)) == "(8,3):(1,12)"
    assert str(cute.coalesce(L((1, 1), (3, 5)))) == "1:0"


@settings(max_examples=200, deadline=None)
@given(layouts())
def test_filter_keeps_the_distinct_values_in_order(layout):
    result = cute.filter(layout)
    expected = []
    for v in values(cute.filter_zeros(layout)):
        expected.append(v)
    assert values(result) == expected
    assert set(values(result)) == set(values(layout))
    assert 0 not in it.flatten(result.stride) or result == L(1, 0)


def test_filter_example():
    assert str(cute.filter(L((4, 2, 3), (1, 0, 4)))) == "12:1"
    assert str(cute.filter(L((2, 3), (0, 0)))) == "1:0"
    assert str(cute.filter(L(((4, 2), 3), ((1, 0), 8)), (1, 1))) == "(4,3):(1,8)"


# ---- complement ----------------------------------------------------------------------------------
def check_complement(layout, cotarget, result, covers=True):
    """``result`` is a complement of ``layout``; with ``covers`` (strides that are multiples of the
    spans below them), ``make_layout(layout, result)`` also covers ``[0, size)`` without holes."""
    image = set(values(layout))
    comp = values(result)
    assert comp == sorted(comp) and len(set(comp)) == len(comp), result             # ordered
    strides = [d for s, d in zip(it.flatten(result.shape), it.flatten(result.stride)) if s > 1]
    assert strides == sorted(strides)
    assert image & set(comp) == {0}, (layout, result)                                # disjoint
    whole = cute.make_layout(cute.filter(layout), result)
    whole_values = values(whole)
    assert len(set(whole_values)) == whole.size                                      # injective
    if covers:
        assert set(whole_values) == set(range(whole.size))                           # no gaps
        if it.is_int(cotarget):
            assert whole.size >= cotarget                                            # reaches the cotarget


@settings(max_examples=300, deadline=None)
@given(injective_layouts(), st.integers(1, 200))
def test_complement_properties(layout, cotarget):
    check_complement(layout, cotarget, cute.complement(layout, cotarget))


@settings(max_examples=100, deadline=None)
@given(injective_layouts(), st.lists(st.integers(1, 12), min_size=1, max_size=3).map(tuple))
def test_complement_with_a_shape_cotarget(layout, cotarget):
    # CuTe rounds up mode by mode (ceil_div of a shape), so the cotarget's size is not always reached
    check_complement(layout, cotarget, cute.complement(layout, cotarget))
    assert cute.complement(layout, (it.product(cotarget),)) == cute.complement(layout, it.product(cotarget))


def test_complement_exhaustive_small():
    for layout in flat_layouts([1, 2, 3, 4], [0, 1, 2, 3, 4, 6, 8, 12], max_rank=2):
        nonzero = cute.filter(layout)
        injective = len(set(values(nonzero))) == nonzero.size
        try:
            result = cute.complement(layout, 48, strict=True)
        except LayoutError as error:
            assert str(error).startswith("complement(")
            continue
        assert injective, layout
        check_complement(layout, 48, result)


def test_complement_exhaustive_small_cute_semantics():
    # by default only a layout with a stride inside the span of the smaller modes is refused (C++'s
    # "non-injective" static_assert; it covers every non-injective layout); the others get CuTe's
    # complement, which leaves holes where a stride is not a multiple of the span below it
    for layout in flat_layouts([1, 2, 3, 4], [0, 1, 2, 3, 4, 6, 8, 12], max_rank=2):
        nonzero = cute.filter(layout)
        injective = len(set(values(nonzero))) == nonzero.size
        try:
            result = cute.complement(layout, 48)
        except LayoutError as error:
            assert str(error).startswith("complement(") and "not injective" in str(error)
            with pytest.raises(LayoutError, match="not injective"):
                cute.complement(layout, 48, strict=True)
            continue
        assert injective, layout
        check_complement(layout, 48, result, covers=False)
        try:
            assert result == cute.complement(layout, 48, strict=True)
        except LayoutError:
            assert injective, layout


def test_complement_defaults_and_broadcasts():
    assert str(cute.complement(L((2, 2), (1, 6)))) == "3:2"
    assert str(cute.complement(L(4, 0), 8)) == "8:1"
    assert str(cute.complement(L((4, 2), (1, 0)), 16)) == "4:4"
    assert str(cute.complement(L((2, 3), (3, 1)), 12)) == "1:0" or cute.complement(L((2, 3), (3, 1)), 12).size == 2


def test_complement_of_a_non_injective_layout_raises():
    with pytest.raises(LayoutError, match=r"complement\(\(2,2\):\(1,1\), 8\): the layout is not injective"):
        cute.complement(L((2, 2), (1, 1)), 8)
    with pytest.raises(LayoutError, match=r"complement\(\(2,2\):\(2,3\), 16\): .*not injective"):
        cute.complement(L((2, 2), (2, 3)), 16)
    with pytest.raises(LayoutError, match=r"complement\(\(2,2\):\(1,3\), 12\): stride 3 .* not a multiple of 2"):
        cute.complement(L((2, 2), (1, 3)), 12, strict=True)
    with pytest.raises(LayoutError, match="negative"):
        cute.complement(L(4, -1), 8)
    # the non-injective ones and negative strides are refused in both modes
    for strict in (False, True):
        with pytest.raises(LayoutError, match="not injective"):
            cute.complement(L((2, 2), (1, 1)), 8, strict=strict)
        with pytest.raises(LayoutError, match="negative"):
            cute.complement(L(4, -1), 8, strict=strict)


def test_complement_rounds_a_gap_down_as_cute_does():
    # the gap between the modes 2:1 and 2:3 is 3 // 2 = 1 element: none, values 2, 5, 8, ... stay holes
    assert str(cute.complement(L((2, 2), (1, 3)), 12)) == "2:6"
    assert str(cute.complement(L((4, 6), (1, 6)))) == "1:0"
    assert str(cute.complement(L((4, 6), (1, 6)), 72)) == "2:36"
    assert str(cute.complement(L((2, 3), (1, 5)), 60)) == "(2,4):(2,15)"
    check_complement(L((2, 3), (1, 5)), 60, cute.complement(L((2, 3), (1, 5)), 60), covers=False)


# ---- composition ---------------------------------------------------------------------------------
def check_composition(lhs, rhs, result):
    """``result(c) == lhs(rhs(c))``, ``lhs`` extended past its size."""
    assert compatible(rhs.shape, result.shape), (lhs, rhs, result)
    for i in range(rhs.size):
        assert result(i) == extended(lhs, rhs(i)), (lhs, rhs, result, i)


def check_composition_by_mode(lhs, rhs, result):
    """CuTe's definition: ``result(c)`` is the sum over the leaves ``s_j:d_j`` of ``rhs`` of
    ``lhs(d_j * c_j)``, ``c_j`` the leaf's coordinate (``lhs o rhs`` when nothing carries)."""
    assert compatible(rhs.shape, result.shape), (lhs, rhs, result)
    strides = it.flatten(rhs.stride)
    for i in range(rhs.size):
        leaves = it.flatten(it.idx2crd(i, rhs.shape))
        assert result(i) == sum(extended(lhs, d * c) for d, c in zip(strides, leaves)), (lhs, rhs, result, i)


COMPOSITION_LHS = flat_layouts([2, 3, 4], [1, 2, 4, 6], max_rank=2)
COMPOSITION_RHS = flat_layouts([1, 2, 3, 4], [0, 1, 2, 3], max_rank=2)


def test_composition_definition_exhaustive():
    admitted = 0
    for lhs in COMPOSITION_LHS:
        for rhs in COMPOSITION_RHS:
            try:
                result = cute.composition(lhs, rhs, strict=True)
            except LayoutError as error:
                assert str(error).startswith("composition(")
                continue
            admitted += 1
            check_composition(lhs, rhs, result)
    assert admitted > 0.5 * len(COMPOSITION_LHS) * len(COMPOSITION_RHS)


def test_composition_by_mode_exhaustive():
    # CuTe's composition admits more (the rhs modes may carry into the next lhs mode) and agrees
    # with the strict one wherever that succeeds
    admitted = strict_admitted = 0
    for lhs in COMPOSITION_LHS:
        for rhs in COMPOSITION_RHS:
            try:
                result = cute.composition(lhs, rhs)
            except LayoutError as error:
                assert str(error).startswith("composition(") and "does not divide" in str(error)
                continue
            admitted += 1
            check_composition_by_mode(lhs, rhs, result)
            try:
                assert cute.composition(lhs, rhs, strict=True) == result
                strict_admitted += 1
            except LayoutError as error:
                assert "overlap" in str(error)
    assert admitted > strict_admitted > 0.5 * len(COMPOSITION_LHS) * len(COMPOSITION_RHS)


@settings(max_examples=300, deadline=None)
@given(layouts(max_rank=3, max_stride=8), layouts(max_rank=3, max_stride=6))
def test_composition_definition(lhs, rhs):
    try:
        result = cute.composition(lhs, rhs, strict=True)
    except LayoutError:
        return
    check_composition(lhs, rhs, result)


@settings(max_examples=300, deadline=None)
@given(layouts(max_rank=3, max_stride=8), layouts(max_rank=3, max_stride=6))
def test_composition_by_mode(lhs, rhs):
    try:
        result = cute.composition(lhs, rhs)
    except LayoutError as error:
        assert "does not divide" in str(error)
        return
    check_composition_by_mode(lhs, rhs, result)


@settings(max_examples=200, deadline=None)
@given(layouts(max_rank=3, max_stride=8), st.data())
def test_composition_with_a_refining_rhs_is_admissible(lhs, data):
    # a compact rhs whose shape refines the left's flat shape (each leaf split in two) always works
    leaves = []
    for extent in it.flatten(lhs.shape):
        first = data.draw(st.sampled_from([f for f in range(1, extent + 1) if extent % f == 0]))
        leaves += [first, extent // first]
    shape = it.unflatten(tuple(leaves), data.draw(nestings(range(len(leaves)))))
    rhs = L(shape)
    check_composition(lhs, rhs, cute.composition(lhs, rhs))


def test_composition_refuses_overlapping_rhs_modes():
    # (2,2):(1,1) is not injective: its modes add up past mode 0 of the left layout
    message = r"composition\(\(2,2\):\(1,1\), \(2,2\):\(1,1\)\): the modes of the right layout overlap in mode 0"
    with pytest.raises(LayoutError, match=message):
        cute.composition(L((2, 2), (1, 1)), L((2, 2), (1, 1)), strict=True)
    # ... but overlapping modes whose sums stay inside a left mode are fine
    lhs, rhs = L((6, 2), (1, 100)), L((2, 2), (3, 2))
    check_composition(lhs, rhs, cute.composition(lhs, rhs, strict=True))
    # and a single-mode left layout is linear: anything goes
    assert cute.composition(L(8, 3), L((2, 2), (1, 1)), strict=True) == L((2, 2), (3, 3))


def test_composition_with_carrying_rhs_modes_goes_mode_by_mode():
    # CuTe's result: each rhs mode composed on its own, (2:1 o 2:1, 2:1 o 2:1); at (1, 1) it is
    # lhs(1) + lhs(1) = 2, where lhs(rhs(1, 1)) = lhs(2) = 1
    lhs, rhs = L((2, 2), (1, 1)), L((2, 2), (1, 1))
    result = cute.composition(lhs, rhs)
    assert str(result) == "(2,2):(1,1)"
    assert result(1, 1) == 2 and lhs(rhs(1, 1)) == 1
    check_composition_by_mode(lhs, rhs, result)
    # a carry out of a size-6 mode into a stride-10 mode: rhs(1, 3) = 6 is lhs's (0, 1)
    lhs, rhs = L((6, 3), (1, 10)), L((2, 4), (3, 1))
    assert str(cute.composition(lhs, rhs)) == "(2,4):(3,1)"
    assert cute.composition(lhs, rhs)(1, 3) == 6 and lhs(rhs(1, 3)) == 10
    with pytest.raises(LayoutError, match="overlap in mode 0"):
        cute.composition(lhs, rhs, strict=True)


def test_composition_past_the_size_of_lhs():
    # the last mode of lhs extends: 4:1 o 4:2 takes lhs(0), lhs(2), lhs(4), lhs(6)
    assert str(cute.composition(L(4, 1), L(4, 2))) == "4:2"
    assert str(cute.composition(L(1, 0), 4)) == "4:0"
    assert str(cute.composition(L(1, 5), 4)) == "4:5"
    assert str(cute.composition(L((4, 1), (1, 7)), 8)) == "(4,2):(1,7)"
    assert [L((4, 1), (1, 7))(i) for i in range(8)] == [0, 1, 2, 3, 7, 8, 9, 10]
    for lhs, rhs in [(L(4, 1), L(4, 2)), (L(1, 5), L(4)), (L((4, 1), (1, 7)), L(8)), (L((2, 3), (3, 1)), L(3, 4))]:
        check_composition(lhs, rhs, cute.composition(lhs, rhs))
        check_composition(lhs, rhs, cute.composition(lhs, rhs, strict=True))


def test_composition_examples():
    assert str(cute.composition(L((6, 2), (8, 2)), L((4, 3), (3, 1)))) == "((2,2),3):((24,2),8)"
    assert str(cute.composition(L((4, 3), (3, 1)), L(12, 1))) == "(4,3):(3,1)"
    assert str(cute.composition(L(4, 2), 3)) == "3:2"
    assert str(cute.composition(L((4, 8), (8, 1)), L(4, 0))) == "4:0"
    assert str(cute.composition(L((4, 8), (8, 1)), L(1, 5))) == "1:0"


def test_composition_by_mode_with_a_tiler():
    layout = L((12, (4, 8)), (59, (13, 1)))
    result = cute.composition(layout, (L(3, 4), L(8, 2)))
    assert str(result) == "(3,(2,4)):(236,(26,1))"
    for i, j in itertools.product(range(3), range(8)):
        assert result(i, j) == layout(4 * i, 2 * j)
    # None keeps a mode; CuTe drops the layout's modes past the tiler
    assert cute.composition(layout, (None, 4))[0] == layout[0]
    assert str(cute.composition(L((4, 6, 2)), (2,))) == "(2):(1)"


def test_composition_not_admissible_raises():
    with pytest.raises(LayoutError, match=r"composition\(\(6,2\):\(1,10\), 2:4\): stride 4 does not divide"):
        cute.composition(L((6, 2), (1, 10)), L(2, 4))
    with pytest.raises(LayoutError, match=r"composition\(\(2,2\):\(1,10\), 3:1\): shape 3 does not divide"):
        cute.composition(L((2, 2), (1, 10)), L(3, 1))
    with pytest.raises(LayoutError, match="more modes than the layout"):
        cute.composition(L(4), (2, 2))


def test_composition_stays_within_a_mode_without_dividing():
    # 4 elements of a size-6 mode: admissible (CuTe's static check is stricter here)
    check_composition(L((6, 2), (1, 10)), L(4, 1), cute.composition(L((6, 2), (1, 10)), L(4, 1)))


# ---- inverses ------------------------------------------------------------------------------------
def check_right_inverse(layout):
    inverse = cute.right_inverse(layout)
    for i in range(inverse.size):
        assert layout(inverse(i)) == i, (layout, inverse, i)
    return inverse


def test_right_inverse_exhaustive():
    for layout in SMALL_FLAT:
        check_right_inverse(layout)


@settings(max_examples=300, deadline=None)
@given(layouts())
def test_right_inverse(layout):
    check_right_inverse(layout)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=4), st.data())
def test_right_inverse_of_a_bijection_is_its_inverse(shapes, data):
    order = data.draw(st.permutations(range(len(shapes))))
    strides = [0] * len(shapes)
    span = 1
    for i in order:
        strides[i] = span
        span *= shapes[i]
    layout = L(tuple(shapes), tuple(strides))
    inverse = check_right_inverse(layout)
    assert inverse.size == layout.size
    assert all(inverse(layout(i)) == i for i in range(layout.size))


def test_inverse_examples():
    assert str(cute.right_inverse(L((4, 2), (2, 1)))) == "(2,4):(4,1)"
    assert str(cute.right_inverse(L(4, 2))) == "1:0"
    assert str(cute.right_inverse(L((2, 4), (1, 4)))) == "2:1"
    assert str(cute.left_inverse(L((2, 4), (4, 1)))) == "(4,2):(2,1)"
    assert str(cute.left_inverse(L(4, 2))) == "(2,4):(0,1)" or all(
        cute.left_inverse(L(4, 2))(L(4, 2)(i)) == i for i in range(4))


@settings(max_examples=300, deadline=None)
@given(injective_layouts())
def test_left_inverse(layout):
    inverse = cute.left_inverse(layout)
    for i in range(layout.size):
        assert inverse(layout(i)) == i, (layout, inverse, i)


def test_left_inverse_exhaustive():
    for layout in flat_layouts([1, 2, 3, 4], [1, 2, 3, 4, 6, 8], max_rank=2):
        try:
            inverse = cute.left_inverse(layout, strict=True)
        except LayoutError as error:
            assert str(error).startswith("left_inverse(")
            continue
        assert all(inverse(layout(i)) == i for i in range(layout.size)), (layout, inverse)
        assert cute.left_inverse(layout) == inverse


def test_left_inverse_where_the_complement_leaves_holes():
    # CuTe's left inverse of (4,6):(1,6) inverts the first mode only: the complement is 1:0
    layout = L((4, 6), (1, 6))
    assert str(cute.left_inverse(layout)) == "4:1"
    assert all(cute.left_inverse(layout)(layout(i)) == i for i in range(4))
    with pytest.raises(LayoutError, match=r"left_inverse\(\(4,6\):\(1,6\)\): .*not a multiple of 4"):
        cute.left_inverse(layout, strict=True)


def test_left_inverse_of_a_non_injective_layout_raises():
    with pytest.raises(LayoutError, match=r"left_inverse\(\(2,2\):\(1,1\)\): .*not injective"):
        cute.left_inverse(L((2, 2), (1, 1)))


def test_negative_strides_are_refused_by_the_inverses():
    assert values(cute.coalesce(L((2, 2), (-1, -2)))) == [0, -1, -2, -3]
    with pytest.raises(LayoutError, match=r"right_inverse\(4:-1\): negative strides"):
        cute.right_inverse(L(4, -1))
    with pytest.raises(LayoutError, match=r"composition\(\(8,2\):\(1,16\), 4:-1\): negative stride -1 on the right"):
        cute.composition(L((8, 2), (1, 16)), L(4, -1))
