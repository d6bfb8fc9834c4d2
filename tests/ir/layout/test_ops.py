"""tilus_tvm/ir/layout (ops, register_ops, shared_ops): Tilus's module paths and the shared-layout
operations, checked element by element against the mode-form definition of a shared layout."""
import doctest
import importlib
import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tilus_tvm.layout as base
from tilus_tvm.errors import LayoutError
from tilus_tvm.ir.layout.ops import register_ops, shared_ops
from tilus_tvm.ir.layout.ops import (concat, local, reduce, register_layout, replicated, shared_compose, shared_layout,
                                     shared_permute, shared_reshape, shared_row_major, shared_row_major_swizzle,
                                     spatial)
from tilus_tvm.layout.shared import SharedLayout, bank_conflicts, shared_column_major, shared_strides
from tilus_tvm.layout.swizzle import Swizzle


def test_doctests():
    assert doctest.testmod(register_ops).failed == 0
    assert doctest.testmod(shared_ops).failed == 0


# ---- module paths ---------------------------------------------------------------------------------
TILUS_IMPORTS = {
    "tilus_tvm.ir.layout": ["RegisterLayout", "SharedLayout", "register_layout", "shared_layout", "spatial", "local",
                            "column_spatial", "column_local", "compose", "concat", "divide", "flatten", "permute",
                            "reduce", "reshape", "squeeze", "unsqueeze", "auto_local_spatial", "shared_row_major",
                            "shared_column_major", "shared_compose", "visualize_layout", "LayoutOperationError", "ops"],
    "tilus_tvm.ir.layout.ops": ["register_layout", "shared_layout", "auto_local_spatial", "column_local",
                                "column_spatial", "compose", "concat", "divide", "flatten", "local", "permute",
                                "reduce", "replicated", "reshape", "spatial", "squeeze", "unsqueeze",
                                "shared_column_major", "shared_compose", "shared_permute", "shared_reshape",
                                "shared_row_major", "shared_row_major_swizzle"],
    "tilus_tvm.ir.layout.ops.register_ops": ["spatial", "local", "reduce", "concat", "divide", "replicated"],
    "tilus_tvm.ir.layout.ops.shared_ops": ["shared_row_major_swizzle", "shared_layout", "shared_reshape"],
    "tilus_tvm.ir.layout.register_layout": ["RegisterLayout", "register_layout", "visualize_layout"],
    "tilus_tvm.ir.layout.register_layout_ops": ["spatial", "local", "divide", "compose", "reshape", "register_layout"],
    "tilus_tvm.ir.layout.shared_layout": ["SharedLayout", "shared_layout"],
}


@pytest.mark.parametrize("module", sorted(TILUS_IMPORTS))
def test_the_module_paths_tilus_programs_import(module):
    loaded = importlib.import_module(module)
    for name in TILUS_IMPORTS[module]:
        assert hasattr(loaded, name), f"{module}.{name}"
        if hasattr(base, name) and name != "ops":
            assert getattr(loaded, name) is getattr(base, name), f"{module}.{name} is not tilus_tvm.layout's"


def test_functions_named_like_submodules_stay_functions():
    import tilus_tvm.ir.layout as layout
    import tilus_tvm.ir.layout.register_layout  # noqa: F401 - importing the submodule again must not rebind
    import tilus_tvm.ir.layout.shared_layout  # noqa: F401

    assert callable(layout.register_layout) and layout.register_layout is base.register_layout
    assert layout.shared_layout is shared_layout
    assert layout.LayoutOperationError is LayoutError


# ---- register layouts -----------------------------------------------------------------------------
def test_replicated_holds_the_whole_tile_in_every_worker():
    layout = replicated(3, 4, num_workers=8)
    assert (layout.num_threads, layout.num_replicas, layout.local_size) == (8, 8, 12)
    for i, j in itertools.product(range(3), range(4)):
        assert layout.holders(i, j) == [(t, i * 4 + j) for t in range(8)]
    assert replicated(5, num_workers=1) == local(5)
    with pytest.raises(LayoutError, match="replicated: num_workers must be a positive int, got 0"):
        replicated(4, num_workers=0)


def test_tilus_warp_grid_expressions_give_our_layouts():
    # Tilus builds the A operand's warp grid as reduce(spatial(wsm, 1, wsn, ranks=[1, 0, 2]), dims=[2]):
    # warp i * wsn + j holds row block i, replicated over j
    assert reduce(spatial(2, 1, 4, ranks=[1, 0, 2]), dims=[2]) == register_layout([2, 1], [2], [0, -4], [])
    assert reduce(spatial(1, 4, 2, ranks=[0, 2, 1]), dims=[2]) == register_layout([1, 4], [4], [-2, 0], [])
    assert concat(spatial(2), local(3)).shape == (2, 3)


# ---- shared layouts: the mode-form reference ----------------------------------------------------------
def mode_offset(shape, mode_shape, mode_strides, swizzle, index):
    """Tilus's definition: split each index into its dimension's modes, dot with the strides, swizzle."""
    offset, mode = 0, 0
    for extent, i in zip(shape, index):
        sizes, product = [], 1
        while product < extent:
            sizes.append(mode_shape[mode])
            product *= mode_shape[mode]
            mode += 1
        digits = []
        for size in reversed(sizes):
            digits.append(i % size)
            i //= size
        for digit, stride in zip(reversed(digits), mode_strides[mode - len(sizes):mode]):
            offset += digit * stride
    return swizzle(offset) if swizzle is not None else offset


def offsets(layout: SharedLayout):
    return {index: layout.offset(*index) for index in itertools.product(*map(range, layout.shape))}


@st.composite
def nested_mode_layouts(draw):
    """A mode-form layout whose modes nest within each dimension (representable with one stride)."""
    ndim = draw(st.integers(1, 3))
    shape = [draw(st.sampled_from([1, 2, 3, 4, 6, 8])) for _ in range(ndim)]
    order = draw(st.permutations(range(ndim)))
    strides, step = [0] * ndim, 1
    for d in reversed(order):
        strides[d] = step
        step *= shape[d]
    mode_shape, mode_strides = [], []
    for extent, stride in zip(shape, strides):
        inner = draw(st.sampled_from([f for f in (1, 2, 3) if extent % f == 0]))
        mode_shape += [extent // inner, inner]
        mode_strides += [stride * inner, stride]
    return shape, mode_shape, mode_strides


@settings(max_examples=60, deadline=None)
@given(nested_mode_layouts())
def test_shared_layout_matches_the_mode_definition(case):
    shape, mode_shape, mode_strides = case
    layout = shared_layout(shape, mode_shape, mode_strides)
    for index, offset in offsets(layout).items():
        assert offset == mode_offset(shape, mode_shape, mode_strides, None, index)


def test_shared_layout_refuses_modes_that_do_not_nest():
    # Tilus's layout for 16-byte columns stored column-block first: two strides in one dimension
    with pytest.raises(LayoutError, match="dimension 1 of shape \\[8, 16\\] would need modes"):
        shared_layout([8, 16], [8, 2, 8], [8, 64, 1])
    with pytest.raises(LayoutError, match="does not split shape"):
        shared_layout([8, 6], [8, 4], [4, 1])
    with pytest.raises(LayoutError, match="differ in length"):
        shared_layout([8], [8], [1, 1])


def test_shared_layout_keeps_a_swizzle():
    layout = shared_layout([8, 64], [8, 64], [64, 1], Swizzle(3, 3, 3))
    assert layout == shared_row_major(8, 64).swizzled(Swizzle(3, 3, 3))


@pytest.mark.parametrize("outer, inner", [((2, 1), (4, 8)), ((3, 1), (2, 5)), ((2, 3), (1, 1)), ((4,), (16,)),
                                          ((1, 1), (4, 4)), ((2, 1, 1), (1, 4, 8))])
def test_shared_compose_tiles_the_inner_layout(outer, inner):
    lhs, rhs = shared_row_major(*outer), shared_row_major(*inner)
    composed = shared_compose(lhs, rhs)
    assert composed.shape == tuple(a * b for a, b in zip(outer, inner))
    for index, offset in offsets(composed).items():
        a = [i // n for i, n in zip(index, inner)]
        b = [i % n for i, n in zip(index, inner)]
        assert offset == lhs.offset(*a) * rhs.cosize + rhs.offset(*b)


def test_shared_compose_keeps_an_inner_swizzle_and_refuses_the_rest():
    swizzled = shared_row_major(8, 64).swizzled(Swizzle(3, 3, 3))
    stacked = shared_compose(shared_row_major(2, 1), swizzled)
    assert stacked == shared_row_major(16, 64).swizzled(Swizzle(3, 3, 3))
    with pytest.raises(LayoutError, match="lhs .* is swizzled"):
        shared_compose(swizzled, shared_row_major(1, 1))
    with pytest.raises(LayoutError, match="would need modes"):
        shared_compose(shared_row_major(2, 2), shared_row_major(4, 4))  # 2x2 blocks of 4x4: two strides per dim
    with pytest.raises(LayoutError, match="dimension 1 of shape \\[8, 16\\] would need modes"):
        shared_compose(shared_row_major(1, 2), shared_row_major(8, 8))  # blocks side by side, block-major
    with pytest.raises(LayoutError, match="differ in rank"):
        shared_compose(shared_row_major(2), shared_row_major(2, 2))


@pytest.mark.parametrize("dims", list(itertools.permutations(range(3))))
def test_shared_permute_moves_dimensions(dims):
    layout = shared_row_major(2, 3, 4).swizzled(Swizzle(1, 0, 1))
    permuted = shared_permute(layout, dims)
    for index, offset in offsets(permuted).items():
        original = [0] * 3
        for position, d in enumerate(dims):
            original[d] = index[position]
        assert offset == layout.offset(*original)
    with pytest.raises(LayoutError, match="not a permutation"):
        shared_permute(layout, [0, 0, 1])


@pytest.mark.parametrize("layout, new_shape", [
    (shared_row_major(4, 8), [2, 16]),
    (shared_row_major(4, 8), [32]),
    (shared_row_major(2, 3, 4), [6, 4]),
    (shared_row_major(2, 3, 4), [2, 12]),
    (shared_row_major(16, 64).swizzled(Swizzle(3, 3, 3)), [2, 8, 64]),
    (shared_strides((4, 8), (16, 1)), [4, 2, 4]),
])
def test_shared_reshape_keeps_the_row_major_order_of_elements(layout, new_shape):
    reshaped = shared_reshape(layout, new_shape)
    for index, offset in offsets(reshaped).items():
        flat = sum(i * math.prod(new_shape[d + 1:]) for d, i in enumerate(index))
        original = [flat // math.prod(layout.shape[d + 1:]) % layout.shape[d] for d in range(layout.ndim)]
        assert offset == layout.offset(*original)


def test_shared_reshape_refuses_what_needs_two_strides():
    with pytest.raises(LayoutError, match="would need modes"):
        shared_reshape(shared_column_major(4, 8), [32])
    with pytest.raises(LayoutError, match="straddles"):
        shared_reshape(shared_row_major(2, 3), [3, 2])
    with pytest.raises(LayoutError, match="has 12 elements"):
        shared_reshape(shared_row_major(4, 8), [3, 4])


# ---- shared_row_major_swizzle ---------------------------------------------------------------------
def tilus_row_major_swizzle_offset(shape, nbytes, index):
    """Tilus's layout for rows of at most 128 bytes: row-major, 16-byte chunks XOR-ed with the row
    (bits log2(row / 16), shift 3)."""
    chunks = shape[-1] * nbytes // 16
    bits = chunks.bit_length() - 1
    base = (16 // nbytes).bit_length() - 1
    row_major = [math.prod(shape[d + 1:]) for d in range(len(shape))]
    swizzle = Swizzle(bits, base, 3) if bits else None
    return mode_offset(shape, shape, row_major, swizzle, index)


@pytest.mark.parametrize("shape, nbytes", [([8, 8], 2), ([16, 16], 2), ([64, 32], 2), ([64, 64], 2),
                                           ([3, 32, 64], 2), ([16, 32], 4), ([8, 128], 1), ([2, 16, 8], 4)])
def test_narrow_rows_are_tilus_layout_exactly(shape, nbytes):
    layout = shared_row_major_swizzle(shape, nbytes)
    for index, offset in offsets(layout).items():
        assert offset == tilus_row_major_swizzle_offset(shape, nbytes, index)


def ldmatrix_reads(rows: int, column: int, row0: int, vec: int):
    return [((row0 + r, column), vec) for r in range(8)]


def row_writes(layout: SharedLayout, first: int, vec: int):
    """A warp's 32 16-byte stores of consecutive chunks in row-major order from chunk ``first``."""
    chunks_per_row = layout.shape[-1] // vec
    return [(((first + t) // chunks_per_row, (first + t) % chunks_per_row * vec), vec) for t in range(32)]


@pytest.mark.parametrize("shape, nbytes", [([8, 8], 2), ([64, 32], 2), ([64, 64], 2), ([32, 128], 2), ([16, 256], 2),
                                           ([8, 96], 2), ([16, 48], 2), ([8, 24], 2), ([32, 64], 4), ([16, 384], 1),
                                           ([32, 192], 2)])
def test_every_width_serves_ldmatrix_without_conflicts(shape, nbytes):
    layout = shared_row_major_swizzle(shape, nbytes)
    vec = 16 // nbytes
    assert sorted(offsets(layout).values()) == sorted(set(offsets(layout).values()))  # one element per offset
    for row0 in range(0, shape[0], 8):
        for column in range(0, shape[1], vec):
            cost = bank_conflicts(layout, ldmatrix_reads(8, column, row0, vec), nbytes * 8)
            assert cost.conflict_free, (row0, column, cost)
    chunks = shape[0] * shape[1] // vec
    power_of_two_row = (shape[1] // vec) & (shape[1] // vec - 1) == 0
    for first in range(0, chunks - 31, 32):
        cost = bank_conflicts(layout, row_writes(layout, first, vec), nbytes * 8)
        # rows of 2^i chunks: conflict-free; other widths: a phase can straddle two rows (Tilus's too)
        assert cost.conflict_free if power_of_two_row else cost.conflict_ways <= 2, (first, cost)


def test_wide_power_of_two_rows_swizzle_without_padding():
    layout = shared_row_major_swizzle([4, 64, 128], 2)
    assert layout.cosize == layout.size == 4 * 64 * 128 and layout.swizzle == Swizzle(3, 3, 4)


@pytest.mark.parametrize("shape, nbytes, message", [
    ([64], 2, "needs at least two dimensions"),
    ([12, 64], 2, "rows \\(12\\) must be a multiple of 8"),
    ([8, 12], 2, "a row \\(24 bytes\\) a multiple of 16 bytes"),
    ([8, 64], 3, "dtype_nbytes must be 1, 2, 4, 8 or 16"),
])
def test_shapes_tilus_refuses_are_refused(shape, nbytes, message):
    with pytest.raises(LayoutError, match=message):
        shared_row_major_swizzle(shape, nbytes)

