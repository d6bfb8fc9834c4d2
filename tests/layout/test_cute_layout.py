"""tilus_tvm.layout.cute.int_tuple and .layout: int-tuples, Layout, coordinates, slicing (seed 001)."""
import itertools

import pytest

import tilus_tvm.cute as cute
from tilus_tvm.errors import LayoutError
from tilus_tvm.layout.cute import int_tuple as it
from tilus_tvm.layout.cute.layout import make_layout, slice_and_offset


# ---- int-tuples -----------------------------------------------------------------------------------
def test_int_tuple_helpers():
    assert cute.product((2, (3, 4))) == 24
    assert cute.product(()) == 1
    assert cute.product(5) == 5
    assert cute.product_each((2, (3, 4))) == (2, 12)
    assert cute.inner_product((1, (2, 3)), (4, (5, 6))) == 4 + 10 + 18
    assert cute.prefix_product((2, (3, 4))) == (1, (2, 6))
    assert cute.prefix_product(7) == 1
    assert cute.flatten((2, (3, (4,)), ())) == (2, 3, 4)
    assert cute.flatten(5) == (5,)
    assert it.unflatten((1, 2, 3), (0, (0, 0))) == (1, (2, 3))
    assert it.rank((2, (3, 4))) == 2 and it.rank(3) == 1
    assert it.depth((2, (3, 4))) == 2 and it.depth(3) == 0 and it.depth((2, 3)) == 1
    assert cute.congruent((1, (2, 3)), (4, (5, 6))) and not cute.congruent((1, 2), (1, (2, 3)))


def test_shape_div_and_ceil_div():
    assert cute.shape_div(12, 4) == 3
    assert cute.shape_div(2, 8) == 1          # rounds away from zero
    assert cute.shape_div((4, 5, 6), 40) == (1, 1, 3)
    assert cute.shape_div((6, 4), (3, 2)) == (2, 2)
    assert cute.shape_div(24, (2, 3)) == 4
    with pytest.raises(LayoutError, match="shape_div"):
        cute.shape_div(6, 4)
    assert cute.ceil_div(7, 2) == 4
    assert cute.ceil_div((3, 5), 2) == (2, 5)
    assert cute.ceil_div((3, 5), (2,)) == (2, 5)
    assert cute.ceil_div((4, 6), 8) == (1, 3)


@pytest.mark.parametrize("shape", [4, (2, 3), (2, (3, 2)), ((2, 2), (3, (1, 2)))])
def test_idx2crd_crd2idx_round_trip(shape):
    for i in range(cute.product(shape)):
        crd = cute.idx2crd(i, shape)
        assert cute.congruent(crd, shape)
        assert cute.crd2idx(crd, shape) == i
        assert cute.crd2idx(i, shape) == i


def test_idx2crd_is_colexicographic():
    assert cute.idx2crd(5, (2, (3, 4))) == (1, (2, 0))
    assert cute.idx2crd(7, (2, (3, 4))) == (1, (0, 1))
    assert cute.idx2crd((1, 5), (2, (3, 4))) == (1, (2, 1))


# ---- Layout basics (seed 001 "Fundamentals") --------------------------------------------------------
LAYOUT_2X4 = cute.Layout((2, (2, 2)), (4, (1, 2)))


def test_seed_fundamentals():
    assert str(LAYOUT_2X4) == "(2,(2,2)):(4,(1,2))"
    assert LAYOUT_2X4.shape == (2, (2, 2))
    assert LAYOUT_2X4.stride == (4, (1, 2))
    assert LAYOUT_2X4.size == cute.size(LAYOUT_2X4) == 8
    assert LAYOUT_2X4.rank == cute.rank(LAYOUT_2X4) == 2
    assert LAYOUT_2X4.depth == cute.depth(LAYOUT_2X4) == 2
    assert LAYOUT_2X4.cosize == cute.cosize(LAYOUT_2X4) == 8


def test_seed_stride_vector():
    # StrideVector(collect(1:8), Layout(4, 2)) reads a[1..4] = 1, 3, 5, 7; 0-indexed: data[L(i)]
    data = list(range(8))
    layout = cute.Layout(4, 2)
    assert str(layout) == "4:2"
    assert [data[layout(i)] for i in range(4)] == [0, 2, 4, 6]


def test_seed_coordinate_spaces():
    # seed: layout_2x4(2, (1, 2)) == layout_2x4(2, 3) == layout_2x4(6) == 7 (1-indexed)
    assert LAYOUT_2X4((1, (0, 1))) == 6
    assert LAYOUT_2X4(1, (0, 1)) == 6
    assert LAYOUT_2X4(1, 2) == 6
    assert LAYOUT_2X4(5) == 6
    assert LAYOUT_2X4([1, [0, 1]]) == 6


def test_layout_is_row_major_2x4_matrix():
    # "this can be viewed as a row-major matrix"
    assert [[LAYOUT_2X4(r, c) for c in range(4)] for r in range(2)] == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_three_coordinate_spaces_agree_everywhere():
    layout = cute.Layout(((2, 3), (2, 2)), ((1, 12), (2, 4)))
    for i in range(layout.size):
        hier = cute.idx2crd(i, layout.shape)
        r_d = tuple(cute.crd2idx(h, s) for h, s in zip(hier, layout.shape))
        assert layout(i) == layout(*r_d) == layout(hier) == cute.inner_product(hier, layout.stride)


def test_seed_concatenation_and_iteration():
    assert str(LAYOUT_2X4[1]) == "(2,2):(1,2)"
    assert [str(sub) for sub in LAYOUT_2X4] == ["2:4", "(2,2):(1,2)"]
    assert make_layout(*LAYOUT_2X4) == LAYOUT_2X4
    assert str(cute.make_layout(*LAYOUT_2X4)) == "(2,(2,2)):(4,(1,2))"
    assert len(LAYOUT_2X4) == 2
    assert LAYOUT_2X4[-1] == LAYOUT_2X4[1]


def test_default_stride_is_colexicographic():
    assert str(cute.Layout((2, (3, 4)))) == "(2,(3,4)):(1,(2,6))"
    assert str(cute.make_layout((4, 8))) == "(4,8):(1,4)"
    assert str(cute.make_layout((4, 8), stride=(8, 1))) == "(4,8):(8,1)"
    assert str(cute.make_layout(6, 2)) == "6:2"
    assert str(cute.make_layout((16,))) == "(16):(1)"
    assert str(cute.make_layout(cute.Layout(4, 2))) == "(4):(2)"


def test_rank1_and_empty_layouts():
    layout = cute.Layout(8, 3)
    assert layout.rank == 1 and layout.depth == 0 and layout[0] == layout and list(layout) == [layout]
    assert layout.cosize == 22
    assert cute.Layout(()).size == 1
    assert cute.Layout(4, 0).cosize == 1
    assert cute.Layout(3, -2).cosize == 5


def test_size_of_modes():
    assert cute.size(LAYOUT_2X4, mode=1) == 4
    assert cute.size(LAYOUT_2X4, mode=[1, 0]) == 2
    assert cute.rank((2, (3, 4)), mode=1) == 2
    assert cute.size((2, (3, 4))) == 24


def test_layout_equality_and_hash():
    assert cute.Layout((2, 3)) == cute.Layout([2, 3], [1, 2])
    assert hash(cute.Layout((2, 3))) == hash(cute.Layout((2, 3), (1, 2)))
    assert cute.Layout((2, 3)) != cute.Layout((2, 3), (3, 1))
    assert repr(cute.Layout((2, 3))) == "Layout((2, 3), (1, 2))"


# ---- slicing -------------------------------------------------------------------------------------
def test_slicing_keeps_none_modes():
    layout = cute.Layout((4, 8), (8, 1))
    assert str(layout(None, 2)) == "(4):(8)"
    sub, offset = slice_and_offset(layout, (None, 2))
    assert offset == 2 and all(layout(i, 2) == offset + sub(i) for i in range(4))
    nested = cute.Layout((2, (3, 4)), (1, (2, 6)))
    assert str(nested(None, (None, None))) == "(2,3,4):(1,2,6)"
    assert str(nested(None, (1, None))) == "(2,4):(1,6)"
    assert slice_and_offset(nested, (1, (None, 3)))[1] == 1 + 18
    assert cute.slice_(nested, None) == nested


# ---- errors --------------------------------------------------------------------------------------
def test_shape_and_stride_must_be_congruent():
    with pytest.raises(LayoutError, match=r"Layout: shape \(2,3\) and stride \(1,\(2,3\)\) are not congruent"):
        cute.Layout((2, 3), (1, (2, 3)))
    with pytest.raises(LayoutError, match="not congruent"):
        cute.Layout(4, (1, 2))


@pytest.mark.parametrize("bad", [(2, 0), "4", (2, 2.0), True, (1, -3)])
def test_bad_shapes(bad):
    with pytest.raises(LayoutError, match="Layout"):
        cute.Layout(bad)


@pytest.mark.parametrize("coord", [8, -1, (2, 0), (0, 4), (0, (2, 0)), (0, (0, 0), 0), (0, 1, 2), "a", 1.5])
def test_coordinates_out_of_range_or_malformed(coord):
    with pytest.raises(LayoutError, match=r"\(2,\(2,2\)\):\(4,\(1,2\)\).*coordinate"):
        LAYOUT_2X4(coord, strict=True)


def test_out_of_range_message_names_shape():
    with pytest.raises(LayoutError, match=r"coordinate \(2, 0\) is out of range for shape 2 \(2 is not in \[0, 2\)\)"):
        LAYOUT_2X4(2, 0, strict=True)


@pytest.mark.parametrize("coord, value", [(8, 4), (9, 8), (13, 10), ((2, 0), 8), ((0, 4), 4), ((0, (2, 0)), 2),
                                          ((1, (1, 3)), 11), (100, 50)])
def test_coordinates_past_the_size_extend_the_last_mode(coord, value):
    # as in CuTe (and pycute): an index past a mode's size goes to that mode's last sub-mode
    assert LAYOUT_2X4(coord) == value == it.crd2idx(coord, LAYOUT_2X4.shape, LAYOUT_2X4.stride)


@pytest.mark.parametrize("coord", [-1, (0, -1), (0, (0, 0), 0), (0, 1, 2), "a", 1.5])
def test_negative_or_malformed_coordinates_are_refused_by_default(coord):
    with pytest.raises(LayoutError, match=r"\(2,\(2,2\)\):\(4,\(1,2\)\).*coordinate"):
        LAYOUT_2X4(coord)
    with pytest.raises(LayoutError, match=r"coordinate \(0, -1\) is out of range for shape \(2,2\) \(-1 is negative\)"):
        LAYOUT_2X4(0, -1)


def test_mode_index_errors():
    with pytest.raises(LayoutError, match="mode 2 does not exist"):
        LAYOUT_2X4[2]
    with pytest.raises(LayoutError, match="make_layout"):
        cute.make_layout(cute.Layout(2), 3)


def test_every_coordinate_of_small_layouts_is_accepted():
    for shape in [(2, 3), ((2, 2), 3), (1, (2, 1))]:
        layout = cute.Layout(shape)
        for coord in itertools.product(*(range(cute.product(s)) for s in shape)):
            assert layout(*coord) == cute.crd2idx(coord, shape)


def test_shape_and_stride_functions():
    assert cute.shape(LAYOUT_2X4) == (2, (2, 2)) and cute.stride(LAYOUT_2X4) == (4, (1, 2))
    assert cute.shape(LAYOUT_2X4, mode=1) == (2, 2) and cute.stride(LAYOUT_2X4, mode=[1, 1]) == 2
