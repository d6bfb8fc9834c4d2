"""Shared-memory layouts: a strided map from logical index to element offset, optionally swizzled.

A shared layout of ``shape`` and ``strides`` (both in elements) maps a logical index to

    linear(index) = sum(index[d] * strides[d])
    offset(index) = swizzle(linear(index))            (CuTe's Swizzle o Layout; no swizzle: identity)

``cosize`` is the storage the layout spans, ``max(linear) + 1 = 1 + sum((shape[d] - 1) * strides[d])``:
interior padding is counted, padding after the last element is not (CuTe's definition).

A swizzle must *fit* its layout, checked when the swizzled layout is built:

1. it reaches no further than the layout: every offset bit it reads or flips is set by some offset
   of the layout (for a compact layout: ``swizzle.span = 2**(B + M + |S|)`` is at most the next
   power of two of ``cosize``); a bit that never varies is read or flipped for nothing, which is a
   mistake in the parameters, and
2. it only permutes the offsets the layout covers: ``{swizzle(o)} == {linear(index)}``. A compact
   layout whose ``cosize`` is a multiple of the span passes at once; any other (padded, strided,
   or of a size that is not a multiple of the span) is checked offset by offset.

:func:`bank_conflicts` models one warp-wide shared-memory request on 32 banks of 4 bytes.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from tilus_tvm.errors import LayoutError
from tilus_tvm.layout.swizzle import Swizzle

Index = Any  # an int, or a TVM PrimExpr when the mapping is evaluated symbolically

NUM_BANKS = 32
BANK_BITS = 32


def _int_tuple(values: Any, what: str, op: str) -> tuple[int, ...]:
    if isinstance(values, int) and not isinstance(values, bool):
        values = (values,)
    try:
        values = tuple(values)
    except TypeError:
        raise LayoutError(f"{op}: {what} must be a sequence of ints, got {values!r}") from None
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int):
            raise LayoutError(f"{op}: {what} must hold Python ints, got {v!r} in {list(values)}")
    return values


def _shape_args(shape: tuple, op: str) -> tuple[int, ...]:
    if len(shape) == 1 and isinstance(shape[0], (list, tuple)):
        shape = tuple(shape[0])
    return _int_tuple(shape, "shape", op)


def _check_shape_strides(shape: tuple[int, ...], strides: tuple[int, ...], op: str) -> None:
    if len(shape) == 0:
        raise LayoutError(f"{op}: shape must have at least one dimension, got []")
    if len(shape) != len(strides):
        raise LayoutError(f"{op}: shape {list(shape)} has {len(shape)} dimensions but strides {list(strides)} "
                          f"has {len(strides)}")
    if any(s < 1 for s in shape):
        raise LayoutError(f"{op}: shape entries must be positive, got {list(shape)}")
    if any(s < 0 for s in strides):
        raise LayoutError(f"{op}: strides must be non-negative, got {list(strides)} for shape {list(shape)}")


def _linear_offsets(shape: Sequence[int], strides: Sequence[int]) -> list[int]:
    """Every un-swizzled offset of the layout, in row-major order of the logical index."""
    offsets = [0]
    for extent, stride in zip(shape, strides):
        offsets = [o + i * stride for o in offsets for i in range(extent)]
    return offsets


@functools.lru_cache(maxsize=256)
def _swizzle_mismatch(shape: tuple[int, ...], strides: tuple[int, ...], swizzle: Swizzle) -> Optional[str]:
    """Why ``swizzle`` does not fit the strided layout, or ``None`` when it fits."""
    cosize = 1 + sum((n - 1) * s for n, s in zip(shape, strides))
    size = math.prod(shape)
    if size == cosize and cosize % swizzle.span == 0 and _is_injective(shape, strides):
        return None  # compact, whole spans: the swizzle permutes each span of offsets
    offsets = _linear_offsets(shape, strides)
    varying = functools.reduce(lambda a, b: a | b, offsets, 0)
    unused = (swizzle.yyy_mask | swizzle.zzz_mask) & ~varying
    if unused:
        bits = [b for b in range(unused.bit_length()) if unused >> b & 1]
        return (f"the swizzle spans {swizzle.span} elements (2**(bits+base+|shift|)) and uses offset bit(s) "
                f"{bits}, which no offset of the layout sets (cosize {cosize}); use fewer bits, a smaller base "
                f"or a smaller shift")
    covered = set(offsets)
    for o in offsets:
        if swizzle(o) not in covered:
            return (f"the swizzle moves offset {o} to {swizzle(o)}, which the layout does not cover "
                    f"(cosize {cosize}); a swizzle must permute the offsets of its layout")
    return None


def _is_injective(shape: Sequence[int], strides: Sequence[int]) -> bool:
    """Whether distinct indices have distinct offsets (sufficient test: sorted strides nest)."""
    reach = 0  # largest offset reachable with the dimensions seen so far
    for stride, extent in sorted((s, n) for s, n in zip(strides, shape) if n > 1):
        if stride <= reach:
            return False
        reach += (extent - 1) * stride
    return True


@dataclass(frozen=True)
class SharedLayout:
    """A strided shared-memory layout with an optional swizzle of the linear offset.

    ``offset(index) = swizzle(sum(index[d] * strides[d]))``, all in elements.

    >>> SharedLayout((8, 64), (64, 1), Swizzle(3, 3, 3)).offset(1, 0)
    72
    """

    shape: tuple[int, ...]
    strides: tuple[int, ...]
    swizzle: Optional[Swizzle] = None

    def __post_init__(self):
        op = "SharedLayout"
        shape = _int_tuple(self.shape, "shape", op)
        strides = _int_tuple(self.strides, "strides", op)
        _check_shape_strides(shape, strides, op)
        swizzle = self.swizzle
        if swizzle is not None and not isinstance(swizzle, Swizzle):
            raise LayoutError(f"{op}: swizzle must be a Swizzle or None, got {swizzle!r}")
        if swizzle is not None and swizzle.bits == 0:
            swizzle = None  # the identity: keep one representation so equal layouts compare equal
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "strides", strides)
        object.__setattr__(self, "swizzle", swizzle)
        if swizzle is not None:
            mismatch = _swizzle_mismatch(shape, strides, swizzle)
            if mismatch:
                raise LayoutError(f"{op}: swizzle {swizzle} does not fit layout "
                                  f"{_describe(shape, strides, None)}: {mismatch}")

    def __repr__(self) -> str:
        return _describe(self.shape, self.strides, self.swizzle)

    __str__ = __repr__

    # ---- sizes ---------------------------------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        """Number of logical elements, ``prod(shape)``.

        >>> shared_padded((8, 64), 8).size
        512
        """
        return math.prod(self.shape)

    @property
    def cosize(self) -> int:
        """Elements of storage the layout spans: ``1 + sum((shape[d] - 1) * strides[d])``.

        Interior padding is included, trailing padding after the last element is not; a swizzle
        (which only permutes covered offsets) does not change it.

        >>> shared_padded((8, 64), 8).cosize
        568
        """
        return 1 + sum((n - 1) * s for n, s in zip(self.shape, self.strides))

    # ---- mapping (generic: ints or PrimExprs) --------------------------------------------------
    def linear(self, *index: Index) -> Index:
        """The offset before the swizzle: ``sum(index[d] * strides[d])``.

        >>> shared_row_major(8, 64).linear(2, 5)
        133
        """
        return self._linear(self._index_args(index, "linear"))

    def _linear(self, index: tuple) -> Index:
        acc: Index = 0
        for i, stride in zip(index, self.strides):
            if stride == 0:
                continue
            term = i if stride == 1 else i * stride
            acc = term if _is_zero(acc) else acc + term
        return acc

    def offset(self, *index: Index) -> Index:
        """The element offset of ``index``: ``swizzle(linear(index))``; ints or TVM PrimExprs.

        >>> shared_row_major(8, 64).swizzled(Swizzle(3, 3, 3)).offset(3, 8)
        208
        """
        linear = self._linear(self._index_args(index, "offset"))
        return self.swizzle(linear) if self.swizzle is not None else linear

    def _index_args(self, index: tuple, op: str) -> tuple:
        if len(index) == 1 and isinstance(index[0], (tuple, list)):
            index = tuple(index[0])
        if len(index) != len(self.shape):
            raise LayoutError(f"{op}: index {list(index)} has {len(index)} coordinates, layout {self} has "
                              f"{len(self.shape)} dimensions")
        for d, (i, extent) in enumerate(zip(index, self.shape)):
            if isinstance(i, int) and not 0 <= i < extent:
                raise LayoutError(f"{op}: index {list(index)} is out of range in dimension {d} for layout {self}")
        return index

    # ---- transformations -----------------------------------------------------------------------
    def swizzled(self, swizzle: Swizzle) -> SharedLayout:
        """This layout with ``swizzle`` applied to its offsets (see :func:`swizzled`)."""
        return swizzled(self, swizzle)


def _is_zero(value: Any) -> bool:
    return isinstance(value, int) and value == 0


def _describe(shape: Sequence[int], strides: Sequence[int], swizzle: Optional[Swizzle]) -> str:
    text = f"SharedLayout(shape={list(shape)}, strides={list(strides)}"
    if swizzle is not None:
        text += f", swizzle={swizzle}"
    return text + ")"


# ---- constructors -----------------------------------------------------------------------------
def shared_strides(shape: Sequence[int], strides: Sequence[int]) -> SharedLayout:
    """A layout with explicit ``strides`` (in elements): ``offset(index) = sum(index[d] * strides[d])``.

    >>> shared_strides((4, 8), (1, 4)).offset(1, 2)
    9
    """
    op = "shared_strides"
    shape = _int_tuple(shape, "shape", op)
    strides = _int_tuple(strides, "strides", op)
    _check_shape_strides(shape, strides, op)
    return SharedLayout(shape, strides)


def _row_major_strides(shape: Sequence[int]) -> tuple[int, ...]:
    strides = []
    acc = 1
    for extent in reversed(shape):
        strides.append(acc)
        acc *= extent
    return tuple(reversed(strides))


def shared_row_major(*shape: int) -> SharedLayout:
    """Compact row-major layout: the last dimension is contiguous.

    >>> shared_row_major(4, 8)
    SharedLayout(shape=[4, 8], strides=[8, 1])
    """
    shape = _shape_args(shape, "shared_row_major")
    _check_shape_strides(shape, shape, "shared_row_major")
    return SharedLayout(shape, _row_major_strides(shape))


def shared_column_major(*shape: int) -> SharedLayout:
    """Compact column-major layout: the first dimension is contiguous.

    >>> shared_column_major(4, 8)
    SharedLayout(shape=[4, 8], strides=[1, 4])
    """
    shape = _shape_args(shape, "shared_column_major")
    _check_shape_strides(shape, shape, "shared_column_major")
    return SharedLayout(shape, tuple(reversed(_row_major_strides(tuple(reversed(shape))))))


def shared_padded(shape: Sequence[int], pad: int) -> SharedLayout:
    """Row-major layout whose rows (the last dimension) are each followed by ``pad`` unused elements.

    ``strides[-1] = 1``, ``strides[-2] = shape[-1] + pad``, ``strides[d] = strides[d+1] * shape[d+1]``
    above that.

    >>> shared_padded((8, 64), 8)
    SharedLayout(shape=[8, 64], strides=[72, 1])
    """
    op = "shared_padded"
    shape = _int_tuple(shape, "shape", op)
    _check_shape_strides(shape, shape, op)
    if isinstance(pad, bool) or not isinstance(pad, int) or pad < 0:
        raise LayoutError(f"{op}: pad must be a non-negative int, got {pad!r} for shape {list(shape)}")
    if len(shape) < 2:
        raise LayoutError(f"{op}: shape {list(shape)} has one dimension; padding pads rows, which needs at "
                          f"least two dimensions")
    strides = [1, shape[-1] + pad]
    for d in range(len(shape) - 3, -1, -1):
        strides.append(strides[-1] * shape[d + 1])
    return SharedLayout(shape, tuple(reversed(strides)))


def swizzled(layout: SharedLayout, swizzle: Swizzle) -> SharedLayout:
    """``layout`` with ``swizzle`` applied to its linear offset: ``offset = swizzle(linear(index))``.

    Raises :class:`LayoutError` when the layout is already swizzled or the swizzle does not fit
    (it reaches beyond ``cosize``, or does not permute the offsets the layout covers).

    >>> swizzled(shared_row_major(8, 64), Swizzle(3, 3, 3)).offset(1, 8)
    64
    """
    op = "swizzled"
    if not isinstance(layout, SharedLayout):
        raise LayoutError(f"{op}: expected a SharedLayout, got {layout!r}")
    if not isinstance(swizzle, Swizzle):
        raise LayoutError(f"{op}: expected a Swizzle for layout {layout}, got {swizzle!r}")
    if layout.swizzle is not None:
        raise LayoutError(f"{op}: layout {layout} is already swizzled; cannot apply {swizzle} on top")
    if swizzle.bits:
        mismatch = _swizzle_mismatch(layout.shape, layout.strides, swizzle)
        if mismatch:
            raise LayoutError(f"{op}: swizzle {swizzle} does not fit layout {layout}: {mismatch}")
    return SharedLayout(layout.shape, layout.strides, swizzle)


# ---- bank conflicts ---------------------------------------------------------------------------
@dataclass(frozen=True)
class BankConflicts:
    """Cost of one warp's shared-memory request.

    ``wavefronts``: shared-memory cycles the request takes; ``ideal_wavefronts``: what it would take
    without conflicts (one per phase that has an active thread); ``conflict_ways``: the worst
    phase's most loaded bank, in distinct 4-byte words (1: conflict-free).
    """

    wavefronts: int
    ideal_wavefronts: int
    conflict_ways: int

    @property
    def conflict_free(self) -> bool:
        return self.wavefronts == self.ideal_wavefronts


def _threads_per_phase(access_bits: int) -> int:
    if access_bits > 64:
        return 8
    if access_bits > 32:
        return 16
    return 32


def _vector_offsets(layout: SharedLayout, index: tuple, vec: int) -> list:
    """``[layout.offset(*index[:-1], index[-1] + e) for e in range(vec)]`` (the last coordinate in range),
    with the index checked and its strided offset computed once: :func:`bank_conflicts` asks this for
    every thread of every request of every candidate layout the shared-layout pass scores."""
    if not all(isinstance(i, int) for i in index):
        return [layout.offset(*index[:-1], index[-1] + e) for e in range(vec)]
    linear = layout._linear(layout._index_args(index, "offset"))  # offset()'s errors, for e = 0
    step = layout.strides[-1]
    swizzle = layout.swizzle
    return [linear + e * step if swizzle is None else swizzle(linear + e * step) for e in range(vec)]


def bank_conflicts(layout: SharedLayout, accesses: Sequence[Optional[tuple[Sequence[int], int]]],
                   dtype_bits: int) -> BankConflicts:
    """Count the wavefronts of one warp-wide access to shared memory laid out by ``layout``.

    ``accesses[t]`` is thread ``t``'s request ``(logical index, vector length)``: the elements
    ``index, index + (0, ..., 1), ..., index + (0, ..., vec - 1)`` along the last dimension, which
    must be contiguous in memory and aligned to the vector's size (one vector instruction); ``None``
    marks an inactive thread. Every thread uses the same vector length (one instruction).

    Model: 32 banks of 4 bytes; a 16-byte access is served in 4 phases of 8 threads, an 8-byte one
    in 2 phases of 16 threads, a narrower one in one phase of 32. Within a phase the cost is the
    largest number of distinct 4-byte words any bank must deliver (threads reading the same word
    share it); ``wavefronts`` is the sum over phases.

    >>> rows = [((r, 0), 8) for r in range(8)]         # ldmatrix: rows 0..7 of an 8x8 f16 tile
    >>> bank_conflicts(shared_row_major(8, 64), rows, 16).wavefronts
    8
    >>> bank_conflicts(shared_row_major(8, 64).swizzled(Swizzle(3, 3, 3)), rows, 16).wavefronts
    1
    """
    op = "bank_conflicts"
    if not isinstance(layout, SharedLayout):
        raise LayoutError(f"{op}: expected a SharedLayout, got {layout!r}")
    if isinstance(dtype_bits, bool) or not isinstance(dtype_bits, int) or dtype_bits < 1:
        raise LayoutError(f"{op}: dtype_bits must be a positive int, got {dtype_bits!r}")
    accesses = list(accesses)
    if len(accesses) > 32:
        raise LayoutError(f"{op}: a warp has 32 threads, got {len(accesses)} accesses")
    vec_lengths = {a[1] for a in accesses if a is not None}
    if not vec_lengths:
        return BankConflicts(0, 0, 0)
    if len(vec_lengths) != 1:
        raise LayoutError(f"{op}: threads use different vector lengths {sorted(vec_lengths)}; one request is one "
                          f"instruction with one vector length")
    (vec,) = vec_lengths
    if isinstance(vec, bool) or not isinstance(vec, int) or vec < 1:
        raise LayoutError(f"{op}: vector length must be a positive int, got {vec!r}")
    access_bits = vec * dtype_bits
    if access_bits > 128 or access_bits & (access_bits - 1):
        raise LayoutError(f"{op}: a thread accesses {vec} x {dtype_bits} bits = {access_bits} bits; a shared "
                          f"memory access is a power of two of at most 128 bits")
    phase_size = _threads_per_phase(access_bits)

    phases: dict[int, dict[int, set[int]]] = {}  # phase -> bank -> words
    for thread, access in enumerate(accesses):
        if access is None:
            continue
        index = tuple(access[0])
        if len(index) != layout.ndim:
            raise LayoutError(f"{op}: thread {thread} index {list(index)} has {len(index)} coordinates, layout "
                              f"{layout} has {layout.ndim}")
        last = index[-1]
        if not (0 <= last and last + vec <= layout.shape[-1]):
            raise LayoutError(f"{op}: thread {thread} reads {vec} elements from {list(index)}, beyond the last "
                              f"dimension ({layout.shape[-1]}) of layout {layout}")
        offsets = _vector_offsets(layout, index, vec)
        if offsets != list(range(offsets[0], offsets[0] + vec)) or offsets[0] % vec:
            raise LayoutError(f"{op}: thread {thread} reads {vec} elements from {list(index)} at offsets "
                              f"{offsets} in layout {layout}; a vector access needs contiguous offsets "
                              f"aligned to {vec}")
        first_bit = offsets[0] * dtype_bits
        words = range(first_bit // BANK_BITS, (first_bit + access_bits - 1) // BANK_BITS + 1)
        banks = phases.setdefault(thread // phase_size, {})
        for word in words:
            banks.setdefault(word % NUM_BANKS, set()).add(word)

    wavefronts = 0
    ideal = 0
    worst = 0
    for banks in phases.values():
        cost = max(len(words) for words in banks.values())
        distinct = sum(len(words) for words in banks.values())
        wavefronts += cost
        ideal += -(-distinct // NUM_BANKS)
        worst = max(worst, cost)
    return BankConflicts(wavefronts=wavefronts, ideal_wavefronts=ideal, conflict_ways=worst)
