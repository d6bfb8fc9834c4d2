"""Register layouts: which thread(s) of a thread block hold each element of a tile, and where.

A register layout is the Tilus representation (seed 000). The tensor ``shape`` is split into
*modes*: each dimension ``d`` of size ``shape[d]`` is factored into consecutive modes (major to
minor), ``mode_shape`` lists all modes of all dimensions in order. Every mode is either *spatial*
(it selects the thread) or *local* (it selects the register slot inside a thread):

    thread_id = row_major(mode_index[s] for s in spatial_modes)
    local_id  = row_major(mode_index[l] for l in local_modes)

A negative entry ``-r`` in ``spatial_modes`` is a *replication* of size ``r``: it takes part in
the thread id like a mode of size ``r`` but selects no element, so ``r`` threads hold the same
element. The layout is kept in canonical form: modes of size 1 are pruned, and two modes of one
dimension that are adjacent in ``mode_shape`` and adjacent in the same list are merged, so two
layouts are equal exactly when their representations are equal.

Every mapping below is written with ``+ * // %`` only, so it works on Python ints and, unchanged,
on TVM ``PrimExpr`` (the lowering indexes registers through these very functions).
"""
from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass
from typing import Any, Sequence

from tilus_tvm.errors import LayoutError

Index = Any  # an int, or a TVM PrimExpr when the mapping is evaluated symbolically


def row_major_unravel(index: Index, sizes: Sequence[int]) -> list[Index]:
    """Digits of ``index`` in the mixed radix ``sizes`` (first digit most significant)."""
    digits: list[Index] = []
    for size in reversed(sizes):
        digits.append(index % size)
        index = index // size
    return digits[::-1]


def row_major_ravel(digits: Sequence[Index], sizes: Sequence[int]) -> Index:
    """Inverse of :func:`row_major_unravel`: ``sum(digit[i] * prod(sizes[i+1:]))``."""
    if not digits:
        return 0
    acc = digits[0]
    for digit, size in zip(digits[1:], sizes[1:]):
        acc = acc * size + digit
    return acc


def _as_int_tuple(values: Sequence[int], what: str) -> tuple[int, ...]:
    if isinstance(values, int):
        values = [values]
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int):
            raise LayoutError(f"register_layout: {what} must hold Python ints, got {v!r} in {list(values)}")
        out.append(int(v))
    return tuple(out)


def _group_modes(shape: Sequence[int], mode_shape: Sequence[int]) -> list[list[int]]:
    """Assign consecutive modes to dimensions: the modes of dim ``d`` multiply to ``shape[d]``."""
    groups: list[list[int]] = []
    mode = 0
    for dim, extent in enumerate(shape):
        group: list[int] = []
        product = 1
        while product < extent and mode < len(mode_shape):
            product *= mode_shape[mode]
            group.append(mode)
            mode += 1
        if product != extent:
            raise LayoutError(
                f"register_layout: mode_shape {list(mode_shape)} does not split shape {list(shape)}: "
                f"the modes of dimension {dim} multiply to {product}, expected {extent}"
            )
        groups.append(group)
    if mode != len(mode_shape):
        raise LayoutError(
            f"register_layout: mode_shape {list(mode_shape)} has more elements than shape {list(shape)}"
        )
    return groups


def _canonicalize(shape, mode_shape, spatial_modes, local_modes):
    shape = _as_int_tuple(shape, "shape")
    mode_shape = _as_int_tuple(mode_shape, "mode_shape")
    spatial_modes = _as_int_tuple(spatial_modes, "spatial_modes")
    local_modes = _as_int_tuple(local_modes, "local_modes")
    desc = (f"shape={list(shape)}, mode_shape={list(mode_shape)}, spatial_modes={list(spatial_modes)}, "
            f"local_modes={list(local_modes)}")
    if any(s < 1 for s in shape) or any(m < 1 for m in mode_shape):
        raise LayoutError(f"register_layout: sizes must be positive ({desc})")
    num_modes = len(mode_shape)
    for m in spatial_modes + local_modes:
        if m >= num_modes:
            raise LayoutError(f"register_layout: mode {m} does not exist, there are {num_modes} modes ({desc})")
    for m in local_modes:
        if m < 0:
            raise LayoutError(f"register_layout: local mode {m} is negative; only spatial modes may be "
                              f"replications ({desc})")
    both = sorted(set(m for m in spatial_modes if m >= 0) & set(local_modes))
    if both:
        raise LayoutError(f"register_layout: mode {both[0]} is both spatial and local ({desc})")
    used = [m for m in spatial_modes if m >= 0] + list(local_modes)
    if len(used) != len(set(used)):
        dup = next(m for m in used if used.count(m) > 1)
        raise LayoutError(f"register_layout: mode {dup} is listed twice ({desc})")
    if set(used) != set(range(num_modes)):
        missing = sorted(set(range(num_modes)) - set(used))
        raise LayoutError(f"register_layout: mode {missing[0]} is neither spatial nor local ({desc})")
    if math.prod(shape) != math.prod(mode_shape):
        raise LayoutError(f"register_layout: shape and mode_shape have different sizes "
                          f"{math.prod(shape)} vs {math.prod(mode_shape)} ({desc})")

    # 1. prune modes of size 1 (and replications of size 1)
    keep = [m for m in range(num_modes) if mode_shape[m] > 1]
    renumber = {old: new for new, old in enumerate(keep)}
    mode_shape = [mode_shape[m] for m in keep]
    spatial = [renumber[m] if m >= 0 else m for m in spatial_modes if m < -1 or (m >= 0 and m in renumber)]
    local = [renumber[m] for m in local_modes if m in renumber]
    dim_of = {m: d for d, group in enumerate(_group_modes(shape, mode_shape)) for m in group}

    # 2. merge neighbours: modes m, m+1 of one dimension that are adjacent in one list; replications
    merged = True
    while merged:
        merged = False
        for lst in (spatial, local):
            for i in range(len(lst) - 1):
                a, b = lst[i], lst[i + 1]
                if a < 0 and b < 0:
                    lst[i : i + 2] = [a * -b]
                    merged = True
                    break
                if a >= 0 and b == a + 1 and dim_of[a] == dim_of[b]:
                    mode_shape[a : a + 2] = [mode_shape[a] * mode_shape[b]]
                    lst[i : i + 2] = [a]
                    for other in (spatial, local):
                        other[:] = [m - 1 if m > b else m for m in other]
                    dim_of = {(m - 1 if m > b else m): d for m, d in dim_of.items() if m != b}
                    merged = True
                    break
            if merged:
                break
    return shape, tuple(mode_shape), tuple(spatial), tuple(local)


@dataclass(frozen=True, init=False)
class RegisterLayout:
    """A register layout in canonical form (see the module docstring).

    >>> RegisterLayout([4, 6], [2, 2, 3, 2], [0, 2], [3, 1]).holders(3, 5)
    [(5, 3)]
    """

    shape: tuple[int, ...]
    mode_shape: tuple[int, ...]
    spatial_modes: tuple[int, ...]
    local_modes: tuple[int, ...]

    def __init__(self, shape: Sequence[int], mode_shape: Sequence[int], spatial_modes: Sequence[int],
                 local_modes: Sequence[int]):
        canonical = _canonicalize(shape, mode_shape, spatial_modes, local_modes)
        for name, value in zip(("shape", "mode_shape", "spatial_modes", "local_modes"), canonical):
            object.__setattr__(self, name, value)

    def __repr__(self) -> str:
        return (f"RegisterLayout(shape={list(self.shape)}, mode_shape={list(self.mode_shape)}, "
                f"spatial_modes={list(self.spatial_modes)}, local_modes={list(self.local_modes)})")

    __str__ = __repr__

    # ---- derived sizes -------------------------------------------------------------------------
    @functools.cached_property
    def grouped_modes(self) -> tuple[tuple[int, ...], ...]:
        """The modes of each dimension, major to minor."""
        return tuple(tuple(g) for g in _group_modes(self.shape, self.mode_shape))

    @functools.cached_property
    def spatial_shape(self) -> tuple[int, ...]:
        """Sizes of the entries of ``spatial_modes`` (replications included)."""
        return tuple(self.mode_shape[m] if m >= 0 else -m for m in self.spatial_modes)

    @functools.cached_property
    def local_shape(self) -> tuple[int, ...]:
        return tuple(self.mode_shape[m] for m in self.local_modes)

    @property
    def num_threads(self) -> int:
        """Threads the layout spreads over (replicas counted)."""
        return math.prod(self.spatial_shape)

    @property
    def local_size(self) -> int:
        """Registers (elements) each thread holds."""
        return math.prod(self.local_shape)

    @property
    def num_replicas(self) -> int:
        """How many threads hold each element."""
        return math.prod(-m for m in self.spatial_modes if m < 0)

    @property
    def is_replicated(self) -> bool:
        return self.num_replicas > 1

    @property
    def size(self) -> int:
        """Number of elements of the tile."""
        return math.prod(self.shape)

    # ---- mappings (generic: ints or PrimExprs) ------------------------------------------------
    def mode_index(self, index: Sequence[Index]) -> list[Index]:
        """Split a logical index into one digit per mode."""
        self._check_rank(index, "mode_index")
        digits: list[Index] = []
        for dim_index, group in zip(index, self.grouped_modes):
            digits.extend(row_major_unravel(dim_index, [self.mode_shape[m] for m in group]))
        return digits

    def thread_of(self, index: Sequence[Index], replica: Index = 0) -> Index:
        """The thread holding ``index``; ``replica`` (in ``[0, num_replicas)``) picks among copies."""
        digits = self.mode_index(index)
        replica_sizes = [-m for m in self.spatial_modes if m < 0]
        replica_digits = iter(row_major_unravel(replica, replica_sizes))
        spatial_digits = [digits[m] if m >= 0 else next(replica_digits) for m in self.spatial_modes]
        return row_major_ravel(spatial_digits, self.spatial_shape)

    def local_of(self, index: Sequence[Index]) -> Index:
        """The register slot holding ``index`` (the same in every replica)."""
        digits = self.mode_index(index)
        return row_major_ravel([digits[m] for m in self.local_modes], self.local_shape)

    def logical(self, thread: Index, local: Index) -> tuple[Index, ...]:
        """The logical index held by ``thread`` in slot ``local`` (valid for in-range arguments)."""
        digits: list[Index] = [0] * len(self.mode_shape)
        for m, d in zip(self.spatial_modes, row_major_unravel(thread, self.spatial_shape)):
            if m >= 0:
                digits[m] = d
        for m, d in zip(self.local_modes, row_major_unravel(local, self.local_shape)):
            digits[m] = d
        return tuple(row_major_ravel([digits[m] for m in group], [self.mode_shape[m] for m in group])
                     for group in self.grouped_modes)

    def replica_of(self, thread: Index) -> Index:
        """Which copy ``thread`` holds: 0 for the first replica (the one that writes results out)."""
        replica_digits = [d for m, d in zip(self.spatial_modes, row_major_unravel(thread, self.spatial_shape))
                          if m < 0]
        return row_major_ravel(replica_digits, [-m for m in self.spatial_modes if m < 0])

    def holders(self, *index: int) -> list[tuple[int, int]]:
        """All ``(thread, local)`` pairs that hold the element at ``index`` (ints only)."""
        if len(index) == 1 and isinstance(index[0], (tuple, list)):
            index = tuple(index[0])
        self._check_rank(index, "holders")
        for i, (v, extent) in enumerate(zip(index, self.shape)):
            if not 0 <= v < extent:
                raise LayoutError(f"holders: index {list(index)} is out of range for shape {list(self.shape)} "
                                  f"(dimension {i})")
        local = self.local_of(index)
        return [(self.thread_of(index, r), local) for r in range(self.num_replicas)]

    def _check_rank(self, index: Sequence[Index], op: str) -> None:
        if len(index) != len(self.shape):
            raise LayoutError(f"{op}: index {list(index)} has {len(index)} coordinates, layout shape "
                              f"{list(self.shape)} has {len(self.shape)}")

    # ---- composition shorthands ---------------------------------------------------------------
    def spatial(self, *shape: int, ranks: Sequence[int] | None = None) -> RegisterLayout:
        return compose(self, spatial(*shape, ranks=ranks))

    def local(self, *shape: int, ranks: Sequence[int] | None = None) -> RegisterLayout:
        return compose(self, local(*shape, ranks=ranks))

    def column_spatial(self, *shape: int) -> RegisterLayout:
        return compose(self, column_spatial(*shape))

    def column_local(self, *shape: int) -> RegisterLayout:
        return compose(self, column_local(*shape))

    repeat = local
    column_repeat = column_local

    def __mul__(self, inner: RegisterLayout) -> RegisterLayout:
        return compose(self, inner)

    def __truediv__(self, inner: RegisterLayout) -> RegisterLayout:
        """``self / inner`` is :func:`~tilus_tvm.layout.register_ops.divide`: ``(a * b) / b == a``."""
        from tilus_tvm.layout.register_ops import divide  # register_ops builds on this module

        return divide(self, inner)


def register_layout(shape: Sequence[int], mode_shape: Sequence[int], spatial_modes: Sequence[int],
                    local_modes: Sequence[int]) -> RegisterLayout:
    """Create a register layout from its four attributes (it is brought to canonical form)."""
    return RegisterLayout(shape, mode_shape, spatial_modes, local_modes)


def _shape_args(shape: tuple, op: str) -> tuple[int, ...]:
    if len(shape) == 1 and isinstance(shape[0], (list, tuple)):
        shape = tuple(shape[0])
    for s in shape:
        if isinstance(s, bool) or not isinstance(s, int) or s < 1:
            raise LayoutError(f"{op}: shape entries must be positive ints, got {list(shape)}")
    return tuple(shape)


def _order_from_ranks(ndim: int, ranks: Sequence[int] | None, op: str) -> list[int]:
    """Dimensions listed from the most to the least significant, given each dimension's rank."""
    if ranks is None:
        return list(range(ndim))
    ranks = list(ranks)
    if sorted(ranks) != list(range(ndim)):
        raise LayoutError(f"{op}: ranks {ranks} must be a permutation of 0..{ndim - 1}")
    return [ranks.index(r) for r in range(ndim)]


def spatial(*shape: int, ranks: Sequence[int] | None = None) -> RegisterLayout:
    """Each element in its own thread; threads numbered row-major (or in the order ``ranks`` gives:
    ``ranks[d]`` is the significance of dimension ``d``, 0 the most significant).

    >>> spatial(2, 3).holders(1, 0)
    [(3, 0)]
    """
    shape = _shape_args(shape, "spatial")
    return RegisterLayout(shape, shape, _order_from_ranks(len(shape), ranks, "spatial"), [])


def local(*shape: int, ranks: Sequence[int] | None = None) -> RegisterLayout:
    """Every element in thread 0; registers numbered row-major (or in the order ``ranks`` gives)."""
    shape = _shape_args(shape, "local")
    return RegisterLayout(shape, shape, [], _order_from_ranks(len(shape), ranks, "local"))


def column_spatial(*shape: int) -> RegisterLayout:
    """:func:`spatial` with threads numbered column-major (last dimension most significant)."""
    shape = _shape_args(shape, "column_spatial")
    return RegisterLayout(shape, shape, list(reversed(range(len(shape)))), [])


def column_local(*shape: int) -> RegisterLayout:
    """:func:`local` with registers numbered column-major."""
    shape = _shape_args(shape, "column_local")
    return RegisterLayout(shape, shape, [], list(reversed(range(len(shape)))))


repeat = local
column_repeat = column_local


def compose(outer: RegisterLayout, inner: RegisterLayout) -> RegisterLayout:
    """Replace every element of ``outer`` by a whole tile laid out by ``inner``.

    With ``o = index // inner.shape`` and ``i = index % inner.shape`` (per dimension):

        thread(index) = thread_outer(o) * inner.num_threads + thread_inner(i)
        local(index)  = local_outer(o) * inner.local_size + local_inner(i)

    so ``shape = outer.shape * inner.shape``. Associative, not commutative.

    >>> compose(local(3, 4), spatial(2, 3)).mode_shape
    (3, 2, 4, 3)
    """
    if not isinstance(outer, RegisterLayout) or not isinstance(inner, RegisterLayout):
        raise LayoutError(f"compose: expected two RegisterLayouts, got {outer!r} and {inner!r}")
    if len(outer.shape) != len(inner.shape):
        raise LayoutError(f"compose: rank mismatch, outer {outer} has shape {list(outer.shape)}, inner {inner} "
                          f"has shape {list(inner.shape)}")
    outer_map: dict[int, int] = {}
    inner_map: dict[int, int] = {}
    mode_shape: list[int] = []
    for outer_group, inner_group in zip(outer.grouped_modes, inner.grouped_modes):
        for layout, group, mapping in ((outer, outer_group, outer_map), (inner, inner_group, inner_map)):
            for m in group:
                mapping[m] = len(mode_shape)
                mode_shape.append(layout.mode_shape[m])

    def remap(modes: Sequence[int], mapping: dict[int, int]) -> list[int]:
        return [mapping[m] if m >= 0 else m for m in modes]

    return RegisterLayout(
        shape=[a * b for a, b in zip(outer.shape, inner.shape)],
        mode_shape=mode_shape,
        spatial_modes=remap(outer.spatial_modes, outer_map) + remap(inner.spatial_modes, inner_map),
        local_modes=remap(outer.local_modes, outer_map) + remap(inner.local_modes, inner_map),
    )


def all_indices(shape: Sequence[int]):
    """Every logical index of ``shape``, row-major."""
    return itertools.product(*(range(s) for s in shape))
