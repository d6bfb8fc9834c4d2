"""tilus_tvm.layout.cute.tiling: products, divides, local_tile and local_partition (seed 001)."""
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tilus_tvm.cute as cute
from tilus_tvm.errors import LayoutError
from tilus_tvm.layout.cute import int_tuple as it

L = cute.Layout
TILE = L((2, 2), (1, 2))
MATRIX_OF_TILES = L((3, 4), (4, 1))


def values(layout):
    return [layout(i) for i in range(layout.size)]


def coords(shape):
    """Every h-D coordinate of ``shape``, colexicographically."""
    return [it.idx2crd(i, shape) for i in range(it.product(shape))]


@st.composite
def compact_layouts(draw, max_rank=3, max_shape=4, spaced=False):
    """Compact layouts (a permutation of a column-major layout), or with ``spaced`` the same
    scaled by 1 or 2 (every other element)."""
    rank = draw(st.integers(1, max_rank))
    shapes = draw(st.lists(st.integers(1, max_shape), min_size=rank, max_size=rank))
    order = draw(st.permutations(range(rank)))
    strides = [0] * rank
    span = draw(st.sampled_from([1, 2])) if spaced else 1
    for i in order:
        strides[i] = span
        span *= shapes[i]
    return L(tuple(shapes), tuple(strides)) if rank > 1 else L(shapes[0], strides[0])


# ---- seed 001 ------------------------------------------------------------------------------------
def test_seed_products():
    assert str(cute.logical_product(TILE, MATRIX_OF_TILES)) == "((2,2),(3,4)):((1,2),(16,4))"
    assert str(cute.blocked_product(TILE, MATRIX_OF_TILES)) == "((2,3),(2,4)):((1,16),(2,4))"
    assert str(cute.raked_product(TILE, MATRIX_OF_TILES)) == "((3,2),(4,2)):((16,1),(4,2))"


def test_seed_divides():
    raked = cute.raked_product(TILE, MATRIX_OF_TILES)
    subtile = (L(2, 3), L(2, 4))
    assert str(cute.logical_divide(raked, subtile)) == "((2,3),(2,4)):((1,16),(2,4))"
    assert str(cute.zipped_divide(raked, subtile)) == "((2,2),(3,4)):((1,2),(16,4))"
    assert str(cute.tiled_divide(raked, subtile)) == "((2,2),3,4):((1,2),16,4)"
    assert str(cute.flat_divide(raked, subtile)) == "(2,2,3,4):(1,2,16,4)"


def test_cpp_coalesced_products():
    # CuTe's C++ coalesces each mode of blocked/raked products; the same functions
    blocked = cute.blocked_product(TILE, MATRIX_OF_TILES, coalesce_result=True)
    assert str(blocked) == "((2,3),8):((1,16),2)"
    assert values(blocked) == values(cute.blocked_product(TILE, MATRIX_OF_TILES))
    raked = cute.raked_product(TILE, MATRIX_OF_TILES, coalesce_result=True)
    assert raked == cute.raked_product(TILE, MATRIX_OF_TILES)


def test_tiled_and_flat_products():
    assert str(cute.zipped_product(TILE, MATRIX_OF_TILES)) == "((2,2),(3,4)):((1,2),(16,4))"
    assert str(cute.tiled_product(TILE, MATRIX_OF_TILES)) == "((2,2),3,4):((1,2),16,4)"
    assert str(cute.flat_product(TILE, MATRIX_OF_TILES)) == "(2,2,3,4):(1,2,16,4)"


# ---- products against their definitions ------------------------------------------------------
@settings(max_examples=200, deadline=None)
@given(compact_layouts(), compact_layouts(spaced=True))
def test_logical_product_definition(block, tiler):
    result = cute.logical_product(block, tiler)
    rest = cute.complement(block, block.size * tiler.cosize)
    assert result[0] == block
    assert result[1] == cute.composition(rest, tiler)
    for a, b in itertools.product(range(block.size), range(tiler.size)):
        assert result(a, b) == block(a) + rest(tiler(b))
    # copies of an injective block over an injective tiler do not overlap
    assert len(set(values(result))) == result.size


@settings(max_examples=150, deadline=None)
@given(compact_layouts(max_rank=2), compact_layouts(max_rank=2, spaced=True))
def test_blocked_and_raked_products_regroup_the_logical_product(block, tiler):
    rank = max(block.rank, tiler.rank)
    logical = cute.logical_product(cute.append(block, rank), cute.append(tiler, rank))
    blocked = cute.blocked_product(block, tiler)
    raked = cute.raked_product(block, tiler)
    assert blocked.rank == raked.rank == rank
    for b_crd in coords(logical[0].shape):
        for t_crd in coords(logical[1].shape):
            b_modes = b_crd if rank > 1 else (b_crd,)
            t_modes = t_crd if rank > 1 else (t_crd,)
            value = logical(b_crd, t_crd)
            blocked_crd = tuple((b, t) for b, t in zip(b_modes, t_modes))
            raked_crd = tuple((t, b) for b, t in zip(b_modes, t_modes))
            assert blocked(blocked_crd if rank > 1 else blocked_crd) == value
            assert raked(raked_crd) == value
    coalesced = cute.blocked_product(block, tiler, coalesce_result=True)
    assert values(coalesced) == values(blocked)


def test_blocked_product_is_a_block_matrix():
    # 2x2 blocks laid out by a 3x4 row-major matrix of tiles: row r, col c of the result is
    # element (r % 2, c % 2) of block (r // 2, c // 2)
    result = cute.blocked_product(TILE, MATRIX_OF_TILES)
    for r, c in itertools.product(range(6), range(8)):
        block_index = MATRIX_OF_TILES(r // 2, c // 2)
        assert result(r, c) == TILE(r % 2, c % 2) + TILE.size * block_index


def test_product_by_mode_with_a_tuple_tiler():
    result = cute.logical_product(L((2, 5), (5, 1)), (L(3), L(4)))
    assert result[0] == cute.logical_product(L(2, 5), L(3))
    assert result[1] == cute.logical_product(L(5, 1), L(4))
    assert cute.logical_product(TILE, None) == TILE


# ---- divides against their definitions --------------------------------------------------------
@settings(max_examples=200, deadline=None)
@given(compact_layouts(spaced=True), st.integers(1, 6), st.integers(1, 4))
def test_logical_divide_definition(layout, tile_size, stride):
    tiler = L(tile_size, stride)
    try:
        result = cute.logical_divide(layout, tiler, strict=True)
    except LayoutError as error:
        assert str(error).startswith("logical_divide(")
        return
    whole = cute.make_layout(tiler, cute.complement(tiler, layout.shape))
    assert result.rank == 2 and result[0].size == tile_size and result.size == whole.size
    for t, r in itertools.product(range(result[0].size), range(result[1].size)):
        assert result(t, r) == layout(whole(t, r))  # past its size the layout extends, as in CuTe
    assert cute.logical_divide(layout, tiler) == result


@settings(max_examples=200, deadline=None)
@given(compact_layouts(max_rank=2, spaced=True), compact_layouts(max_rank=2, spaced=True))
def test_logical_divide_is_composition_with_the_completed_tiler(layout, tiler):
    # CuTe's definition, whatever the tiler: layout o (tiler, complement(tiler, shape(layout)))
    try:
        result = cute.logical_divide(layout, tiler)
    except LayoutError as error:
        assert str(error).startswith("logical_divide(")
        return
    rest = cute.complement(tiler, layout.shape)
    assert result == cute.composition(layout, cute.make_layout(tiler, rest))
    assert result[0] == cute.composition(layout, tiler)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 48), st.data())
def test_logical_divide_by_a_dividing_tiler_permutes_the_layout(size, data):
    tile_size = data.draw(st.sampled_from([d for d in range(1, size + 1) if size % d == 0]))
    rest = size // tile_size
    stride = data.draw(st.sampled_from([d for d in range(1, rest + 1) if rest % d == 0]))
    result = cute.logical_divide(L(size), L(tile_size, stride))
    assert sorted(values(result)) == list(range(size))
    assert result[0].size == tile_size and result[1].size == rest
    assert [result(t, 0) for t in range(tile_size)] == [stride * t for t in range(tile_size)]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(1, 3), min_size=2, max_size=2), st.lists(st.integers(1, 3), min_size=2, max_size=2),
       st.permutations(range(2)))
def test_zipped_tiled_flat_divide_regroup_logical_divide(tile_shape, counts, order):
    shape = tuple(t * n for t, n in zip(tile_shape, counts))
    strides = [1, 1]
    strides[order[1]] = shape[order[0]]
    layout = L(shape, tuple(strides))
    tiler = tuple(tile_shape)
    logical = cute.logical_divide(layout, tiler)
    zipped = cute.zipped_divide(layout, tiler)
    assert str(zipped.shape) == str(((tile_shape[0], tile_shape[1]), (counts[0], counts[1])))
    for t0, t1, r0, r1 in itertools.product(range(tile_shape[0]), range(tile_shape[1]),
                                            range(counts[0]), range(counts[1])):
        assert zipped((t0, t1), (r0, r1)) == logical((t0, r0), (t1, r1)) == layout(t0 + tile_shape[0] * r0,
                                                                                   t1 + tile_shape[1] * r1)
    assert values(cute.tiled_divide(layout, tiler)) == values(zipped)
    assert values(cute.flat_divide(layout, tiler)) == values(zipped)
    assert cute.tiled_divide(layout, tiler).rank == 3 and cute.flat_divide(layout, tiler).rank == 4


def test_logical_divide_example():
    assert str(cute.logical_divide(L(16, 1), L(4, 2))) == "(4,(2,2)):(2,(1,8))"
    assert str(cute.logical_divide(L((4, 2, 3), (2, 1, 8)), L(4, 2))) == "((2,2),(2,3)):((4,1),(2,8))"
    assert str(cute.zipped_divide(L((8, 6)), (2, 3))) == "((2,3),(4,2)):((1,8),(2,24))"
    assert cute.logical_divide(L((8, 6)), (None, 3)) == cute.make_layout(L(8), cute.logical_divide(L(6, 8), 3))


def test_divide_not_admissible_raises():
    # CuTe refuses these too (static_assert in C++): in both modes
    with pytest.raises(LayoutError, match=r"logical_divide\(\(6,2\):\(1,10\), 4:1\): composition.*does not divide"):
        cute.logical_divide(L((6, 2), (1, 10)), L(4, 1))
    with pytest.raises(LayoutError, match=r"logical_divide\(\(6,2\):\(1,10\), 4:1\): composition.*does not divide"):
        cute.logical_divide(L((6, 2), (1, 10)), L(4, 1), strict=True)
    with pytest.raises(LayoutError, match=r"logical_divide\(8:1, \(2,2\):\(1,1\)\): .*not injective"):
        cute.logical_divide(L(8, 1), L((2, 2), (1, 1)))
    with pytest.raises(LayoutError, match=r"logical_divide\(8:1, <2,2>\): the tiler has 2 modes, the layout only 1"):
        cute.logical_divide(L(8, 1), (2, 2))
    with pytest.raises(LayoutError, match="logical_product"):
        cute.logical_product(L((2, 2), (1, 1)), L(3))


def test_strict_reaches_the_complement_and_composition_inside():
    # the tiler (2,2):(1,3) has a stride that is not a multiple of the span below it: CuTe rounds
    # its complement down; strictly, every product and divide built on it refuses
    gappy = L((2, 2), (1, 3))
    assert str(cute.logical_divide(L(24), gappy)) == "((2,2),4):((1,3),6)"
    assert str(cute.zipped_divide(L(24), gappy)) == "((2,2),4):((1,3),6)"
    assert str(cute.logical_product(gappy, L(2))) == "((2,2),2):((1,3),6)"
    assert str(cute.blocked_product(gappy, L(2))) == "((2,2),(2,1)):((1,6),(3,0))"
    for divide in (cute.logical_divide, cute.zipped_divide, cute.tiled_divide, cute.flat_divide):
        with pytest.raises(LayoutError, match=r"complement\(\(2,2\):\(1,3\), 24\): stride 3 .* not a multiple of 2"):
            divide(L(24), gappy, strict=True)
    for product in (cute.logical_product, cute.zipped_product, cute.tiled_product, cute.flat_product,
                    cute.blocked_product, cute.raked_product):
        with pytest.raises(LayoutError, match=r"not a multiple of 2"):
            product(gappy, L(2), strict=True)
    with pytest.raises(LayoutError, match=r"logical_divide.*not a multiple of 2"):
        cute.local_tile(L(24), gappy, 0, strict=True)
    # a divide whose rest mode carries past a mode of the layout: refused strictly only
    layout, tiler = L((6, 4), (1, 10)), L((2, 4), (3, 1))
    assert str(cute.composition(layout, tiler)) == "(2,4):(3,1)"
    with pytest.raises(LayoutError, match="overlap"):
        cute.composition(layout, tiler, strict=True)
    assert cute.logical_divide(L((6, 4), (1, 10)), (L(2, 3), None), strict=True) == \
        cute.logical_divide(L((6, 4), (1, 10)), (L(2, 3), None))


# ---- partitions --------------------------------------------------------------------------------
@pytest.mark.parametrize("thread_layout", [L((2, 4)), L((2, 4), (4, 1)), L((4, 2), (2, 1)), L(8)])
def test_local_partition_covers_every_element_once(thread_layout):
    data = L((8, 16), (16, 1))  # a row-major 8x16 tensor
    if thread_layout.rank == 1:
        data = L(128)
    owned = []
    for thread in range(thread_layout.size):
        part, offset = cute.local_partition(data, thread_layout, thread)
        assert part.size == data.size // thread_layout.size
        owned += [offset + part(i) for i in range(part.size)]
    assert sorted(owned) == list(range(128))


def test_local_partition_gives_each_thread_its_coordinate():
    data = L((8, 16), (16, 1))
    threads = L((2, 4), (4, 1))     # thread t sits at (t // 4, t % 4)
    part, offset = cute.local_partition(data, threads, 6)
    assert offset == data(1, 2)
    assert str(part) == "(4,4):(32,4)"
    assert part(3, 1) + offset == data(1 + 2 * 3, 2 + 4 * 1)


def test_local_tile_tiles_the_layout():
    data = L((8, 12), (12, 1))
    seen = []
    for m, n in itertools.product(range(4), range(3)):
        tile, offset = cute.local_tile(data, (2, 4), (m, n))
        assert tile.shape == (2, 4)
        assert offset == data(2 * m, 4 * n)
        for i, j in itertools.product(range(2), range(4)):
            assert offset + tile(i, j) == data(2 * m + i, 4 * n + j)
            seen.append(offset + tile(i, j))
    assert sorted(seen) == list(range(96))
    tile, offset = cute.local_tile(data, (2, 4), (3, None))
    assert tile.shape == (2, 4, 3) and offset == data(6, 0)


def test_partition_errors():
    with pytest.raises(LayoutError, match=r"local_partition\(.*\): thread index 8 is out of range \[0, 8\)"):
        cute.local_partition(L((8, 16)), L((2, 4)), 8)
    with pytest.raises(LayoutError, match="local_tile"):
        cute.local_tile(L((8, 12)), (2, 4), (4, 0))
