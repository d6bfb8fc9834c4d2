"""``Cast``: convert every element of a register tensor to another type of the table.

Layout rule: the output has the input's layout (both ways, as for the elementwise instructions), or
one that gives every thread the same elements in another register order (``cast(x, dtype, layout=)``,
or an ``out`` of such a layout): the emitter renames the registers, for free. No scratch memory. The
conversion rules are :mod:`tilus_tvm.lowp`'s (see :mod:`cast_rules`):

- into a type of at most 8 bits (``int8``, ``uint8`` and the packed types): round to nearest, ties
  to even; saturate at the largest finite value (infinities too); NaN to the type's NaN code
  (``float8_e4m3``/``float8_e5m2``: 0x7F, ``float8_e8m0``: 0xFF) or to 0 where the type has none;
  the sign of zero kept in signed floats; an unsigned type's smallest value for what lies below it.
  Floats wider than 32 bits are converted to ``float32`` first;
- from a packed type: the code's exact value;
- between other types (``float16``, ``float32``, ``int32``...): TVM's cast, which is C's (floats
  round to nearest even; a float into a wider integer truncates).

Emitter, per thread, with every slot known while the kernel is generated (the words of a packed
tensor stay in registers). Fast paths, two slots at a time, into ``float16``/``bfloat16``:

- ``uint4b``/``int4b`` -> float16: ``prmt`` + ``lop3`` + one ``fma.rn.f16x2`` per byte (the
  magic number 1024, :func:`cast_rules.int4_pair`);
- ``uint8``/``int8`` -> float16: one ``prmt`` and one ``fma.rn.f16x2`` per two bytes (the same
  magic number, :func:`cast_rules.byte_pair`), where C's conversion takes one ``cvt`` -- a
  quarter-rate instruction -- per element; -> bfloat16: two ``prmt``, two ``lop3`` and one
  ``fma.rn.bf16x2`` (the top bit of each byte picks the addend, :func:`cast_rules.byte_pair_bf16`);
- 1- and 2-bit integers: a word's codes at a time, masked by bytes, interleaved and put under the
  magic pattern by ``prmt``, one paired fma (:func:`cast_rules.narrow_int_word`);
- other integers of at most 7 bits: two codes cut out of the words together, spread to the two
  lanes under the magic pattern, one paired fma (:func:`cast_rules.int_pair_field`);
- ``float4_e2m1`` -> float16: four codes at a time by four ``prmt`` (a byte lookup of the
  magnitudes' high bytes, one of the signs, two spreading them; :func:`cast_rules.e2m1_quad`);
- floats whose fields fit the target (``float4_e2m1``, ``float6_e3m2``, ``float6_e2m3``,
  ``float8_e4m3``, ``float8_e5m2``...): fields placed, one paired multiply;
- 8-bit floats (``float8_e4m3``, ``float8_e5m2``...) -> bfloat16: both codes' fields placed by one ``prmt`` and
  a shift, their infinities and NaN found by a carry, one paired multiply (:func:`cast_rules.byte_float_pair`);
- on sm_89 and newer (a second registration): ``float8_e4m3``/``float8_e5m2`` from and to 16- and
  32-bit floats with ``cvt`` (``cvt.rn.f16x2.e4m3x2``, ``cvt.rn.satfinite.e4m3x2.f32``).

Everything else goes one element at a time through :mod:`cast_rules`' decode and encode.

Codes stored by a bit placement (``cast(..., placement=)``, :mod:`tilus_tvm.bit_placement`: integers of 3, 5,
6, 7 bits and small floats, as ``pack_weight`` stores them) take one ``lop3`` a piece of a pair, most pairs one
piece, and one paired fma or multiply (:func:`cast_rules.placed_block`).

Into a layout of another register order, 1-, 2- and 4-bit integers whose words hold each pair of output
slots at the same place of their two 16-bit halves (the input in
:func:`~tilus_tvm.layout.register_ops.interleave_local` order of the output's words) take one ``lop3`` and
one paired fma a pair (:func:`cast_rules.interleaved_int_word`); other reorderings go one element at a time.

``cast(x, dtype, minus=z, times=s)`` is ``(cast(x) - z) * s``, each step rounded in ``dtype``. For those
interleaved integers the pair's fma takes ``z`` (any code) or ``s`` (unsigned codes without ``z``), each place's
codes under a magic number of their own (:func:`cast_rules.interleaved_int_word_affine`). Placed codes (unsigned
integers, under their place's magic number, and floats, whose multiply becomes ``s`` times it:
:func:`cast_rules.placed_block_affine`), ``uint8`` and 8-bit floats into bfloat16 take ``s`` alone the same way.
Each does so in a thread whose values make every addend exact (:func:`_fused_exact`); other threads, and other
types, take the separate steps.
"""
from __future__ import annotations

import functools
import math
from typing import Any, Optional

from tvm import tirx
from tvm.script.ir_builder import tirx as Tb

from tilus_tvm.backend.context import CodegenContext, broadcast_local
from tilus_tvm.dtypes import DataType, float32, int32
from tilus_tvm.instructions import cast_rules as rules
from tilus_tvm.instructions.elementwise import propagate_same, set_layout
from tilus_tvm.instructions.packed import bits_of, pack_words, u32
from tilus_tvm.instructions.registry import register
from tilus_tvm.ir import inst as ir
from tilus_tvm.layout.register import RegisterLayout
from tilus_tvm.layout.register_ops import interleaved_slot, slot_permutation
from tilus_tvm.lowp import float_family, is_low_precision, is_packed
from tilus_tvm.passes.layout_choice import broadcast_layout

HALVES = ("float16", "bfloat16")


class PtxOps:
    """The operations of :class:`cast_rules.PortableOps` as single PTX instructions (inline assembly)."""

    SOURCES = {
        "tilus_prmt": "__device__ __forceinline__ unsigned tilus_prmt(unsigned a, unsigned b, unsigned s) "
                      "{ unsigned d; asm(\"prmt.b32 %0, %1, %2, %3;\" : \"=r\"(d) : \"r\"(a), \"r\"(b), \"r\"(s)); "
                      "return d; }\n",
        "tilus_lop3_and_or": "__device__ __forceinline__ unsigned tilus_lop3_and_or(unsigned a, unsigned b, "
                             "unsigned c) { unsigned d; asm(\"lop3.b32 %0, %1, %2, %3, 0xEA;\" : \"=r\"(d) : "
                             "\"r\"(a), \"r\"(b), \"r\"(c)); return d; }\n",
        "tilus_lop3_and_xor": "__device__ __forceinline__ unsigned tilus_lop3_and_xor(unsigned a, unsigned b, "
                              "unsigned c) { unsigned d; asm(\"lop3.b32 %0, %1, %2, %3, 0x6A;\" : \"=r\"(d) : "
                              "\"r\"(a), \"r\"(b), \"r\"(c)); return d; }\n",
        "tilus_fma_f16x2": "__device__ __forceinline__ unsigned tilus_fma_f16x2(unsigned a, unsigned b, unsigned c) "
                           "{ unsigned d; asm(\"fma.rn.f16x2 %0, %1, %2, %3;\" : \"=r\"(d) : \"r\"(a), \"r\"(b), "
                           "\"r\"(c)); return d; }\n",
        "tilus_fma_bf16x2": "__device__ __forceinline__ unsigned tilus_fma_bf16x2(unsigned a, unsigned b, "
                            "unsigned c) { unsigned d; asm(\"fma.rn.bf16x2 %0, %1, %2, %3;\" : \"=r\"(d) : "
                            "\"r\"(a), \"r\"(b), \"r\"(c)); return d; }\n",
        "tilus_cvt_f16x2_e4m3x2": "__device__ __forceinline__ unsigned tilus_cvt_f16x2_e4m3x2(unsigned short a) "
                                  "{ unsigned d; asm(\"cvt.rn.f16x2.e4m3x2 %0, %1;\" : \"=r\"(d) : \"h\"(a)); "
                                  "return d; }\n",
        "tilus_cvt_f16x2_e5m2x2": "__device__ __forceinline__ unsigned tilus_cvt_f16x2_e5m2x2(unsigned short a) "
                                  "{ unsigned d; asm(\"cvt.rn.f16x2.e5m2x2 %0, %1;\" : \"=r\"(d) : \"h\"(a)); "
                                  "return d; }\n",
        "tilus_cvt_e4m3x2_f32": "__device__ __forceinline__ unsigned short tilus_cvt_e4m3x2_f32(float hi, float lo) "
                                "{ unsigned short d; asm(\"cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\" : \"=h\"(d) : "
                                "\"f\"(hi), \"f\"(lo)); return d; }\n",
        "tilus_cvt_e5m2x2_f32": "__device__ __forceinline__ unsigned short tilus_cvt_e5m2x2_f32(float hi, float lo) "
                                "{ unsigned short d; asm(\"cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;\" : \"=h\"(d) : "
                                "\"f\"(hi), \"f\"(lo)); return d; }\n",
    }

    @classmethod
    def call(cls, name: str, *args: Any, return_type: str = "uint32"):
        return Tb.cuda.func_call(name, *args, source_code=cls.SOURCES[name], return_type=return_type)

    def prmt(self, a: Any, b: Any, selector: Any):
        return self.call("tilus_prmt", a, b, u32(selector) if isinstance(selector, int) else selector)

    def bind(self, value: Any):
        """``value`` bound to a variable of the kernel, for reuse (the asm calls are not merged)."""
        return Tb.Bind(value)

    def lop3(self, a: Any, b: Any, c: Any, lut: int):
        name = {rules.LOP3_AND_OR: "tilus_lop3_and_or", rules.LOP3_AND_XOR: "tilus_lop3_and_xor"}[lut]
        return self.call(name, a, b, c)

    def fma2(self, bits: Any, mul, add, half: str):
        return self.call("tilus_fma_f16x2" if half == "float16" else "tilus_fma_bf16x2", bits,
                         u32(_half2_bits(mul, half)), u32(_half2_bits(add, half)))

    def mul2(self, bits: Any, scale: float, half: str):
        return self.fma2(bits, (scale, scale), (-0.0, -0.0), half)

    def fma2_bits(self, bits: Any, mul: Any, add: Any, half: str):
        return self.call("tilus_fma_f16x2" if half == "float16" else "tilus_fma_bf16x2", bits, mul, add)


def _half2_bits(values, half: str) -> int:
    """The bits of two 16-bit floats (lane 0 low) -- exact constants only."""
    import numpy

    if half == "float16":
        lanes = [int(numpy.array(v, dtype=numpy.float16).view(numpy.uint16)) for v in values]
    else:
        lanes = [int(numpy.array(v, dtype=numpy.float32).view(numpy.uint32)) >> 16 for v in values]
    return lanes[0] | lanes[1] << 16


# ---- the emitter --------------------------------------------------------------------------------------
def follows_lowp(source: DataType, target: DataType) -> bool:
    """Whether the conversion takes :mod:`cast_rules` (anything packed, or into ``int8``/``uint8``)."""
    return is_packed(source) or is_packed(target) or (is_low_precision(target) and source != target)


@functools.lru_cache(maxsize=None)
def register_order(src: RegisterLayout, dst: RegisterLayout) -> Optional[tuple[int, ...]]:
    """The slot permutation from ``src`` to ``dst`` (:func:`slot_permutation`; cached: every cast asks)."""
    return slot_permutation(src, dst)


def required_operands(inst: ir.Cast) -> list:
    """x in the output's layout, unless the two differ by register order only (the emitter renames); minus
    and times in the output's layout reduced over their size-1 dimensions (as elementwise operands)."""
    src, out = inst.x.layout, inst.output.layout
    affine = [(t, broadcast_layout(out, t.shape)) for t in (inst.minus, inst.times) if t is not None]
    if src is not None and out is not None and src != out and register_order(src, out) is not None:
        return affine
    return [(inst.x, out)] + affine


def propagate_cast(inst: ir.Cast) -> bool:
    changed = propagate_same(inst.output, inst.x)
    if inst.output.layout is not None:
        for t in (inst.minus, inst.times):
            if t is not None and t.layout is None:
                changed |= set_layout(t, broadcast_layout(inst.output.layout, t.shape))
    return changed


def emit_cast(ctx: CodegenContext, inst: ir.Cast, hardware_fp8: bool = False) -> None:
    if inst.minus is None and inst.times is None:
        return _emit_plain_cast(ctx, inst, hardware_fp8)
    out = inst.output
    dst_buf = ctx.reg(out)

    def separately():  # the conversion, then the subtraction and the multiply, each rounded
        _emit_plain_cast(ctx, inst, hardware_fp8)
        paired = _emit_paired_steps(ctx, inst) if out.dtype.name in HALVES else 0
        for slot in range(paired, out.layout.local_size):
            value = dst_buf[slot]
            if inst.minus is not None:
                value = value - _affine_value(ctx, inst.minus, out.layout, slot)
            if inst.times is not None:
                value = value * _affine_value(ctx, inst.times, out.layout, slot)
            Tb.buffer_store(dst_buf, value, [slot])

    form = _fused_form(inst)
    if form is None:
        return separately()
    with Tb.If(_fused_exact(ctx, inst)):  # every addend this thread's fma would take is exact
        with Tb.Then():
            {"interleaved": _emit_fused_interleaved, "placed": _emit_fused_placed,
             "bytes": _emit_fused_bytes}[form](ctx, inst)
        with Tb.Else():
            separately()


def _emit_paired_steps(ctx: CodegenContext, inst: ir.Cast, minus: bool = True) -> int:
    """minus (unless ``minus`` is False: the fma took it) and times of a 16-bit result, two slots an instruction:
    ``fma(x, 1, -z)`` is ``x - z`` and ``fma(x, s, -0)`` is ``x * s``, each rounded once as the separate operation
    (signed zeros too); the slots done (an odd last one is left to the caller)."""
    out = inst.output
    half, dst_buf = out.dtype.name, ctx.reg(out)
    one, negative_zero = u32(_half2_bits((1.0, 1.0), half)), u32(_half2_bits((-0.0, -0.0), half))
    ops = PtxOps()
    pairs = out.layout.local_size // 2
    for p in range(pairs):
        slots, ramp = (2 * p, 2 * p + 1), tirx.Ramp(2 * p, 1, 2)
        bits = tirx.reinterpret("uint32", dst_buf[ramp])
        if minus and inst.minus is not None:
            z = [_affine_value(ctx, inst.minus, out.layout, slot) for slot in slots]
            bits = ops.fma2_bits(bits, one, _lanes(-z[0], -z[1]), half)
        if inst.times is not None:
            s = [_affine_value(ctx, inst.times, out.layout, slot) for slot in slots]
            bits = ops.fma2_bits(bits, _lanes(*s), negative_zero, half)
        Tb.buffer_store(dst_buf, tirx.reinterpret(f"{half}x2", bits), [ramp])
    return 2 * pairs


def _affine_value(ctx: CodegenContext, tensor: Any, out_layout: RegisterLayout, slot: int):
    """The element of ``tensor`` (minus or times, broadcast) for the output's register slot ``slot``."""
    return ctx.reg(tensor)[broadcast_local(out_layout, tensor.shape, slot)]


def times_fusable(source: DataType, target: DataType, placement: Any = None) -> bool:
    """Whether a cast of ``source`` codes into ``target`` can take a scale alone (``times``, no ``minus``) into
    the paired fma that ends its conversion: unsigned 1-, 2- and 4-bit integers in interleaved order
    (:func:`cast_rules.interleaved_int_word_affine`), codes stored by a bit placement, unsigned integers and
    floats (:func:`cast_rules.placed_block_affine`), ``uint8`` (:func:`cast_rules.byte_pair`,
    :func:`cast_rules.byte_pair_bf16`) and 8-bit floats into bfloat16 (:func:`cast_rules.byte_float_pair`).
    A signed integer's addend with a scale, ``(base + 2**(n-1)) * s``, is not exact in general: its scale stays
    a second instruction."""
    if target.name not in HALVES:
        return False
    if placement is not None:
        return source.is_float or not source.signed
    if _fused_bytes(source, target):
        return True
    return rules.interleavable(source) and not source.signed


def _fused_bytes(source: DataType, target: DataType) -> bool:
    """Whether 8-bit codes of ``source`` convert into ``target`` by a byte-pair rule that takes a scale into its fma
    (``_emit_fused_bytes``): ``uint8``, and 8-bit floats into bfloat16."""
    return source.name == "uint8" or rules.byte_float_supported(source, target.name)


def _fused_form(inst: ir.Cast) -> Optional[str]:
    """Which emitter takes the cast's minus or times into its fma ("interleaved", "placed", "bytes"), or None
    (the separate steps). Interleaved 1-, 2- and 4-bit integers take minus (any code) or times
    (:func:`times_fusable`); placed codes (with ``scale`` 1), ``uint8`` and 8-bit floats into bfloat16 in the
    output's layout take times alone."""
    source, target = inst.x.dtype, inst.output.dtype
    if target.name not in HALVES:
        return None
    if inst.placement is not None:
        return "placed" if inst.minus is None and inst.scale == 1.0 and times_fusable(source, target, inst.placement) \
            else None
    if _fused_bytes(source, target):
        return "bytes" if inst.minus is None and inst.x.layout == inst.output.layout else None
    if not is_packed(source) or not rules.interleavable(source) or inst.x.layout == inst.output.layout:
        return None
    if inst.minus is None and source.signed:
        return None
    return "interleaved" if is_interleaved_order(register_order(inst.x.layout, inst.output.layout), source) \
        else None


def _fused_exact(ctx: CodegenContext, inst: ir.Cast) -> Any:
    """Whether this thread's fma addends are all exact in the 16-bit type, so the fused cast rounds once where
    the separate steps would round to the same value: with minus, every ``z`` an integer of at most
    ``2**(m+1) - 2**m - 2**(n-1)`` in magnitude (``-base - z`` then an integer within ``2**(m+1)``); with
    times alone, every ``|s| * 2**m`` finite (``-base * s`` a power of two times ``s``, ``base`` at most
    ``2**m``), or for floats (placed, and 8-bit ones into bfloat16) ``|s| * factor``
    (:func:`cast_rules.rebias_factor`, a power of two of at least 1: the multiplier ``s * factor``). NaN fails
    both."""
    half = inst.output.dtype.name
    exponent_bits, mantissa_bits = rules.HALF_FORMAT[half]
    largest = math.ldexp(2.0 - math.ldexp(1.0, -mantissa_bits), (1 << (exponent_bits - 1)) - 1)
    source = inst.x.dtype
    sign = 1 << (source.nbits - 1) if source.signed else 0
    tensor = inst.minus if inst.minus is not None else inst.times
    bound = rules.rebias_factor(source, half) if source.is_float else float(1 << mantissa_bits)
    buffer = ctx.reg(tensor)
    conditions = []
    for slot in range(int(buffer.shape[0])):
        value = tirx.Cast("float32", buffer[slot])
        if inst.minus is not None:
            limit = float((1 << (mantissa_bits + 1)) - (1 << mantissa_bits) - sign)
            conditions.append(tirx.And(value == tirx.floor(value), tirx.abs(value) <= rules.f32(limit)))
        else:
            conditions.append(tirx.abs(value) * rules.f32(bound) <= rules.f32(largest))
    return functools.reduce(tirx.And, conditions)


def _lanes(first, second):
    """Two 16-bit floats as the bits of one register (first low)."""
    return tirx.Cast("uint32", tirx.reinterpret("uint16", first)) | \
        (tirx.Cast("uint32", tirx.reinterpret("uint16", second)) << u32(16))


def _times_coefficients(ctx: CodegenContext, inst: ir.Cast, slots: tuple, base: float, factor: float = 1.0):
    """The bits of an fma's multiplier ``s * factor`` and addend ``-base * s`` (-0 for a base of 0: a float's
    zero code keeps the sign the separate multiply gives it) for the output slot pair ``slots``."""
    out = inst.output
    s = [_affine_value(ctx, inst.times, out.layout, slot) for slot in slots]
    # (s * factor in float32, exact there and back: the thread's check keeps it finite in the 16-bit type)
    mul = _lanes(*s) if factor == 1.0 else \
        _lanes(*(tirx.Cast(out.dtype.tvm_name, tirx.Cast("float32", v) * rules.f32(factor)) for v in s))
    if not base:
        return mul, u32(_half2_bits((-0.0, -0.0), out.dtype.name))
    minus_base = tirx.const(-base, out.dtype.tvm_name)
    return mul, _lanes(s[0] * minus_base, s[1] * minus_base)


def _emit_fused_interleaved(ctx: CodegenContext, inst: ir.Cast) -> None:
    """The conversion with minus (or times) in each pair's fma (:func:`cast_rules.interleaved_int_word_affine`),
    then times where minus took the fma."""
    out, src = inst.output, inst.x
    half, dst_buf, src_buf = out.dtype.name, ctx.reg(out), ctx.reg(src)
    per_word = 32 // src.dtype.nbits

    for w in range(int(src_buf.shape[0])):
        def coefficients(i, base, w=w):
            slots = (w * per_word + 2 * i, w * per_word + 2 * i + 1)
            if inst.minus is not None:
                minus_base = tirx.const(-base, out.dtype.tvm_name)
                z = [_affine_value(ctx, inst.minus, out.layout, slot) for slot in slots]
                return u32(_half2_bits((1.0, 1.0), half)), _lanes(minus_base - z[0], minus_base - z[1])
            return _times_coefficients(ctx, inst, slots, base)

        pairs = rules.interleaved_int_word_affine(PtxOps(), src_buf[w], src.dtype, half, coefficients)
        for i, bits in enumerate(pairs):
            Tb.buffer_store(dst_buf, tirx.reinterpret(f"{half}x2", bits), [tirx.Ramp(w * per_word + 2 * i, 1, 2)])
    if inst.minus is not None and inst.times is not None:
        for slot in range(_emit_paired_steps(ctx, inst, minus=False), out.layout.local_size):
            Tb.buffer_store(dst_buf, dst_buf[slot] * _affine_value(ctx, inst.times, out.layout, slot), [slot])


def _emit_fused_placed(ctx: CodegenContext, inst: ir.Cast) -> None:
    """Placed codes with times in each pair's fma (:func:`cast_rules.placed_block_affine`)."""
    out, placement = inst.output, inst.placement
    half, dst_buf, src_buf = out.dtype.name, ctx.reg(out), ctx.reg(inst.x)
    words = [src_buf[i] for i in range(int(src_buf.shape[0]))]
    for b in range(len(words) // placement.words):
        first = b * placement.slots

        def coefficients(j, base, factor, first=first):
            return _times_coefficients(ctx, inst, (first + 2 * j, first + 2 * j + 1), base, factor)

        block = words[b * placement.words:(b + 1) * placement.words]
        for j, bits in enumerate(rules.placed_block_affine(PtxOps(), block, placement, half, coefficients)):
            Tb.buffer_store(dst_buf, tirx.reinterpret(f"{half}x2", bits), [tirx.Ramp(first + 2 * j, 1, 2)])


def _emit_fused_bytes(ctx: CodegenContext, inst: ir.Cast) -> None:
    """8-bit codes with times in each pair's fma: ``uint8`` (:func:`cast_rules.byte_pair`, into bfloat16
    :func:`cast_rules.byte_pair_bf16`) and 8-bit floats into bfloat16 (:func:`cast_rules.byte_float_pair`, whose
    multiplier is ``s`` times the rebias factor); an odd last slot converts and multiplies separately."""
    out, source = inst.output, inst.x.dtype
    half, dst_buf, src_buf, slots = out.dtype.name, ctx.reg(out), ctx.reg(inst.x), out.layout.local_size
    if source.is_float:  # (packed: the words as they are)
        words = [src_buf[i] for i in range(int(src_buf.shape[0]))]
        pair_of = functools.partial(rules.byte_float_pair, dtype=source)
    else:
        words = pack_words([tirx.Cast("uint32", src_buf[i]) for i in range(slots)], 8)
        pair_of = functools.partial(rules.byte_pair if half == "float16" else rules.byte_pair_bf16, signed=False)
    for p in range(slots // 2):
        def coefficients(base, factor=1.0, p=p):
            return _times_coefficients(ctx, inst, (2 * p, 2 * p + 1), base, factor)

        bits = pair_of(PtxOps(), words[p // 2], p % 2, coefficients=coefficients)
        Tb.buffer_store(dst_buf, tirx.reinterpret(f"{half}x2", bits), [tirx.Ramp(2 * p, 1, 2)])
    if slots % 2:
        last = slots - 1
        value = convert(bits_of(words, 8 * last, 8), source, out.dtype) if source.is_float else \
            tirx.Cast(out.dtype.tvm_name, src_buf[last])
        Tb.buffer_store(dst_buf, value * _affine_value(ctx, inst.times, out.layout, last), [last])


def _emit_plain_cast(ctx: CodegenContext, inst: ir.Cast, hardware_fp8: bool = False) -> None:
    out, src = inst.output, inst.x
    source, target = src.dtype, out.dtype
    src_buf, dst_buf = ctx.reg(src), ctx.reg(out)
    if inst.placement is not None:
        return _emit_placed_cast(src_buf, dst_buf, inst.placement, target.name, inst.scale)
    if src.layout != out.layout or inst.biased:
        return _emit_reordering_cast(src_buf, dst_buf, source, target, register_order(src.layout, out.layout),
                                     inst.biased)
    if source == target:  # bit for bit (a decode and encode would make every NaN code the canonical one)
        for i in range(int(dst_buf.shape[0])):
            Tb.buffer_store(dst_buf, src_buf[i], [i])
        return
    if source.name in ("int8", "uint8") and target.name in HALVES:  # bytes gathered into words (which
        slots = out.layout.local_size                                   # the compiler sees through)
        codes = [tirx.Cast("uint32", tirx.reinterpret("uint8", src_buf[i]) if source.signed else src_buf[i])
                 for i in range(slots)]
        done = _pairs_to_half(dst_buf, pack_words(codes, 8), codes, source, target.name, hardware_fp8)
        if done:  # else no fast path (bfloat16): C's conversion below
            for i in range(done, slots):  # an odd last slot
                Tb.buffer_store(dst_buf, tirx.Cast(target.tvm_name, src_buf[i]), [i])
            return
    if not follows_lowp(source, target):
        with Tb.unroll(0, out.layout.local_size) as i:
            Tb.buffer_store(dst_buf, tirx.Cast(target.tvm_name or target.name, src_buf[i]), [i])
        return
    slots = out.layout.local_size
    if is_packed(source):
        words = [src_buf[i] for i in range(int(src_buf.shape[0]))]
        inputs = [bits_of(words, slot * source.nbits, source.nbits) for slot in range(slots)]
    else:
        words, inputs = None, [src_buf[i] for i in range(slots)]
    done = 0
    if target.name in HALVES and is_packed(source):
        done = _pairs_to_half(dst_buf, words, inputs, source, target.name, hardware_fp8)
    if is_packed(target):
        codes = _fp8_codes(inputs, source, target) if hardware_fp8 and _hardware_encode(source, target) else \
            [convert(value, source, target) for value in inputs]
        for index, word in enumerate(pack_words(codes, target.nbits)):
            Tb.buffer_store(dst_buf, word, [index])
        return
    for slot in range(done, slots):
        Tb.buffer_store(dst_buf, convert(inputs[slot], source, target), [slot])


def _emit_reordering_cast(src_buf, dst_buf, source: DataType, target: DataType, order: tuple[int, ...],
                          biased: bool = False) -> None:
    """Output slot ``j`` is input slot ``order[j]`` converted: interleaved words of 1-, 2- and 4-bit
    integers into float16/bfloat16 by :func:`cast_rules.interleaved_int_word` (``biased``:
    :func:`cast_rules.interleaved_int_word_biased`), anything else one element at a time."""
    slots = len(order)
    interleaved = is_packed(source) and target.name in HALVES and is_interleaved_order(order, source)
    if biased and not interleaved:  # (cast refuses it first)
        raise ValueError(f"a biased cast takes 1-, 2- or 4-bit integers in interleaved order into float16 or "
                         f"bfloat16, not {source.name} -> {target.name} in register order {order}")
    if is_packed(source):
        words = [src_buf[i] for i in range(int(src_buf.shape[0]))]
        if interleaved:
            per_word = 32 // source.nbits
            convert_word = rules.interleaved_int_word_biased if biased else rules.interleaved_int_word
            for w, word in enumerate(words):
                for i, bits in enumerate(convert_word(PtxOps(), word, source, target.name)):
                    Tb.buffer_store(dst_buf, tirx.reinterpret(f"{target.name}x2", bits),
                                    [tirx.Ramp(w * per_word + 2 * i, 1, 2)])
            return
        inputs = [bits_of(words, slot * source.nbits, source.nbits) for slot in range(slots)]
    else:
        inputs = [src_buf[i] for i in range(slots)]
    values = [inputs[order[j]] for j in range(slots)]
    if source == target:  # bit for bit (codes of a packed type)
        results = values
    elif follows_lowp(source, target):
        results = [convert(value, source, target) for value in values]
    else:
        results = [tirx.Cast(target.tvm_name or target.name, value) for value in values]
    if is_packed(target):
        results = pack_words(results, target.nbits)
    for index, value in enumerate(results):
        Tb.buffer_store(dst_buf, value, [index])


def _emit_placed_cast(src_buf, dst_buf, placement, half: str, scale: float) -> None:
    """x's words are blocks of ``placement`` (:mod:`tilus_tvm.bit_placement`): each block's slot pairs by
    :func:`cast_rules.placed_block`."""
    words = [src_buf[i] for i in range(int(src_buf.shape[0]))]
    for b in range(len(words) // placement.words):
        block = words[b * placement.words:(b + 1) * placement.words]
        for j, bits in enumerate(rules.placed_block(PtxOps(), block, placement, half, scale)):
            Tb.buffer_store(dst_buf, tirx.reinterpret(f"{half}x2", bits),
                            [tirx.Ramp(b * placement.slots + 2 * j, 1, 2)])


def is_interleaved_order(order: tuple[int, ...], source: DataType) -> bool:
    """Whether ``order`` takes each output pair ``(2i, 2i + 1)`` of a word's slots from its fields ``i`` and
    ``i + 16 / n`` (``interleave_local(out_layout, 32 / n)``), for a 1-, 2- or 4-bit integer ``source``."""
    if not rules.interleavable(source):
        return False
    per_word = 32 // source.nbits
    return len(order) % per_word == 0 and all(order[j] == interleaved_slot(j, per_word) for j in range(len(order)))


def _pairs_to_half(dst_buf, words, codes, source: DataType, half: str, hardware_fp8: bool) -> int:
    """Store the slot pairs a fast path converts (:func:`half_pairs`) into the 16-bit float tensor;
    the slots done."""
    pairs = half_pairs(PtxOps(), words, codes, source, half, hardware_fp8)
    for p, bits in enumerate(pairs):
        Tb.buffer_store(dst_buf, tirx.reinterpret(f"{half}x2", bits), [tirx.Ramp(2 * p, 1, 2)])
    return 2 * len(pairs)


def half_pairs(ops: Any, words: Any, codes: Any, source: DataType, half: str, hardware_fp8: bool = False) -> list:
    """The bits (uint32: two 16-bit floats, the first slot low) of each slot pair ``(2p, 2p + 1)``
    of ``codes`` -- the codes of ``source`` held in ``words``, slot ``s`` at bits ``[s*n, (s+1)*n)``
    -- converted into ``half`` by a fast path, in pair order; ``[]`` where none applies.

    ``ops``: :class:`PtxOps` in kernels, :class:`cast_rules.PortableOps` in the CPU tests (which run
    this on every path); ``hardware_fp8`` (``cvt`` of the fp8 types) only with :class:`PtxOps`."""
    pairs = len(codes) // 2
    family = float_family(source) if source.is_float else None
    if source.name in ("int8", "uint8"):
        byte_pair = rules.byte_pair if half == "float16" else rules.byte_pair_bf16
        return [byte_pair(ops, words[p // 2], p % 2, source.signed) for p in range(pairs)]
    several: list = []  # pairs done by a path that takes several at a time
    if source.name == "float4_e2m1" and half == "float16":  # four codes a 16-bit half word, by lookup
        for q in range(pairs // 2):
            several.extend(rules.e2m1_quad(ops, words[q // 2], q % 2))
    elif source.is_integer and source.nbits in (1, 2):  # a word's codes at a time, by bytes
        per_word = 16 // source.nbits
        for w in range(pairs // per_word):
            several.extend(rules.narrow_int_word(ops, words[w], source, half))
    if hardware_fp8 and source.nbits == 8 and family in ("fn", "ieee") and half == "float16":
        kind = "e4m3" if family == "fn" else "e5m2"
        convert_pair = lambda p: ops.call(f"tilus_cvt_f16x2_{kind}x2",  # noqa: E731
                                          tirx.Cast("uint16", bits_of(words, 2 * p * 8, 16)))
    elif source.is_integer and source.nbits == 4 and half == "float16":
        convert_pair = lambda p: rules.int4_pair(ops, words[p // 4], p % 4, source.signed)  # noqa: E731
    elif source.is_integer and source.nbits <= rules.HALF_MAGIC[half][2]:  # both codes cut out at once
        n = source.nbits
        convert_pair = lambda p: rules.int_pair_field(ops, bits_of(words, 2 * p * n, 2 * n), source, half)  # noqa: E731
    elif rules.byte_float_supported(source, half):
        convert_pair = lambda p: rules.byte_float_pair(ops, words[p // 2], p % 2, source)  # noqa: E731
    elif rules.float_pair_supported(source, half):
        convert_pair = lambda p: rules.float_pair(ops, codes[2 * p: 2 * p + 2], source, half)  # noqa: E731
    else:
        return several
    return several + [convert_pair(p) for p in range(len(several), pairs)]


def _hardware_encode(source: DataType, target: DataType) -> bool:
    return target.nbits == 8 and float_family(target) in ("fn", "ieee") and source.is_float and \
        not is_packed(source) and source.nbits <= 32


def _fp8_codes(values: list, source: DataType, target: DataType) -> list:
    """``cvt.rn.satfinite`` two values at a time (NaN fixed to 0x7F, the code lowp gives)."""
    kind = "e4m3" if float_family(target) == "fn" else "e5m2"
    as_f32 = [tirx.Cast("float32", v) if source.name != "float32" else v for v in values]
    codes: list = []
    for first in range(0, len(values) - 1, 2):
        lo, hi = as_f32[first], as_f32[first + 1]
        pair = u32(PtxOps.call(f"tilus_cvt_{kind}x2_f32", hi, lo, return_type="uint16"))
        for lane, value in enumerate((lo, hi)):
            code = (pair >> u32(8 * lane)) & u32(0xFF) if lane else pair & u32(0xFF)
            codes.append(tirx.Select(tirx.isnan(value), u32(0x7F), code))
    if len(values) % 2:
        codes.append(convert(values[-1], source, target))
    return codes


def convert(value: Any, source: DataType, target: DataType):
    """One element: ``value`` (a packed code as uint32, or a value of ``source``) as ``target``
    (a code as uint32 for a packed target)."""
    if is_packed(source):
        if source.is_integer:
            value, source = rules.decode_int(value, source), int32
        else:
            value, source = rules.decode_float(value, source), float32
    if is_packed(target) or (is_low_precision(target) and target.is_integer):
        if target.is_float:
            code = rules.encode_float(tirx.Cast("float32", value), target)
        elif source.is_float:
            code = rules.encode_int(tirx.Cast("float32", value), target)
        else:
            code = rules.encode_int(tirx.Cast("int32", value) if source.kind == "bool" else value, target)
        if is_packed(target):
            return code
        return tirx.Cast(target.tvm_name, rules.decode_int(code, target))  # int8 / uint8
    if target.kind == "bool":
        return tirx.NE(value, tirx.const(0, str(value.ty.dtype)))
    return tirx.Cast(target.tvm_name or target.name, value)


def _register() -> None:
    register(ir.Cast, "sm_80", emit=emit_cast, propagate=propagate_cast, required=required_operands)
    register(ir.Cast, "sm_89", emit=lambda ctx, inst: emit_cast(ctx, inst, hardware_fp8=True),
             propagate=propagate_cast, required=required_operands)


_register()
