"""The conversion rules of ``cast`` (tilus_tvm/instructions/cast_rules.py) compiled for the CPU and run on
every code of every type of at most 8 bits, against tilus_tvm.lowp's reference."""
import math

import numpy as np
import pytest
import torch
import tvm
from tvm import tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as Tb

from tilus_tvm import dtypes, lowp
from tilus_tvm.dtypes import float_type, int_type
from tilus_tvm.instructions import cast_rules as rules

INTEGERS = [int_type(bits, signed) for bits in range(1, 9) for signed in (True, False)]
FLOATS = [dtypes.float8_e4m3, dtypes.float8_e5m2, dtypes.float8_e8m0, dtypes.float6_e3m2, dtypes.float6_e2m3,
          dtypes.float4_e2m1, float_type(1, 1), float_type(3, 4), float_type(2, 2), float_type(3, 3, signed=False),
          float_type(1, 6), float_type(5, 1)]
LOW_PRECISION = INTEGERS + FLOATS


def run_cpu(build, inputs: dict, outputs: dict):
    """Compile ``build(buffers)`` (a loop body over index i < n) for llvm and run it on numpy arrays."""
    n = len(next(iter(inputs.values())))
    with IRBuilder() as ib:
        with Tb.prim_func():
            Tb.func_name("main")
            buffers = {name: Tb.arg(name, Tb.buffer((len(a),), str(a.dtype))) for name, a in {**inputs, **outputs}.items()}
            with Tb.serial(0, n) as i:
                for name, value in build(buffers, i).items():
                    Tb.buffer_store(buffers[name], value, [i])
    func = ib.get()
    module = tvm.compile(func, target="llvm", tir_pipeline="tirx")
    arrays = {**inputs, **{k: v.copy() for k, v in outputs.items()}}
    module["main"](*[arrays[name] for name in [*inputs, *outputs]])
    return {name: arrays[name] for name in outputs}


def expected_f32(dtype):
    return np.array(lowp.all_values(dtype), dtype=np.float64).astype(np.float32)


@pytest.mark.parametrize("dtype", LOW_PRECISION, ids=str)
def test_decode_every_code(dtype):
    codes = np.arange(1 << dtype.nbits, dtype=np.uint32)
    if dtype.is_integer:
        out = run_cpu(lambda b, i: {"v": rules.decode_int(b["c"][i], dtype)}, {"c": codes},
                      {"v": np.zeros(len(codes), np.int32)})["v"]
        assert out.tolist() == list(lowp.all_values(dtype))
    else:
        out = run_cpu(lambda b, i: {"v": rules.decode_float(b["c"][i], dtype)}, {"c": codes},
                      {"v": np.zeros(len(codes), np.float32)})["v"]
        np.testing.assert_array_equal(out, expected_f32(dtype))  # NaN where the reference has NaN
        assert (np.signbit(out) == np.signbit(expected_f32(dtype))).all()  # -0 included


def probe_values(dtype) -> np.ndarray:
    """Every finite value of the type, the midpoints of neighbours and just around them, beyond the range,
    infinities, NaN, signed zeros and random values of every magnitude (as float32)."""
    finite = sorted({v for v in lowp.all_values(dtype) if math.isfinite(v)})
    values = list(finite)
    for a, b in zip(finite, finite[1:]):
        middle = (a + b) / 2
        values += [middle, np.nextafter(np.float32(middle), np.float32(np.inf)),
                   np.nextafter(np.float32(middle), np.float32(-np.inf))]
    top = max(abs(v) for v in finite)
    values += [top * 1.01, top * 4, 3e38, -3e38, math.inf, -math.inf, math.nan, 0.0, -0.0, 1e-45, -1e-45, 1e-30]
    rng = np.random.default_rng(dtype.nbits)
    values += list(rng.standard_normal(2000) * np.exp2(rng.integers(-20, 20, 2000)))
    values += [-v for v in values]
    with np.errstate(over="ignore"):  # beyond float32: infinities, which must saturate too
        return np.array(values, dtype=np.float32)


@pytest.mark.parametrize("dtype", LOW_PRECISION, ids=str)
def test_encode_floats(dtype):
    values = probe_values(dtype)
    encode = rules.encode_float if dtype.is_float else rules.encode_int
    out = run_cpu(lambda b, i: {"c": encode(b["x"][i], dtype)}, {"x": values},
                  {"c": np.zeros(len(values), np.uint32)})["c"]
    reference = lowp.encode(torch.from_numpy(values.astype(np.float64)), dtype).numpy()
    bad = np.nonzero(out != reference)[0]
    assert bad.size == 0, [(float(values[j]), int(out[j]), int(reference[j])) for j in bad[:8]]


@pytest.mark.parametrize("dtype", INTEGERS, ids=str)
@pytest.mark.parametrize("source", ["int32", "int8", "uint8", "int64"])
def test_encode_integers_saturate(dtype, source):
    info = np.iinfo(source)
    candidates = {info.min, info.max, 0, 1, -1, 200, -200, *range(-130, 130)}
    values = np.array(sorted(v for v in candidates if info.min <= v <= info.max), dtype=source)
    out = run_cpu(lambda b, i: {"c": rules.encode_int(b["x"][i], dtype)}, {"x": values},
                  {"c": np.zeros(len(values), np.uint32)})["c"]
    reference = lowp.encode(torch.from_numpy(values.astype(np.float64)), dtype).numpy()
    assert out.tolist() == reference.tolist()


def half_bits(values, half: str) -> np.ndarray:
    """The 16-bit patterns of exact values (as the GPU would hold them), NaN as a canonical NaN."""
    f32 = np.asarray(values, dtype=np.float64).astype(np.float32)
    if half == "float16":
        return f32.astype(np.float16).view(np.uint16).astype(np.uint32)
    return (f32.view(np.uint32) >> 16).astype(np.uint32)


def slot_bits(out, slot: int) -> np.ndarray:
    """The 16 bits of ``slot`` in pair outputs ``p0``, ``p1``, ... (slot ``2p`` low in ``p{p}``)."""
    return (out[f"p{slot // 2}"] >> np.uint32(16 * (slot % 2))) & np.uint32(0xFFFF)


def check_pairs(half, dtype, pair):
    """``pair(buffers, i) -> bits`` converts codes (c0[i], c1[i]); compare both lanes with lowp."""
    count = 1 << dtype.nbits
    c0 = np.arange(count, dtype=np.uint32)
    c1 = ((c0 * 7 + 3) % count).astype(np.uint32)
    out = run_cpu(lambda b, i: {"h": pair(b, i)}, {"c0": c0, "c1": c1}, {"h": np.zeros(count, np.uint32)})["h"]
    values = np.array(lowp.all_values(dtype), dtype=np.float64)
    for lane, codes in enumerate((c0, c1)):
        got = (out >> (16 * lane)) & 0xFFFF
        want = half_bits(values[codes], half)
        nan = np.isnan(values[codes])
        got_f = got.astype(np.uint16).view(np.float16) if half == "float16" else (got << 16).view(np.float32)
        assert np.isnan(got_f[nan]).all()
        assert got[~nan].tolist() == want[~nan].tolist(), (dtype, lane)


def byte_word(b, i, pair: int, noise: int = 0x5AC3):
    """Codes ``c0[i]``, ``c1[i]`` as bytes ``2 * pair`` and ``2 * pair + 1`` of a word whose other two bytes are
    ``noise``."""
    low, high = (tirx.const(8 * (2 * pair), "uint32"), tirx.const(8 * (2 * pair + 1), "uint32"))
    return (b["c0"][i] << low) | (b["c1"][i] << high) | tirx.const(noise << (16 * (1 - pair)), "uint32")


def codes_by_scale(scales):
    """Every 8-bit code against every scale: the columns c0 (the code), c1 (another code, the other lane), s."""
    c = np.repeat(np.arange(256, dtype=np.uint32), len(scales)).astype(np.uint32)
    return c, ((c * 7 + 3) % 256).astype(np.uint32), np.tile(scales, 256)


@pytest.mark.parametrize("signed", [False, True])
def test_int4_pair_prmt_lop3(signed):
    dtype = int_type(4, signed)
    ops = rules.PortableOps()

    def pair(b, i):  # the two codes as byte 1 of a word whose other bytes are noise
        word = (b["c0"][i] | (b["c1"][i] << tirx.const(4, "uint32"))) << tirx.const(8, "uint32")
        word = word | tirx.const(0xA5000077, "uint32")
        return rules.int4_pair(ops, word, 1, signed)

    check_pairs("float16", dtype, pair)


@pytest.mark.parametrize("pair", [0, 1])
@pytest.mark.parametrize("signed", [False, True])
def test_byte_pair_prmt(signed, pair):
    """int8/uint8 -> float16: every code in both lanes, the word's other bytes noise."""
    dtype = int_type(8, signed)
    ops = rules.PortableOps()

    check_pairs("float16", dtype, lambda b, i: rules.byte_pair(ops, byte_word(b, i, pair), pair, signed))


@pytest.mark.parametrize("pair", [0, 1])
@pytest.mark.parametrize("signed", [False, True])
def test_byte_pair_into_bfloat16(signed, pair):
    """int8/uint8 -> bfloat16 (the top bit of each byte picking the fma's addend): every code in both lanes, the
    word's other bytes noise."""
    dtype = int_type(8, signed)
    ops = rules.PortableOps()

    check_pairs("bfloat16", dtype, lambda b, i: rules.byte_pair_bf16(ops, byte_word(b, i, pair), pair, signed))


@pytest.mark.parametrize("pair", [0, 1])
@pytest.mark.parametrize("dtype", [dtypes.float8_e4m3, dtypes.float8_e5m2, float_type(3, 4), float_type(1, 6),
                                   float_type(6, 1)], ids=str)
def test_byte_float_pair_into_bfloat16(dtype, pair):
    """8-bit floats -> bfloat16 by placed fields, a carry finding the reserved codes and one multiply: every code
    in both lanes (infinities, NaN, subnormals and both zeros included), the word's other bytes noise."""
    assert rules.byte_float_supported(dtype, "bfloat16") and not rules.byte_float_supported(dtype, "float16")
    ops = rules.PortableOps()

    noise = 0xFF7C  # (an infinity's and a NaN's codes)
    check_pairs("bfloat16", dtype, lambda b, i: rules.byte_float_pair(ops, byte_word(b, i, pair, noise), pair, dtype))


@pytest.mark.parametrize("pair", [0, 1])
@pytest.mark.parametrize("dtype", [dtypes.uint8, dtypes.float8_e4m3, dtypes.float8_e5m2], ids=str)
def test_byte_pairs_into_bfloat16_take_a_scale(dtype, pair):
    """uint8 -> bfloat16 with a scale in the fma (``(128 + low) * s`` plus ``-128 * s`` where the top bit is clear)
    and 8-bit floats (their placed pattern times ``s`` times the rebias factor): every code against scales from
    bfloat16's smallest magnitudes to the largest the cast lets in, one rounding, the value the separate multiply
    gives (uint8's zero code times a negative scale: +0, where the separate multiply gives -0; a float's
    infinities and NaN stay what they are times ``s``)."""
    from tests.test_bit_placement import random_scales

    bound = 128.0 if dtype.is_integer else rules.rebias_factor(dtype, "bfloat16")
    c, c1, s = codes_by_scale(random_scales("bfloat16", bound, 48, 7 + pair))
    ops = rules.PortableOps()

    def build(b, i):
        value = rules._half_to_f32(b["s"][i], "bfloat16")
        both = lambda x: rules._f32_to_half_rounded(x, "bfloat16") * rules.u32(0x10001)  # noqa: E731
        word = byte_word(b, i, pair)
        if dtype.is_integer:
            return {"h": rules.byte_pair_bf16(ops, word, pair, False,
                                              lambda base: (both(value), both(value * rules.f32(-base))))}
        return {"h": rules.byte_float_pair(ops, word, pair, dtype,
                                           lambda base, factor: (both(value * rules.f32(factor)),
                                                                 rules.u32(0x80008000)))}

    out = run_cpu(build, {"c0": c, "c1": c1, "s": rounded_bits(s, "bfloat16")}, {"h": np.zeros(len(c), np.uint32)})["h"]
    values = np.array(lowp.all_values(dtype), dtype=np.float64)
    for lane, lane_codes in enumerate((c, c1)):
        with np.errstate(invalid="ignore"):
            exact = values[lane_codes] * s
        got = ((out >> np.uint32(16 * lane)) & np.uint32(0xFFFF)).astype(np.uint32)
        nan = np.isnan(exact)
        assert np.isnan((got[nan] << 16).view(np.float32)).all(), lane
        want = rounded_bits(np.where(nan, 0, exact), "bfloat16")
        if dtype.is_integer:
            want = np.where(exact == 0, 0, want)
        assert got[~nan].tolist() == want[~nan].tolist(), lane
    with pytest.raises(ValueError, match="int8 codes take no coefficients"):
        rules.byte_pair_bf16(ops, tirx.Var("w", "uint32"), pair, True, lambda base: None)


def test_byte_float_pair_refuses_what_it_cannot_place():
    for dtype in (dtypes.float8_e8m0, dtypes.float6_e3m2, float_type(3, 4, signed=False)):
        assert not rules.byte_float_supported(dtype, "bfloat16")
        with pytest.raises(ValueError, match="signed 8-bit float"):
            rules.byte_float_pair(rules.PortableOps(), tirx.const(0, "uint32"), 0, dtype)


@pytest.mark.parametrize("pair", [0, 1])
def test_byte_pair_takes_a_scale(pair):
    """uint8 -> float16 with a scale in the fma (``h * s - 1024 * s``): every code against every scale of a sweep
    from float16's smallest magnitude to the largest the cast lets in (|s| * 1024 finite), one rounding (a zero
    code times a negative scale: +0); int8 codes take none."""
    from tests.test_bit_placement import random_scales

    c, c1, s = codes_by_scale(random_scales("float16", 1024.0, 96, 5 + pair))
    ops = rules.PortableOps()

    def build(b, i):
        value = rules._half_to_f32(b["s"][i], "float16")
        bits = rules._f32_to_half_rounded(value, "float16")
        both = lambda x: rules._f32_to_half_rounded(x, "float16") * rules.u32(0x10001)  # noqa: E731
        return {"h": rules.byte_pair(ops, byte_word(b, i, pair), pair, False,
                                     lambda base: (bits * rules.u32(0x10001), both(value * rules.f32(-base))))}

    out = run_cpu(build, {"c0": c, "c1": c1, "s": rounded_bits(s, "float16")}, {"h": np.zeros(len(c), np.uint32)})["h"]
    for lane, lane_codes in enumerate((c, c1)):
        exact = lane_codes.astype(np.float64) * s
        want = np.where(exact == 0, 0, rounded_bits(exact, "float16"))
        assert ((out >> np.uint32(16 * lane)) & np.uint32(0xFFFF)).tolist() == want.tolist(), lane
    with pytest.raises(ValueError, match="int8 codes take no coefficients"):
        rules.byte_pair(ops, tirx.Var("w", "uint32"), pair, True, lambda base: None)


@pytest.mark.parametrize("half_word", [0, 1])
def test_e2m1_quad_prmt_lookup(half_word):
    """float4_e2m1 -> float16 four codes at a time: every 16-bit pattern of four codes, in either half of
    the word (the other half noise), both output pairs."""
    quads = np.arange(1 << 16, dtype=np.uint32)
    noise = np.uint32(0x9A3F)
    words = (quads << np.uint32(16 * half_word)) | (noise << np.uint32(16 * (1 - half_word)))
    ops = rules.PortableOps()
    out = run_cpu(lambda b, i: dict(zip(("p0", "p1"), rules.e2m1_quad(ops, b["w"][i], half_word))), {"w": words},
                  {"p0": np.zeros(len(words), np.uint32), "p1": np.zeros(len(words), np.uint32)})
    values = np.array(lowp.all_values(dtypes.float4_e2m1), dtype=np.float64)
    for slot in range(4):
        codes = (quads >> np.uint32(4 * slot)) & np.uint32(0xF)
        got = slot_bits(out, slot)
        assert got.tolist() == half_bits(values[codes], "float16").tolist(), slot  # -0 included


@pytest.mark.parametrize("half", ["float16", "bfloat16"])
@pytest.mark.parametrize("dtype", [t for t in INTEGERS if t.nbits <= 2], ids=str)
def test_narrow_int_word_bytes(half, dtype):
    """1- and 2-bit integers a word at a time: random words and the all-codes words, every slot."""
    n, slots = dtype.nbits, 32 // dtype.nbits
    rng = np.random.default_rng(n)
    words = np.concatenate([rng.integers(0, 1 << 32, 4096, dtype=np.uint64).astype(np.uint32),
                            np.array([0, 0xFFFFFFFF, 0xAAAAAAAA, 0x55555555, 0x1B1B1B1B, 0xE4E4E4E4], np.uint32)])
    ops = rules.PortableOps()
    names = [f"p{i}" for i in range(slots // 2)]
    out = run_cpu(lambda b, i: dict(zip(names, rules.narrow_int_word(ops, b["w"][i], dtype, half))), {"w": words},
                  {name: np.zeros(len(words), np.uint32) for name in names})
    values = np.array(lowp.all_values(dtype), dtype=np.float64)
    for slot in range(slots):
        codes = (words >> np.uint32(slot * n)) & np.uint32((1 << n) - 1)
        got = slot_bits(out, slot)
        assert got.tolist() == half_bits(values[codes], half).tolist(), slot


@pytest.mark.parametrize("half", ["float16", "bfloat16"])
@pytest.mark.parametrize("dtype", [t for t in INTEGERS if t.nbits in (1, 2, 4)], ids=str)
def test_interleaved_int_word_masks_both_halves(half, dtype):
    """Interleaved words (pair i = fields i and i + 16/n): random words and patterned ones, every field, each
    pair's lanes in order."""
    n, fields = dtype.nbits, 32 // dtype.nbits
    rng = np.random.default_rng(10 + n)
    words = np.concatenate([rng.integers(0, 1 << 32, 4096, dtype=np.uint64).astype(np.uint32),
                            np.array([0, 0xFFFFFFFF, 0xAAAAAAAA, 0x55555555, 0x76543210, 0xFEDCBA98], np.uint32)])
    ops = rules.PortableOps()
    names = [f"p{i}" for i in range(fields // 2)]
    out = run_cpu(lambda b, i: dict(zip(names, rules.interleaved_int_word(ops, b["w"][i], dtype, half))),
                  {"w": words}, {name: np.zeros(len(words), np.uint32) for name in names})
    values = np.array(lowp.all_values(dtype), dtype=np.float64)
    for i, name in enumerate(names):
        for lane, field in enumerate((i, i + fields // 2)):
            codes = (words >> np.uint32(field * n)) & np.uint32((1 << n) - 1)
            got = (out[name] >> np.uint32(16 * lane)) & np.uint32(0xFFFF)
            assert got.tolist() == half_bits(values[codes], half).tolist(), (dtype, half, field)


@pytest.mark.parametrize("half", ["float16", "bfloat16"])
@pytest.mark.parametrize("dtype", [t for t in INTEGERS if t.nbits in (1, 2, 4)], ids=str)
def test_interleaved_int_word_biased(half, dtype):
    """Each pair under its place's own magic number, no fma: lanes ``b + c`` exactly (``b`` the pair's bias from
    interleaved_biases, the same in both lanes), one lop3 a pair."""
    n, fields = dtype.nbits, 32 // dtype.nbits
    rng = np.random.default_rng(30 + n + 100 * dtype.signed)
    words = np.concatenate([rng.integers(0, 1 << 32, 4096, dtype=np.uint64).astype(np.uint32),
                            np.array([0, 0xFFFFFFFF, 0xAAAAAAAA, 0x55555555, 0x76543210], np.uint32)])
    ops = rules.PortableOps()
    names = [f"p{i}" for i in range(fields // 2)]
    out = run_cpu(lambda b, i: dict(zip(names, rules.interleaved_int_word_biased(ops, b["w"][i], dtype, half))),
                  {"w": words}, {name: np.zeros(len(words), np.uint32) for name in names})
    biases = rules.interleaved_biases(dtype, half)
    assert len(biases) == len(names) and min(biases) >= 1
    values = np.array(lowp.all_values(dtype), dtype=np.float64)
    for i, name in enumerate(names):
        for lane, field in enumerate((i, i + fields // 2)):
            codes = (words >> np.uint32(field * n)) & np.uint32((1 << n) - 1)
            got = (out[name] >> np.uint32(16 * lane)) & np.uint32(0xFFFF)
            assert got.tolist() == half_bits(values[codes] + biases[i], half).tolist(), (dtype, half, field)
    if (dtype, half) == (dtypes.uint2b, "float16"):  # places 0, 2, 4, 6, 8, then the word shifted by 10: 0, 2, 4
        assert biases == [1024.0, 256.0, 64.0, 16.0, 4.0, 1024.0, 256.0, 64.0]


def rounded_bits(values, half: str) -> np.ndarray:
    """The 16-bit patterns of values exact in float32, rounded to nearest even."""
    f32 = torch.tensor(np.asarray(values, dtype=np.float32))
    rounded = f32.to(torch.float16 if half == "float16" else torch.bfloat16)
    return rounded.view(torch.int16).numpy().view(np.uint16).astype(np.uint32)


@pytest.mark.parametrize("mode", ["minus", "times"])
@pytest.mark.parametrize("half", ["float16", "bfloat16"])
@pytest.mark.parametrize("dtype", [t for t in INTEGERS if t.nbits in (1, 2, 4)], ids=str)
def test_interleaved_int_word_affine(dtype, half, mode):
    """Each pair's fma taking a zero point (``code - z``, z an integer up to the limit the cast checks) or, for
    unsigned codes, a scale (``code * s``, s of any magnitude the cast lets through): one rounding, the value the
    separate steps give."""
    if mode == "times" and dtype.signed:
        pytest.skip("a signed code's scale stays a separate multiply (its addend is not exact)")
    n, fields = dtype.nbits, 32 // dtype.nbits
    rng = np.random.default_rng(20 + n + 100 * dtype.signed)
    count = 4096
    words = rng.integers(0, 1 << 32, count, dtype=np.uint64).astype(np.uint32)
    mantissa = rules.HALF_FORMAT[half][1]
    sign_offset = 1 << (n - 1) if dtype.signed else 0
    if mode == "minus":
        limit = (1 << mantissa) - sign_offset  # (2**(m+1) - 2**m - sign: the cast's check)
        values = np.concatenate([rng.integers(-limit, limit + 1, count - 4), [limit, -limit, 0, 1]]).astype(np.float32)
    else:
        top = 6 if half == "float16" else 40  # |s| * 2**m finite in float16: |s| < 64
        values = (rng.choice([-1.0, 1.0], count) * np.exp2(rng.uniform(-24, top, count))).astype(np.float32)
        values = torch.tensor(values).to(torch.float16 if half == "float16" else torch.bfloat16).float().numpy()
        values[:3] = [0.0, 2.0 ** (top - 1), -(2.0 ** (top - 1))]
    value_bits = rounded_bits(values, half)
    ops = rules.PortableOps()
    names = [f"p{i}" for i in range(fields // 2)]

    def build(b, i):
        v = rules._half_to_f32(b["v"][i], half)

        def both(x):  # a float32 exact in the 16-bit type, in both lanes
            bits = rules._f32_to_half_rounded(x, half)
            return bits | (bits << rules.u32(16))

        def coefficients(pair, base):
            if mode == "minus":
                return both(rules.f32(1.0)), both(rules.f32(-base) - v)
            return both(v), both(v * rules.f32(-base))

        return dict(zip(names, rules.interleaved_int_word_affine(ops, b["w"][i], dtype, half, coefficients)))

    out = run_cpu(build, {"w": words, "v": value_bits}, {name: np.zeros(count, np.uint32) for name in names})
    codes_values = np.array(lowp.all_values(dtype), dtype=np.float64)
    for i, name in enumerate(names):
        for lane, field in enumerate((i, i + fields // 2)):
            codes = (words >> np.uint32(field * n)) & np.uint32((1 << n) - 1)
            exact = codes_values[codes] - values if mode == "minus" else codes_values[codes] * values
            want = rounded_bits(exact, half)
            if mode == "times":  # a zero code times a negative scale: +0 here, -0 in the separate multiply
                want = np.where(exact == 0, 0, want)
            got = (out[name] >> np.uint32(16 * lane)) & np.uint32(0xFFFF)
            assert got.tolist() == want.tolist(), (dtype, half, mode, field)


def test_place_magic():
    """2**(m - place): 1024, 64 and 16 in float16 (places 0, 4 and 6), 128 and 8 in bfloat16."""
    assert [rules.place_magic("float16", p) for p in (0, 4, 6)] == [0x6400, 0x5400, 0x4C00]
    assert [rules.place_magic("bfloat16", p) for p in (0, 4)] == [0x4300, 0x4100]


def test_interleaved_int_word_counts_instructions():
    """The point of interleaving: uint4b -> float16 in 9 operations for 8 codes (1 shift, 4 lop3, 4 fma)."""
    calls = []

    class Counting(rules.PortableOps):
        def bind(self, value):
            calls.append("bind")
            return value

        def lop3(self, *args):
            calls.append("lop3")
            return super().lop3(*args)

        def fma2(self, *args):
            calls.append("fma2")
            return super().fma2(*args)

    rules.interleaved_int_word(Counting(), tirx.Var("w", "uint32"), dtypes.uint4b, "float16")
    assert sorted(calls) == ["bind"] + ["fma2"] * 4 + ["lop3"] * 4
    with pytest.raises(ValueError, match="uint3b"):
        rules.interleaved_int_word(Counting(), tirx.Var("w", "uint32"), int_type(3, False), "float16")


def test_prmt_emulation_with_a_computed_selector_and_sign_replication():
    ops = rules.PortableOps()
    a, b = np.uint32(0x84_03_02_81), np.uint32(0x07_86_05_04)
    cases = {0x3210: 0x84030281, 0x7654: 0x07860504, 0x0404: 0x81048104, 0x8888: 0xFFFFFFFF, 0x9999: 0x00000000,
             0xCAE3: 0x0000FF84}
    for selector, want in cases.items():
        fixed = run_cpu(lambda buf, i: {"r": ops.prmt(buf["a"][i], buf["b"][i], selector)},
                        {"a": np.array([a]), "b": np.array([b])}, {"r": np.zeros(1, np.uint32)})["r"][0]
        computed = run_cpu(lambda buf, i: {"r": ops.prmt(buf["a"][i], buf["b"][i], buf["s"][i])},
                           {"a": np.array([a]), "b": np.array([b]), "s": np.array([selector], np.uint32)},
                           {"r": np.zeros(1, np.uint32)})["r"][0]
        assert int(fixed) == int(computed) == want, hex(selector)


@pytest.mark.parametrize("half", ["float16", "bfloat16"])
@pytest.mark.parametrize("dtype", [t for t in INTEGERS if t.nbits < 8], ids=str)
def test_int_pair_magic_number(half, dtype):
    shift = tirx.const(dtype.nbits, "uint32")
    check_pairs(half, dtype, lambda b, i: rules.int_pair_field(rules.PortableOps(), b["c0"][i] | (b["c1"][i] << shift),
                                                               dtype, half))


@pytest.mark.parametrize("half", ["float16", "bfloat16"])
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_float_pair_fields(half, dtype):
    if not rules.float_pair_supported(dtype, half):
        pytest.skip(f"{dtype.name} -> {half} takes the generic path")
    check_pairs(half, dtype, lambda b, i: rules.float_pair(rules.PortableOps(), [b["c0"][i], b["c1"][i]], dtype, half))


def test_pair_paths_cover_the_listed_types():
    """The quantized-matmul weight types all have a paired fast path into float16."""
    for dtype in (dtypes.uint4b, dtypes.int4b, dtypes.uint2b, dtypes.uint3b, dtypes.uint6b, dtypes.int3b):
        assert dtype.nbits < 8 and dtype.is_integer
    for dtype in (dtypes.float8_e4m3, dtypes.float8_e5m2, dtypes.float6_e3m2, dtypes.float6_e2m3, dtypes.float4_e2m1):
        assert rules.float_pair_supported(dtype, "float16")
    assert not rules.float_pair_supported(dtypes.float8_e8m0, "float16")
    assert not rules.float_pair_supported(dtypes.float8_e5m2, "bfloat16")  # its infinities need 5 exponent bits


def test_float_to_int_rounds_half_even_and_saturates():
    values = np.array([2.5, 3.5, -2.5, 1e10, -1e10, np.nan, 7.49, -0.5], dtype=np.float32)
    out = run_cpu(lambda b, i: {"v": rules.float_to_int(b["x"][i], dtypes.int32)}, {"x": values},
                  {"v": np.zeros(len(values), np.int32)})["v"]
    assert out.tolist() == [2, 4, -2, 2**31 - 1, -2**31, 0, 7, 0]


@pytest.mark.parametrize("half", ["float16", "bfloat16"])
@pytest.mark.parametrize("dtype", LOW_PRECISION, ids=str)
def test_half_pairs_put_every_slot_in_its_place(dtype, half):
    """The emitter's fast paths as a kernel uses them (cast.half_pairs: which words, which pair, in what
    order), run on random words with the portable ops: 32 slots, each lane against lowp's value."""
    from tilus_tvm.instructions.cast import half_pairs
    from tilus_tvm.instructions.packed import bits_of

    n, slots = dtype.nbits, 32
    rng = np.random.default_rng(n * 7 + len(half))
    words = rng.integers(0, 1 << 32, (n, 512), dtype=np.uint64).astype(np.uint32)  # 32 slots of n bits: n words
    ops = rules.PortableOps()

    def build(b, i):
        stream = [b[f"w{j}"][i] for j in range(n)]
        codes = [bits_of(stream, slot * n, n) for slot in range(slots)]
        pairs = half_pairs(ops, stream, codes, dtype, half)
        return {f"p{p}": bits for p, bits in enumerate(pairs)}

    probe = {}
    with IRBuilder():  # how many pairs a fast path gives (none: the generic path, nothing to check here)
        with Tb.prim_func():
            stream = [Tb.arg(f"w{j}", Tb.buffer((1,), "uint32"))[0] for j in range(n)]
            probe = half_pairs(ops, stream, [bits_of(stream, s * n, n) for s in range(slots)], dtype, half)
    if not probe:
        pytest.skip(f"{dtype.name} -> {half}: no fast path")
    assert len(probe) == slots // 2
    out = run_cpu(build, {f"w{j}": words[j] for j in range(n)},
                  {f"p{p}": np.zeros(words.shape[1], np.uint32) for p in range(slots // 2)})
    values = np.array(lowp.all_values(dtype), dtype=np.float64)
    stream_ints = [sum(int(words[j][k]) << (32 * j) for j in range(n)) for k in range(words.shape[1])]
    for slot in range(slots):
        codes = np.array([(v >> (slot * n)) & ((1 << n) - 1) for v in stream_ints])
        got = slot_bits(out, slot)
        want = half_bits(values[codes], half)
        nan = np.isnan(values[codes])
        got_f = got.astype(np.uint16).view(np.float16) if half == "float16" else (got << 16).view(np.float32)
        assert np.isnan(got_f[nan]).all(), (dtype, slot)
        assert got[~nan].tolist() == want[~nan].tolist(), (dtype, slot)
