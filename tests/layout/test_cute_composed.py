"""tilus_tvm.layout.cute.composed: composed and identity layouts; seed 003's examples run."""
import itertools

import numpy as np
import pytest
import torch

import tilus_tvm.cute as cute
from tilus_tvm.errors import LayoutError

L = cute.Layout


# ---- seed 003 ------------------------------------------------------------------------------------
def test_seed_custom_transformation():
    def inner(c):
        x, y = c
        return x, y + 1

    layout = cute.make_composed_layout(inner, (1, 0), cute.make_identity_layout(shape=(8, 4)))
    assert str(layout) == "inner o (1,0) o (8,4):(1@0,1@1)"
    assert layout(0) == (1, 1)
    # everywhere: R(c) = inner(offset + outer(c))
    for x, y in itertools.product(range(8), range(4)):
        assert layout(x, y) == (x + 1, y + 1)
        assert layout(x + 8 * y) == (x + 1, y + 1)


@pytest.mark.parametrize("backend", ["torch", "numpy"])
def test_seed_gather(backend):
    shape = (16,)
    if backend == "torch":
        offset_tensor = torch.randint(0, 256, shape, dtype=torch.int32)
        data_tensor = torch.arange(0, 256, dtype=torch.int32)
    else:
        offset_tensor = np.random.default_rng().integers(0, 256, shape, dtype=np.int32)
        data_tensor = np.arange(0, 256, dtype=np.int32)

    def inner(c):
        return offset_tensor[c]

    gather_layout = cute.make_composed_layout(inner, 0, cute.make_layout(shape))
    assert gather_layout.shape == (16,) and gather_layout.size == cute.size(shape) == 16
    for i in range(cute.size(shape)):
        assert gather_layout(i) == offset_tensor[i]
        assert data_tensor[gather_layout(i)] == data_tensor[offset_tensor[i]]
    # "layout operations like slice, partition can still be applied on outer"
    tile = cute.composition(gather_layout, L(4, 2))
    assert [int(tile(i)) for i in range(4)] == [int(offset_tensor[2 * i]) for i in range(4)]


# ---- identity layouts ------------------------------------------------------------------------------
def test_identity_layout():
    identity = cute.make_identity_layout((2, (3, 2)))
    assert str(identity) == "(2,(3,2)):(1@0,(1@1@0,1@1@1))"
    assert identity.size == 12 and identity.rank == 2 and identity.depth == 2
    for i in range(12):
        assert identity(i) == cute.idx2crd(i, (2, (3, 2)))
    assert identity(1, 4) == (1, (1, 1))
    assert cute.make_identity_layout(8)(5) == (5,)
    with pytest.raises(LayoutError, match="out of range"):
        identity(12, strict=True)
    # past its size, the last mode takes the overflow (CuTe's idx2crd)
    assert identity(12) == (0, (0, 2)) and identity(1, 7) == (1, (1, 2))
    with pytest.raises(LayoutError, match="negative"):
        identity(-1)


# ---- swizzles and layouts as the inner map -------------------------------------------------------
def test_swizzle_composed_with_a_layout():
    swizzle = cute.Swizzle(3, 3, 3)
    outer = L((8, 64), (64, 1))
    swizzled = cute.composition(swizzle, outer)
    assert isinstance(swizzled, cute.ComposedLayout)
    assert str(swizzled) == "Sw<3,3,3> o 0 o (8,64):(64,1)"
    assert swizzled == cute.make_composed_layout(swizzle, 0, outer)
    for r, c in itertools.product(range(8), range(64)):
        assert swizzled(r, c) == swizzle(64 * r + c)
    # rows of 8 16-byte chunks: chunk k of row r lands in chunk k ^ r
    assert [swizzled(r, 0) // 8 for r in range(8)] == [r * 8 + r for r in range(8)]


def test_layout_as_inner_with_an_int_offset():
    composed = cute.make_composed_layout(L((4, 4), (4, 1)), 3, L(8, 2))
    assert str(composed) == "(4,4):(4,1) o 3 o 8:2"
    assert [composed(i) for i in range(6)] == [L((4, 4), (4, 1))(3 + 2 * i) for i in range(6)]


def test_composition_of_a_composed_layout_tiles_its_outer_layout():
    swizzled = cute.make_composed_layout(cute.Swizzle(2, 0, 2), 0, L((4, 4), (4, 1)))
    tile = cute.composition(swizzled, (L(2, 2), L(2, 1)))
    assert isinstance(tile, cute.ComposedLayout) and tile.shape == (2, 2)
    for i, j in itertools.product(range(2), range(2)):
        assert tile(i, j) == swizzled(2 * i, j)
    assert str(tile) == "Sw<2,0,2> o 0 o (2,2):(8,1)"


def test_composed_layout_errors():
    with pytest.raises(LayoutError, match="inner must be"):
        cute.make_composed_layout(5, 0, L(4))
    with pytest.raises(LayoutError, match="outer must be"):
        cute.make_composed_layout(abs, 0, "x")
    with pytest.raises(LayoutError, match=r"offset \(1,0\) does not match"):
        cute.make_composed_layout(abs, (1, 0), L(4))(2)
    with pytest.raises(LayoutError, match="int offset 2 cannot be added"):
        cute.make_composed_layout(lambda c: c, 2, cute.make_identity_layout((2, 2)))(0)
