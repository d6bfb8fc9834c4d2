"""tilus_tvm/lowp.py against references written another way.

Values: every code of every type of at most 8 bits against a construction by accumulated spacings
(``fractions.Fraction``), literal tables of the OCP formats, torch's float8 types (bit patterns through
``.view``) and ml_dtypes' fp6 / fp4. Rounding: a brute-force nearest search over every finite value in
exact integers. Packing: the byte stream as one Python integer.
"""
import doctest
import math
import random
import subprocess
import sys
from fractions import Fraction
from functools import lru_cache

import pytest
import torch

import tilus_tvm
from tilus_tvm import dtypes, lowp
from tilus_tvm.dtypes import DataType, as_dtype, float16, float32, float_type, int8, int16, int_type, uint8
from tilus_tvm.errors import ScriptError
from tilus_tvm.lowp import PackedTensor, all_values, decode, encode, from_torch, pack_codes, unpack_codes

INTEGER_TYPES = [int_type(nbits, signed) for nbits in range(1, 9) for signed in (True, False)]
FLOAT_TYPES = [float_type(exponent_bits, mantissa_bits, signed) for signed in (True, False)
               for exponent_bits in range(1, 9) for mantissa_bits in range(0, 8)
               if int(signed) + exponent_bits + mantissa_bits <= 8]
ALL_TYPES = INTEGER_TYPES + FLOAT_TYPES
NAN, POS_INF, NEG_INF = "nan", "+inf", "-inf"
NAN_CODES = {"float8_e4m3": 0x7F, "float8_e5m2": 0x7F, "float8_e8m0": 0xFF}  # every other type: 0
TORCH_FLOAT8 = {"float8_e4m3": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2,
                "float8_e8m0": torch.float8_e8m0fnu}


def ids(types):
    return [t.name for t in types]


def test_doctests():
    assert doctest.testmod(lowp).failed == 0


def test_the_type_list_is_complete():
    # 16 integers; floats: signed e + m <= 7 (28 formats), unsigned e + m <= 8 (36 formats)
    assert len(INTEGER_TYPES) == 16 and len(FLOAT_TYPES) == 64 and len(set(ALL_TYPES)) == 80
    assert {"int4b", "uint1b", "int6b", "int8", "uint8", "float8_e4m3", "float8_e5m2", "float6_e3m2",
            "float6_e2m3", "float4_e2m1", "float3_e1m1", "float8_e8m0"} <= set(ids(ALL_TYPES))


# ---- reference values ---------------------------------------------------------------------------
def accumulated_magnitudes(exponent_bits, mantissa_bits):
    """Magnitudes of codes 0, 1, 2, ... when every code is finite: each code adds the spacing of the
    binade the previous code is in (subnormals share the spacing of the first binade)."""
    bias = 2 ** (exponent_bits - 1) - 1
    magnitudes = [Fraction(0)]
    for code in range(1, 2 ** (exponent_bits + mantissa_bits)):
        binade = max((code - 1) >> mantissa_bits, 1)
        magnitudes.append(magnitudes[-1] + Fraction(2) ** (binade - bias - mantissa_bits))
    return magnitudes


@lru_cache(maxsize=None)
def reference_values(dtype):
    """Per code: an int or Fraction, or NAN / POS_INF / NEG_INF; floats' sign of zero is checked apart."""
    nbits = dtype.nbits
    if dtype.is_integer:
        top = 2 ** (nbits - 1) if dtype.signed else 0
        return tuple((code & (2 ** nbits - 1 - top)) - (code & top) for code in range(2 ** nbits))
    if dtype.name == "float8_e8m0":
        return tuple(Fraction(2) ** (code - 127) for code in range(255)) + (NAN,)
    magnitudes = accumulated_magnitudes(dtype.exponent_bits, dtype.mantissa_bits)
    if dtype.name == "float8_e5m2":  # exponent 11111: mantissa 00 is infinity, the rest NaN
        magnitudes[0x7C:] = [POS_INF, NAN, NAN, NAN]
    if dtype.name == "float8_e4m3":  # S.1111.111 is NaN
        magnitudes[0x7F] = NAN
    if not dtype.signed:
        return tuple(magnitudes)
    negated = [{POS_INF: NEG_INF, NAN: NAN}.get(m, m) if isinstance(m, str) else -m for m in magnitudes]
    return tuple(magnitudes + negated)


def matches(value, expected, negative_zero):
    if expected == NAN:
        return isinstance(value, float) and math.isnan(value)
    if expected in (POS_INF, NEG_INF):
        return value == (math.inf if expected == POS_INF else -math.inf)
    if not math.isfinite(value) or Fraction(value) != expected:
        return False
    return value != 0 or math.copysign(1.0, value) == (-1.0 if negative_zero else 1.0)


@pytest.mark.parametrize("dtype", ALL_TYPES, ids=ids(ALL_TYPES))
def test_every_code_has_the_reference_value(dtype):
    values = all_values(dtype)
    expected = reference_values(dtype)
    assert len(values) == len(expected) == 2 ** dtype.nbits
    sign_bit = 2 ** (dtype.nbits - 1) if dtype.is_float and dtype.signed else None
    wrong = [(code, values[code], expected[code]) for code in range(len(values))
             if not matches(values[code], expected[code], sign_bit is not None and code & sign_bit)]
    assert not wrong, f"{dtype.name}: (code, value, expected) {wrong[:8]}"
    assert all(isinstance(v, int) for v in values) if dtype.is_integer else all(isinstance(v, float) for v in values)
    decoded = decode(torch.arange(2 ** dtype.nbits), dtype)  # the tensor path, float32 or int32
    assert decoded.dtype == (torch.float32 if dtype.is_float else torch.int32)
    assert all(matches(value, expected[code], sign_bit is not None and code & sign_bit)
               for code, value in enumerate(decoded.tolist()))


def test_named_formats_have_the_published_values():
    def positives(name):
        return [v for v in all_values(name)[:2 ** (as_dtype(name).nbits - 1)] if math.isfinite(v)]

    assert positives("float4_e2m1") == [0, 0.5, 1, 1.5, 2, 3, 4, 6]
    assert positives("float3_e1m1") == [0, 1, 2, 3]
    facts = {  # name: (smallest subnormal, largest finite), from the OCP FP8 and MX specifications
        "float8_e4m3": (2.0 ** -9, 448.0), "float8_e5m2": (2.0 ** -16, 57344.0),
        "float6_e3m2": (0.0625, 28.0), "float6_e2m3": (0.125, 7.5), "float4_e2m1": (0.5, 6.0),
    }
    for name, (smallest, largest) in facts.items():
        assert (positives(name)[1], positives(name)[-1]) == (smallest, largest), name
        assert lowp.finite_range(name) == (-largest, largest)
    assert lowp.finite_range("float8_e8m0") == (2.0 ** -127, 2.0 ** 127)
    assert lowp.finite_range("uint3b") == (0, 7) and lowp.finite_range("int1b") == (-1, 0)
    assert [lowp.float_family(n) for n in ("float8_e5m2", "float8_e4m3", "float8_e8m0", "float8_e3m4",
                                           "float7_e5m2", "float16")] == ["ieee", "fn", "e8m0", "finite",
                                                                          "finite", "ieee"]
    assert all_values("float8_e5m2")[0x7C] == math.inf and all_values("float8_e5m2")[0xFC] == -math.inf
    assert sum(math.isnan(v) for v in all_values("float8_e4m3")) == 2
    assert not any(math.isnan(v) or math.isinf(v) for v in all_values("float6_e3m2") + all_values("float8_e3m4"))


@pytest.mark.parametrize("name", list(TORCH_FLOAT8))
def test_float8_codes_agree_with_torch(name):
    torch_values = torch.arange(256, dtype=torch.uint8).view(TORCH_FLOAT8[name]).to(torch.float32)
    ours = decode(torch.arange(256), name)
    assert torch.equal(torch.isnan(ours), torch.isnan(torch_values))
    finite = ~torch.isnan(ours)
    assert torch.equal(ours[finite], torch_values[finite])
    assert torch.equal(torch.signbit(ours[finite]), torch.signbit(torch_values[finite]))  # -0 at 0x80


@pytest.mark.parametrize("name, ml_name", [("float6_e3m2", "float6_e3m2fn"), ("float6_e2m3", "float6_e2m3fn"),
                                           ("float4_e2m1", "float4_e2m1fn"), ("float8_e4m3", "float8_e4m3fn"),
                                           ("float8_e5m2", "float8_e5m2"), ("float8_e8m0", "float8_e8m0fnu")])
def test_codes_agree_with_ml_dtypes(name, ml_name):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    import numpy as np

    theirs = np.arange(2 ** as_dtype(name).nbits, dtype=np.uint8).view(getattr(ml_dtypes, ml_name))
    theirs = theirs.astype(np.float64).tolist()
    ours = all_values(name)
    assert [math.isnan(v) for v in ours] == [math.isnan(v) for v in theirs]
    assert [(v, math.copysign(1, v)) for v in ours if not math.isnan(v)] == \
           [(v, math.copysign(1, v)) for v in theirs if not math.isnan(v)]


def test_integer_codes_agree_with_torch():
    codes = torch.arange(256, dtype=torch.uint8)
    assert all_values(int8) == tuple(codes.view(torch.int8).tolist())
    assert all_values(uint8) == tuple(codes.tolist())
    assert all_values("int4b") == (0, 1, 2, 3, 4, 5, 6, 7, -8, -7, -6, -5, -4, -3, -2, -1)


# ---- rounding -----------------------------------------------------------------------------------
SCALE = 2 ** 1074  # every finite float64 times this is an integer


def scaled(value):
    exact = Fraction(value) * SCALE
    assert exact.denominator == 1
    return int(exact)


@lru_cache(maxsize=None)
def rounding_candidates(dtype):
    """(scaled value, code) of every finite code; signed floats: magnitude codes only."""
    values = reference_values(dtype)
    signed_float = dtype.is_float and dtype.signed
    codes = range(2 ** (dtype.nbits - 1)) if signed_float else range(2 ** dtype.nbits)
    return tuple((scaled(values[code]), code) for code in codes if not isinstance(values[code], str))


def reference_encode(x, dtype):
    """Nearest finite value by brute force, ties to the even code; saturation falls out of "nearest"."""
    if math.isnan(x):
        return NAN_CODES.get(dtype.name, 0)
    signed_float = dtype.is_float and dtype.signed
    candidates = rounding_candidates(dtype)
    target = abs(x) if signed_float else x
    if math.isinf(target):
        code = (max if target > 0 else min)(candidates)[1]
    else:
        exact = scaled(target)
        code = min(candidates, key=lambda candidate: (abs(candidate[0] - exact), candidate[1] % 2))[1]
    if signed_float and math.copysign(1.0, x) < 0:
        code += 2 ** (dtype.nbits - 1)
    return code


def probes(dtype):
    """Every finite value, every midpoint (the ties), points just off the midpoints, beyond the range,
    infinities, NaN, signed zeros, and fresh random values across (and past) the range."""
    finite = sorted({float(v) for v in reference_values(dtype) if not isinstance(v, str)})
    xs = finite + [-v for v in finite]
    for low, high in zip(finite, finite[1:]):
        middle, nudge = (low + high) / 2, (high - low) / 16
        xs += [middle, middle - nudge, middle + nudge, -middle, -middle - nudge]
    top, gap = finite[-1], finite[-1] - finite[-2]
    xs += [top + gap / 2, top + gap, 4 * top, -top - gap / 2, -4 * top, 1e300, -1e300, 5e-324,
           math.inf, -math.inf, math.nan, -math.nan, 0.0, -0.0]
    xs += [random.uniform(-1.5 * top, 1.5 * top) for _ in range(64)]
    return xs


@pytest.mark.parametrize("dtype", ALL_TYPES, ids=ids(ALL_TYPES))
def test_encoding_matches_the_brute_force_reference(dtype):
    xs = probes(dtype)
    ours = encode(torch.tensor(xs, dtype=torch.float64), dtype).tolist()
    expected = [reference_encode(x, dtype) for x in xs]
    wrong = [(x, got, want) for x, got, want in zip(xs, ours, expected) if got != want]
    assert not wrong, f"{dtype.name}: (input, code, expected code) {wrong[:8]}"
    # and decoding gives back every finite value unchanged
    finite_codes = [code for code, v in enumerate(all_values(dtype)) if math.isfinite(v)]
    finite_values = torch.tensor([all_values(dtype)[code] for code in finite_codes], dtype=torch.float64)
    round_trip = encode(finite_values, dtype).tolist()
    assert all(all_values(dtype)[a] == all_values(dtype)[b] for a, b in zip(round_trip, finite_codes))


@pytest.mark.parametrize("name", ["float8_e4m3", "float8_e5m2"])
def test_float8_rounding_agrees_with_torch_inside_the_range(name):
    largest = lowp.finite_range(name)[1]
    values = (torch.rand(4096) * 2 - 1) * largest * 1.01
    grid = torch.tensor([v for v in all_values(name) if math.isfinite(v)], dtype=torch.float64).unique()
    ties = ((grid[1:] + grid[:-1]) / 2).to(torch.float32)  # exact in float32
    values = torch.cat([values, ties, -ties]).clamp(-largest, largest)
    theirs = values.to(TORCH_FLOAT8[name]).view(torch.uint8)
    assert torch.equal(from_torch(values).to(name).storage, theirs)
    assert torch.equal(from_torch(values.to(TORCH_FLOAT8[name])).to_torch(), theirs.view(TORCH_FLOAT8[name]).float())


@pytest.mark.parametrize("name, ml_name", [("float6_e3m2", "float6_e3m2fn"), ("float6_e2m3", "float6_e2m3fn"),
                                           ("float4_e2m1", "float4_e2m1fn")])
def test_sub_byte_rounding_agrees_with_ml_dtypes_inside_the_range(name, ml_name):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    largest = lowp.finite_range(name)[1]
    values = ((torch.rand(4096, dtype=torch.float64) * 2 - 1) * largest).to(torch.float32)
    theirs = values.numpy().astype(getattr(ml_dtypes, ml_name)).astype("float32")
    assert torch.equal(from_torch(values).to(name).to_torch(), torch.from_numpy(theirs))


def test_ties_go_to_the_even_code():
    cases = {
        "float4_e2m1": ([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -5.0, -0.25], [0, 1, 1, 2, 2, 4, 4, -4, -0.0]),
        "float8_e4m3": ([1 + 2 ** -4, 1 + 3 * 2 ** -4, 416.0, 2 ** -10, 3 * 2 ** -10],
                        [1.0, 1.25, 416.0, 0.0, 2 ** -8]),
        "float8_e8m0": ([3.0, 6.0, 1.5, 0.75], [2.0, 8.0, 2.0, 0.5]),  # codes 128, 130, 128, 126
        "int4b": ([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 6.5], [0, 2, 2, 0, -2, -2, 6]),
        "uint2b": ([0.5, 1.5, 2.5], [0, 2, 2]),
    }
    for name, (inputs, expected) in cases.items():
        out = from_torch(torch.tensor(inputs, dtype=torch.float64)).to(name).to_torch().tolist()
        assert out == expected, name
        assert [math.copysign(1, v) for v in out] == [math.copysign(1, v) for v in expected], name


def test_saturation_and_infinities():
    big = torch.tensor([1e6, -1e6, math.inf, -math.inf, 464.0, 480.0, 61440.0])
    assert encode(big, "float8_e4m3").tolist() == [0x7E, 0xFE, 0x7E, 0xFE, 0x7E, 0x7E, 0x7E]  # +-448
    # e5m2: 464 rounds to 448 (0x5F), 480 is the tie of 448 and 512 and takes the even code 0x60
    assert encode(big, "float8_e5m2").tolist() == [0x7B, 0xFB, 0x7B, 0xFB, 0x5F, 0x60, 0x7B]
    assert decode(torch.tensor([0x5F, 0x60]), "float8_e5m2").tolist() == [448.0, 512.0]
    # torch keeps e5m2's infinities; this module saturates (cvt.rn.satfinite), as documented
    assert torch.tensor([math.inf]).to(torch.float8_e5m2).view(torch.uint8).item() == 0x7C
    assert encode(big, "float4_e2m1").tolist() == [7, 15, 7, 15, 7, 7, 7]
    assert from_torch(torch.tensor([100.0, -100.0, math.inf, -math.inf]), "int6b").to_torch().tolist() == \
           [31, -32, 31, -32]
    assert from_torch(torch.tensor([-3.0, -0.4, 0.0, 1e9]), "uint3b").to_torch().tolist() == [0, 0, 0, 7]
    e8m0 = from_torch(torch.tensor([0.0, -5.0, 1e-300, 1e300, math.inf]), "float8_e8m0")
    assert e8m0.codes().tolist() == [0, 0, 0, 254, 254]


def test_nan_handling():
    nans = torch.tensor([math.nan, -math.nan])
    for name, code in NAN_CODES.items():
        assert encode(nans, name).tolist() == [code, code], name
        assert math.isnan(all_values(name)[code])
    for name in ("float6_e3m2", "float4_e2m1", "float8_e3m4", "int4b", "uint8", "int8"):
        assert encode(nans, name).tolist() == [0, 0], name  # no NaN in the type: the value 0
        assert lowp.nan_code(name) is None


def test_signed_zero():
    out = from_torch(torch.tensor([-0.0, -1e-30, 0.0, 1e-30]), "float6_e2m3")
    assert out.codes().tolist() == [0x20, 0x20, 0, 0]
    assert [math.copysign(1, v) for v in out.to_torch().tolist()] == [-1, -1, 1, 1]


def test_integers_round_non_integral_values_instead_of_refusing_them():
    values = torch.tensor([3.7, -3.7, 0.49, -0.51, 126.5, 127.5, 1e10])
    assert from_torch(values, int8).to_torch().tolist() == [4, -4, 0, -1, 126, 127, 127]
    assert from_torch(values, "uint7b").to_torch().tolist() == [4, 0, 0, 0, 126, 127, 127]
    assert from_torch(torch.tensor([5, -9, 300], dtype=torch.int64), "int4b").to_torch().tolist() == [5, -8, 7]


# ---- packing ------------------------------------------------------------------------------------
def reference_pack(codes, nbits):
    stream = sum(code << (index * nbits) for index, code in enumerate(codes))
    return list(stream.to_bytes((len(codes) * nbits + 7) // 8, "little"))


@pytest.mark.parametrize("nbits", range(1, 9))
@pytest.mark.parametrize("count", [0, 1, 2, 3, 5, 7, 8, 9, 13, 31, 100])
def test_pack_codes_round_trip(nbits, count):
    codes = torch.randint(0, 2 ** nbits, (count,))
    packed = pack_codes(codes, nbits)
    assert packed.dtype == torch.uint8 and packed.dim() == 1
    assert packed.tolist() == reference_pack(codes.tolist(), nbits), codes.tolist()
    assert packed.numel() == int_type(nbits).storage_bytes(count)
    assert unpack_codes(packed, nbits, count).tolist() == codes.tolist()


@pytest.mark.parametrize("dtype", ALL_TYPES, ids=ids(ALL_TYPES))
@pytest.mark.parametrize("shape", [(0,), (1,), (7,), (3, 5), (2, 3, 3)], ids=str)
def test_packed_tensor_round_trip(dtype, shape):
    finite = torch.tensor([v for v in all_values(dtype) if math.isfinite(v)], dtype=torch.float64)
    values = finite[torch.randint(0, finite.numel(), shape)]
    packed = from_torch(values).to(dtype)
    assert (packed.dtype, packed.shape) == (dtype, shape)
    assert packed.storage.numel() == dtype.storage_bytes(math.prod(shape))
    assert packed.storage.tolist() == reference_pack(encode(values, dtype).reshape(-1).tolist(), dtype.nbits)
    unpacked = packed.to_torch()
    assert unpacked.dtype == (torch.float32 if dtype.is_float else torch.int32) and tuple(unpacked.shape) == shape
    assert torch.equal(unpacked.to(torch.float64), values)
    again = PackedTensor(packed.storage, shape, dtype)
    assert torch.equal(again.codes(), packed.codes())


def test_packing_examples():
    # eight uint1b per byte, element 0 in the lowest bit
    assert from_torch(torch.tensor([1, 0, 1, 1, 0, 0, 0, 1, 1]), "uint1b").storage.tolist() == [0b10001101, 0b1]
    # two uint4b per byte, element 0 in the low nibble
    assert from_torch(torch.tensor([3, 10, 5]), "uint4b").storage.tolist() == [0xA3, 0x05]
    # four int6b in three bytes: codes 1, 63, 5, 32 -> 0b100000_000101_111111_000001
    assert from_torch(torch.tensor([1, -1, 5, -32]), "int6b").storage.tolist() == [0xC1, 0x5F, 0x80]
    # two float4_e2m1: 1.5 (code 3) and -6 (code 15)
    assert from_torch(torch.tensor([1.5, -6.0]), "float4_e2m1").storage.tolist() == [0xF3]


@pytest.mark.parametrize("dtype", ALL_TYPES, ids=ids(ALL_TYPES))
def test_storage_sizes(dtype):
    for count in (1, 2, 3, 4, 5, 8, 9, 17):
        assert from_torch(torch.ones(count), dtype).storage.numel() == dtype.storage_bytes(count) == \
               math.ceil(count * dtype.nbits / 8)


# ---- torch tensors of other types, conversions between types ---------------------------------------
def test_from_torch_keeps_torch_types_as_their_bytes():
    values = torch.randn(3, 4) * 100
    packed = from_torch(values)
    assert (packed.dtype, packed.shape, packed.storage.numel()) == (float32, (3, 4), 48)
    assert torch.equal(packed.to_torch(), values)
    weights = torch.randint(-128, 128, (5,), dtype=torch.int8)
    assert from_torch(weights).dtype is int8 and torch.equal(from_torch(weights).storage, weights.view(torch.uint8))
    assert from_torch(weights).to_torch().tolist() == weights.tolist()
    assert from_torch(torch.tensor([True, False])).to_torch().tolist() == [True, False]
    float8 = (torch.randn(6) * 10).to(torch.float8_e4m3fn)
    assert from_torch(float8).dtype is dtypes.float8_e4m3
    assert torch.equal(from_torch(float8).to_torch(), float8.float())


def test_conversions_between_types():
    values = torch.randn(9, dtype=torch.float64) * 3
    as_half = from_torch(values).to(float16)
    assert as_half.dtype is float16 and torch.equal(as_half.to_torch(), values.to(torch.float16))
    four = from_torch(values, "float4_e2m1")
    assert torch.equal(four.to(float16).to_torch(), four.to_torch().half())  # exact: no rounding
    assert torch.equal(four.to("float6_e3m2").to_torch(), four.to_torch())  # every e2m1 value is an e3m2 value
    assert from_torch(torch.tensor([2.5, -3.5, 1e9, -1e9, math.nan]), int16).to_torch().tolist() == \
           [2, -4, 32767, -32768, 0]
    assert from_torch(torch.tensor([-7, 7]), "int4b").to("uint2b").to_torch().tolist() == [0, 3]
    assert "PackedTensor(int4b, shape=(2,)" in repr(from_torch(torch.tensor([-7, 7]), "int4b"))


# ---- the table and the package -----------------------------------------------------------------------
def test_named_types_in_the_table():
    assert as_dtype(torch.float8_e4m3fn) is dtypes.float8_e4m3 is as_dtype("float8_e4m3fn") is float_type(4, 3)
    assert as_dtype(torch.float8_e5m2) is dtypes.float8_e5m2 is as_dtype("float8_e5m2")
    assert as_dtype(torch.float8_e8m0fnu) is dtypes.float8_e8m0 is float_type(8, 0, signed=False)
    assert as_dtype("float4_e2m1fn") is dtypes.float4_e2m1 is tilus_tvm.float4_e2m1
    assert dtypes.float6_e3m2.tvm_name is None and dtypes.float8_e4m3.ptx == "e4m3"
    names = [f"int{n}b" for n in range(1, 8)] + [f"uint{n}b" for n in range(1, 8)]
    assert all(getattr(dtypes, name) is as_dtype(name) for name in names)
    assert tilus_tvm.float_type is float_type and tilus_tvm.int_type is int_type
    assert tilus_tvm.from_torch is from_torch and tilus_tvm.PackedTensor is PackedTensor
    assert tilus_tvm.int4b is int_type(4) and tilus_tvm.uint4b is int_type(4, signed=False)


def test_import_loads_neither_torch_nor_tvm():
    code = ("import sys, tilus_tvm, tilus_tvm.lowp as lowp\n"
            "assert tilus_tvm.float_type(3, 2).name == 'float6_e3m2'\n"
            "assert lowp.all_values('float4_e2m1')[7] == 6.0 and lowp.finite_range('int4b') == (-8, 7)\n"
            "print(sorted(m for m in ('tvm', 'torch', 'numpy') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


# ---- errors ---------------------------------------------------------------------------------------
def test_errors():
    values = torch.tensor([1.0, 2.0])
    with pytest.raises(ScriptError, match="unknown data type 'int9b'"):
        from_torch(values).to("int9b")
    with pytest.raises(ScriptError, match="unknown data type 'float8_e5m4'"):  # 5 + 4 bits do not fit in 8
        from_torch(values, "float8_e5m4")
    assert as_dtype("float8_e4m4").signed is False  # 8 = 4 + 4: no room for a sign, so unsigned
    with pytest.raises(ScriptError, match="float_type: exponent_bits must be an int >= 1, got 0"):
        float_type(0, 3)
    with pytest.raises(ScriptError, match="float9_e4m4 is neither a type of at most 8 bits nor one with a torch"):
        # a row made but not registered, so the table stays as test_dtypes.py expects it
        from_torch(values).to(DataType("float9_e4m4", 9, "float", "f9e4m4", True, exponent_bits=4, mantissa_bits=4))
    with pytest.raises(ScriptError, match="all_values: float16 is not a low-precision type"):
        all_values(float16)
    with pytest.raises(ScriptError, match="encode: bool is not a low-precision type"):
        encode(values, "bool")
    with pytest.raises(ScriptError, match="bool is not a conversion target"):
        from_torch(values).to("bool")
    with pytest.raises(ScriptError, match="from_torch: expected a torch.Tensor, got list"):
        from_torch([1.0, 2.0])
    with pytest.raises(ScriptError, match="unknown data type"):
        from_torch(torch.zeros(2, dtype=torch.complex64))
    with pytest.raises(ScriptError, match=r"storage of 5 int6b elements must be a 1-D torch.uint8 tensor of 4 bytes, "
                                          r"got torch.uint8 of shape \(3,\)"):
        PackedTensor(torch.zeros(3, dtype=torch.uint8), (5,), "int6b")
    with pytest.raises(ScriptError, match=r"pack_codes: codes must lie in \[0, 16\) for nbits=4, got .* \[0, 16\]"):
        pack_codes(torch.tensor([0, 16]), 4)
    with pytest.raises(ScriptError, match="pack_codes: nbits must be an int in 1..8, got 9"):
        pack_codes(torch.tensor([0]), 9)
    with pytest.raises(ScriptError, match="unpack_codes: storage must be a 1-D torch.uint8 tensor of at least 2 bytes"):
        unpack_codes(torch.zeros(1, dtype=torch.uint8), 4, 3)
    with pytest.raises(ScriptError, match="PackedTensor.codes: float32 is not a low-precision type"):
        from_torch(values).codes()
    with pytest.raises(ScriptError, match="float_family: int4b is a int, not a float"):
        lowp.float_family("int4b")


def test_tilus_tensor_constructors():
    """tilus.empty / zeros / ones / full / rand / randn / randint / view_torch make PackedTensors of any table type,
    their values rounded by PackedTensor.to."""
    import tilus_tvm as tilus

    cpu = dict(device="cpu")
    empty = tilus.empty([3, 5], "uint4b", **cpu)
    assert (empty.shape, empty.dtype.name, empty.storage.numel(), empty.device.type) == ((3, 5), "uint4b", 8, "cpu")
    assert tilus.zeros([2, 3], "float6_e3m2", **cpu).to_torch().eq(0).all()
    assert tilus.ones(7, "int3b", **cpu).to_torch().tolist() == [1] * 7
    assert tilus.full([4], 2.5, "uint2b", **cpu).to_torch().tolist() == [2] * 4  # ties to even
    assert tilus.full([2], 100.0, "float4_e2m1", **cpu).to_torch().tolist() == [6.0, 6.0]  # saturates
    assert tilus.full([2], -1.5, "float16", **cpu).torch().tolist() == [-1.5, -1.5]
    r = tilus.randint(0, 16, [64, 8], "uint4b", **cpu).to_torch()
    assert r.shape == (64, 8) and 0 <= r.min() and r.max() <= 15 and len(r.unique()) > 8
    u = tilus.rand([1000], "float16", **cpu).torch()
    assert u.dtype == torch.float16 and 0 <= u.min() and u.max() <= 1
    n = tilus.randn([1000], "float8_e4m3", **cpu).to_torch()
    assert n.abs().max() <= 448 and n.std() > 0.5
    packed = tilus.from_torch(torch.arange(12).reshape(3, 4) % 16, "uint4b")
    seen = tilus.view_torch(packed.storage.view(torch.int16), dtype="uint4b", shape=[3, 4])
    assert torch.equal(seen.to_torch(), packed.to_torch()) and seen.data_ptr() == packed.data_ptr()
    with pytest.raises(ScriptError, match=r"view_torch: uint4b\[3, 5\] takes 8 bytes, the tensor has 6"):
        tilus.view_torch(packed.storage, dtype="uint4b", shape=[3, 5])
    with pytest.raises(ScriptError, match="empty: shape must be ints >= 0, got"):
        tilus.empty([2, -1], "int4b", **cpu)


def test_packed_tensor_views_and_torch():
    """Tilus's Tensor methods on PackedTensor: torch() (the typed storage, for types torch has), view(dtype=,
    shape=) (the same bits), clone(), data_ptr()."""
    import tilus_tvm as tilus

    bytes_ = tilus.from_torch(torch.tensor([[0x21, 0x43, 0x65]], dtype=torch.uint8))
    codes = bytes_.view(dtype="uint4b")
    assert codes.shape == (1, 6) and codes.to_torch().tolist() == [[1, 2, 3, 4, 5, 6]]
    assert codes.view(dtype="uint8").torch().tolist() == [[0x21, 0x43, 0x65]]
    assert codes.view(shape=[2, 3]).to_torch().tolist() == [[1, 2, 3], [4, 5, 6]]
    assert codes.view(dtype="int8", shape=[3]).torch().tolist() == [0x21, 0x43, 0x65]
    copy = codes.clone()
    assert copy.data_ptr() != codes.data_ptr() and torch.equal(copy.storage, codes.storage)
    with pytest.raises(ScriptError, match="torch has no uint4b dtype"):
        codes.torch()
    with pytest.raises(ScriptError, match=r"float16\[4\] holds 64 bits, uint4b\[1, 6\] 24"):
        codes.view(dtype="float16", shape=[4])
    with pytest.raises(ScriptError, match="cannot be read as float16 along its last dimension"):
        codes.view(dtype="float16")
