"""Operations on register layouts (seed 000, "Operations on Layouts").

Each operation treats a layout as a tensor whose elements are lists of ``(thread, local)``
pairs and returns a new :class:`RegisterLayout` in canonical form:

- transformations keep every element's holders and only change the tensor's shape or
  indexing: :func:`squeeze`, :func:`unsqueeze`, :func:`permute`, :func:`reshape`, :func:`flatten`;
- :func:`concat` puts two layouts side by side in new dimensions (:func:`compose`, its partner,
  lives in ``register.py``), :func:`divide` undoes :func:`compose`;
- :func:`reduce` turns the threads of reduced dimensions into replicas;
- :func:`local_slice` keeps a sub-tile held in a subset of each thread's registers;
  :func:`split_local` / :func:`merge_local` relate the layouts of a tile viewed with a narrower or
  wider element type (same bits in the same registers);
- :func:`interleave_local` reorders each thread's registers in runs (the same threads hold the same
  elements, in other slots), and :func:`slot_permutation` tells whether two layouts differ only so
  (a per-thread renaming of registers, which ``cast`` does for free);
- :func:`auto_local_spatial` builds a ``local(...).spatial(...)`` layout for a thread count.

Operations that must cut a mode in two (``reshape``, ``divide``) work on :class:`_Modes`, a
mutable, non-canonical copy of a layout's modes; cutting a mode of size ``a * b`` into a major
mode ``a`` and a minor mode ``b`` wherever it appears never changes the mapping, because the
digit of the whole mode is ``major * b + minor`` both in the index and in the thread/local id.
"""
from __future__ import annotations

import math
from typing import Sequence

from tilus_tvm.errors import LayoutError
from tilus_tvm.layout.register import RegisterLayout, compose, local, spatial


# ---- argument checks ---------------------------------------------------------------------------
def _check_layout(layout: object, op: str, name: str = "layout") -> None:
    if not isinstance(layout, RegisterLayout):
        raise LayoutError(f"{op}: {name} must be a RegisterLayout, got {type(layout).__name__} {layout!r}")


def _normalize_dims(dims: int | Sequence[int], ndim: int, op: str, layout: RegisterLayout | None) -> list[int]:
    """Dimensions in ``[0, ndim)``, negative ones counted from the end (as torch does); no repeats."""
    if isinstance(dims, int):
        dims = [dims]
    where = f"layout {layout}" if layout is not None else f"a result of rank {ndim}"
    result = []
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, int):
            raise LayoutError(f"{op}: dims must hold Python ints, got {d!r} in {list(dims)}")
        if not -ndim <= d < ndim:
            raise LayoutError(f"{op}: dim {d} is out of range [{-ndim}, {ndim}) for {where}")
        result.append(d % ndim)
    if len(set(result)) != len(result):
        raise LayoutError(f"{op}: dims {list(dims)} name a dimension twice (for {where})")
    return result


def _check_shape(shape: Sequence[int], op: str) -> list[int]:
    if isinstance(shape, int):
        shape = [shape]
    shape = list(shape)
    for s in shape:
        if isinstance(s, bool) or not isinstance(s, int) or s < 1:
            raise LayoutError(f"{op}: shape entries must be positive ints, got {shape}")
    return shape


def _with_shape(layout: RegisterLayout, shape: Sequence[int]) -> RegisterLayout:
    """The same modes under a shape that differs from ``layout.shape`` only by size-1 dimensions
    (those own no modes in canonical form)."""
    return RegisterLayout(shape, layout.mode_shape, layout.spatial_modes, layout.local_modes)


# ---- a mutable copy of a layout's modes, for splitting -----------------------------------------
class _Modes:
    """Modes of a layout by id, with ``size``; ``groups[d]`` lists the modes of dimension ``d``
    (major to minor), ``spatial`` and ``local`` the thread and register digits (most significant
    first). Replications get ids too, recorded in ``replications``."""

    def __init__(self, layout: RegisterLayout):
        self.size = dict(enumerate(layout.mode_shape))
        self.groups = [list(group) for group in layout.grouped_modes]
        self.replications: set[int] = set()
        self.spatial: list[int] = []
        for m in layout.spatial_modes:
            if m < 0:
                m = self._new_id(-m)
                self.replications.add(m)
            self.spatial.append(m)
        self.local = list(layout.local_modes)

    def _new_id(self, size: int) -> int:
        mode = len(self.size)
        self.size[mode] = size
        return mode

    def split(self, mode: int, minor_size: int) -> None:
        """Replace ``mode`` by a major mode of size ``size / minor_size`` and a minor one of
        ``minor_size``, in every list it appears in."""
        major = self._new_id(self.size[mode] // minor_size)
        minor = self._new_id(minor_size)
        if mode in self.replications:
            self.replications |= {major, minor}
        for entries in (*self.groups, self.spatial, self.local):
            if mode in entries:
                at = entries.index(mode)
                entries[at : at + 1] = [major, minor]

    def cut(self, entries: list[int], product: int) -> bool:
        """Split (at most) one entry so that ``product`` is the product of a suffix of ``entries``;
        False when no split can do it."""
        acc = 1
        for mode in reversed(entries):
            if acc == product:
                return True
            size = self.size[mode]
            if acc * size > product:
                if product % acc or size % (product // acc):
                    return False
                self.split(mode, product // acc)
                return True
            acc *= size
        return acc == product

    def take_suffix(self, entries: list[int], product: int) -> tuple[list[int], list[int]]:
        """``entries`` as ``(prefix, suffix)`` where the suffix multiplies to ``product``
        (the caller has made ``product`` a suffix product with :meth:`cut`)."""
        at, acc = len(entries), 1
        while acc < product:
            at -= 1
            acc *= self.size[entries[at]]
        return entries[:at], entries[at:]

    def to_layout(self, shape: Sequence[int], groups: Sequence[Sequence[int]], spatial_ids: Sequence[int],
                  local_ids: Sequence[int]) -> RegisterLayout:
        number = {mode: n for n, mode in enumerate(m for group in groups for m in group)}
        return RegisterLayout(
            shape=shape,
            mode_shape=[self.size[m] for group in groups for m in group],
            spatial_modes=[-self.size[m] if m in self.replications else number[m] for m in spatial_ids],
            local_modes=[number[m] for m in local_ids],
        )


def _suffix_products(sizes: Sequence[int]) -> list[int]:
    """``prod(sizes[i:])`` for every ``i`` (the cut points of a row-major mixed radix)."""
    return [math.prod(sizes[i:]) for i in range(len(sizes))]


# ---- shape transformations ---------------------------------------------------------------------
def squeeze(layout: RegisterLayout, dims: int | Sequence[int]) -> RegisterLayout:
    """Remove the size-1 dimensions ``dims``; every element keeps its holders.

    >>> squeeze(spatial(1, 4), dims=[0])
    RegisterLayout(shape=[4], mode_shape=[4], spatial_modes=[0], local_modes=[])
    """
    _check_layout(layout, "squeeze")
    dims = _normalize_dims(dims, len(layout.shape), "squeeze", layout)
    for d in dims:
        if layout.shape[d] != 1:
            raise LayoutError(f"squeeze: dimension {d} of layout {layout} has size {layout.shape[d]}, "
                              f"only size-1 dimensions can be squeezed")
    return _with_shape(layout, [s for d, s in enumerate(layout.shape) if d not in dims])


def unsqueeze(layout: RegisterLayout, dims: int | Sequence[int]) -> RegisterLayout:
    """Insert size-1 dimensions; ``dims`` are their positions in the result (rank
    ``len(layout.shape) + len(dims)``). Every element keeps its holders.

    >>> unsqueeze(spatial(4), dims=[0])
    RegisterLayout(shape=[1, 4], mode_shape=[4], spatial_modes=[0], local_modes=[])
    """
    _check_layout(layout, "unsqueeze")
    count = 1 if isinstance(dims, int) else len(dims)
    dims = _normalize_dims(dims, len(layout.shape) + count, "unsqueeze", None)
    rest = iter(layout.shape)
    return _with_shape(layout, [1 if d in dims else next(rest) for d in range(len(layout.shape) + len(dims))])


def permute(layout: RegisterLayout, dims: Sequence[int]) -> RegisterLayout:
    """Reorder the dimensions: dimension ``i`` of the result is dimension ``dims[i]`` of ``layout``,

        permute(layout, dims).holders(*index) == layout.holders(*unpermuted(index))

    where ``unpermuted(index)[dims[i]] = index[i]``. Threads and registers do not move.

    >>> permute(local(2, 3), dims=[1, 0])
    RegisterLayout(shape=[3, 2], mode_shape=[3, 2], spatial_modes=[], local_modes=[1, 0])
    """
    _check_layout(layout, "permute")
    ndim = len(layout.shape)
    dims_list = _normalize_dims(dims, ndim, "permute", layout)
    if len(dims_list) != ndim:
        raise LayoutError(f"permute: dims {list(dims)} must be a permutation of 0..{ndim - 1} for layout {layout}")
    groups = [layout.grouped_modes[d] for d in dims_list]
    number = {mode: n for n, mode in enumerate(m for group in groups for m in group)}
    return RegisterLayout(
        shape=[layout.shape[d] for d in dims_list],
        mode_shape=[layout.mode_shape[m] for group in groups for m in group],
        spatial_modes=[number[m] if m >= 0 else m for m in layout.spatial_modes],
        local_modes=[number[m] for m in layout.local_modes],
    )


def reshape(layout: RegisterLayout, shape: Sequence[int]) -> RegisterLayout:
    """Reinterpret the tile under a new ``shape`` of the same size, both read row-major:
    the element at ``index`` of the result is the element at ``unravel(ravel(index, shape),
    layout.shape)`` of ``layout``, with the same holders.

    The modes, read in order, are the digits of the row-major flat index; each boundary of the
    new dimensions (a suffix product of ``shape``) must fall between modes or inside a mode it
    divides, which is then split. Otherwise no register layout can express the result.

    >>> reshape(spatial(6).local(4), [2, 12])  # the boundary at 12 cuts mode 6 into 2 x 3
    RegisterLayout(shape=[2, 12], mode_shape=[2, 3, 4], spatial_modes=[0, 1], local_modes=[2])
    """
    _check_layout(layout, "reshape")
    shape = _check_shape(shape, "reshape")
    if math.prod(shape) != layout.size:
        raise LayoutError(f"reshape: cannot reshape layout {layout} of {layout.size} elements to shape {shape} "
                          f"of {math.prod(shape)} elements")
    modes = _Modes(layout)
    for product in _suffix_products(shape):
        if not modes.cut([m for group in modes.groups for m in group], product):
            raise LayoutError(f"reshape: cannot reshape layout {layout} to shape {shape}: the boundary at "
                              f"{product} elements (a suffix product of {shape}) cuts a mode of "
                              f"mode_shape {list(layout.mode_shape)} unevenly")
    flat = [m for group in modes.groups for m in group]
    groups = []
    for extent in reversed(shape):
        flat, group = modes.take_suffix(flat, extent)
        groups.append(group)
    return modes.to_layout(shape, groups[::-1], modes.spatial, modes.local)


def flatten(layout: RegisterLayout, start_dim: int = 0, end_dim: int = -1) -> RegisterLayout:
    """Merge dimensions ``start_dim..end_dim`` (inclusive, negative counted from the end) into one:
    ``reshape(layout, shape[:start] + [prod(shape[start:end + 1])] + shape[end + 1:])``. Always
    possible; a 0-d layout becomes 1-d.

    >>> flatten(spatial(2, 3).local(2, 2))
    RegisterLayout(shape=[24], mode_shape=[2, 2, 3, 2], spatial_modes=[0, 2], local_modes=[1, 3])
    """
    _check_layout(layout, "flatten")
    shape = list(layout.shape)
    if not shape:
        return reshape(layout, [1])
    start, end = _normalize_dims([start_dim], len(shape), "flatten", layout) + _normalize_dims(
        [end_dim], len(shape), "flatten", layout)
    if start > end:
        raise LayoutError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim} for layout {layout}")
    return reshape(layout, shape[:start] + [math.prod(shape[start : end + 1])] + shape[end + 1 :])


# ---- combining layouts -------------------------------------------------------------------------
def concat(lhs: RegisterLayout, rhs: RegisterLayout) -> RegisterLayout:
    """Put the dimensions of ``rhs`` after those of ``lhs``, each of its tiles under each element
    of ``lhs``: for ``index = (i, j)`` with ``i`` an index of lhs and ``j`` one of rhs,

        shape         = lhs.shape + rhs.shape
        thread(i, j)  = thread_lhs(i) * rhs.num_threads + thread_rhs(j)
        local(i, j)   = local_lhs(i) * rhs.local_size + local_rhs(j)

    >>> concat(spatial(2), local(3))
    RegisterLayout(shape=[2, 3], mode_shape=[2, 3], spatial_modes=[0], local_modes=[1])
    """
    _check_layout(lhs, "concat", "lhs")
    _check_layout(rhs, "concat", "rhs")
    offset = len(lhs.mode_shape)

    def shifted(modes: Sequence[int]) -> list[int]:
        return [m + offset if m >= 0 else m for m in modes]

    return RegisterLayout(
        shape=lhs.shape + rhs.shape,
        mode_shape=lhs.mode_shape + rhs.mode_shape,
        spatial_modes=list(lhs.spatial_modes) + shifted(rhs.spatial_modes),
        local_modes=list(lhs.local_modes) + shifted(rhs.local_modes),
    )


def divide(lhs: RegisterLayout, rhs: RegisterLayout) -> RegisterLayout:
    """The layout ``result`` with ``compose(result, rhs) == lhs`` (``lhs / rhs``).

    :func:`compose` puts, per dimension, the modes of ``rhs`` after (minor to) those of the outer
    layout, and its spatial and local lists after the outer ones. So ``lhs`` is divisible by
    ``rhs`` when, after cutting modes at the boundaries ``rhs`` implies, each dimension of ``lhs``
    ends with the modes of ``rhs``, and ``lhs.spatial_modes`` / ``lhs.local_modes`` end with
    ``rhs.spatial_modes`` / ``rhs.local_modes``; what precedes is the result:

        result.shape = lhs.shape / rhs.shape   (per dimension)

    >>> divide(local(3, 4).spatial(2, 3), spatial(2, 3))
    RegisterLayout(shape=[3, 4], mode_shape=[3, 4], spatial_modes=[], local_modes=[0, 1])
    """
    _check_layout(lhs, "divide", "lhs")
    _check_layout(rhs, "divide", "rhs")

    def fail(reason: str) -> LayoutError:
        return LayoutError(f"divide: cannot divide lhs {lhs} by rhs {rhs}: {reason}")

    if len(lhs.shape) != len(rhs.shape):
        raise fail(f"rank {len(lhs.shape)} vs {len(rhs.shape)}")
    for d, (a, b) in enumerate(zip(lhs.shape, rhs.shape)):
        if a % b:
            raise fail(f"dimension {d} of size {a} is not a multiple of {b}")
    for what, a, b in (("threads", lhs.num_threads, rhs.num_threads), ("registers", lhs.local_size, rhs.local_size)):
        if a % b:
            raise fail(f"lhs has {a} {what}, not a multiple of rhs's {b}")

    modes = _Modes(lhs)
    for d, rhs_group in enumerate(rhs.grouped_modes):
        for product in _suffix_products([rhs.mode_shape[m] for m in rhs_group]):
            if not modes.cut(modes.groups[d], product):
                raise fail(f"the modes of dimension {d} cannot be cut to end with the modes of rhs")
    for what, entries, sizes in (("spatial", modes.spatial, rhs.spatial_shape),
                                 ("local", modes.local, rhs.local_shape)):
        for product in _suffix_products(sizes):
            if not modes.cut(entries, product):
                raise fail(f"the {what} modes cannot be cut to end with {what} sizes {list(sizes)}")

    # the lhs modes that make up each mode of rhs, and the outer modes of each dimension
    inner_of: dict[int, list[int]] = {}
    outer_groups = []
    for d, rhs_group in enumerate(rhs.grouped_modes):
        group = modes.groups[d]
        for m in reversed(rhs_group):
            group, inner_of[m] = modes.take_suffix(group, rhs.mode_shape[m])
        outer_groups.append(group)

    outer_lists = []
    for what, entries, rhs_modes in (("spatial", modes.spatial, rhs.spatial_modes),
                                     ("local", modes.local, rhs.local_modes)):
        for m in reversed(rhs_modes):
            size = rhs.mode_shape[m] if m >= 0 else -m
            entries, run = modes.take_suffix(entries, size)
            matches = (run == inner_of[m]) if m >= 0 else all(r in modes.replications for r in run)
            if not matches:
                entry = f"mode {m} (size {size})" if m >= 0 else f"replication {m}"
                raise fail(f"the {what} modes of lhs do not end like those of rhs: rhs's {entry} does not line "
                           f"up with the same modes of lhs")
        outer_lists.append(entries)
    shape = [a // b for a, b in zip(lhs.shape, rhs.shape)]
    return modes.to_layout(shape, outer_groups, *outer_lists)


def reduce(layout: RegisterLayout, dims: int | Sequence[int], keepdims: bool = False) -> RegisterLayout:
    """The layout of the result of reducing ``layout``'s tile over ``dims``: the threads that held
    a reduced row now all hold its result. Each spatial mode of a reduced dimension becomes a
    replication of its size, in place in ``spatial_modes``; each local mode of a reduced dimension
    is dropped; the reduced dimensions are removed (or kept with size 1 when ``keepdims``). So

        result.num_threads == layout.num_threads
        result.num_replicas == layout.num_replicas * prod(sizes of the reduced spatial modes)

    >>> reduce(spatial(3, 4), dims=[0])
    RegisterLayout(shape=[4], mode_shape=[4], spatial_modes=[-3, 0], local_modes=[])
    """
    _check_layout(layout, "reduce")
    dims = _normalize_dims(dims, len(layout.shape), "reduce", layout)
    reduced = {m for d in dims for m in layout.grouped_modes[d]}
    kept = [m for m in range(len(layout.mode_shape)) if m not in reduced]
    number = {m: n for n, m in enumerate(kept)}
    if keepdims:
        shape = [1 if d in dims else s for d, s in enumerate(layout.shape)]
    else:
        shape = [s for d, s in enumerate(layout.shape) if d not in dims]

    def spatial_entry(m: int) -> int:
        if m < 0:
            return m  # an existing replication stays
        return -layout.mode_shape[m] if m in reduced else number[m]

    return RegisterLayout(
        shape=shape,
        mode_shape=[layout.mode_shape[m] for m in kept],
        spatial_modes=[spatial_entry(m) for m in layout.spatial_modes],
        local_modes=[number[m] for m in layout.local_modes if m not in reduced],
    )


def local_slice(layout: RegisterLayout, offsets: Sequence[int], shape: Sequence[int]) -> RegisterLayout:
    """The layout of the sub-tile ``[offsets[d], offsets[d] + shape[d])`` of ``layout`` when every
    thread keeps exactly the elements of the sub-tile it already held, in some of its registers:
    with ``result = local_slice(layout, offsets, shape)`` and ``select(j) =
    layout.local_of(offsets + result.logical(0, j))``,

        result.holders(*i) == [(thread, j) for each (thread, select(j)) in layout.holders(*(offsets + i))]

    (the same slot selection in every thread).

    Along each dimension the sub-tile must be a whole block of the dimension's inner modes: its
    extent a suffix product of the modes (a mode may be cut in two), its offset a multiple of the
    extent; the outer modes it fixes must be local (a fixed spatial digit would leave threads
    without elements). The result's slot ``j`` is slot ``layout.local_of(offsets + logical(0, j))``.

    >>> local_slice(local(4).spatial(8), offsets=[16], shape=[8])
    RegisterLayout(shape=[8], mode_shape=[8], spatial_modes=[0], local_modes=[])
    """
    _check_layout(layout, "local_slice")
    offsets, shape = list(offsets), _check_shape(shape, "local_slice")

    def fail(reason: str) -> LayoutError:
        return LayoutError(f"local_slice: the sub-tile of shape {shape} at offsets {offsets} of layout {layout} "
                           f"is not held in a subset of each thread's registers: {reason}")

    if len(offsets) != len(layout.shape) or len(shape) != len(layout.shape):
        raise fail(f"offsets and shape need {len(layout.shape)} entries")
    modes = _Modes(layout)
    fixed: set[int] = set()
    for d, (offset, extent) in enumerate(zip(offsets, shape)):
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0 or offset + extent > layout.shape[d]:
            raise fail(f"dimension {d} of size {layout.shape[d]} does not contain [{offset}, {offset}+{extent})")
        if offset % extent:
            raise fail(f"offset {offset} in dimension {d} is not a multiple of the extent {extent}")
        if not modes.cut(modes.groups[d], extent):
            raise fail(f"extent {extent} does not split the modes of dimension {d}")
        outer, inner = modes.take_suffix(modes.groups[d], extent)
        for m in outer:
            if m in modes.spatial and modes.size[m] > 1:
                raise fail(f"dimension {d} would fix a spatial mode of size {modes.size[m]}")
        fixed.update(outer)
        modes.groups[d] = inner
    return modes.to_layout(shape, modes.groups, modes.spatial, [m for m in modes.local if m not in fixed])


def split_local(layout: RegisterLayout, factor: int) -> RegisterLayout:
    """Every element becomes ``factor`` consecutive elements along the last dimension, held by the
    same threads in consecutive registers: element ``(..., j * factor + t)`` of the result is in slot
    ``layout.local_of(..., j) * factor + t``. The layout of a tile viewed with an element type
    ``factor`` times narrower (a ``uint32`` tile seen as ``float16``: the bits stay in place).

    >>> split_local(spatial(4, 8), 2)
    RegisterLayout(shape=[4, 16], mode_shape=[4, 8, 2], spatial_modes=[0, 1], local_modes=[2])
    """
    _check_layout(layout, "split_local")
    if isinstance(factor, bool) or not isinstance(factor, int) or factor < 1:
        raise LayoutError(f"split_local: factor must be a positive int, got {factor!r}")
    if not layout.shape:
        raise LayoutError(f"split_local: layout {layout} has no last dimension")
    # the last dimension's modes are the last ones, so the new innermost mode is appended
    return RegisterLayout(layout.shape[:-1] + (layout.shape[-1] * factor,), layout.mode_shape + (factor,),
                          layout.spatial_modes, layout.local_modes + (len(layout.mode_shape),))


def merge_local(layout: RegisterLayout, factor: int) -> RegisterLayout:
    """The inverse of :func:`split_local`: ``factor`` consecutive elements along the last dimension
    held in consecutive registers of one thread become one element (a ``float16`` tile seen as
    ``uint32``). Possible when the last dimension's innermost mode is local, the least significant
    register digit, and a multiple of ``factor``.

    >>> merge_local(spatial(4, 8).local(1, 2), 2)
    RegisterLayout(shape=[4, 8], mode_shape=[4, 8], spatial_modes=[0, 1], local_modes=[])
    """
    _check_layout(layout, "merge_local")
    if isinstance(factor, bool) or not isinstance(factor, int) or factor < 1:
        raise LayoutError(f"merge_local: factor must be a positive int, got {factor!r}")
    if factor == 1:
        return layout
    inner = layout.grouped_modes[-1][-1] if layout.shape and layout.grouped_modes[-1] else None
    if inner is None or not layout.local_modes or layout.local_modes[-1] != inner or layout.mode_shape[inner] % factor:
        raise LayoutError(f"merge_local: layout {layout} does not hold groups of {factor} consecutive elements of "
                          f"the last dimension in consecutive registers (its innermost mode must be local, the "
                          f"last register digit, and a multiple of {factor})")
    mode_shape = list(layout.mode_shape)
    mode_shape[inner] //= factor
    return RegisterLayout(layout.shape[:-1] + (layout.shape[-1] // factor,), mode_shape, layout.spatial_modes,
                          layout.local_modes)


# ---- register order -----------------------------------------------------------------------------
def interleave_local(layout: RegisterLayout, run: int) -> RegisterLayout:
    """The same elements in the same threads, each run of ``run`` consecutive registers reordered to
    hold the run's even slots first, then its odd ones: slot ``r * run + 2 * h + b`` of ``layout`` is
    slot ``r * run + b * run / 2 + h`` of the result. A run of the 8 ``uint4b`` codes of a 32-bit word
    then holds elements 0, 2, 4, 6 in its low 16 bits and 1, 3, 5, 7 in the high ones, at the same
    places: one mask takes a pair of them into the two halves of a ``float16x2``
    (:func:`~tilus_tvm.instructions.cast_rules.interleaved_int_word`).

    >>> interleave_local(spatial(2).local(8), 8)
    RegisterLayout(shape=[16], mode_shape=[2, 4, 2], spatial_modes=[0], local_modes=[2, 1])
    """
    _check_layout(layout, "interleave_local")
    if isinstance(run, bool) or not isinstance(run, int) or run < 2 or run % 2:
        raise LayoutError(f"interleave_local: run must be a positive even int, got {run!r}")
    modes = _Modes(layout)
    if layout.local_size % run or not (modes.cut(modes.local, run) and modes.cut(modes.local, 2)):
        raise LayoutError(f"interleave_local: the {layout.local_size} registers of {layout} do not split into "
                          f"runs of {run} made of register pairs (a run must be a suffix of its register digits)")
    outer, inner = modes.take_suffix(modes.local, run)
    head, pair = modes.take_suffix(inner, 2)
    return modes.to_layout(layout.shape, modes.groups, modes.spatial, outer + pair + head)


def interleaved_slot(slot, run: int):
    """The slot of ``interleave_local(layout, run)`` that holds what ``layout`` holds in ``slot`` (an int
    or a TIR expression): ``r * run + 2 * h + b`` -> ``r * run + b * run / 2 + h``.

    >>> [interleaved_slot(s, 4) for s in range(8)]
    [0, 2, 1, 3, 4, 6, 5, 7]
    """
    return slot - slot % run + slot % 2 * (run // 2) + slot % run // 2


def slot_permutation(src: RegisterLayout, dst: RegisterLayout) -> tuple[int, ...] | None:
    """``perm`` with ``dst``'s slot ``j`` holding, in every thread, the element of ``src``'s slot
    ``perm[j]`` -- the two layouts give every thread the same elements, in another register order --
    or None when they do not (an element moves between threads, or the order differs by thread).

    >>> slot_permutation(spatial(2).local(4), interleave_local(spatial(2).local(4), 4))
    (0, 2, 1, 3)
    """
    import numpy as np

    _check_layout(src, "slot_permutation", "src")
    _check_layout(dst, "slot_permutation", "dst")
    if (src.shape != dst.shape or src.num_threads != dst.num_threads or src.local_size != dst.local_size
            or src.num_replicas != dst.num_replicas):
        return None
    threads = np.arange(dst.num_threads)[:, None]
    index = dst.logical(threads, np.arange(dst.local_size)[None, :])  # [threads, slots] per dimension
    slots = np.broadcast_to(np.asarray(src.local_of(index)), (dst.num_threads, dst.local_size))
    if not (slots == slots[0]).all():
        return None
    held = np.zeros(slots.shape, dtype=bool)
    for replica in range(src.num_replicas):
        held |= np.asarray(src.thread_of(index, replica)) == threads
    return tuple(int(s) for s in slots[0]) if held.all() else None


# ---- construction ------------------------------------------------------------------------------
def auto_local_spatial(num_threads: int, shape: Sequence[int]) -> RegisterLayout:
    """A ``local(...).spatial(...)`` layout of ``shape`` over exactly ``num_threads`` threads.

    Threads are handed out from the innermost dimension outwards, ``spatial[d] =
    gcd(threads left, shape[d])``, so consecutive threads hold consecutive elements of the last
    dimension (coalesced accesses); the rest of each dimension is local. When there are more
    threads than elements, the surplus ``num_threads / prod(shape)`` is a replication, the most
    significant digit of the thread id. One of ``num_threads`` and ``prod(shape)`` must divide
    the other.

    >>> auto_local_spatial(8, [4, 6])  # local(1, 3).spatial(4, 2)
    RegisterLayout(shape=[4, 6], mode_shape=[4, 3, 2], spatial_modes=[0, 2], local_modes=[1])
    """
    if isinstance(num_threads, bool) or not isinstance(num_threads, int) or num_threads < 1:
        raise LayoutError(f"auto_local_spatial: num_threads must be a positive int, got {num_threads!r}")
    shape = _check_shape(shape, "auto_local_spatial")
    size = math.prod(shape)
    if size % num_threads and num_threads % size:
        raise LayoutError(f"auto_local_spatial: {num_threads} threads cannot share shape {shape} of {size} "
                          f"elements evenly: neither divides the other")
    threads_left = num_threads
    spatial_shape = [1] * len(shape)
    for d in reversed(range(len(shape))):
        spatial_shape[d] = math.gcd(threads_left, shape[d])
        threads_left //= spatial_shape[d]
    layout = compose(local(*[s // t for s, t in zip(shape, spatial_shape)]), spatial(*spatial_shape))
    return RegisterLayout(layout.shape, layout.mode_shape, (-threads_left,) + layout.spatial_modes,
                          layout.local_modes)
