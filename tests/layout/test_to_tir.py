"""Layouts as TVM IndexMaps: every map evaluated at every point and compared with the Python mapping."""
import doctest
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tilus_tvm.errors import LayoutError
from tilus_tvm.layout.atoms import get_ldmatrix_atom, get_mma_atom, mma_atoms
from tilus_tvm.layout.register import RegisterLayout, column_local, column_spatial, local, spatial
from tilus_tvm.layout.shared import shared_column_major, shared_padded, shared_row_major, shared_strides
from tilus_tvm.layout.swizzle import Swizzle
from tilus_tvm.layout.to_tir import register_index_map, register_inverse_index_map, shared_index_map


def evaluate(index_map, point):
    return tuple(int(x) for x in index_map.map_indices(list(point)))


def points(shape):
    return itertools.product(*(range(n) for n in shape))


def check_register_maps(layout):
    forward = register_index_map(layout)
    inverse = register_inverse_index_map(layout)
    assert len(forward.initial_indices) == len(layout.shape)
    assert len(forward.final_indices) == 2 and len(inverse.final_indices) == len(layout.shape)
    for index in points(layout.shape):
        assert evaluate(forward, index) == (layout.thread_of(index, 0), layout.local_of(index)), index
    for thread, slot in points((layout.num_threads, layout.local_size)):
        assert evaluate(inverse, (thread, slot)) == layout.logical(thread, slot), (thread, slot)


def check_shared_map(layout):
    index_map = shared_index_map(layout)
    assert len(index_map.final_indices) == 1
    for index in points(layout.shape):
        assert evaluate(index_map, index) == (layout.offset(*index),), index


# ---- register layouts ------------------------------------------------------------------------
REGISTER_LAYOUTS = {
    "spatial": spatial(4, 8),
    "local": local(2, 3),
    "column_spatial": column_spatial(3, 4),
    "column_local": column_local(4, 2),
    "seed_mma_c": local(2, 1).spatial(8, 4).local(1, 2),
    "seed_mapping_example": RegisterLayout([4, 6], [2, 2, 3, 2], [0, 2], [3, 1]),
    "replicated": RegisterLayout([4, 6], [2, 2, 3, 2], [0, -2, 2], [3, 1]),
    "replicated_front": RegisterLayout([4], [4], [-3, 0], []),
    "three_dims": local(2, 1, 2).spatial(2, 4, 2).column_local(1, 2, 2),
    "medium_64x64": local(2, 2).spatial(4, 8).column_local(2, 2).spatial(2, 1).local(2, 4),
}


@pytest.mark.parametrize("name", sorted(REGISTER_LAYOUTS))
def test_register_maps_match_layout(name):
    check_register_maps(REGISTER_LAYOUTS[name])


@pytest.mark.parametrize("atom", mma_atoms(), ids=lambda atom: atom.ptx)
def test_register_maps_of_mma_atoms(atom):
    for layout in (atom.a_layout, atom.b_layout, atom.c_layout):
        check_register_maps(layout)


@pytest.mark.parametrize("num, trans", [(1, False), (2, False), (4, False), (1, True), (2, True), (4, True)])
def test_register_maps_of_ldmatrix(num, trans):
    check_register_maps(get_ldmatrix_atom(num, trans).layout)


def test_replicated_layout_inverse_covers_every_replica():
    layout = REGISTER_LAYOUTS["replicated"]
    inverse = register_inverse_index_map(layout)
    for index in points(layout.shape):
        for thread, slot in layout.holders(*index):
            assert evaluate(inverse, (thread, slot)) == index
    # no pre-defined inverse for a replicated layout: the forward map is not a bijection
    assert register_index_map(layout).inverse_index_map is None


def test_predefined_inverse_of_bijective_layout():
    layout = mma_atoms()[0].a_layout
    forward = register_index_map(layout)
    inverse = forward.inverse(list(layout.shape))
    for thread, slot in points((32, layout.local_size)):
        assert evaluate(inverse, (thread, slot)) == layout.logical(thread, slot)


def test_index_dtype_is_int32_by_default():
    index_map = register_index_map(spatial(2, 3))
    assert all(str(v.ty) == "int32" for v in index_map.initial_indices)
    assert all(str(e.ty) == "int32" for e in index_map.final_indices)  # constants too (local is always 0)
    assert str(shared_index_map(shared_row_major(4, 4), index_dtype="int64").initial_indices[0].ty) == "int64"


def test_printed_maps():
    atom = mma_atoms()[0]
    assert str(register_index_map(atom.c_layout)) == (
        "T.index_map(lambda i0, i1: (i0 % 8 * 4 + i1 // 2, i0 // 8 * 2 + i1 % 2), "
        "inverse_index_map=lambda thread, local: (local // 2 * 8 + thread // 4, thread % 4 * 2 + local % 2))")
    assert str(shared_index_map(shared_row_major(16, 64).swizzled(Swizzle(3, 3, 3)))) == (
        "T.index_map(lambda i0, i1: (i0 * 64 + i1 ^ (i0 * 64 + i1 & 448) >> 3,))")


def test_errors():
    with pytest.raises(LayoutError, match="register_index_map: expected a RegisterLayout, got SharedLayout"):
        register_index_map(shared_row_major(2, 2))
    with pytest.raises(LayoutError, match="shared_index_map: expected a SharedLayout, got RegisterLayout"):
        shared_index_map(spatial(2, 2))
    with pytest.raises(LayoutError, match="register_inverse_index_map: expected a RegisterLayout"):
        register_inverse_index_map(None)


# ---- shared layouts --------------------------------------------------------------------------
SHARED_LAYOUTS = {
    "row_major": shared_row_major(8, 16),
    "column_major": shared_column_major(8, 16),
    "strided": shared_strides((4, 6), (13, 2)),
    "padded": shared_padded((8, 32), 8),
    "three_dims": shared_padded((2, 4, 8), 4),
    "swizzle_64_cols": shared_row_major(16, 64).swizzled(Swizzle(3, 3, 3)),
    "swizzle_32_cols": shared_row_major(16, 32).swizzled(Swizzle(2, 3, 3)),
    "swizzle_f32": shared_row_major(8, 32).swizzled(Swizzle(3, 2, 3)),
    "swizzle_padded_permutation": shared_padded((8, 64), 64).swizzled(Swizzle(3, 3, 4)),
    "swizzle_column_major": shared_column_major(64, 16).swizzled(Swizzle(3, 3, 3)),
}


@pytest.mark.parametrize("name", sorted(SHARED_LAYOUTS))
def test_shared_map_matches_layout(name):
    check_shared_map(SHARED_LAYOUTS[name])


# ---- properties ------------------------------------------------------------------------------
@st.composite
def register_layouts(draw):
    ndim = draw(st.integers(1, 3))
    shape, mode_shape = [], []
    for _ in range(ndim):
        modes = draw(st.lists(st.sampled_from([2, 3, 4]), min_size=0, max_size=2))
        mode_shape += modes
        size = 1
        for m in modes:
            size *= m
        shape.append(size)
    modes = list(range(len(mode_shape)))
    is_spatial = draw(st.lists(st.booleans(), min_size=len(modes), max_size=len(modes)))
    spatial_modes = draw(st.permutations([m for m, s in zip(modes, is_spatial) if s]))
    local_modes = draw(st.permutations([m for m, s in zip(modes, is_spatial) if not s]))
    replication = draw(st.sampled_from([0, 0, 2, 3]))
    if replication:
        position = draw(st.integers(0, len(spatial_modes)))
        spatial_modes = spatial_modes[:position] + [-replication] + spatial_modes[position:]
    return RegisterLayout(shape, mode_shape, spatial_modes, local_modes)


@settings(max_examples=40, deadline=None)
@given(register_layouts())
def test_property_register_maps_match_layout(layout):
    check_register_maps(layout)


@st.composite
def shared_layouts(draw):
    ndim = draw(st.integers(1, 3))
    shape = draw(st.lists(st.integers(1, 8), min_size=ndim, max_size=ndim))
    order = draw(st.permutations(list(range(ndim))))
    strides = [0] * ndim
    acc = 1
    for d in reversed(order):  # nested strides with random gaps: always injective
        strides[d] = acc
        acc = acc * shape[d] + draw(st.integers(0, 3))
    layout = shared_strides(shape, strides)
    bits = draw(st.integers(0, 2))
    swizzle = Swizzle(bits, draw(st.integers(0, 2)), draw(st.integers(max(bits, 1), 3)))
    try:
        return layout.swizzled(swizzle)
    except LayoutError:
        return layout


@settings(max_examples=40, deadline=None)
@given(shared_layouts())
def test_property_shared_map_matches_layout(layout):
    check_shared_map(layout)


# ---- use in a TVM schedule -------------------------------------------------------------------
def test_bijective_register_map_drives_transform_layout():
    import tvm
    from tvm.script import tirx as T

    @T.prim_func(s_tir=True)
    def copy(a: T.Buffer((16, 16), "float16"), b: T.Buffer((16, 16), "float16")):
        staged = T.sblock_alloc_buffer((16, 16), "float16")
        for i, j in T.grid(16, 16):
            with T.sblock("stage"):
                vi, vj = T.axis.remap("SS", [i, j])
                staged[vi, vj] = a[vi, vj]
        for i, j in T.grid(16, 16):
            with T.sblock("out"):
                vi, vj = T.axis.remap("SS", [i, j])
                b[vi, vj] = staged[vi, vj]

    layout = get_mma_atom("float16", "float16", "float32").a_layout  # m16n8k16: A is [16, 16]
    sch = tvm.s_tir.Schedule(copy)
    sch.transform_layout(sch.get_sblock("stage"), ("write", 0), register_index_map(layout))
    script = sch.mod["main"].script()
    assert 'T.sblock_alloc_buffer((32, 8), "float16")' in script  # (thread, local)
    assert "staged[vi % 8 * 4 + vj % 8 // 2, vj // 8 * 4 + vi // 8 * 2 + vj % 2] = a[vi, vj]" in script


def test_docstring_examples():
    from tilus_tvm.layout import to_tir as module

    results = doctest.testmod(module)
    assert results.attempted > 0 and results.failed == 0
