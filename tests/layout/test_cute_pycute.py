"""tilus_tvm.layout.cute against CUTLASS's reference Python implementation, ``pycute``.

``pycute`` ships in the ``nvidia-cutlass`` wheel, which the ``test`` extra installs (the PyPI
project named ``pycute`` is an unrelated package). Results are compared as layouts: shape, stride
and printed form, where ``pycute`` prints Python tuples (``(4, 6):(1, 6)``, ``(4,):(1,)``) and
we print CuTe's ``(4,6):(1,6)``, ``(4):(1)``.

Where ``pycute`` departs from CuTe's C++ we follow C++ (see :mod:`tilus_tvm.layout.cute.algebra`),
and the tests compare what is comparable, saying so where they do:

- a size-1 mode never multiplies its stride by anything but 0, and the conventions for that stride
  differ: ``pycute``'s composition leaves ``1:d`` with the stride it reached, C++ and we give
  ``1:0`` or, when the left layout is a single mode, ``1:(d*stride)``. Where two results differ
  only there they are the same function on the domain, and are compared as functions (same
  shape, same strides on every mode of size > 1, same values);
- a size-1 mode of the right side of a composition (or of a tiler): ``pycute`` (like C++) still
  asks that its stride divide the left layout, we compose it whatever it is. ``pycute`` is handed
  such modes with stride 0, the same layout on its domain;
- ``tiled_divide`` and ``tiled_product`` with a rest mode of rank 1 given as a 1-tuple: ``pycute``
  unpacks it, C++ (``repeat<1>(_)`` is a single ``_``) and we keep it; compared flattened;
- a left layout whose last leaf has size 1: ``pycute``'s coalesce drops it, stride included, so
  its composition does not extend the layout past its size; it is handed the same function with
  that leaf's size made 2 (the last leaf takes every index past the others either way);
- ``right_inverse`` of a non-injective layout: ``pycute`` stops at a stride-0 mode and breaks ties
  between equal strides by shape; both results are checked to be right inverses;
- ``complement``'s default cotarget: ``pycute`` uses 1, C++ and we the cosize, so it is passed;
- ``logical_divide`` completes the tiler up to ``shape(layout)`` in C++ and here, up to
  ``size(layout)`` in ``pycute``: compared where the two complements agree;
- where ``pycute`` has no result but does not say so (a shape that does not divide is floor
  divided and elements are lost; a non-injective complement gets a 0 in its shape), C++ fails a
  ``static_assert`` and we raise.
"""
import itertools

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import tilus_tvm.cute as cute
from tilus_tvm.errors import LayoutError
from tilus_tvm.layout.cute import int_tuple as it

pycute = pytest.importorskip("pycute")
if not hasattr(pycute, "composition"):
    pytest.skip("the installed pycute is not CUTLASS's (install nvidia-cutlass)", allow_module_level=True)

L = cute.Layout


# ---- generators ----------------------------------------------------------------------------------
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
        groups.append(chunk[0] if len(chunk) == 1 else draw(nestings(chunk)))
    return tuple(groups)


@st.composite
def layouts(draw, max_rank=4, max_shape=4, min_stride=0, max_stride=12):
    """A random small layout: hierarchical shape, strides in ``[min_stride, max_stride]``."""
    rank = draw(st.integers(1, max_rank))
    shapes = draw(st.lists(st.integers(1, max_shape), min_size=rank, max_size=rank))
    strides = draw(st.lists(st.integers(min_stride, max_stride), min_size=rank, max_size=rank))
    profile = draw(nestings(range(rank)))
    return L(it.unflatten(tuple(shapes), profile), it.unflatten(tuple(strides), profile))


@st.composite
def compact_layouts(draw, max_rank=3, max_shape=6):
    """A compact layout (a permutation of column-major), hierarchical: what divides are applied to."""
    rank = draw(st.integers(1, max_rank))
    shapes = draw(st.lists(st.integers(1, max_shape), min_size=rank, max_size=rank))
    strides = [0] * rank
    span = 1
    for i in draw(st.permutations(range(rank))):
        strides[i] = span
        span *= shapes[i]
    profile = draw(nestings(range(rank)))
    return L(it.unflatten(tuple(shapes), profile), it.unflatten(tuple(strides), profile))


# ---- comparing with pycute ---------------------------------------------------------------------
def to_pycute(layout):
    return pycute.Layout(layout.shape, layout.stride)


def pycute_str(layout):
    """``pycute``'s printed layout in CuTe's notation: no spaces, ``(4)`` for the 1-tuple ``(4,)``."""
    return str(layout).replace(" ", "").replace(",)", ")")


def assert_same(ours, theirs):
    """The same layout: shape, stride and printed form; or, where only the strides of size-1
    leaves differ (which no coordinate of the domain reads), the same function on the domain.
    Returns ``"layout"`` or ``"function"``: how they compared."""
    if (ours.shape, ours.stride) == (theirs.shape, theirs.stride):
        assert str(ours) == pycute_str(theirs)
        return "layout"
    assert ours.shape == theirs.shape, (str(ours), str(theirs))
    for s, d, e in zip(it.flatten(ours.shape), it.flatten(ours.stride), it.flatten(theirs.stride)):
        assert s == 1 or d == e, (str(ours), str(theirs))
    assert [ours(i) for i in range(ours.size)] == [theirs(i) for i in range(ours.size)]
    return "function"


def assert_same_tiled(ours, theirs):
    """``tiled_*`` results: the tile mode as layouts, the whole flattened (see the module
    docstring: ``pycute`` unpacks a rest mode that is a 1-tuple, C++ and we keep it)."""
    assert_same(ours[0], theirs[0])
    assert_same(cute.flatten(ours), pycute.Layout(it.flatten(theirs.shape), it.flatten(theirs.stride)))


def pycute_result(fn, *args, size=None):
    """``fn(*args)``, or ``None`` where ``pycute`` has no result: it fails an assertion, or gives a
    layout with a 0 in its shape or (when ``size`` is given) of another size than promised."""
    try:
        result = fn(*args)
    except AssertionError:
        return None
    if 0 in it.flatten(result.shape) or (size is not None and pycute.size(result) != size):
        return None
    return result


def extending_lhs(lhs):
    """``lhs`` for ``pycute``'s composition: its last leaf of size 1 made size 2, the same function
    on all non-negative ints, which ``pycute``'s coalesce then keeps (see the module docstring)."""
    shapes = list(it.flatten(lhs.shape))
    if shapes[-1] == 1:
        shapes[-1] = 2
    return pycute.Layout(it.unflatten(tuple(shapes), lhs.shape), lhs.stride)


def unit_modes_zeroed(layout):
    """``layout`` for ``pycute`` with the stride of every size-1 leaf made 0: the same layout on
    its domain, whose size-1 leaves ``pycute`` then composes to ``1:0`` without asking that their
    stride divide the left layout (see the module docstring)."""
    strides = tuple(0 if s == 1 else d for s, d in zip(it.flatten(layout.shape), it.flatten(layout.stride)))
    return pycute.Layout(layout.shape, it.unflatten(strides, layout.stride))


def check_composition(lhs, rhs):
    """Our composition against ``pycute``'s; ``pycute`` failing, we must refuse."""
    theirs = pycute_result(pycute.composition, extending_lhs(lhs), unit_modes_zeroed(rhs), size=rhs.size)
    if theirs is None:
        with pytest.raises(LayoutError, match=r"composition\(.*does not divide"):
            cute.composition(lhs, rhs)
        return "refused"
    return assert_same(cute.composition(lhs, rhs), theirs)


# ---- the cases where we used to refuse ----------------------------------------------------------
def test_layouts_evaluate_past_their_size_as_pycute_does():
    for layout in [L(4, 1), L((2, (2, 2)), (4, (1, 2))), L((3, 1), (1, 7)), L((2, 3), (3, 1)), L(1, 5)]:
        theirs = to_pycute(layout)
        assert [layout(i) for i in range(4 * layout.size)] == [theirs(i) for i in range(4 * layout.size)]
    nested = L((2, (2, 2)), (4, (1, 2)))
    for coord in [(2, 0), (0, 4), (0, (2, 0)), (3, (1, 5))]:
        assert nested(coord) == to_pycute(nested)(coord)


def test_composition_past_the_size_of_lhs_matches_pycute():
    assert_same(cute.composition(L(4, 1), L(4, 2)), pycute.composition(pycute.Layout(4, 1), pycute.Layout(4, 2)))
    assert_same(cute.composition(L(1, 0), 4), pycute.composition(pycute.Layout(1, 0), 4))
    assert str(cute.composition(L(4, 1), L(4, 2))) == "4:2" and str(cute.composition(L(1, 0), 4)) == "4:0"
    # pycute coalesces the trailing 1:5 away, C++ (coalesce_x) keeps its stride and extends it
    assert str(pycute.composition(pycute.Layout(1, 5), 4)) == "4:0"
    assert str(cute.composition(L(1, 5), 4)) == "4:5" == str(pycute.composition(pycute.Layout(2, 5), 4))


def test_complement_of_strides_that_are_not_multiples_matches_pycute():
    layout = L((4, 6), (1, 6))
    assert str(cute.complement(layout)) == "1:0"
    assert_same(cute.complement(layout), pycute.complement(to_pycute(layout), layout.cosize))
    for cotarget in [1, 24, 35, 36, 37, 72, 100]:
        assert_same(cute.complement(layout, cotarget), pycute.complement(to_pycute(layout), cotarget))
    assert_same(cute.complement(L((2, 3), (1, 5)), 60), pycute.complement(pycute.Layout((2, 3), (1, 5)), 60))


def test_composition_with_carries_matches_pycute():
    for lhs, rhs in [(L((2, 2), (1, 1)), L((2, 2), (1, 1))), (L((6, 3), (1, 10)), L((2, 4), (3, 1))),
                     (L((4, 8), (8, 1)), L((2, 8), (2, 1)))]:
        with pytest.raises(LayoutError, match="overlap"):
            cute.composition(lhs, rhs, strict=True)
        assert_same(cute.composition(lhs, rhs), pycute.composition(to_pycute(lhs), to_pycute(rhs)))


def test_left_inverse_where_the_complement_leaves_holes_matches_pycute():
    layout = L((4, 6), (1, 6))
    assert_same(cute.left_inverse(layout), pycute.left_inverse(to_pycute(layout)))


# ---- coalesce and filter -------------------------------------------------------------------------
@settings(max_examples=300, deadline=None)
@given(layouts(min_stride=-6))
def test_coalesce_matches_pycute(layout):
    assert_same(cute.coalesce(layout), pycute.coalesce(to_pycute(layout)))


@settings(max_examples=150, deadline=None)
@given(layouts(min_stride=-6), st.data())
def test_coalesce_by_mode_matches_pycute(layout, data):
    profile = (1,) * data.draw(st.integers(1, layout.rank))
    assert_same(cute.coalesce(layout, profile), pycute.coalesce(to_pycute(layout), profile))


@settings(max_examples=300, deadline=None)
@given(layouts(min_stride=-6))
def test_filter_matches_pycute(layout):
    assert_same(cute.filter(layout), pycute.filter(to_pycute(layout)))


@settings(max_examples=200, deadline=None)
@given(layouts(min_stride=-6))
def test_evaluation_matches_pycute_past_the_size(layout):
    theirs = to_pycute(layout)
    assert [layout(i) for i in range(3 * layout.size)] == [theirs(i) for i in range(3 * layout.size)]
    assert layout.cosize == theirs.cosize() or min(it.flatten(layout.stride)) < 0


# ---- complement ----------------------------------------------------------------------------------
@settings(max_examples=400, deadline=None)
@given(layouts(max_stride=16), st.one_of(st.none(), st.integers(1, 100)))
def test_complement_matches_pycute(layout, cotarget):
    theirs = pycute_result(pycute.complement, to_pycute(layout), layout.cosize if cotarget is None else cotarget)
    if theirs is None:
        with pytest.raises(LayoutError, match=r"complement\(.*not injective"):
            cute.complement(layout, cotarget)
        return
    assert_same(cute.complement(layout, cotarget), theirs)


# ---- composition ---------------------------------------------------------------------------------
@settings(max_examples=400, deadline=None)
@given(layouts(max_rank=3, max_stride=8), layouts(max_rank=3, max_stride=6))
def test_composition_matches_pycute(lhs, rhs):
    check_composition(lhs, rhs)


def test_composition_matches_pycute_exhaustive():
    shapes, strides = [1, 2, 3, 4], [0, 1, 2, 3, 4, 6]
    flat = [L(s, d) for s, d in itertools.product(shapes, strides)]
    flat += [L((s0, s1), (d0, d1)) for s0, s1 in itertools.product(shapes, repeat=2)
             for d0, d1 in itertools.product(strides, repeat=2)]
    outcomes = {"layout": 0, "function": 0, "refused": 0, "carries": 0}
    for lhs in flat[::5]:
        for rhs in flat[::7]:
            outcome = check_composition(lhs, rhs)
            outcomes[outcome] += 1
            if outcome != "refused":
                try:
                    cute.composition(lhs, rhs, strict=True)
                except LayoutError as error:
                    assert "overlap" in str(error)
                    outcomes["carries"] += 1  # CuTe's result, which strict composition refuses
    assert outcomes["layout"] > outcomes["refused"] > outcomes["function"] > outcomes["carries"] > 0


@settings(max_examples=200, deadline=None)
@given(layouts(max_rank=3, max_stride=8), st.integers(1, 12))
def test_composition_with_an_int_matches_pycute(lhs, n):
    check_composition(lhs, L(n))
    theirs = pycute_result(pycute.composition, extending_lhs(lhs), n, size=n)
    if theirs is not None:
        assert_same(cute.composition(lhs, n), theirs)


@settings(max_examples=200, deadline=None)
@given(layouts(max_rank=3, max_stride=8), st.data())
def test_composition_with_a_tiler_matches_pycute(lhs, data):
    # a full-rank tiler: C++ drops the modes of lhs past the tiler, pycute keeps them
    tiler = tuple(data.draw(st.one_of(st.none(), st.integers(1, 6), layouts(max_rank=2, max_stride=4)))
                  for _ in range(lhs.rank))
    theirs_lhs = pycute.make_layout(*(to_pycute(m) if t is None else extending_lhs(m) for m, t in zip(lhs, tiler)))
    theirs_tiler = tuple(unit_modes_zeroed(t) if isinstance(t, L) else t for t in tiler)
    sizes = [mode.size if t is None else cute.size(t) if isinstance(t, L) else t for mode, t in zip(lhs, tiler)]
    try:
        theirs = pycute.composition(theirs_lhs, theirs_tiler)
    except AssertionError:
        theirs = None
    if theirs is None or [pycute.size(theirs[i]) for i in range(lhs.rank)] != sizes:
        with pytest.raises(LayoutError, match=r"composition\(.*does not divide"):
            cute.composition(lhs, tiler)
        return
    assert_same(cute.composition(lhs, tiler), theirs)


# ---- inverses ------------------------------------------------------------------------------------
def is_injective(layout):
    return len({layout(i) for i in range(layout.size)}) == layout.size


@settings(max_examples=300, deadline=None)
@given(layouts(max_stride=16))
def test_right_inverse_matches_pycute(layout):
    ours, theirs = cute.right_inverse(layout), pycute.right_inverse(to_pycute(layout))
    if is_injective(layout):
        assert_same(ours, theirs)
        return
    # pycute stops at a stride-0 mode and breaks ties by shape: two right inverses, ours from C++
    assert all(layout(ours(i)) == i for i in range(ours.size))
    assert all(layout(theirs(i)) == i for i in range(pycute.size(theirs)))


@settings(max_examples=300, deadline=None)
@given(layouts(min_stride=1, max_stride=16))
def test_left_inverse_matches_pycute(layout):
    try:
        ours = cute.left_inverse(layout)
    except LayoutError as error:
        assert "not injective" in str(error)
        assert pycute_result(pycute.complement, to_pycute(layout), 1) is None
        return
    assert is_injective(layout)
    assert_same(ours, pycute.left_inverse(to_pycute(layout)))


# ---- divides and products ----------------------------------------------------------------------
def same_cotarget(tiler, layout):
    """Whether completing ``tiler`` up to ``shape(layout)`` (C++) and up to ``size(layout)``
    (``pycute``) agree; both refuse alike, the cotarget playing no part in refusing."""
    try:
        return cute.complement(tiler, layout.shape) == cute.complement(tiler, layout.size)
    except LayoutError:
        return True


def pycute_divide(layout, tiler):
    """``pycute``'s logical_divide where it has a result (its complement and composition neither
    fail nor lose elements), else ``None``."""
    theirs_tiler = unit_modes_zeroed(tiler)
    rest = pycute_result(pycute.complement, theirs_tiler, layout.size)
    if rest is None:
        return None
    whole = pycute.make_layout(theirs_tiler, rest)
    if pycute_result(pycute.composition, to_pycute(layout), whole, size=pycute.size(whole)) is None:
        return None
    return pycute.logical_divide(to_pycute(layout), theirs_tiler)


def pycute_product(block, tiler):
    """``pycute``'s logical_product where it has a result, else ``None``."""
    theirs_tiler = unit_modes_zeroed(tiler)
    rest = pycute_result(pycute.complement, to_pycute(block), block.size * tiler.cosize)
    if rest is None or pycute_result(pycute.composition, rest, theirs_tiler, size=tiler.size) is None:
        return None
    return pycute.logical_product(to_pycute(block), theirs_tiler)


@settings(max_examples=300, deadline=None)
@given(compact_layouts(), layouts(max_rank=3, max_shape=4, min_stride=1, max_stride=8))
def test_logical_divide_matches_pycute(layout, tiler):
    assume(it.flatten(layout.shape)[-1] > 1 and same_cotarget(tiler, layout))
    theirs = pycute_divide(layout, tiler)
    if theirs is None:
        with pytest.raises(LayoutError, match=r"logical_divide\("):
            cute.logical_divide(layout, tiler)
        return
    theirs_layout, theirs_tiler = to_pycute(layout), unit_modes_zeroed(tiler)
    assert_same(cute.logical_divide(layout, tiler), theirs)
    assert_same(cute.zipped_divide(layout, tiler), pycute.zipped_divide(theirs_layout, theirs_tiler))
    assert_same_tiled(cute.tiled_divide(layout, tiler), pycute.tiled_divide(theirs_layout, theirs_tiler))


@settings(max_examples=200, deadline=None)
@given(compact_layouts(max_rank=3), st.data())
def test_divides_by_a_tuple_tiler_match_pycute(layout, data):
    assume(layout.rank > 1)
    count = data.draw(st.integers(1, layout.rank))
    tiler = tuple(data.draw(layouts(max_rank=2, max_shape=4, min_stride=1, max_stride=4)) for _ in range(count))
    assume(all(it.flatten(layout[i].shape)[-1] > 1 and same_cotarget(t, layout[i]) for i, t in enumerate(tiler)))
    if any(pycute_divide(layout[i], t) is None for i, t in enumerate(tiler)):
        with pytest.raises(LayoutError, match=r"logical_divide\("):
            cute.logical_divide(layout, tiler)
        return
    theirs_layout, theirs_tiler = to_pycute(layout), tuple(unit_modes_zeroed(t) for t in tiler)
    assert_same(cute.logical_divide(layout, tiler), pycute.logical_divide(theirs_layout, theirs_tiler))
    assert_same(cute.zipped_divide(layout, tiler), pycute.zipped_divide(theirs_layout, theirs_tiler))
    assert_same_tiled(cute.tiled_divide(layout, tiler), pycute.tiled_divide(theirs_layout, theirs_tiler))


def test_logical_divide_completes_the_tiler_up_to_the_shape_as_cpp_does():
    # ceil_div((6,4), 4) = (2,4) mode by mode (C++), where pycute's 24/4 gives 6
    assert str(cute.complement(L(4), (6, 4))) == "8:4"
    assert str(pycute.complement(pycute.Layout(4), 24)) == "6:4"
    assert not same_cotarget(L(4), L((6, 4)))
    # where they agree, so do the divides
    assert_same(cute.logical_divide(L((8, 6)), L(4)), pycute.logical_divide(pycute.Layout((8, 6)), pycute.Layout(4)))


@settings(max_examples=300, deadline=None)
@given(layouts(max_rank=3, max_shape=4, min_stride=1, max_stride=8), layouts(max_rank=3, max_shape=4, max_stride=8))
def test_logical_product_matches_pycute(block, tiler):
    theirs = pycute_product(block, tiler)
    if theirs is None:
        with pytest.raises(LayoutError, match=r"logical_product\("):
            cute.logical_product(block, tiler)
        return
    theirs_block, theirs_tiler = to_pycute(block), unit_modes_zeroed(tiler)
    assert_same(cute.logical_product(block, tiler), theirs)
    assert_same(cute.zipped_product(block, tiler), pycute.zipped_product(theirs_block, theirs_tiler))
    assert_same_tiled(cute.tiled_product(block, tiler), pycute.tiled_product(theirs_block, theirs_tiler))


@settings(max_examples=150, deadline=None)
@given(layouts(max_rank=3, max_shape=4, min_stride=1, max_stride=8), st.data())
def test_products_by_a_tuple_tiler_match_pycute(block, data):
    count = data.draw(st.integers(1, block.rank))
    tiler = tuple(data.draw(layouts(max_rank=2, max_shape=3, max_stride=4)) for _ in range(count))
    if any(pycute_product(block[i], t) is None for i, t in enumerate(tiler)):
        with pytest.raises(LayoutError, match=r"logical_product\("):
            cute.logical_product(block, tiler)
        return
    theirs_block, theirs_tiler = to_pycute(block), tuple(unit_modes_zeroed(t) for t in tiler)
    assert_same(cute.logical_product(block, tiler), pycute.logical_product(theirs_block, theirs_tiler))
    assert_same(cute.zipped_product(block, tiler), pycute.zipped_product(theirs_block, theirs_tiler))
    assert_same_tiled(cute.tiled_product(block, tiler), pycute.tiled_product(theirs_block, theirs_tiler))
