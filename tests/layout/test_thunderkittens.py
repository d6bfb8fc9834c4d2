"""tilus_tvm.layout.thunderkittens: TK register tiles and vectors (seed 002) as RegisterLayouts."""
import itertools

import pytest

from tilus_tvm.errors import LayoutError
from tilus_tvm.layout.atoms import get_mma_atom
from tilus_tvm.layout.register import RegisterLayout
from tilus_tvm.layout.register_ops import permute, reduce
from tilus_tvm.layout.thunderkittens import base_tile, rt, rt_col_vec, rt_row_vec, rv


def tk_load_row(height, width):
    """Seed 002's ``load`` for a row-layout ``rt``, run on the CPU for every lane of one warp:
    ``{(row, col): (lane, register)}`` with register ``8 * tile + 2 * k + e`` for ``data[k]``
    (tile ``(i, j)`` is number ``i * width + j``) and ``e`` the half of the packed pair."""
    held = {}
    tile_size = 16
    for warp_laneid in range(32):
        for i in range(height):
            row = i * tile_size + (warp_laneid // 4)
            for j in range(width):
                col = j * tile_size + 2 * (warp_laneid % 4)
                base = 8 * (i * width + j)
                for k, (dr, dc) in ((0, (0, 0)), (2, (0, 8)), (1, (8, 0)), (3, (8, 8))):
                    for e in range(2):                       # U2 load: two neighbouring columns
                        held[(row + dr, col + dc + e)] = (warp_laneid, base + 2 * k + e)
    return held


def holders_map(layout):
    return {index: layout.holders(*index) for index in itertools.product(*(range(s) for s in layout.shape))}


@pytest.mark.parametrize("height, width", [(1, 1), (1, 2), (2, 1), (2, 4), (4, 2)])
def test_row_tile_is_seed_load(height, width):
    layout = rt(height, width)
    held = tk_load_row(height, width)
    assert len(held) == 256 * height * width
    assert holders_map(layout) == {index: [who] for index, who in held.items()}
    assert layout.num_threads == 32 and layout.local_size == 8 * height * width


def test_row_base_tile_is_the_mma_a_operand_layout():
    atom = get_mma_atom("float16", "float16", "float32")
    assert base_tile("row") == atom.a_layout
    assert rt(1, 1) == atom.a_layout


def test_row_base_tile_is_the_ptx_a_fragment():
    # PTX ISA, mma.m16n8k16 .f16 A fragment: a_i sits at row = lane >> 2 (+8 for i in {2,3,6,7}),
    # col = (lane % 4) * 2 + (i & 1) (+8 for i >= 4)
    layout = base_tile("row")
    for lane, i in itertools.product(range(32), range(8)):
        row = (lane >> 2) + (8 if i in (2, 3, 6, 7) else 0)
        col = (lane % 4) * 2 + (i & 1) + (8 if i >= 4 else 0)
        assert layout.holders(row, col) == [(lane, i)]
        assert layout.logical(lane, i) == (row, col)


def test_column_base_tile_is_the_transpose():
    row, col = base_tile("row"), base_tile("col")
    assert col == permute(row, [1, 0])
    for r, c in itertools.product(range(16), range(16)):
        assert col.holders(r, c) == row.holders(c, r)


def test_column_tile_numbers_base_tiles_row_major():
    layout = rt(2, 3, "col")
    base = base_tile("col")
    for r, c in itertools.product(range(32), range(48)):
        lane, register = base.holders(r % 16, c % 16)[0]
        assert layout.holders(r, c) == [(lane, 8 * ((r // 16) * 3 + c // 16) + register)]


def test_vectors_follow_tk():
    one = rv(2, 1)
    for x in range(32):
        lanes = [(x % 8) * 4 + q for q in range(4)]
        assert one.holders(x) == [(lane, 2 * (x // 16) + (x % 16) // 8) for lane in lanes]
    two = rv(3, 2)
    for x in range(48):
        lanes = sorted(p * 4 + (x % 8) // 2 for p in range(8))
        register = 4 * (x // 16) + 2 * ((x % 16) // 8) + x % 2
        assert sorted(two.holders(x)) == [(lane, register) for lane in lanes]
    assert one.num_threads == two.num_threads == 32
    assert one.num_replicas == 4 and two.num_replicas == 8


@pytest.mark.parametrize("layout", ["row", "col"])
def test_vectors_are_the_tile_reductions(layout):
    tile = rt(2, 3, layout)
    assert rt_col_vec(2, layout) == reduce(tile, dims=1)   # one value per row
    assert rt_row_vec(3, layout) == reduce(tile, dims=0)   # one value per column


def test_row_vectors_hold_what_the_tile_rows_hold():
    # each lane holding part of row r of a row-layout tile holds the col_vec value r
    tile, col_vec = rt(2, 2), rt_col_vec(2)
    for r in range(32):
        tile_lanes = {lane for c in range(32) for lane, _ in tile.holders(r, c)}
        assert {lane for lane, _ in col_vec.holders(r)} == tile_lanes


def test_bad_arguments():
    with pytest.raises(LayoutError, match="layout must be 'row' or 'col'"):
        base_tile("diag")
    with pytest.raises(LayoutError, match="rt: height must be a positive int"):
        rt(0, 1)
    with pytest.raises(LayoutError, match="rv: inner_dim must be 1 or 2"):
        rv(1, 4)
    assert isinstance(rv(1, 2), RegisterLayout)
