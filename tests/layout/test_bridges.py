"""tilus_tvm.layout.bridges: register layouts <-> CuTe TV layouts, shared layouts <-> CuTe layouts."""
import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tilus_tvm.cute as cute
from tilus_tvm.errors import LayoutError
from tilus_tvm.layout.atoms import get_mma_atom
from tilus_tvm.layout.bridges import cute_to_shared, register_to_tv, shared_to_cute, tv_to_register
from tilus_tvm.layout.register import RegisterLayout, local, spatial
from tilus_tvm.layout.register_ops import permute
from tilus_tvm.layout.shared import shared_padded, shared_row_major, shared_strides, swizzled
from tilus_tvm.layout.thunderkittens import base_tile, rt, rv

L = cute.Layout

# CuTe's MMA atom layouts for SM80_16x8x16 (f16 inputs): (thread, value) -> colexicographic index
# of the (M, K), (N, K) and (M, N) tiles.
CUTE_SM80_16x8x16_A = L(((4, 8), (2, 2, 2)), ((32, 1), (16, 8, 128)))
CUTE_SM80_16x8x16_B = L(((4, 8), (2, 2)), ((16, 1), (8, 64)))
CUTE_SM80_16x8_C = L(((4, 8), (2, 2)), ((32, 1), (16, 8)))


def colex(index, shape):
    """Colexicographic index of a tile coordinate: CuTe's TV codomain convention."""
    return cute.crd2idx(tuple(index), tuple(shape))


@st.composite
def register_layouts(draw):
    """Any register layout of rank 1..3: each dimension split into modes, modes dealt to the
    spatial and local lists in any order, replications mixed into the spatial list."""
    rank = draw(st.integers(1, 3))
    mode_shape, shape = [], []
    for _ in range(rank):
        modes = draw(st.lists(st.integers(1, 4), min_size=1, max_size=3))
        mode_shape += modes
        shape.append(1)
        for m in modes:
            shape[-1] *= m
    order = draw(st.permutations(range(len(mode_shape))))
    cut = draw(st.integers(0, len(order)))
    spatial_modes, local_modes = list(order[:cut]), list(order[cut:])
    for _ in range(draw(st.integers(0, 2))):
        spatial_modes.insert(draw(st.integers(0, len(spatial_modes))), -draw(st.integers(2, 3)))
    return RegisterLayout(shape, mode_shape, spatial_modes, local_modes)


# ---- register <-> TV ------------------------------------------------------------------------------
def test_mma_operands_are_cutes_atom_layouts():
    atom = get_mma_atom("float16", "float16", "float32")
    assert register_to_tv(atom.a_layout) == CUTE_SM80_16x8x16_A
    assert register_to_tv(atom.c_layout) == CUTE_SM80_16x8_C
    assert tv_to_register(CUTE_SM80_16x8x16_A, (16, 16)) == atom.a_layout
    assert tv_to_register(CUTE_SM80_16x8_C, (16, 8)) == atom.c_layout
    # CuTe keeps B as (N, K); ours is (K, N)
    assert tv_to_register(CUTE_SM80_16x8x16_B, (8, 16)) == permute(atom.b_layout, [1, 0])


def test_thunderkittens_tiles_as_tv_layouts():
    assert register_to_tv(base_tile("row")) == CUTE_SM80_16x8x16_A
    assert str(register_to_tv(base_tile("col"))) == "((4,8),(2,2,2)):((2,16),(1,128,8))"
    assert tv_to_register(register_to_tv(rt(2, 3)), (32, 48)) == rt(2, 3)
    assert str(register_to_tv(rv(2, 1))) == "((4,8),4):((0,1),8)"


@settings(max_examples=150, deadline=None)
@given(register_layouts())
def test_register_layout_round_trip(layout):
    tv = register_to_tv(layout)
    assert tv.rank == 2
    assert cute.size(tv[0]) == layout.num_threads and cute.size(tv[1]) == layout.local_size
    for thread, value in itertools.product(range(layout.num_threads), range(layout.local_size)):
        assert tv(thread, value) == colex(layout.logical(thread, value), layout.shape)
    assert tv_to_register(tv, layout.shape) == layout


@st.composite
def tv_layouts(draw):
    """A mixed-radix split of [0, N) dealt into a thread and a value mode, plus replications,
    and a tile shape whose dimensions each split the leaves evenly."""
    sizes = draw(st.lists(st.integers(2, 4), min_size=1, max_size=5))
    strides, span = [], 1
    for s in sizes:
        strides.append(span)
        span *= s
    leaves = list(zip(sizes, strides))
    cut = draw(st.integers(0, len(leaves)))
    order = draw(st.permutations(range(len(leaves))))
    threads = [leaves[i] for i in order[:cut]] + [(draw(st.integers(2, 3)), 0)] * draw(st.integers(0, 1))
    values = [leaves[i] for i in order[cut:]]
    threads = draw(st.permutations(threads))
    # tile dimensions at leaf boundaries
    cuts = sorted(draw(st.sets(st.integers(1, len(sizes) - 1), max_size=2))) if len(sizes) > 1 else []
    bounds = [0] + cuts + [len(sizes)]
    tile = tuple(math.prod(sizes[a:b]) for a, b in zip(bounds, bounds[1:]))

    def mode(items):
        if not items:
            return 1, 0
        if len(items) == 1:
            return items[0]
        return tuple(s for s, _ in items), tuple(d for _, d in items)

    (ts, td), (vs, vd) = mode(threads), mode(values)
    return L((ts, vs), (td, vd)), tile


@settings(max_examples=150, deadline=None)
@given(tv_layouts())
def test_tv_layout_to_register_layout(case):
    tv, tile = case
    layout = tv_to_register(tv, tile)
    assert layout.shape == tile
    assert layout.num_threads == cute.size(tv[0]) and layout.local_size == cute.size(tv[1])
    for thread, value in itertools.product(range(cute.size(tv[0])), range(cute.size(tv[1]))):
        index = cute.idx2crd(tv(thread, value), tile)
        index = index if isinstance(index, tuple) else (index,)
        assert (thread, value) in layout.holders(*index)
    # and back: the same function (the leaves may be split or merged differently)
    back = register_to_tv(layout)
    assert all(back(t, v) == tv(t, v) for t, v in itertools.product(range(cute.size(tv[0])), range(cute.size(tv[1]))))


def test_tv_leaf_split_at_a_tile_boundary():
    # thread leaf 8:1 spans rows 0..3 of a (4, 2) tile and both columns: it splits into 4 x 2
    layout = tv_to_register(L((8, 1), (1, 0)), (4, 2))
    assert layout == RegisterLayout([4, 2], [4, 2], [1, 0], [])
    assert layout == spatial(4, 2, ranks=[1, 0])


@pytest.mark.parametrize("tv, tile, message", [
    (L(((4, 8), (2, 2)), ((1, 4), (64, 128))), (16, 16), r"mode 2:64 leaves a gap \(indices 32..63"),
    (L((4, 4), (1, 2)), (4, 2), r"mode 4:2 overlaps the smaller ones"),
    (L((4, (2, 2)), (1, (4, 0))), (4, 2), "a value mode has stride 0"),
    (L((4, 4), (1, 4)), (4, 8), r"cover \[0, 16\) but the tile has 32 elements"),
    (L(((2, 3), 4), ((1, 2), 6)), (4, 6), r"mode 3:2 crosses a tile dimension boundary \(at index 4\)"),
    (L((4, 2), (1, -4)), (4, 2), "negative stride"),
])
def test_tv_layouts_that_are_not_register_layouts(tv, tile, message):
    with pytest.raises(LayoutError, match=r"tv_to_register\(.*\): .*" + message):
        tv_to_register(tv, tile)


def test_tv_to_register_argument_errors():
    with pytest.raises(LayoutError, match="rank-2"):
        tv_to_register(L(8), (8,))
    with pytest.raises(LayoutError, match="tile_shape must hold positive ints"):
        tv_to_register(L((4, 2)), (8, 0))
    with pytest.raises(LayoutError, match="expected a RegisterLayout"):
        register_to_tv(L(4))


def test_all_local_and_all_spatial():
    assert str(register_to_tv(local(2, 3))) == "(1,(3,2)):(0,(2,1))"
    assert str(register_to_tv(spatial(2, 3))) == "((3,2),1):((2,1),0)"
    assert tv_to_register(L((1, (3, 2)), (0, (2, 1))), (2, 3)) == local(2, 3)


# ---- shared <-> CuTe -------------------------------------------------------------------------------
SHARED = [
    shared_row_major(8, 64),
    shared_row_major(8, 64).swizzled(cute.Swizzle(3, 3, 3)),
    shared_padded((8, 64), 8),
    shared_strides((16, 8), (1, 16)),
    swizzled(shared_strides((32, 32), (1, 32)), cute.Swizzle(2, 2, 3)),
    shared_row_major(128),
    shared_strides((1, 8), (8, 1)),
]


@pytest.mark.parametrize("layout", SHARED, ids=str)
def test_shared_layout_round_trip(layout):
    as_cute = shared_to_cute(layout)
    for index in itertools.product(*(range(s) for s in layout.shape)):
        assert as_cute(*index) == layout.offset(*index)
    assert cute_to_shared(as_cute) == layout


def test_shared_as_swizzle_composed_with_a_layout():
    layout = shared_row_major(8, 64).swizzled(cute.Swizzle(3, 3, 3))
    as_cute = shared_to_cute(layout)
    assert isinstance(as_cute, cute.ComposedLayout)
    assert str(as_cute) == "Sw<3,3,3> o 0 o (8,64):(64,1)"
    assert as_cute == cute.composition(cute.Swizzle(3, 3, 3), L((8, 64), (64, 1)))
    assert str(shared_to_cute(shared_row_major(4, 8))) == "(4,8):(8,1)"


def test_cute_layouts_with_coalescable_modes_become_shared_layouts():
    assert cute_to_shared(L(((2, 4), 8), ((1, 2), 8))) == shared_strides((8, 8), (1, 8))
    tiled = cute.zipped_divide(L((8, 64), (64, 1)), (8, 64))[0]  # one whole tile: ((8,64)):((64,1))
    assert cute_to_shared(cute.flatten(tiled)) == shared_row_major(8, 64)


@pytest.mark.parametrize("layout, message", [
    (L(((2, 4), 8), ((1, 4), 8)), r"mode 0 \(\(2,4\):\(1,4\)\) does not coalesce to a single stride"),
    (cute.make_composed_layout(cute.Swizzle(3, 3, 3), 8, L((8, 64), (64, 1))), "has no offset"),
    (cute.make_composed_layout(L(4), 0, L(4)), "only a Swizzle"),
    (cute.make_composed_layout(cute.Swizzle(3, 3, 3), 0, L((2, 4), (4, 1))), "swizzle Sw<3,3,3> does not fit"),
    (L(4, -1), "strides must be non-negative"),
])
def test_cute_layouts_that_are_not_shared_layouts(layout, message):
    with pytest.raises(LayoutError, match=r"cute_to_shared\(.*\): .*" + message):
        cute_to_shared(layout)
