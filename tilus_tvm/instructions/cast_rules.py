"""Conversions between the table's types as TIR expressions: the arithmetic behind ``cast``.

The rules are :mod:`tilus_tvm.lowp`'s, bit for bit:

- a packed code (``uint32`` expression holding it in its low bits) decodes to its exact value
  (:func:`decode_float` as ``float32``, :func:`decode_int` as ``int32``);
- a value converts into a low-precision type by rounding to nearest, ties to even, saturating at the
  largest finite value (infinities included), keeping the sign of zero in signed floats, sending
  what is below an unsigned type's range to its smallest value, and NaN to the type's NaN code
  (0x7F in ``float8_e4m3`` / ``float8_e5m2``, 0xFF in ``float8_e8m0``) or to 0 in types without NaN
  (:func:`encode_float`, :func:`encode_int`). Wider sources are first converted to ``float32``
  (floats) or kept in their own integer type (integers).

Everything here is plain TIR (no CUDA), so the same expressions compile for the CPU, where a test
checks them on every code of every type of at most 8 bits against :mod:`tilus_tvm.lowp`.

**Pairs.** The fast paths produce two 16-bit floats at once, as the bits of an ``f16x2`` /
``bf16x2`` register, through an ``ops`` object that gives ``prmt``, ``lop3`` and the paired
multiply-add: :class:`PortableOps` spells them in TIR (the CPU test), ``cast.py``'s PTX ops
in inline assembly. The tricks (each exact):

- *magic numbers*: a ``k``-bit unsigned integer ``c < 2**10`` in the low bits of the f16 pattern
  ``0x6400`` (1024.0) is the f16 value ``1024 + c``; subtracting 1024 gives ``c``. Signed codes flip
  their sign bit first (``c ^ 2**(k-1) = value + 2**(k-1)``) and subtract that too. bf16 uses
  ``0x4300`` (128.0) and needs ``c < 2**7``;
- *4-bit integers*: ``prmt`` copies byte ``j`` of a word into both 16-bit lanes and one ``lop3``
  keeps the low nibble in lane 0 and the high nibble (times 16) in lane 1 and ors in the magic
  number; one paired fma with (1, 1/16) and (-1024, -64) finishes both;
- *small floats*: a format with ``E`` exponent and ``M`` mantissa bits placed into an f16 (bf16)
  pattern with its exponent field's low bit at bit 10 (7) and the sign at bit 15 is the value times
  ``2**(bias_f16 - bias)``, subnormals included; one paired multiply by ``2**(bias - ...)`` restores
  it. NaN codes of ``float8_e4m3`` are replaced by the 16-bit NaN pattern first.
"""
from __future__ import annotations

import math
from functools import lru_cache
from typing import Any, Sequence

from tvm import tirx

from tilus_tvm.dtypes import DataType
from tilus_tvm.instructions.packed import low_mask, u32
from tilus_tvm.lowp import _rounding_grid, float_family, nan_code

F32_BIAS = 127
F32_MANTISSA = 23


def f32(value: float):
    return tirx.const(value, "float32")


def i32(value: int):
    return tirx.const(value, "int32")


def bias(dtype: DataType) -> int:
    return (1 << (dtype.exponent_bits - 1)) - 1


@lru_cache(maxsize=None)
def max_finite_code(dtype: DataType) -> int:
    """The code (without the sign bit) of the largest finite value of a low-precision float."""
    _, codes = _rounding_grid(dtype)
    return codes[-1]


# ---- decoding ---------------------------------------------------------------------------------------
def decode_int(code: Any, dtype: DataType):
    """The ``int32`` value of an integer code (two's complement for signed types)."""
    if not dtype.signed:
        return tirx.Cast("int32", code)
    shift = 32 - dtype.nbits
    return tirx.reinterpret("int32", code << u32(shift)) >> i32(shift)


def decode_float(code: Any, dtype: DataType):
    """The exact ``float32`` value of a low-precision float code."""
    exponent_bits, mantissa_bits = dtype.exponent_bits, dtype.mantissa_bits
    magnitude_bits = exponent_bits + mantissa_bits
    family = float_family(dtype)
    magnitude = code & u32(low_mask(magnitude_bits)) if dtype.signed else code
    exponent = magnitude >> u32(mantissa_bits) if mantissa_bits else magnitude
    mantissa = magnitude & u32(low_mask(mantissa_bits))
    if family == "e8m0":  # 2**(e - 127): code 0 is the f32 subnormal 2**-127, 0xFF is NaN
        value = tirx.Select(exponent == u32(0), u32(1 << 22), exponent << u32(F32_MANTISSA))
        value = tirx.Select(exponent == u32(0xFF), u32(0x7FC00000), value)
        return tirx.reinterpret("float32", value)
    normal = ((exponent + u32(F32_BIAS - bias(dtype))) << u32(F32_MANTISSA)) | \
        (mantissa << u32(F32_MANTISSA - mantissa_bits))
    subnormal = tirx.reinterpret("uint32", tirx.Cast("float32", mantissa) *
                                 f32(math.ldexp(1.0, 1 - bias(dtype) - mantissa_bits)))
    bits = tirx.Select(exponent == u32(0), subnormal, normal)
    all_ones = low_mask(exponent_bits)
    if family == "ieee":
        special = tirx.Select(mantissa == u32(0), u32(0x7F800000), u32(0x7FC00000))
        bits = tirx.Select(exponent == u32(all_ones), special, bits)
    elif family == "fn":
        bits = tirx.Select(magnitude == u32(low_mask(magnitude_bits)), u32(0x7FC00000), bits)
    if dtype.signed:
        bits = bits | ((code >> u32(magnitude_bits)) << u32(31))
    return tirx.reinterpret("float32", bits)


# ---- encoding ---------------------------------------------------------------------------------------
def encode_float(value: Any, dtype: DataType):
    """The code (uint32) of ``value`` (a ``float32`` expression) converted to a low-precision float."""
    mantissa_bits = dtype.mantissa_bits
    family = float_family(dtype)
    bits = tirx.reinterpret("uint32", value)
    magnitude = bits & u32(0x7FFFFFFF)
    negative = (bits >> u32(31)) == u32(1)
    is_nan = magnitude > u32(0x7F800000)
    drop = F32_MANTISSA - mantissa_bits
    # round to nearest even on the f32 pattern: a carry into the exponent is the next binade
    rounded = (magnitude + u32((1 << (drop - 1)) - 1) + ((magnitude >> u32(drop)) & u32(1))) >> u32(drop)
    normal = rounded - u32((F32_BIAS - bias(dtype)) << mantissa_bits)
    if family == "e8m0":
        below_normal = tirx.Select(magnitude <= u32(0x00600000), u32(0), u32(1))  # ties at 1.5 * 2**-127: even
        code = tirx.Select(magnitude < u32(0x00800000), below_normal, normal)
    else:
        # below the smallest normal: a multiple of the subnormal step 2**(1 - bias - M), rounded half to even
        min_normal_bits = (F32_BIAS + 1 - bias(dtype)) << F32_MANTISSA
        steps = tirx.nearbyint(tirx.reinterpret("float32", magnitude) *
                               f32(math.ldexp(1.0, bias(dtype) - 1 + mantissa_bits)))
        subnormal = tirx.Cast("uint32", steps)
        code = tirx.Select(magnitude < u32(min_normal_bits), subnormal, normal)
    code = tirx.min(code, u32(max_finite_code(dtype)))  # saturate (infinities too)
    if dtype.signed:
        code = code | tirx.Select(negative, u32(1 << (dtype.nbits - 1)), u32(0))
    else:
        code = tirx.Select(negative, u32(0), code)  # below the range: the smallest value
    return tirx.Select(is_nan, u32(nan_code(dtype) or 0), code)


def encode_int(value: Any, dtype: DataType):
    """The code (uint32) of ``value`` converted to an integer type of at most 8 bits.

    Floats (``float32`` expressions) round half to even, saturate, and give 0 for NaN; integer
    expressions of any width saturate."""
    source = str(value.ty.dtype)
    if source.startswith("float"):
        rounded = tirx.nearbyint(value)
        clamped = tirx.max(tirx.min(rounded, f32(dtype.max_value)), f32(dtype.min_value))
        integer = tirx.Cast("int32", tirx.Select(tirx.isnan(value), f32(0.0), clamped))
    else:
        integer = clamp_int(value, dtype)
        integer = tirx.Cast("int32", integer) if source != "int32" else integer
    return tirx.reinterpret("uint32", integer) & u32(low_mask(dtype.nbits))


def clamp_int(value: Any, dtype: DataType):
    """An integer expression clamped to ``dtype``'s range, in the expression's own type (a range the
    source type holds entirely is not clamped)."""
    source = str(value.ty.dtype)
    source_bits = int("".join(ch for ch in source if ch.isdigit()) or 32)
    source_signed = source.startswith("int")
    low, high = dtype.min_value, dtype.max_value
    source_low = -(1 << (source_bits - 1)) if source_signed else 0
    source_high = (1 << (source_bits - 1)) - 1 if source_signed else (1 << source_bits) - 1
    if high < source_high:
        value = tirx.min(value, tirx.const(high, source))
    if low > source_low:
        value = tirx.max(value, tirx.const(low, source))
    return value


def float_to_int(value: Any, dtype: DataType):
    """A float expression converted to the integer type ``dtype`` (any width): round half to even,
    saturate, NaN to 0."""
    name = dtype.tvm_name
    wide = tirx.Cast("float64", value) if dtype.nbits > 24 else tirx.Cast("float32", value)
    rounded = tirx.nearbyint(wide)
    kind = str(wide.ty.dtype)
    high = tirx.const(float(dtype.max_value), kind)
    clamped = tirx.max(tirx.min(rounded, high), tirx.const(float(dtype.min_value), kind))
    converted = tirx.Cast(name, tirx.Select(tirx.isnan(wide), tirx.const(0.0, kind), clamped))
    # the largest value of a 32/64-bit integer is not a float; what rounds to 2**31 (2**63) saturates
    return tirx.Select(rounded >= high, tirx.const(dtype.max_value, name), converted)


# ---- pairs into 16-bit floats -----------------------------------------------------------------------------
HALF_MAGIC = {"float16": (0x6400, 1024.0, 10), "bfloat16": (0x4300, 128.0, 7)}  # pattern, value, max code bits
HALF_NAN = {"float16": 0x7E00, "bfloat16": 0x7FC0}
HALF_FORMAT = {"float16": (5, 10), "bfloat16": (8, 7)}  # exponent, mantissa bits
LOP3_AND_OR = 0xEA  # (a & b) | c
LOP3_AND_XOR = 0x6A  # (a & b) ^ c


class PortableOps:
    """``prmt``, ``lop3`` and paired 16-bit arithmetic in plain TIR (exact for the values used here)."""

    def prmt(self, a: Any, b: Any, selector: Any):
        """PTX ``prmt.b32`` (default mode): byte ``i`` of the result is byte ``selector >> 4i & 7`` of
        ``b:a`` (bytes 0-3 of a, 4-7 of b), or that byte's sign replicated where bit ``4i + 3`` is set.
        ``selector``: an int, or a uint32 expression."""
        selector = u32(selector) if isinstance(selector, int) else selector
        both = tirx.Cast("uint64", a) | (tirx.Cast("uint64", b) << tirx.const(32, "uint64"))
        pieces = []
        for i in range(4):
            nibble = (selector >> u32(4 * i)) & u32(0xF)
            shift = tirx.Cast("uint64", (nibble & u32(7)) * u32(8))
            byte = tirx.Cast("uint32", (both >> shift) & tirx.const(0xFF, "uint64"))
            byte = tirx.Select((nibble & u32(8)) != u32(0), tirx.Select(byte >= u32(0x80), u32(0xFF), u32(0)), byte)
            pieces.append(byte << u32(8 * i) if i else byte)
        return pieces[0] | pieces[1] | pieces[2] | pieces[3]

    def bind(self, value: Any):
        """``value`` bound to a variable (a statement of the function being built), for reuse."""
        from tvm.script.ir_builder import tirx as Tb

        return Tb.Bind(value)

    def lop3(self, a: Any, b: Any, c: Any, lut: int):
        if lut == LOP3_AND_OR:
            return (a & b) | c
        if lut == LOP3_AND_XOR:
            return (a & b) ^ c
        raise ValueError(f"PortableOps.lop3: no spelling for look-up table {lut:#x}")

    def fma2(self, bits: Any, mul: Sequence[float], add: Sequence[float], half: str):
        """Lane-wise ``x * mul + add`` of the 16-bit floats in ``bits`` (exact results only)."""
        lanes = []
        for lane in range(2):
            x = _half_to_f32(bits >> u32(16 * lane) & u32(0xFFFF), half)
            lanes.append(_f32_to_half(x * f32(mul[lane]) + f32(add[lane]), half))
        return lanes[0] | (lanes[1] << u32(16))

    def mul2(self, bits: Any, scale: float, half: str):
        return self.fma2(bits, (scale, scale), (-0.0, -0.0), half)

    def fma2_bits(self, bits: Any, mul: Any, add: Any, half: str):
        """Lane-wise ``x * mul + add`` with ``mul`` and ``add`` given as the bits of two 16-bit floats (uint32
        expressions), rounded to nearest even once (exact for the operands used: the product and the sum are
        exact in float32)."""
        lanes = []
        for lane in range(2):
            x, m, a = (_half_to_f32(v >> u32(16 * lane) & u32(0xFFFF), half) for v in (bits, mul, add))
            lanes.append(_f32_to_half_rounded(x * m + a, half))
        return lanes[0] | (lanes[1] << u32(16))


def _half_to_f32(bits16: Any, half: str):
    if half == "bfloat16":
        return tirx.reinterpret("float32", bits16 << u32(16))
    return tirx.Cast("float32", tirx.reinterpret("float16", tirx.Cast("uint16", bits16)))


def _f32_to_half(value: Any, half: str):
    if half == "bfloat16":  # exact results: the low half of the pattern is zero
        return tirx.reinterpret("uint32", value) >> u32(16)
    return tirx.Cast("uint32", tirx.reinterpret("uint16", tirx.Cast("float16", value)))


def _f32_to_half_rounded(value: Any, half: str):
    """The bits (uint32) of a finite float32 rounded to nearest even into ``half``."""
    if half == "bfloat16":
        bits = tirx.reinterpret("uint32", value)
        return (bits + u32(0x7FFF) + ((bits >> u32(16)) & u32(1))) >> u32(16)
    return _f32_to_half(value, half)


def int4_pair(ops: Any, word: Any, byte: int, signed: bool):
    """The two float16 of the 4-bit integer codes in byte ``byte`` of ``word`` (low nibble in lane 0).

    Lane 1 holds the high nibble times 16 (``0x6400 | hi << 4``), which needs f16's 10 mantissa bits:
    bf16 takes :func:`int_pair_field`."""
    half = "float16"
    pattern, magic, _ = HALF_MAGIC[half]
    spread = ops.prmt(word, u32(0), 0x4040 | byte << 8 | byte)  # byte j in both lanes' low bytes
    if signed:
        bits = ops.lop3(spread, u32(0x00F0000F), u32((pattern | pattern << 16) ^ 0x00800008), LOP3_AND_XOR)
        return ops.fma2(bits, (1.0, 1.0 / 16), (-magic - 8, -magic / 16 - 8), half)
    bits = ops.lop3(spread, u32(0x00F0000F), u32(pattern | pattern << 16), LOP3_AND_OR)
    return ops.fma2(bits, (1.0, 1.0 / 16), (-magic, -magic / 16), half)


# float16 high bytes of the float4_e2m1 magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6 (their low bytes are all 0),
# as the two words a prmt looks bytes up in
E2M1_F16_HIGH = (0x3E3C3800, 0x46444240)


def e2m1_quad(ops: Any, word: Any, half: int):
    """The two float16 pairs of the four ``float4_e2m1`` codes in 16-bit half ``half`` of ``word``
    (codes 4q..4q+3 at nibbles, the first lowest): one ``prmt`` looks up the four magnitudes' high
    bytes, a second picks 0x80 or 0 for each sign, and two more put each byte over a zero byte."""
    bits = word >> u32(16 * half) if half else word
    magnitude = ops.prmt(u32(E2M1_F16_HIGH[0]), u32(E2M1_F16_HIGH[1]), bits & u32(0x7777))
    sign = ops.prmt(u32(0x8000), u32(0), (bits >> u32(3)) & u32(0x1111))
    high = ops.bind(magnitude | sign)  # used twice: computed once
    return ops.prmt(high, u32(0), 0x1404), ops.prmt(high, u32(0), 0x3424)


def narrow_int_word(ops: Any, word: Any, dtype: DataType, half: str) -> list:
    """The 16-bit float pairs of the ``32 / n`` integer codes of ``n`` = 1 or 2 bits in ``word`` (slot
    ``s`` at bits ``[s*n, (s+1)*n)``), in slot order, by bytes: ``word >> j*n`` masked to each byte's
    low code holds slots ``j, j + 8/n, j + 16/n, j + 24/n``; a ``prmt`` interleaves two such words
    into consecutive slots, a second puts each code under the magic pattern's high byte, and one
    paired fma removes the magic number (and the offset of signed codes, whose sign bits are
    flipped first). About 1.7 instructions a code, where one pair at a time takes 4."""
    n = dtype.nbits
    if n not in (1, 2):
        raise ValueError(f"narrow_int_word: {dtype.name} is not a 1- or 2-bit integer type")
    pattern, magic, _ = HALF_MAGIC[half]
    stride = 8 // n  # slots between the codes of consecutive bytes
    offset = float(1 << (n - 1)) if dtype.signed else 0.0
    if dtype.signed:
        word = ops.bind(word ^ u32(sum(1 << (slot * n + n - 1) for slot in range(32 // n))))
    mask = u32(low_mask(n) * 0x01010101)
    spread = [ops.bind((word >> u32(j * n) if j else word) & mask) for j in range(stride)]
    high = u32((pattern >> 8) * 0x01010101)
    pairs: list = [None] * (16 // n)
    for j in range(0, stride, 2):
        for selector, first_slot in ((0x5140, j), (0x7362, j + 2 * stride)):  # 4 consecutive-pair codes
            codes = ops.bind(ops.prmt(spread[j], spread[j + 1], selector))
            for k, slot in enumerate((first_slot, first_slot + stride)):
                bits = ops.prmt(codes, high, 0x4140 if k == 0 else 0x4342)
                pairs[slot // 2] = ops.fma2(bits, (1.0, 1.0), (-magic - offset, -magic - offset), half)
    return pairs


def interleavable(dtype: DataType) -> bool:
    """Whether :func:`interleaved_int_word` converts ``dtype``: integers of 1, 2 or 4 bits (a 32-bit word
    holds a whole number of their code pairs, one code of each pair in each 16-bit half)."""
    return dtype.is_integer and dtype.nbits in (1, 2, 4)


def interleaved_int_word(ops: Any, word: Any, dtype: DataType, half: str) -> list:
    """The 16-bit float pairs of the ``32 / n`` integer codes of ``n`` = 1, 2 or 4 bits in ``word``, stored
    *interleaved*: pair ``i`` holds the codes of fields ``i`` and ``i + 16 / n`` (field ``f`` at bits
    ``[f*n, (f+1)*n)``), which sit at the same place ``p`` of the word's two 16-bit halves.

    One ``lop3`` keeps such a pair in both halves and ors in the magic pattern (signed codes: xors in the
    pattern and their sign bits), giving lanes ``M + c * 2**p``; one paired fma by ``2**-p`` and
    ``-M * 2**-p`` (minus the signed offset) ends it. A place that would reach the exponent field
    (``p + n`` above the mantissa's bits) is taken from the word shifted right, one shift serving every
    code that then fits: ``uint4b`` -> float16 is 1 shift, 4 ``lop3`` and 4 fma for 8 codes, where
    :func:`int4_pair` takes 12, and ``uint2b`` 17 for 16 codes, where :func:`narrow_int_word` takes 27."""
    pattern, magic, _ = HALF_MAGIC[half]
    pairs = []
    for place, sign, bits in _interleaved_fields(ops, word, dtype, half, lambda place: pattern):
        scale = math.ldexp(1.0, -place)
        offset = -magic * scale - sign
        pairs.append(ops.fma2(bits, (scale, scale), (offset, offset), half))
    return pairs


def place_magic(half: str, place: int) -> int:
    """The bits of ``2**(m - place)`` in ``half`` (``m`` its mantissa bits): the magic number under which a
    code at bit ``place`` of the mantissa counts in units (lanes ``2**(m - place) + c``)."""
    exponent_bits, mantissa_bits = HALF_FORMAT[half]
    return ((1 << (exponent_bits - 1)) - 1 + mantissa_bits - place) << mantissa_bits


def interleaved_int_word_affine(ops: Any, word: Any, dtype: DataType, half: str, coefficients: Any) -> list:
    """:func:`interleaved_int_word`'s pairs, each under the magic number of its own place
    (:func:`place_magic`), so that its lanes hold ``base + c`` (``base``: ``2**(m - place)``, plus
    ``2**(n-1)`` for signed codes), finished by one paired fma whose operands the caller makes:
    ``coefficients(i, base)`` gives the bits of pair ``i``'s multiplier and addend (``uint32``, two lanes).
    The cast takes a zero point (``mul`` 1, ``add -base - z``) or a scale (``mul s``, ``add -base * s``)
    into that fma this way, where the addend is exact (:func:`tilus_tvm.instructions.cast` checks)."""
    biases = interleaved_biases(dtype, half)
    return [ops.fma2_bits(bits, *coefficients(i, biases[i]), half)
            for i, bits in enumerate(interleaved_int_word_biased(ops, word, dtype, half))]


def interleaved_int_word_biased(ops: Any, word: Any, dtype: DataType, half: str) -> list:
    """:func:`interleaved_int_word`'s pairs left under the magic number of their place (:func:`place_magic`),
    with no fma: lanes ``b + c``, ``b`` the pair's bias (:func:`interleaved_biases`), one ``lop3`` a pair (and
    a shift for the places taken from the word shifted right). For a dot that takes the bias off afterwards:
    ``sum(x * (b + c)) - sum(x * b)``, the second term independent of the codes."""
    return [bits for _, _, bits in _interleaved_fields(ops, word, dtype, half, lambda place: place_magic(half, place))]


def interleaved_biases(dtype: DataType, half: str) -> list:
    """The bias ``b`` of each pair of :func:`interleaved_int_word_biased`, in pair order (both lanes): ``2**(m -
    place)`` (``m`` the mantissa's bits), plus ``2**(n-1)`` for signed codes, whose sign bit is flipped."""
    mantissa_bits = HALF_FORMAT[half][1]
    return [math.ldexp(1.0, mantissa_bits - place) + sign for _, place, sign in _interleaved_steps(dtype, half)]


def _interleaved_steps(dtype: DataType, half: str) -> list:
    """(shift, place, signed offset) of each pair of :func:`interleaved_int_word`: its codes are at ``place`` of
    both 16-bit halves of the word shifted right by ``shift`` (a place that would reach the exponent is taken
    from the word shifted so that the code is at bit 0)."""
    n = dtype.nbits
    if not interleavable(dtype):
        raise ValueError(f"interleaved_int_word: {dtype.name} is not a 1-, 2- or 4-bit integer type")
    mantissa_bits = HALF_MAGIC[half][2]
    sign = 1 << (n - 1) if dtype.signed else 0
    steps, shift = [], 0
    for i in range(16 // n):
        if i * n - shift + n > mantissa_bits:  # this code would reach the exponent: shift it to bit 0
            shift = i * n
        steps.append((shift, i * n - shift, sign))
    return steps


def _interleaved_fields(ops: Any, word: Any, dtype: DataType, half: str, pattern_at: Any):
    """(place, signed offset, bits) of each pair of :func:`interleaved_int_word`, in pair order: the bits hold
    the pair's codes at ``place`` of both 16-bit halves under ``pattern_at(place)`` (sign bits flipped)."""
    n = dtype.nbits
    both = 0x00010001  # a 16-bit constant in both halves
    source, bound = word, 0
    for shift, place, sign in _interleaved_steps(dtype, half):
        if shift != bound:
            bound = shift
            source = ops.bind(word >> u32(shift))
        mask = u32((low_mask(n) << place) * both)
        pattern = pattern_at(place)
        if sign:
            bits = ops.lop3(source, mask, u32((pattern ^ sign << place) * both), LOP3_AND_XOR)
        else:
            bits = ops.lop3(source, mask, u32(pattern * both), LOP3_AND_OR)
        yield place, sign, bits


def _unsigned_bytes(rule: str, signed: bool) -> None:
    """Refuse coefficients for int8 codes in a byte-pair rule: their offset's product with a scale is not exact."""
    if signed:
        raise ValueError(f"{rule}: int8 codes take no coefficients (their offset's product with a scale is not exact)")


def byte_pair(ops: Any, word: Any, pair: int, signed: bool, coefficients: Any = None):
    """The two float16 of the 8-bit integers in bytes ``2 * pair`` and ``2 * pair + 1`` of ``word``
    (``int8`` codes are two's complement): one ``prmt`` puts each byte under the magic pattern's
    high byte ``0x64`` (``0x6400 | b`` is ``1024 + b``; ``int8`` takes ``word ^ 0x80808080`` first,
    ``b + 128``), one paired fma removes the offset. ``coefficients`` (``uint8`` only): a function of
    ``base`` (1024) giving the bits of that fma's multiplier and addend instead, as in
    :func:`interleaved_int_word_affine`."""
    pattern, magic, _ = HALF_MAGIC["float16"]
    high = pattern >> 8
    source = word ^ u32(0x80808080) if signed else word
    bits = ops.prmt(source, u32(high * 0x01010101), 0x4040 | (2 * pair + 1) << 8 | 2 * pair)
    if coefficients is not None:
        _unsigned_bytes("byte_pair", signed)
        return ops.fma2_bits(bits, *coefficients(magic), "float16")
    offset = 128.0 if signed else 0.0
    return ops.fma2(bits, (1.0, 1.0), (-magic - offset, -magic - offset), "float16")


def byte_pair_bf16(ops: Any, word: Any, pair: int, signed: bool, coefficients: Any = None):
    """The two bfloat16 of the 8-bit integers in bytes ``2 * pair`` and ``2 * pair + 1`` of ``word``.

    bfloat16 has 7 mantissa bits, one short of a byte under a magic number: a code's low 7 bits go under
    ``0x4300`` (``128 + low``, one ``prmt`` spreading the bytes and one ``lop3``), and its top bit, which
    ``prmt``'s sign mode copies across its lane, picks the paired fma's addend with one more ``lop3``: 0 where
    it is set, -128 where it is clear. ``int8`` takes ``word ^ 0x80808080`` first (``b + 128``), and -128 or
    -256. Five instructions a pair, each lane exact. ``coefficients`` (``uint8`` only): a function of ``base``
    (128) giving the bits of the fma's multiplier ``s`` and of ``-128 * s``, the addend where the top bit is
    clear (``(128 + low) * s - 128 * s``, rounded once: the product ``b * s`` rounded)."""
    source = word ^ u32(0x80808080) if signed else word
    low_byte, high_byte = 2 * pair, 2 * pair + 1
    spread = ops.prmt(source, u32(0), 0x4040 | high_byte << 8 | low_byte)  # each byte alone in its lane
    low = ops.lop3(spread, u32(0x007F007F), u32(0x43004300), LOP3_AND_OR)  # 128 + the low 7 bits
    tops = ops.prmt(source, u32(0), 0x8888 | high_byte << 12 | high_byte << 8 | low_byte << 4 | low_byte)
    if coefficients is not None:
        _unsigned_bytes("byte_pair_bf16", signed)
        multiplier, minus_base = coefficients(128.0)
        return ops.fma2_bits(low, multiplier, ops.lop3(tops, minus_base, minus_base, LOP3_AND_XOR), "bfloat16")
    if signed:  # -256 (0xC380) where the top bit of b + 128 is clear, -128 (0xC300) where it is set
        addend = ops.lop3(tops, u32(0x00800080), u32(0xC380C380), LOP3_AND_XOR)
    else:  # -128 where the top bit is clear, +0 where it is set
        addend = ops.lop3(tops, u32(0xC300C300), u32(0xC300C300), LOP3_AND_XOR)
    return ops.fma2_bits(low, u32(0x3F803F80), addend, "bfloat16")


def byte_float_supported(dtype: DataType, half: str) -> bool:
    """Whether :func:`byte_float_pair` converts ``dtype`` into ``half``: signed 8-bit floats of fewer
    exponent bits than bfloat16's, into bfloat16."""
    return (half == "bfloat16" and dtype.is_float and dtype.nbits == 8 and dtype.signed
            and dtype.exponent_bits < HALF_FORMAT[half][0] and float_family(dtype) in ("ieee", "fn", "finite"))


def byte_float_pair(ops: Any, word: Any, pair: int, dtype: DataType, coefficients: Any = None):
    """The two bfloat16 of the 8-bit float codes in bytes ``2 * pair`` and ``2 * pair + 1`` of ``word``
    (``float8_e4m3``, ``float8_e5m2``, ...: :func:`byte_float_supported`), in eight integer and paired
    instructions, where :func:`float_pair` places each code by itself.

    One ``prmt`` puts each code in the high byte of its lane, one shift moves both codes' fields to the
    bottom of bfloat16's (the sign lands ``m + 1`` bits below bit 15, and adding it ``2**(m+1) - 1`` times
    more carries it there). The reserved codes are found by a carry: one added at the bottom of the
    field that is all ones in them (the exponent of ``"ieee"`` formats, exponent and mantissa of ``"fn"``)
    runs to the bit above it only there, and that bit times ``2**(15 - top) - 1`` fills the rest of
    bfloat16's exponent, so infinities stay infinite and NaN NaN through the final multiply by
    ``2**(127 - bias)`` (subnormal codes become bfloat16 subnormals, which it scales exactly). ``coefficients``:
    a function of ``base`` (0) and that factor giving the bits of another multiplier (``s`` times the factor)
    and addend (-0), as in :func:`placed_block_affine`."""
    if not byte_float_supported(dtype, "bfloat16"):
        raise ValueError(f"byte_float_pair: {dtype.name} is not a signed 8-bit float with fewer than 8 exponent bits")
    mantissa = dtype.mantissa_bits
    low_byte, high_byte = 2 * pair, 2 * pair + 1
    codes = ops.prmt(word, u32(0), 0x0404 | high_byte << 12 | low_byte << 4)  # code i in bits [8, 16) of lane i
    fields = codes >> u32(mantissa + 1)  # mantissa at the top of bf16's 7 bits, the exponent above it
    sign = 1 << (14 - mantissa)
    bits = fields + (fields & u32(sign | sign << 16)) * u32((1 << (mantissa + 1)) - 1)  # sign to bit 15
    family = float_family(dtype)
    if family != "finite":
        probe = 1 << (7 if family == "ieee" else 7 - mantissa)  # the bottom of the all-ones field
        top = 7 + dtype.exponent_bits  # the bit above the code's exponent
        carry = (bits + u32(probe | probe << 16)) & u32(1 << top | 1 << (top + 16))
        bits = bits + carry * u32((1 << (15 - top)) - 1)
    if coefficients is not None:
        return ops.fma2_bits(bits, *coefficients(0.0, rebias_factor(dtype, "bfloat16")), "bfloat16")
    return ops.mul2(bits, rebias_factor(dtype, "bfloat16"), "bfloat16")


def int_pair_field(ops: Any, field: Any, dtype: DataType, half: str):
    """The 16-bit floats of the two integer codes in ``field``, a uint32 holding two consecutive
    ``n``-bit codes (the first in bits ``[0, n)``, the second in ``[n, 2n)``, nothing above), by the
    magic number: one shift spreads the second code to bit 16, one mask keeps both -- where two
    codes cut out one by one take a shift and a mask each."""
    n = dtype.nbits
    pattern, magic, _ = HALF_MAGIC[half]
    mask = low_mask(n) | low_mask(n) << 16
    lanes = (field | (field << u32(16 - n))) & u32(mask)
    offset = float(1 << (n - 1)) if dtype.signed else 0.0
    constant = pattern | pattern << 16
    if dtype.signed:
        sign = 1 << (n - 1)
        bits = lanes ^ u32(constant ^ (sign | sign << 16))
    else:
        bits = lanes | u32(constant)
    return ops.fma2(bits, (1.0, 1.0), (-magic - offset, -magic - offset), half)


def float_pair(ops: Any, codes: Sequence[Any], dtype: DataType, half: str):
    """The 16-bit floats of two low-precision float codes, by placing their fields and one multiply."""
    lanes = [place_float(code, dtype, half) for code in codes]
    bits = lanes[0] | (lanes[1] << u32(16))
    scale = rebias_factor(dtype, half)
    return bits if scale == 1.0 else ops.mul2(bits, scale, half)


def rebias_factor(dtype: DataType, half: str) -> float:
    """``2**(bias(half) - bias(dtype))``: a float code's fields placed into a ``half`` pattern (:func:`place_float`)
    are its value times the inverse of this."""
    target_exponent, _ = HALF_FORMAT[half]
    return math.ldexp(1.0, (1 << (target_exponent - 1)) - 1 - bias(dtype))


def place_float(code: Any, dtype: DataType, half: str):
    """The 16-bit pattern with ``code``'s exponent and mantissa fields at the bottom of the target's
    exponent field and the top of its mantissa field (NaN codes: the target's NaN)."""
    _, target_mantissa = HALF_FORMAT[half]
    magnitude_bits = dtype.exponent_bits + dtype.mantissa_bits
    magnitude = code & u32(low_mask(magnitude_bits))
    placed = magnitude << u32(target_mantissa - dtype.mantissa_bits)
    if dtype.signed:
        placed = placed | ((code >> u32(magnitude_bits)) << u32(15))
    if float_family(dtype) == "fn":
        placed = tirx.Select(magnitude == u32(low_mask(magnitude_bits)), u32(HALF_NAN[half]), placed)
    return placed


def float_pair_supported(dtype: DataType, half: str) -> bool:
    """Whether :func:`float_pair` is exact for ``dtype`` into ``half``: the format's fields fit the
    target's, with a narrower exponent (its values are the target's) or, for IEEE formats, the same one
    (infinities and NaN then land on the target's own)."""
    target_exponent, target_mantissa = HALF_FORMAT[half]
    family = float_family(dtype)
    if family == "e8m0" or dtype.mantissa_bits > target_mantissa:
        return False
    if dtype.exponent_bits == target_exponent:
        return family == "ieee"
    return dtype.exponent_bits < target_exponent and family != "ieee"


def placed_block(ops: Any, words: Sequence[Any], placement: Any, half: str, scale: float = 1.0) -> list:
    """The 16-bit float pairs of one block of a :class:`~tilus_tvm.bit_placement.BitPlacement` (``words``:
    its uint32 words), in pair order, each times ``scale`` (a power of two).

    A pair is the OR of its recipe's pieces: ``lop3`` keeps each piece's bits in both lanes (the first one
    ors in an integer's magic pattern), one shift serving every piece of its word and shift. Integers end
    with one paired fma that removes the magic number (and the offset of signed codes, stored offset
    binary) and scales by ``2**-place``; floats with one paired multiply by ``2**(bias_half - bias)``
    times ``scale``, left out where that is 1 (a caller that folds the power of two into its own scales)."""
    from tilus_tvm.bit_placement import power_of_two

    _check_block(words, placement, half)
    if not power_of_two(scale):
        raise ValueError(f"placed_block: scale {scale} is not a power of two")
    dtype = placement.dtype
    pattern, magic, _ = HALF_MAGIC[half]
    pairs = []
    for recipe, bits in _placed_pairs(ops, words, placement, half, lambda place: pattern):
        if dtype.is_integer:
            offset = float(1 << (dtype.nbits - 1)) if dtype.signed else 0.0
            step = math.ldexp(scale, -recipe.place)
            add = -(magic * math.ldexp(1.0, -recipe.place) + offset) * scale
            pairs.append(ops.fma2(bits, (step, step), (add, add), half))
        else:
            factor = rebias_factor(dtype, half) * scale
            pairs.append(bits if factor == 1.0 else ops.mul2(bits, factor, half))
    return pairs


def placed_block_affine(ops: Any, words: Sequence[Any], placement: Any, half: str, coefficients: Any) -> list:
    """:func:`placed_block`'s pairs (unsigned integers and floats), each finished by one paired fma whose
    operands the caller makes: ``coefficients(j, base, factor)`` gives the bits of pair ``j``'s multiplier and
    addend (``uint32``, two lanes) for lanes that hold ``base + v / factor`` (``v`` the code's value). An integer
    sits under the magic number of its own place (:func:`place_magic`: ``base`` is ``2**(m - place)``, ``factor``
    1); a float's placed pattern is its value over ``factor`` (:func:`rebias_factor`, ``base`` 0). The cast takes
    a scale ``s`` into that fma this way (``mul s * factor``, ``add -base * s``), where both are exact
    (:func:`tilus_tvm.instructions.cast` checks)."""
    dtype = placement.dtype
    if dtype.is_integer and dtype.signed:
        raise ValueError(f"placed_block_affine: {dtype.name} is signed (its offset's product with a scale is not "
                         f"exact)")
    _check_block(words, placement, half)
    mantissa_bits = HALF_FORMAT[half][1]
    pairs = []
    for j, (recipe, bits) in enumerate(_placed_pairs(ops, words, placement, half,
                                                      lambda place: place_magic(half, place))):
        if dtype.is_integer:
            mul, add = coefficients(j, math.ldexp(1.0, mantissa_bits - recipe.place), 1.0)
        else:
            mul, add = coefficients(j, 0.0, rebias_factor(dtype, half))
        pairs.append(ops.fma2_bits(bits, mul, add, half))
    return pairs


def _check_block(words: Sequence[Any], placement: Any, half: str) -> None:
    if half not in HALF_MAGIC:
        raise ValueError(f"placed_block: target {half} is not float16 or bfloat16")
    if len(words) != placement.words:
        raise ValueError(f"placed_block: a {placement.dtype.name} block is {placement.words} words, got {len(words)}")


def _placed_pairs(ops: Any, words: Sequence[Any], placement: Any, half: str, pattern_at: Any):
    """(recipe, bits) of each pair of a placement block, in pair order: the OR of the recipe's pieces, an
    integer's under ``pattern_at(place)`` (its magic number's bits)."""
    dtype = placement.dtype
    both = 0x00010001
    sources: dict = {}

    def source(word: int, shift: int):
        if (word, shift) not in sources:
            value = words[word]
            if shift:
                value = ops.bind(value >> u32(shift) if shift > 0 else value << u32(-shift))
            sources[(word, shift)] = value
        return sources[(word, shift)]

    for pair in range(placement.slots // 2):
        recipe = placement.recipe(pair, half)
        bits = None
        for piece in recipe.pieces:
            src, mask = source(piece.word, piece.shift), u32(piece.mask * both)
            if bits is None:
                bits = ops.lop3(src, mask, u32(pattern_at(recipe.place) * both), LOP3_AND_OR) \
                    if dtype.is_integer else src & mask
            else:
                bits = ops.lop3(src, mask, bits, LOP3_AND_OR)
        yield recipe, bits
