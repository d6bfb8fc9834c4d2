"""RegisterLayout (tilus_tvm/layout/register.py): validation, canonical form, mappings, compose."""
import itertools

import pytest

from tilus_tvm.errors import LayoutError
from tilus_tvm.layout.register import (
    RegisterLayout,
    all_indices,
    column_local,
    column_spatial,
    compose,
    local,
    register_layout,
    repeat,
    row_major_ravel,
    row_major_unravel,
    spatial,
)

SEED_EXAMPLE = RegisterLayout([4, 6], [2, 2, 3, 2], [0, 2], [3, 1])


# ---- validation --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "args, message",
    [
        (([4, 6], [2, 2, 3, 2], [0, 2, 1], [3, 1]), "mode 1 is both spatial and local"),
        (([4, 6], [2, 2, 3, 2], [0, 2], [3]), "mode 1 is neither spatial nor local"),
        (([4, 6], [2, 2, 3, 2], [0, 2, 2], [3, 1]), "mode 2 is listed twice"),
        (([4, 6], [3, 2, 2, 2], [0, 2], [3, 1]), "does not split shape"),
        (([4, 6], [2, 2, 3], [0, 2], [1]), "different sizes 24 vs 12"),
        (([4, 6], [2, 2, 3, 2], [0, 4], [3, 1, 2]), "mode 4 does not exist"),
        (([4, 6], [2, 2, 3, 2], [0, 2], [3, 1, -2]), "local mode -2 is negative"),
        (([4, 6.0], [2, 2, 3, 2], [0, 2], [3, 1]), "shape must hold Python ints"),
        (([4, 6], [2, 2, 3, True], [0, 2], [3, 1]), "mode_shape must hold Python ints"),
        (([4, 0], [4], [0], []), "sizes must be positive"),
    ],
)
def test_constructor_rejects_invalid_layouts(args, message):
    with pytest.raises(LayoutError, match=message) as info:
        RegisterLayout(*args)
    assert str(info.value).startswith("register_layout:")


@pytest.mark.parametrize("ctor", [spatial, local, column_spatial, column_local])
def test_constructors_reject_non_positive_shapes(ctor):
    with pytest.raises(LayoutError, match="positive ints"):
        ctor(2, 0)
    with pytest.raises(LayoutError, match="positive ints"):
        ctor(2, "3")


def test_ranks_must_be_a_permutation():
    with pytest.raises(LayoutError, match=r"ranks \[0, 0\] must be a permutation of 0..1"):
        spatial(2, 3, ranks=[0, 0])


# ---- canonical form ----------------------------------------------------------------------------
def test_size_one_modes_and_replications_are_pruned():
    layout = RegisterLayout([12, 1, 6], [3, 4, 1, 2, 3], [0, -1, 3], [1, 2, 4])
    assert layout.mode_shape == (3, 4, 2, 3)
    assert layout.spatial_modes == (0, 2)
    assert layout.local_modes == (1, 3)


def test_adjacent_modes_of_one_dimension_merge():
    assert RegisterLayout([6], [2, 3], [0, 1], []) == spatial(6)
    assert RegisterLayout([6, 4], [2, 3, 2, 2], [], [0, 1, 2, 3]) == local(6, 4)
    # not merged: the modes are adjacent in the list in the wrong order, or of different dims
    assert RegisterLayout([6], [2, 3], [1, 0], []).mode_shape == (2, 3)
    assert RegisterLayout([2, 3], [2, 3], [0, 1], []).mode_shape == (2, 3)
    # not merged: one spatial, one local
    assert RegisterLayout([6], [2, 3], [0], [1]).mode_shape == (2, 3)


def test_adjacent_replications_merge():
    layout = RegisterLayout([4], [4], [-2, -3, 0, -2], [])
    assert layout.spatial_modes == (-6, 0, -2)
    assert layout.num_replicas == 12


def test_merging_cascades():
    layout = RegisterLayout([2, 24], [2, 2, 3, 4], [0, 1, 2, 3], [])
    assert layout == spatial(2, 24)


def test_equality_and_hash_follow_the_mapping_not_the_spelling():
    a = RegisterLayout([4, 6], [2, 2, 1, 3, 2], [0, 2, 3], [4, 1])
    b = RegisterLayout([4, 6], [2, 2, 3, 2], [0, 2], [3, 1])
    assert a == b and hash(a) == hash(b)
    assert len({a, b, SEED_EXAMPLE}) == 1
    assert spatial(2, 3) != column_spatial(2, 3)
    assert local(2, 3) != spatial(2, 3)
    assert RegisterLayout([4], [4], [-2, 0], []) != RegisterLayout([4], [4], [0, -2], [])


def test_layouts_are_frozen():
    with pytest.raises(AttributeError):
        SEED_EXAMPLE.shape = (1,)


def test_repr():
    assert repr(SEED_EXAMPLE) == ("RegisterLayout(shape=[4, 6], mode_shape=[2, 2, 3, 2], spatial_modes=[0, 2], "
                                  "local_modes=[3, 1])")
    assert str(local(3, 4)) == "RegisterLayout(shape=[3, 4], mode_shape=[3, 4], spatial_modes=[], local_modes=[0, 1])"


# ---- sizes and mappings ------------------------------------------------------------------------
def test_derived_sizes():
    assert SEED_EXAMPLE.grouped_modes == ((0, 1), (2, 3))
    assert SEED_EXAMPLE.spatial_shape == (2, 3)
    assert SEED_EXAMPLE.local_shape == (2, 2)
    assert (SEED_EXAMPLE.num_threads, SEED_EXAMPLE.local_size, SEED_EXAMPLE.size) == (6, 4, 24)
    replicated = RegisterLayout([4], [4], [-3, 0], [])
    assert (replicated.num_threads, replicated.num_replicas, replicated.is_replicated) == (12, 3, True)
    assert not SEED_EXAMPLE.is_replicated


def test_seed_mapping_process():
    """Seed 000, "Mapping Process": thread (i // 2) * 3 + j // 2, local (j % 2) * 2 + i % 2."""
    for i, j in all_indices([4, 6]):
        assert SEED_EXAMPLE.mode_index((i, j)) == [i // 2, i % 2, j // 2, j % 2]
        assert SEED_EXAMPLE.thread_of((i, j)) == (i // 2) * 3 + j // 2
        assert SEED_EXAMPLE.local_of((i, j)) == (j % 2) * 2 + i % 2
        assert SEED_EXAMPLE.holders(i, j) == [((i // 2) * 3 + j // 2, (j % 2) * 2 + i % 2)]
        assert SEED_EXAMPLE.logical((i // 2) * 3 + j // 2, (j % 2) * 2 + i % 2) == (i, j)


def test_mma_c_fragment_mapping():
    """m16n8k8 C operand: lane = 4 * (row % 8) + col // 2, slot = 2 * (row // 8) + col % 2."""
    layout = repeat(2, 1).spatial(8, 4).repeat(1, 2)
    for row, col in all_indices([16, 8]):
        assert layout.holders(row, col) == [(4 * (row % 8) + col // 2, 2 * (row // 8) + col % 2)]


def test_replicated_mapping():
    layout = RegisterLayout([4], [4], [-3, 0], [])
    assert layout.holders(1) == [(1, 0), (5, 0), (9, 0)]
    assert [layout.thread_of((1,), replica) for replica in range(3)] == [1, 5, 9]
    assert [layout.replica_of(t) for t in (1, 5, 9)] == [0, 1, 2]
    assert layout.logical(9, 0) == (1,)


def test_column_constructors():
    assert column_spatial(2, 3).holders(1, 0) == [(1, 0)]
    assert column_local(2, 3).holders(0, 1) == [(0, 2)]
    assert spatial(2, 3, ranks=[1, 0]) == column_spatial(2, 3)
    assert local(2, 3, ranks=[1, 0]) == column_local(2, 3)


def test_holders_checks_the_index():
    with pytest.raises(LayoutError, match=r"holders: index \[4, 0\] is out of range for shape \[4, 6\]"):
        SEED_EXAMPLE.holders(4, 0)
    with pytest.raises(LayoutError, match="has 1 coordinates"):
        SEED_EXAMPLE.holders(1)


def test_scalar_layout():
    scalar = register_layout([], [], [-4], [])
    assert scalar.holders() == [(0, 0), (1, 0), (2, 0), (3, 0)]
    assert scalar.logical(3, 0) == ()


def test_row_major_helpers_round_trip():
    sizes = [2, 3, 4]
    for flat in range(24):
        digits = row_major_unravel(flat, sizes)
        assert row_major_ravel(digits, sizes) == flat
    assert row_major_unravel(23, sizes) == [1, 2, 3]


def test_mappings_accept_tvm_expressions():
    """The same mapping code indexes registers in TIR: build it on TVM variables, then bind them."""
    tirx = pytest.importorskip("tvm.tirx")
    sym = pytest.importorskip("tvm.sym")
    i, j = tirx.Var("i", "int32"), tirx.Var("j", "int32")
    thread, slot = SEED_EXAMPLE.thread_of((i, j)), SEED_EXAMPLE.local_of((i, j))
    assert isinstance(thread, tirx.Expr) and isinstance(slot, tirx.Expr)
    for a, b in [(0, 0), (3, 5), (2, 3)]:
        analyzer = sym.Analyzer()
        analyzer.bind(i, a)
        analyzer.bind(j, b)
        assert [int(analyzer.simplify(e)) for e in (thread, slot)] == list(SEED_EXAMPLE.holders(a, b)[0])


# ---- compose -----------------------------------------------------------------------------------
def test_compose_examples_from_the_seed():
    assert compose(local(3, 4), spatial(2, 3)) == RegisterLayout([6, 12], [3, 2, 4, 3], [1, 3], [0, 2])
    assert spatial(2, 3).local(3, 4) == RegisterLayout([6, 12], [2, 3, 3, 4], [0, 2], [1, 3])
    assert local(3, 4) * spatial(2, 3) == local(3, 4).spatial(2, 3)


def test_compose_formula():
    outer, inner = column_spatial(2, 2).local(1, 2), RegisterLayout([2, 3], [2, 3], [-2, 1], [0])
    composed = compose(outer, inner)
    for index in all_indices(composed.shape):
        o = tuple(x // s for x, s in zip(index, inner.shape))
        i = tuple(x % s for x, s in zip(index, inner.shape))
        expected = sorted(
            (to * inner.num_threads + ti, lo * inner.local_size + li)
            for (to, lo), (ti, li) in itertools.product(outer.holders(*o), inner.holders(*i))
        )
        assert sorted(composed.holders(*index)) == expected


def test_compose_rejects_rank_mismatch():
    with pytest.raises(LayoutError, match="compose: rank mismatch"):
        compose(spatial(2), local(2, 2))
    with pytest.raises(LayoutError, match="compose: expected two RegisterLayouts"):
        compose(spatial(2), (2,))
