"""Register layout operations (tilus_tvm/layout/register_ops.py): exact examples, errors, properties."""
import doctest
import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tilus_tvm.layout.register_ops as register_ops
from tilus_tvm.errors import LayoutError
from tilus_tvm.layout import (
    RegisterLayout,
    auto_local_spatial,
    column_local,
    column_spatial,
    compose,
    concat,
    divide,
    flatten,
    local,
    permute,
    reduce,
    repeat,
    reshape,
    spatial,
    squeeze,
    unsqueeze,
)
from tilus_tvm.layout.register import all_indices

PROPERTY = settings(max_examples=60, deadline=None)


# ---- a strategy for random valid layouts -------------------------------------------------------
@st.composite
def factorizations(draw, extent: int) -> list[int]:
    """Consecutive modes for a dimension of ``extent``: a random ordered factorization, now and then
    with a size-1 mode that the canonical form prunes."""
    factors = []
    while extent > 1:
        factor = draw(st.sampled_from([d for d in range(2, extent + 1) if extent % d == 0]))
        factors.append(factor)
        extent //= factor
    if draw(st.integers(0, 5)) == 0:
        factors.insert(draw(st.integers(0, len(factors))), 1)
    return factors


@st.composite
def register_layouts(draw, ndim: int | None = None, dim_sizes=(1, 2, 3, 4, 6, 8), replication: bool = True):
    """A random valid RegisterLayout: small dims, random splits into modes, each mode spatial or
    local, both lists shuffled, and (when allowed) now and then a replication or two."""
    if ndim is None:
        ndim = draw(st.integers(0, 3))
    shape = draw(st.lists(st.sampled_from(dim_sizes), min_size=ndim, max_size=ndim))
    mode_shape = [factor for extent in shape for factor in draw(factorizations(extent))]
    is_spatial = draw(st.lists(st.booleans(), min_size=len(mode_shape), max_size=len(mode_shape)))
    spatial_modes = list(draw(st.permutations([m for m, s in enumerate(is_spatial) if s])))
    local_modes = list(draw(st.permutations([m for m, s in enumerate(is_spatial) if not s])))
    if replication and draw(st.integers(0, 3)) == 0:
        for size in draw(st.lists(st.sampled_from([2, 3]), min_size=1, max_size=2)):
            spatial_modes.insert(draw(st.integers(0, len(spatial_modes))), -size)
    return RegisterLayout(shape, mode_shape, spatial_modes, local_modes)


SMALL = (1, 2, 3, 4)


def same_rank(count: int, max_ndim: int = 3, dim_sizes=SMALL):
    """``count`` random layouts of one random rank (compose and divide need equal ranks)."""
    return st.integers(0, max_ndim).flatmap(
        lambda ndim: st.tuples(*[register_layouts(ndim=ndim, dim_sizes=dim_sizes) for _ in range(count)]))


@st.composite
def shapes_of_size(draw, size: int) -> list[int]:
    """A random shape with ``size`` elements (rank 1 to 4, size-1 dims allowed)."""
    ndim = draw(st.integers(1, 4))
    shape = []
    for _ in range(ndim - 1):
        extent = draw(st.sampled_from([d for d in range(1, size + 1) if size % d == 0]))
        shape.append(extent)
        size //= extent
    return draw(st.permutations(shape + [size]))


def holders_table(layout: RegisterLayout) -> dict:
    return {index: sorted(layout.holders(*index)) for index in all_indices(layout.shape)}


def unit(ndim: int) -> RegisterLayout:
    """The layout with one element in one thread (compose's identity)."""
    return RegisterLayout([1] * ndim, [], [], [])


def test_strategy_reaches_the_interesting_cases():
    seen = set()

    @settings(max_examples=200, deadline=None)
    @given(register_layouts())
    def record(layout):
        seen.add(("replicated", layout.is_replicated))
        seen.add(("split", len(layout.mode_shape) > sum(1 for s in layout.shape if s > 1)))
        seen.add(("rank", len(layout.shape)))

    record()
    assert {("replicated", True), ("replicated", False), ("split", True), ("rank", 0), ("rank", 3)} <= seen


def test_docstring_examples():
    results = doctest.testmod(register_ops)
    assert results.attempted >= 9 and results.failed == 0


# ---- the layout itself: a bijection between (element, replica) and (thread, local) -------------
@PROPERTY
@given(register_layouts(replication=False))
def test_layout_without_replication_is_a_bijection(layout):
    pairs = [(layout.thread_of(index), layout.local_of(index)) for index in all_indices(layout.shape)]
    assert len(set(pairs)) == len(pairs)
    assert set(pairs) == set(itertools.product(range(layout.num_threads), range(layout.local_size)))
    for index, (thread, slot) in zip(all_indices(layout.shape), pairs):
        assert layout.logical(thread, slot) == index


@PROPERTY
@given(register_layouts())
def test_every_thread_slot_holds_one_element_replica(layout):
    seen = {}
    for index in all_indices(layout.shape):
        for replica, (thread, slot) in enumerate(layout.holders(*index)):
            assert (thread, slot) not in seen
            seen[thread, slot] = index
            assert layout.replica_of(thread) == replica
            assert layout.logical(thread, slot) == index
    assert set(seen) == set(itertools.product(range(layout.num_threads), range(layout.local_size)))
    assert layout.size * layout.num_replicas == layout.num_threads * layout.local_size


# ---- reduce ------------------------------------------------------------------------------------
def test_reduce_seed_example():
    assert reduce(spatial(3, 4), dims=[0]) == RegisterLayout([4], [4], [-3, 0], [])
    assert reduce(spatial(3, 4), dims=[0]).holders(1) == [(1, 0), (5, 0), (9, 0)]


def test_reduce_examples():
    layout = local(3, 4).spatial(2, 3)  # mode_shape [3, 2, 4, 3], spatial [1, 3], local [0, 2]
    assert reduce(layout, [1]) == RegisterLayout([6], [3, 2], [1, -3], [0])
    assert reduce(layout, [-1]) == reduce(layout, 1) == reduce(layout, [1])
    assert reduce(layout, [0], keepdims=True) == RegisterLayout([1, 12], [4, 3], [-2, 1], [0])
    assert reduce(layout, [0, 1]) == RegisterLayout([], [], [-6], [])
    assert reduce(local(3, 4), [1]) == local(3)
    assert reduce(reduce(spatial(3, 4), [0]), [0]) == RegisterLayout([], [], [-12], [])
    assert reduce(layout, []) == layout


@pytest.mark.parametrize(
    "dims, message",
    [([2], r"reduce: dim 2 is out of range \[-2, 2\) for layout RegisterLayout\(shape=\[3, 4\]"),
     ([0, -2], r"reduce: dims \[0, -2\] name a dimension twice"),
     ([0.0], r"reduce: dims must hold Python ints")],
)
def test_reduce_errors(dims, message):
    with pytest.raises(LayoutError, match=message):
        reduce(spatial(3, 4), dims)


def test_reduce_rejects_non_layouts():
    with pytest.raises(LayoutError, match="reduce: layout must be a RegisterLayout, got list"):
        reduce([3, 4], [0])


@PROPERTY
@given(register_layouts(), st.data())
def test_reduce_replicates_the_threads_of_a_reduced_row(layout, data):
    dims = data.draw(st.lists(st.integers(0, max(len(layout.shape) - 1, 0)), unique=True,
                              max_size=len(layout.shape)))
    keepdims = data.draw(st.booleans())
    reduced = reduce(layout, dims, keepdims=keepdims)
    reduced_spatial = [layout.mode_shape[m] for d in dims for m in layout.grouped_modes[d]
                       if m in layout.spatial_modes]
    assert reduced.num_threads == layout.num_threads
    assert reduced.num_replicas == layout.num_replicas * math.prod(reduced_spatial)
    assert reduced.size * reduced.num_replicas == reduced.num_threads * reduced.local_size
    for index in all_indices(layout.shape):
        out = tuple(0 if d in dims else x for d, x in enumerate(index) if keepdims or d not in dims)
        assert {t for t, _ in layout.holders(*index)} <= {t for t, _ in reduced.holders(*out)}


# ---- concat ------------------------------------------------------------------------------------
def test_concat_examples():
    assert concat(spatial(2), local(3)) == RegisterLayout([2, 3], [2, 3], [0], [1])
    assert concat(local(3), spatial(2)) == RegisterLayout([3, 2], [3, 2], [1], [0])
    assert concat(spatial(2, 2), spatial(4)) == spatial(2, 2, 4)
    replicated = reduce(spatial(3, 4), [0])
    assert concat(replicated, column_local(2, 2)) == RegisterLayout([4, 2, 2], [4, 2, 2], [-3, 0], [2, 1])
    assert concat(unit(0), spatial(4)) == spatial(4)


def test_concat_rejects_non_layouts():
    with pytest.raises(LayoutError, match="concat: rhs must be a RegisterLayout, got tuple"):
        concat(spatial(2), (2,))


@PROPERTY
@given(register_layouts(ndim=1, dim_sizes=SMALL), register_layouts(dim_sizes=SMALL))
def test_concat_formula(lhs, rhs):
    result = concat(lhs, rhs)
    assert result.shape == lhs.shape + rhs.shape
    for i in all_indices(lhs.shape):
        for j in all_indices(rhs.shape):
            expected = sorted((tl * rhs.num_threads + tr, ll * rhs.local_size + lr)
                              for (tl, ll), (tr, lr) in itertools.product(lhs.holders(*i), rhs.holders(*j)))
            assert sorted(result.holders(*i, *j)) == expected


# ---- compose (in register.py) and divide -------------------------------------------------------
@PROPERTY
@given(same_rank(3, dim_sizes=(1, 2, 3)))
def test_compose_is_associative(layouts):
    a, b, c = layouts
    assert compose(compose(a, b), c) == compose(a, compose(b, c))


@PROPERTY
@given(same_rank(1))
def test_unit_is_the_identity_of_compose(layouts):
    (a,) = layouts
    assert compose(unit(len(a.shape)), a) == a == compose(a, unit(len(a.shape)))


def test_divide_examples():
    assert divide(local(3, 4).spatial(2, 3), spatial(2, 3)) == local(3, 4)
    assert local(3, 4).spatial(2, 3) / spatial(2, 3) == local(3, 4)
    assert spatial(2, 3).local(3, 4) / local(3, 4) == spatial(2, 3)
    mma_c = repeat(2, 1).spatial(8, 4).repeat(1, 2)
    assert mma_c / repeat(1, 2) == repeat(2, 1).spatial(8, 4)
    assert mma_c / spatial(8, 4).repeat(1, 2) == repeat(2, 1)
    assert spatial(6) / spatial(3) == spatial(2)  # cuts mode 6 into 2 x 3
    assert local(12) / local(4) == local(3)
    assert reduce(spatial(3, 4), [0]) / spatial(4) == RegisterLayout([1], [], [-3], [])
    assert RegisterLayout([4], [2, 2], [-2, 0, -3, 1], []) / RegisterLayout([2], [2], [-3, 0], []) == \
        RegisterLayout([2], [2], [-2, 0], [])
    assert RegisterLayout([4], [4], [-6, 0], []) / RegisterLayout([2], [2], [0], []) == \
        RegisterLayout([2], [2], [-6, 0], [])


@pytest.mark.parametrize(
    "lhs, rhs, message",
    [
        (spatial(4), spatial(2, 2), r"rank 1 vs 2"),
        (spatial(6), spatial(4), r"dimension 0 of size 6 is not a multiple of 4"),
        (spatial(2, 3).local(3, 4), spatial(3, 4), r"lhs has 6 threads, not a multiple of rhs's 12"),
        (local(4, 4), local(1, 8), r"dimension 1 of size 4 is not a multiple of 8"),
        (spatial(2, 3).local(3, 4), spatial(2, 3),
         r"the modes of dimension 0 cannot be cut to end with the modes of rhs"),
        (local(2, 2), column_local(2, 2), r"the local modes of lhs do not end like those of rhs: rhs's mode 0 "
                                          r"\(size 2\) does not line up with the same modes of lhs"),
        (local(2, 3), column_local(2, 3), r"the local modes cannot be cut to end with local sizes \[3, 2\]"),
        (local(3, 4).spatial(2, 3), local(2, 3), r"the local modes cannot be cut to end with local sizes \[2, 3\]"),
        (spatial(2, 2), column_spatial(2, 2), r"the spatial modes of lhs do not end like those of rhs"),
        (RegisterLayout([4], [4], [0, -2], []), RegisterLayout([2], [2], [-2, 0], []),
         r"rhs's mode 0 \(size 2\) does not line up"),
        (spatial(4, 2), RegisterLayout([1, 2], [2], [-2, 0], []), r"rhs's replication -2 does not line up"),
        (RegisterLayout([4], [4], [-6, 0], []), RegisterLayout([2], [2], [-3, 0], []),
         r"the spatial modes cannot be cut to end with spatial sizes \[3, 2\]"),
    ],
)
def test_divide_errors(lhs, rhs, message):
    with pytest.raises(LayoutError, match=message) as info:
        divide(lhs, rhs)
    assert str(info.value).startswith(f"divide: cannot divide lhs {lhs} by rhs {rhs}: ")


@PROPERTY
@given(same_rank(2))
def test_divide_undoes_compose(layouts):
    a, b = layouts
    assert divide(compose(a, b), b) == a
    assert (a * b) / b == a


@PROPERTY
@given(same_rank(2, dim_sizes=(1, 2, 4)))
def test_divide_result_composes_back(layouts):
    lhs, rhs = layouts
    try:
        result = divide(lhs, rhs)
    except LayoutError as error:
        assert str(error).startswith("divide: cannot divide")
        return
    assert compose(result, rhs) == lhs


@PROPERTY
@given(register_layouts())
def test_divide_by_itself_and_by_the_unit(layout):
    ndim = len(layout.shape)
    assert layout / layout == unit(ndim)
    assert layout / unit(ndim) == layout


# ---- squeeze, unsqueeze, permute ---------------------------------------------------------------
def test_squeeze_and_unsqueeze_examples():
    assert squeeze(spatial(1, 4), [0]) == spatial(4)
    assert squeeze(local(2, 1, 3, 1), [1, -1]) == local(2, 3)
    assert unsqueeze(spatial(4), [0]) == spatial(1, 4)
    assert unsqueeze(local(2, 3), [0, 2, 4]) == local(1, 2, 1, 3, 1)
    assert unsqueeze(local(2, 3), -1) == local(2, 3, 1)
    assert unsqueeze(reduce(spatial(3, 4), [0]), [0]) == reduce(spatial(3, 4), [0], keepdims=True)


def test_squeeze_and_unsqueeze_errors():
    with pytest.raises(LayoutError, match=r"squeeze: dimension 1 of layout .* has size 4, only size-1"):
        squeeze(spatial(1, 4), [1])
    with pytest.raises(LayoutError, match=r"squeeze: dim 2 is out of range \[-2, 2\)"):
        squeeze(spatial(1, 4), [2])
    with pytest.raises(LayoutError, match=r"unsqueeze: dim 3 is out of range \[-3, 3\) for a result of rank 3"):
        unsqueeze(spatial(4), [0, 3])


def test_permute_examples():
    assert permute(local(2, 3), [1, 0]) == column_local(3, 2)
    assert permute(spatial(2, 3), [1, 0]) == column_spatial(3, 2)
    layout = RegisterLayout([4, 6], [2, 2, 3, 2], [0, 2], [3, 1])
    assert permute(layout, [1, 0]) == RegisterLayout([6, 4], [3, 2, 2, 2], [2, 0], [1, 3])
    assert permute(layout, [-1, 0]) == permute(layout, [1, 0])


@pytest.mark.parametrize(
    "dims, message",
    [([0], r"permute: dims \[0\] must be a permutation of 0..1"),
     ([0, 0], r"permute: dims \[0, 0\] name a dimension twice"),
     ([0, 2], r"permute: dim 2 is out of range")],
)
def test_permute_errors(dims, message):
    with pytest.raises(LayoutError, match=message):
        permute(spatial(2, 3), dims)


@PROPERTY
@given(register_layouts(), st.data())
def test_permute_moves_indices_not_holders(layout, data):
    dims = data.draw(st.permutations(range(len(layout.shape))))
    permuted = permute(layout, dims)
    inverse = [dims.index(d) for d in range(len(dims))]
    assert permute(permuted, inverse) == layout
    for index in all_indices(permuted.shape):
        original = [0] * len(dims)
        for i, d in enumerate(dims):
            original[d] = index[i]
        assert permuted.holders(*index) == layout.holders(*original)


@PROPERTY
@given(register_layouts(), st.data())
def test_squeeze_undoes_unsqueeze(layout, data):
    count = data.draw(st.integers(0, 2))
    dims = data.draw(st.lists(st.integers(0, max(len(layout.shape) + count - 1, 0)), min_size=count,
                              max_size=count, unique=True))
    grown = unsqueeze(layout, dims)
    assert squeeze(grown, dims) == layout
    for index in all_indices(layout.shape):
        rest = iter(index)
        assert grown.holders(*[0 if d in dims else next(rest) for d in range(len(grown.shape))]) == \
            layout.holders(*index)


# ---- reshape and flatten -----------------------------------------------------------------------
def test_reshape_examples():
    assert reshape(spatial(6).local(4), [2, 12]) == RegisterLayout([2, 12], [2, 3, 4], [0, 1], [2])
    assert reshape(spatial(6), [2, 3]) == spatial(2, 3)
    assert reshape(spatial(2, 3), [6]) == spatial(6)
    assert reshape(column_spatial(2, 3), [6]) == RegisterLayout([6], [2, 3], [1, 0], [])
    assert reshape(local(3, 4).spatial(2, 3), [3, 2, 4, 3]) == \
        RegisterLayout([3, 2, 4, 3], [3, 2, 4, 3], [1, 3], [0, 2])
    assert reshape(spatial(4), [1, 4, 1]) == spatial(1, 4, 1)
    assert reshape(RegisterLayout([], [], [-2], []), [1, 1]) == RegisterLayout([1, 1], [], [-2], [])
    assert reshape(reduce(spatial(3, 4), [0]), [2, 2]) == RegisterLayout([2, 2], [2, 2], [-3, 0, 1], [])


def test_reshape_errors():
    layout = RegisterLayout([4, 6], [2, 2, 3, 2], [0, 2], [3, 1])
    with pytest.raises(LayoutError, match=r"reshape: cannot reshape layout RegisterLayout\(shape=\[4, 6\].* to "
                                          r"shape \[4, 2, 3\]: the boundary at 3 elements"):
        reshape(layout, [4, 2, 3])
    with pytest.raises(LayoutError, match=r"reshape: cannot reshape layout .* of 24 elements to shape \[5, 5\] of "
                                          r"25 elements"):
        reshape(layout, [5, 5])
    with pytest.raises(LayoutError, match=r"reshape: shape entries must be positive ints, got \[-1, 4\]"):
        reshape(layout, [-1, 4])
    with pytest.raises(LayoutError, match="reshape: the boundary|cannot reshape"):
        reshape(spatial(2, 3), [3, 2])


def test_flatten_examples():
    layout = spatial(2, 3).local(2, 2)
    assert flatten(layout) == RegisterLayout([24], [2, 2, 3, 2], [0, 2], [1, 3])
    assert flatten(local(2, 3, 4), 1) == local(2, 12)
    assert flatten(local(2, 3, 4), 0, 1) == local(6, 4)
    assert flatten(local(2, 3, 4), -2, -2) == local(2, 3, 4)
    assert flatten(RegisterLayout([], [], [-2], [])) == RegisterLayout([1], [], [-2], [])
    with pytest.raises(LayoutError, match="flatten: start_dim 2 comes after end_dim 1"):
        flatten(local(2, 3, 4), 2, 1)
    with pytest.raises(LayoutError, match=r"flatten: dim 3 is out of range"):
        flatten(local(2, 3, 4), 3)


@PROPERTY
@given(register_layouts(), st.data())
def test_reshape_reads_the_same_elements_row_major(layout, data):
    shape = data.draw(shapes_of_size(layout.size))
    try:
        reshaped = reshape(layout, shape)
    except LayoutError as error:
        assert str(error).startswith(f"reshape: cannot reshape layout {layout} to shape {shape}: the boundary")
        return
    assert reshape(reshaped, layout.shape) == layout
    old_indices = list(all_indices(layout.shape))
    for flat, index in enumerate(all_indices(shape)):
        assert reshaped.holders(*index) == layout.holders(*old_indices[flat])


@PROPERTY
@given(register_layouts(), st.data())
def test_flatten_always_succeeds_and_reshapes_back(layout, data):
    ndim = max(len(layout.shape), 1)
    start = data.draw(st.integers(0, ndim - 1))
    end = data.draw(st.integers(start, ndim - 1))
    flat = flatten(layout, start, end)
    assert flat.size == layout.size and flat.num_threads == layout.num_threads
    assert reshape(flat, layout.shape) == layout
    assert flatten(layout) == reshape(layout, [layout.size])


# ---- auto_local_spatial ------------------------------------------------------------------------
def test_auto_local_spatial_examples():
    assert auto_local_spatial(8, [4, 6]) == local(1, 3).spatial(4, 2)
    assert auto_local_spatial(128, [16, 16]) == local(2, 1).spatial(8, 16)
    assert auto_local_spatial(32, [64]) == local(2).spatial(32)
    assert auto_local_spatial(64, [4, 4]) == RegisterLayout([4, 4], [4, 4], [-4, 0, 1], [])
    assert auto_local_spatial(1, [3, 5]) == local(3, 5)
    assert auto_local_spatial(4, []) == RegisterLayout([], [], [-4], [])


@pytest.mark.parametrize(
    "num_threads, shape, message",
    [(6, [4], r"auto_local_spatial: 6 threads cannot share shape \[4\] of 4 elements evenly"),
     (0, [4], r"auto_local_spatial: num_threads must be a positive int, got 0"),
     (4, [0], r"auto_local_spatial: shape entries must be positive ints, got \[0\]")],
)
def test_auto_local_spatial_errors(num_threads, shape, message):
    with pytest.raises(LayoutError, match=message):
        auto_local_spatial(num_threads, shape)


@PROPERTY
@given(st.sampled_from([1, 2, 4, 8, 16, 32, 64, 128]),
       st.lists(st.sampled_from([1, 2, 4, 8, 16]), min_size=1, max_size=3))
def test_auto_local_spatial_properties(num_threads, shape):
    layout = auto_local_spatial(num_threads, shape)
    size = math.prod(shape)
    assert layout.shape == tuple(shape)
    assert layout.num_threads == num_threads
    assert layout.num_replicas == max(1, num_threads // size)
    assert layout.local_size == max(1, size // num_threads)
    # threads run along the last dimension first: neighbours there are neighbouring threads
    if shape[-1] > 1 and num_threads > 1:
        zero = [0] * len(shape)
        assert layout.thread_of(zero[:-1] + [1]) == layout.thread_of(zero) + 1


# ---- local_slice, split_local, merge_local -----------------------------------------------------
from tilus_tvm.layout.register_ops import local_slice, merge_local, split_local  # noqa: E402


def test_local_slice_examples():
    layout = local(2, 2).spatial(8, 4).local(1, 2)  # [16, 16]: the outer 2 x 2 blocks are registers
    assert local_slice(layout, [8, 0], [8, 16]) == local(1, 2).spatial(8, 4).local(1, 2)
    assert local_slice(layout, [0, 8], [16, 8]) == local(2, 1).spatial(8, 4).local(1, 2)
    assert local_slice(layout, [8, 8], [8, 8]) == spatial(8, 4).local(1, 2)
    assert local_slice(layout, [0, 0], [16, 16]) == layout
    assert local_slice(local(4).spatial(8), [8], [8]) == spatial(8)


@pytest.mark.parametrize("offsets, shape, message", [
    ([0, 0], [4, 16], "dimension 0 would fix a spatial mode of size 2"),
    ([4, 0], [8, 16], "offset 4 in dimension 0 is not a multiple of the extent 8"),
    ([0, 0], [16, 3], "extent 3 does not split the modes of dimension 1"),
    ([12, 0], [8, 16], r"dimension 0 of size 16 does not contain \[12, 12\+8\)"),
    ([0], [16], "offsets and shape need 2 entries"),
])
def test_local_slice_errors(offsets, shape, message):
    with pytest.raises(LayoutError, match=message):
        local_slice(local(2, 2).spatial(8, 4).local(1, 2), offsets, shape)


@st.composite
def sub_tiles(draw, layout: RegisterLayout):
    """Random aligned sub-tiles of ``layout``: per dimension an extent dividing it and an aligned offset."""
    offsets, shape = [], []
    for extent in layout.shape:
        size = draw(st.sampled_from([d for d in range(1, extent + 1) if extent % d == 0]))
        offsets.append(draw(st.integers(0, extent // size - 1)) * size)
        shape.append(size)
    return offsets, shape


@PROPERTY
@given(register_layouts(), st.data())
def test_local_slice_keeps_every_element_in_its_thread_and_register(layout, data):
    offsets, shape = data.draw(sub_tiles(layout))
    try:
        sliced = local_slice(layout, offsets, shape)
    except LayoutError as error:
        assert str(error).startswith("local_slice: the sub-tile of shape")
        assert "spatial mode" in str(error) or "does not split" in str(error)
        return
    assert sliced.num_threads == layout.num_threads and tuple(sliced.shape) == tuple(shape)
    select = [layout.local_of([o + i for o, i in zip(offsets, sliced.logical(0, j))])
              for j in range(sliced.local_size)]
    for index in all_indices(shape):
        source = [o + i for o, i in zip(offsets, index)]
        assert [(thread, select[slot]) for thread, slot in sliced.holders(*index)] == layout.holders(*source)


@PROPERTY
@given(register_layouts(ndim=2), st.data())
def test_local_slice_of_local_outer_modes_always_succeeds(layout, data):
    outer = data.draw(st.tuples(st.integers(1, 3), st.integers(1, 3)))
    big = compose(local(*outer), layout)
    pick = [data.draw(st.integers(0, n - 1)) for n in outer]
    sliced = local_slice(big, [p * s for p, s in zip(pick, layout.shape)], list(layout.shape))
    assert sliced == layout


def test_split_and_merge_local_examples():
    assert split_local(spatial(4, 8), 2) == spatial(4, 8).local(1, 2)
    assert split_local(spatial(4, 8).local(1, 2), 2) == spatial(4, 8).local(1, 4)
    assert merge_local(spatial(4, 8).local(1, 4), 2) == spatial(4, 8).local(1, 2)
    assert merge_local(local(2, 1).spatial(4, 8).local(1, 2), 2) == local(2, 1).spatial(4, 8)


@pytest.mark.parametrize("layout", [spatial(4, 8), local(1, 2).spatial(4, 8), spatial(4, 8).local(1, 3),
                                    compose(spatial(4, 8), local(2, 2, ranks=[1, 0]))])
def test_merge_local_errors(layout):
    with pytest.raises(LayoutError, match="does not hold groups of 2 consecutive elements"):
        merge_local(layout, 2)


@PROPERTY
@given(register_layouts(), st.integers(1, 4))
def test_split_local_keeps_the_bits_in_place_and_merge_undoes_it(layout, factor):
    if not layout.shape:
        with pytest.raises(LayoutError, match="no last dimension"):
            split_local(layout, factor)
        return
    split = split_local(layout, factor)
    assert split.num_threads == layout.num_threads and split.local_size == layout.local_size * factor
    for index in all_indices(layout.shape):
        for t in range(factor):
            narrow = list(index[:-1]) + [index[-1] * factor + t]
            assert split.holders(*narrow) == [(thread, slot * factor + t) for thread, slot in layout.holders(*index)]
    assert merge_local(split, factor) == layout


# ---- register order: interleave_local, slot_permutation -----------------------------------------
@PROPERTY
@given(register_layouts())
def test_interleave_local_reorders_each_threads_registers_in_runs(layout):
    from tilus_tvm.layout import interleave_local, slot_permutation

    runs = [r for r in (2, 4, 8) if layout.local_size % r == 0]
    for run in runs:
        try:
            result = interleave_local(layout, run)
        except LayoutError:  # a run that is not a suffix of the register digits
            continue
        half = run // 2
        for thread in range(layout.num_threads):
            for slot in range(layout.local_size):
                first, inner = slot - slot % run, slot % run
                moved = first + inner % 2 * half + inner // 2
                assert result.logical(thread, moved) == layout.logical(thread, slot)
        order = slot_permutation(result, layout)
        assert order == tuple(s - s % run + s % run % 2 * half + s % run // 2 for s in range(layout.local_size))
        assert slot_permutation(layout, layout) == tuple(range(layout.local_size))


def test_interleave_local_of_an_mma_fragment_and_its_errors():
    from tilus_tvm.layout import interleave_local
    from tilus_tvm.layout.atoms import mma_a_layout

    a = mma_a_layout(16, 16)  # a lane's 8 slots: (col half, row half, col pair)
    codes = interleave_local(a, 8)
    assert [codes.logical(0, s) for s in range(8)] == [(0, 0), (8, 0), (0, 8), (8, 8), (0, 1), (8, 1), (0, 9),
                                                       (8, 9)]
    with pytest.raises(LayoutError, match="run must be a positive even int"):
        interleave_local(a, 3)
    with pytest.raises(LayoutError, match="do not split into runs of 16"):
        interleave_local(a, 16)


def test_slot_permutation_refuses_layouts_that_move_elements_between_threads():
    from tilus_tvm.layout import slot_permutation

    assert slot_permutation(spatial(4).local(2), local(2).spatial(4)) is None  # other threads
    assert slot_permutation(spatial(4, 2), spatial(4).local(2)) is None  # other thread counts
    assert slot_permutation(local(2, 2), column_local(2, 2)) == (0, 2, 1, 3)
    assert slot_permutation(spatial(2, 1).local(2, 2), spatial(2, 1).column_local(2, 2)) == (0, 2, 1, 3)
