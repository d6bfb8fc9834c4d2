"""Bit placements: low-precision codes stored with their bits where a cheap conversion wants them.

A code of ``n`` bits converts into a 16-bit float by putting its bits at fixed places of the float's
pattern: an integer's under the magic number's exponent (``0x6400 | c << p`` is ``1024 + c * 2**p``), a
float's exponent and mantissa fields at the bottom of the target's exponent and the top of its
mantissa, its sign at bit 15. Codes stored densely (code ``s`` at bits ``[s*n, (s+1)*n)``) straddle the
16-bit halves of their words when 16 is not a multiple of ``n``, and two codes meant for the two lanes
of one paired register never sit at the same place of two halves: each code is then cut out on its own.

A :class:`BitPlacement` instead stores a *block* of ``words`` 32-bit words (``slots = 32 * words / n``
codes) so that slot pair ``(2j, 2j + 1)`` -- one paired register of the output -- has its two codes
at the same places of the low and high halves of the block's words: code ``2j`` in a low half, code
``2j + 1`` at the same place of the high half. So one shift and one ``lop3`` mask out both lanes of a
pair at once. Most pairs sit whole in one word at a place that needs no shift, or a shift shared by
other pairs of that word; the rest are split over the bits left free, a few *pieces* each. A pair's
*recipe* (:meth:`BitPlacement.recipe`) lists its pieces for a target type (``float16`` or
``bfloat16``): ``(word, shift, mask)``, the lanes' pattern being the OR of ``(words[word] >> shift) &
mask`` (a left shift for negative ``shift``; the mask has the same 16 bits in both halves).

Signed integers are stored with their sign bit flipped (offset binary, ``c + 2**(n-1)``), so that the
magic number's fma removes the offset and no ``xor`` is needed.

A placement is designed for one 16-bit type, ``float16`` or ``bfloat16`` (:func:`placement`), and either
type reads it, with recipes of more pieces for the other: a float's fields sit at the bottom of the
target's exponent and the top of its mantissa, 6 bits below its sign in ``float16`` and 9 in ``bfloat16``
(``float4_e2m1``: 10 masks and shifts for 8 codes into ``float16`` and 17 into ``bfloat16`` on the
``float16`` design, 15 and 11 on the ``bfloat16`` one). An integer's magic number takes its code at the same
places in both types, so integers have one design. Which types have one: :func:`placeable`.
``pack_weight`` stores the weights of these types this way (:mod:`tilus_tvm.schedules.quantized_weight`),
and ``cast(..., placement=)`` converts them (:func:`tilus_tvm.instructions.cast_rules.placed_block`).

>>> from tilus_tvm.dtypes import float6_e3m2
>>> p = placement(float6_e3m2)
>>> p.words, p.slots, [len(p.recipe(j, "float16").pieces) for j in range(p.slots // 2)]
(3, 16, [1, 1, 1, 1, 1, 1, 4, 4])
>>> placement(float6_e3m2).cost("bfloat16"), placement(float6_e3m2, "bfloat16").cost("bfloat16")
(36, 21)
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Optional

from tilus_tvm.dtypes import DataType, as_dtype
from tilus_tvm.lowp import float_family, is_low_precision

HALF_BITS = 16
HALVES = ("float16", "bfloat16")  # the 16-bit types a placement is designed for and read into


def power_of_two(value) -> bool:
    """Whether ``value`` is a positive power of two (an exact scale for a float)."""
    return not isinstance(value, bool) and isinstance(value, (int, float)) and value > 0 and \
        math.frexp(float(value))[0] == 0.5


def placeable(dtype) -> bool:
    """Whether ``dtype`` has a :class:`BitPlacement`: integers of 3, 5, 6 or 7 bits (1, 2 and 4 bits
    interleave whole codes instead, :func:`~tilus_tvm.instructions.cast_rules.interleaved_int_word`) and
    floats of at most 7 bits whose values float16 and bfloat16 hold with their fields placed (an exponent
    of at most 4 bits, no reserved codes)."""
    dtype = as_dtype(dtype)
    if not is_low_precision(dtype) or dtype.nbits >= 8:
        return False
    if dtype.is_integer:
        return dtype.nbits in (3, 5, 6, 7)
    return float_family(dtype) == "finite" and dtype.exponent_bits <= 4 and dtype.mantissa_bits <= 7


def targets(dtype: DataType, half: str, place: int = 0) -> tuple[int, ...]:
    """Where each bit of a code (least significant first) goes in a lane of ``half``: an integer's at
    ``place`` upwards, a float's magnitude at the top of the mantissa field upwards and its sign at 15."""
    n = dtype.nbits
    if dtype.is_integer:
        return tuple(place + b for b in range(n))
    mantissa = as_dtype(half).mantissa_bits
    magnitude = dtype.exponent_bits + dtype.mantissa_bits
    spots = [mantissa - dtype.mantissa_bits + b for b in range(magnitude)]
    return tuple(spots + [HALF_BITS - 1] * (n - magnitude))


def places(dtype: DataType, half: str) -> tuple[int, ...]:
    """The places an integer code may take under ``half``'s magic number (its top bit in the mantissa);
    ``(0,)`` for floats, whose places are fixed."""
    if not dtype.is_integer:
        return (0,)
    return tuple(range(as_dtype(half).mantissa_bits - dtype.nbits + 1))


@dataclass(frozen=True)
class Piece:
    """``(word >> shift) & mask`` (``word << -shift`` for a negative shift); ``mask`` is 16 bits, applied to
    both halves."""

    word: int
    shift: int
    mask: int


@dataclass(frozen=True)
class Recipe:
    """How a slot pair becomes a paired 16-bit pattern: the OR of its pieces, an integer's code at
    ``place`` (the fma then scales by ``2**-place``)."""

    pieces: tuple[Piece, ...]
    place: int


@dataclass(frozen=True)
class BitPlacement:
    """Where the bits of a block's codes are stored (module docstring). ``source[w][pos]`` is ``(pair, bit)``:
    storage bit ``pos`` (< 16) of word ``w`` holds bit ``bit`` of slot ``2 * pair``, and bit ``pos + 16``
    the same bit of slot ``2 * pair + 1``; ``half``: the 16-bit type the design is for."""

    dtype: DataType
    words: int
    source: tuple[tuple[tuple[int, int], ...], ...]
    half: str = "float16"  # the 16-bit type it was designed for (either reads it)

    @property
    def slots(self) -> int:
        return 32 * self.words // self.dtype.nbits

    @property
    def offset_binary(self) -> bool:
        """Signed integers are stored with their sign bit flipped."""
        return self.dtype.is_integer and self.dtype.signed

    def position(self, pair: int, bit: int) -> tuple[int, int]:
        """``(word, pos)``: where bit ``bit`` of the pair's low-lane code is stored."""
        return self._positions()[pair][bit]

    @functools.lru_cache(maxsize=None)
    def _positions(self) -> tuple:
        table = [[None] * self.dtype.nbits for _ in range(self.slots // 2)]
        for w, row in enumerate(self.source):
            for pos, (pair, bit) in enumerate(row):
                table[pair][bit] = (w, pos)
        return tuple(tuple(row) for row in table)

    def recipe(self, pair: int, half: str) -> Recipe:
        """The pieces of slot pair ``pair`` for ``half`` (:meth:`recipes`)."""
        return self.recipes(half)[pair]

    @functools.lru_cache(maxsize=None)
    def recipes(self, half: str) -> tuple[Recipe, ...]:
        """Every pair's pieces for ``half``, in pair order. An integer takes the place that needs the fewest
        pieces, then the fewest shifts that no earlier pair has made (``uint3b``: the codes at bits 9 and 12
        of a word share one shift, at places 4 and 7)."""
        made: set = set()
        recipes = []
        for pair in range(self.slots // 2):
            best = None
            for place in places(self.dtype, half):
                pieces: dict = {}
                for bit, target in enumerate(targets(self.dtype, half, place)):
                    w, pos = self.position(pair, bit)
                    pieces[(w, pos - target)] = pieces.get((w, pos - target), 0) | 1 << target
                cost = (len(pieces), sum(shift != 0 and (w, shift) not in made for w, shift in pieces))
                if best is None or cost < best[0]:
                    best = (cost, Recipe(tuple(Piece(w, s, m) for (w, s), m in sorted(pieces.items())), place))
            made |= {(piece.word, piece.shift) for piece in best[1].pieces}
            recipes.append(best[1])
        return tuple(recipes)

    def shifts(self, half: str) -> set:
        """The ``(word, shift)`` sources the recipes use (one shift instruction each, shift 0 aside)."""
        return {(p.word, p.shift) for j in range(self.slots // 2) for p in self.recipe(j, half).pieces}

    def cost(self, half: str) -> int:
        """Instructions a block takes into ``half`` before its multiply or fma: a mask a piece, a shift a
        source."""
        pieces = sum(len(self.recipe(j, half).pieces) for j in range(self.slots // 2))
        return pieces + sum(shift != 0 for _, shift in self.shifts(half))

    # ---- packing (torch) ----------------------------------------------------------------------------
    def pack(self, codes):
        """Place ``codes`` (an integer tensor [..., slots * b]) into words: an int32 tensor [..., words * b]."""
        import torch

        n = self.dtype.nbits
        lead = codes.shape[:-1]
        blocks = codes.reshape(*lead, -1, self.slots).to(torch.int64)
        if self.offset_binary:
            blocks = blocks ^ (1 << (n - 1))
        words = torch.zeros(*blocks.shape[:-1], self.words, dtype=torch.int64, device=codes.device)
        for w, pos, slot, bit, width in self._runs():
            field = (blocks[..., slot] >> bit) & ((1 << width) - 1)
            words[..., w] |= field << pos
        words = torch.where(words >= 1 << 31, words - (1 << 32), words)
        return words.to(torch.int32).reshape(*lead, -1)

    def unpack(self, words):
        """The codes (``torch.uint8`` [..., slots * b]) of placed ``words`` (int32 [..., words * b])."""
        import torch

        n = self.dtype.nbits
        lead = words.shape[:-1]
        blocks = words.reshape(*lead, -1, self.words).to(torch.int64) & 0xFFFFFFFF
        codes = torch.zeros(*blocks.shape[:-1], self.slots, dtype=torch.int64, device=words.device)
        for w, pos, slot, bit, width in self._runs():
            codes[..., slot] |= ((blocks[..., w] >> pos) & ((1 << width) - 1)) << bit
        if self.offset_binary:
            codes = codes ^ (1 << (n - 1))
        return codes.to(torch.uint8).reshape(*lead, -1)

    @functools.lru_cache(maxsize=None)
    def _runs(self) -> tuple:
        """``(word, pos, slot, bit, width)``: storage bits ``[pos, pos + width)`` of ``word`` hold bits ``[bit,
        bit + width)`` of ``slot`` (consecutive bits of one code stored consecutively, merged)."""
        runs = []
        for w, row in enumerate(self.source):
            for half_index in range(2):
                for pos, (pair, bit) in enumerate(row):
                    slot = 2 * pair + half_index
                    at = pos + HALF_BITS * half_index
                    if runs and runs[-1][0] == w and runs[-1][2] == slot and runs[-1][1] + runs[-1][4] == at \
                            and runs[-1][3] + runs[-1][4] == bit:
                        runs[-1][4] += 1
                    else:
                        runs.append([w, at, slot, bit, 1])
        return tuple(tuple(r) for r in runs)


def placement(dtype, half: str = "float16") -> BitPlacement:
    """The placement of a :func:`placeable` type designed for ``half``, ``float16`` or ``bfloat16`` (module
    docstring; an integer's is the same for both).

    Word by word, whole pairs first: a pair goes where its bits need no shift, else at the shift that
    fits the most of the word's remaining pairs (one shift instruction serves them all). The bits left
    free in the block then take the remaining pairs bit by bit, each bit continuing its pair's last
    piece (same word, same shift) where that is free. Blocks of one word are searched."""
    dtype, half = as_dtype(dtype), as_dtype(half).name
    if not placeable(dtype):
        raise ValueError(f"placement: {dtype.name} has no bit placement (placeable() is False)")
    if half not in HALVES:
        raise ValueError(f"placement: half={half} must be float16 or bfloat16")
    return _designed(dtype, "float16" if dtype.is_integer else half)


@functools.lru_cache(maxsize=None)
def _designed(dtype: DataType, half: str) -> BitPlacement:
    """:func:`placement`'s design (arguments checked)."""
    n = dtype.nbits
    words = n // math.gcd(n, HALF_BITS)
    if words == 1:
        return _searched_word(dtype, half)
    pairs = HALF_BITS * words // n
    source: list = [[None] * HALF_BITS for _ in range(words)]
    shapes = [targets(dtype, half, place) for place in places(dtype, half)]
    pair = 0

    def fits(w: int, shift: int, shape: tuple) -> bool:
        return all(0 <= t + shift < HALF_BITS and source[w][t + shift] is None for t in shape)

    def put(w: int, shift: int, shape: tuple) -> None:
        nonlocal pair
        for bit, t in enumerate(shape):
            source[w][t + shift] = (pair, bit)
        pair += 1

    for w in range(words):
        shifts_used = [0]
        while pair < pairs:
            placed = False
            for shift in shifts_used:  # no new instruction
                shape = next((s for s in shapes if fits(w, shift, s)), None)
                if shape is not None:
                    put(w, shift, shape)
                    placed = True
                    break
            if placed:
                continue
            best = None  # a new shift: the one that fits the most pairs (then the smallest)
            for shift in sorted(range(-HALF_BITS + 1, HALF_BITS), key=abs):
                count, taken = 0, set()
                for start in range(HALF_BITS):
                    for shape in shapes:
                        spots = {t + shift for t in shape}
                        if min(shape) + shift == start and fits(w, shift, shape) and not spots & taken:
                            taken |= spots
                            count += 1
                            break
                if count and (best is None or count > best[0]):
                    best = (count, shift)
            if best is None:
                break
            shifts_used.append(best[1])
    free = [(w, pos) for w in range(words) for pos in range(HALF_BITS) if source[w][pos] is None]
    low_shape = shapes[0]
    while pair < pairs:
        last: Optional[tuple[int, int]] = None  # (word, shift) of the previous bit
        for bit, t in enumerate(low_shape):
            spot = None
            if last is not None and (last[0], t + last[1]) in free:
                spot = (last[0], t + last[1])
            if spot is None:
                spot = free[0]
            free.remove(spot)
            source[spot[0]][spot[1]] = (pair, bit)
            last = (spot[0], spot[1] - t)
        pair += 1
    return BitPlacement(dtype, words, tuple(tuple(row) for row in source), half)


# float4_e2m1 reaches its best within these, 10 for float16 and 11 for bfloat16 (the same with 50K); the proof that
# 10 is float16's best takes 20K
SEARCH_NODES = 5_000


def _searched_word(dtype: DataType, half: str) -> BitPlacement:
    """A block of one word (4-bit floats: four pairs a word) placed for ``half`` by a search, bounded by its cost:
    each pair takes a position for each bit; the cost is the pieces (distinct shifts within a pair) plus the
    distinct nonzero shifts of the word. ``float4_e2m1`` into float16: 10 (two pairs whole at shifts of their own,
    two split over two shifts they share), where the greedy design of :func:`placement` takes 13."""
    import itertools

    n = dtype.nbits
    goal = targets(dtype, half)
    options: dict = {}  # lowest position -> [(mask of positions, pieces, nonzero shifts, positions)]
    for spots in itertools.permutations(range(HALF_BITS), n):
        shifts = [spot - target for spot, target in zip(spots, goal)]
        pieces = len(set(shifts))
        if pieces <= 3:
            options.setdefault(min(spots), []).append(
                (sum(1 << spot for spot in spots), pieces, frozenset(s for s in shifts if s), spots))
    for choices in options.values():
        choices.sort(key=lambda option: option[1])
    pairs = HALF_BITS // n
    best: list = [None, None]
    nodes = [0]

    def visit(used: int, chosen: list, pieces: int, shifts: frozenset) -> None:
        nodes[0] += 1
        if nodes[0] > SEARCH_NODES:
            return
        if len(chosen) == pairs:
            if best[0] is None or pieces + len(shifts) < best[0]:
                best[0], best[1] = pieces + len(shifts), list(chosen)
            return
        low = next(pos for pos in range(HALF_BITS) if not used >> pos & 1)  # the pair holding it starts there
        for mask, count, more, spots in options.get(low, []):
            if mask & used:
                continue
            union = shifts | more
            if best[0] is not None and pieces + count + len(union) + pairs - len(chosen) - 1 >= best[0]:
                continue
            chosen.append(spots)
            visit(used | mask, chosen, pieces + count, union)
            chosen.pop()

    visit(0, [], 0, frozenset())
    source: list = [None] * HALF_BITS
    for pair, spots in enumerate(best[1]):
        for bit, spot in enumerate(spots):
            source[spot] = (pair, bit)
    return BitPlacement(dtype, 1, (tuple(source),), half)
