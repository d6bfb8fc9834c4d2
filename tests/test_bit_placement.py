"""Bit placements (tilus_tvm/bit_placement.py): every storage bit holds one code bit, packing round-trips, and
the decode rule (cast_rules.placed_block, compiled for the CPU) gives every code's exact value in both lanes."""
import numpy as np
import pytest
import torch
from tvm import tirx

from tilus_tvm import dtypes, lowp
from tilus_tvm.bit_placement import placeable, placement
from tilus_tvm.dtypes import float_type, int_type
from tilus_tvm.instructions import cast_rules as rules
from tests.instructions.test_cast_rules import half_bits, run_cpu

PLACEABLE = [int_type(n, s) for n in (3, 5, 6, 7) for s in (False, True)] + [
    dtypes.float6_e3m2, dtypes.float6_e2m3, dtypes.float4_e2m1, float_type(1, 1), float_type(2, 2), float_type(3, 1),
    float_type(2, 3, signed=False), float_type(4, 2), float_type(3, 3)]


def test_which_types_are_placeable():
    assert all(placeable(t) for t in PLACEABLE)
    for name in ("uint4b", "int4b", "uint2b", "int1b", "uint8", "int8", "float8_e4m3", "float8_e5m2", "float16"):
        assert not placeable(name), name
    assert not placeable(float_type(5, 1))  # exponent of 5 bits: beyond float16's finite values
    with pytest.raises(ValueError, match="uint4b has no bit placement"):
        placement("uint4b")


@pytest.mark.parametrize("dtype", PLACEABLE, ids=str)
def test_every_bit_of_a_block_holds_one_code_bit(dtype):
    p = placement(dtype)
    held = [bit for row in p.source for bit in row]
    assert len(held) == 16 * p.words and None not in held
    assert sorted(held) == [(pair, bit) for pair in range(p.slots // 2) for bit in range(dtype.nbits)]
    assert p.slots * dtype.nbits == 32 * p.words


@pytest.mark.parametrize("dtype", PLACEABLE, ids=str)
def test_pack_and_unpack_round_trip(dtype):
    p = placement(dtype)
    codes = torch.randint(0, 1 << dtype.nbits, (3, 4 * p.slots), dtype=torch.uint8)
    words = p.pack(codes)
    assert words.dtype == torch.int32 and words.shape == (3, 4 * p.words)
    assert torch.equal(p.unpack(words), codes)
    # one code's change moves exactly its bits, at the same places of the other half for the odd slot
    one = torch.zeros(1, p.slots, dtype=torch.uint8)
    one[0, 3] = (1 << dtype.nbits) - 1
    flipped = 1 << (dtype.nbits - 1) if dtype.is_integer and dtype.signed else 0
    base = p.pack(torch.zeros(1, p.slots, dtype=torch.uint8))
    changed = (p.pack(one) ^ base).view(torch.int32)
    bits = sum(bin(int(w) & 0xFFFFFFFF).count("1") for w in changed[0])
    assert bits == dtype.nbits
    if flipped:  # offset binary: code 0 stores its sign bit set
        assert sum(bin(int(w) & 0xFFFFFFFF).count("1") for w in base[0]) == p.slots


def test_placement_costs_what_the_design_says():
    """float6_e3m2 into float16: six pairs whole in one piece (three need a shift), two split pairs of four
    pieces; 25 masks and shifts for 16 codes where one code at a time took about 6.8 instructions a code.
    uint3b: 23 for 32 codes (the codes at bits 9 and 12 of a word share their shift)."""
    e3m2 = placement(dtypes.float6_e3m2)
    assert [len(e3m2.recipe(j, "float16").pieces) for j in range(8)] == [1, 1, 1, 1, 1, 1, 4, 4]
    assert e3m2.cost("float16") == 25
    assert placement(dtypes.uint3b).cost("float16") == 23
    # one-word blocks are searched: float4_e2m1 takes 10 for 8 codes (the word-by-word design took 13)
    assert placement(dtypes.float4_e2m1).cost("float16") == 10


@pytest.mark.parametrize("half", ["float16", "bfloat16"])
@pytest.mark.parametrize("dtype", PLACEABLE, ids=str)
def test_placed_block_decodes_every_code(half, dtype):
    """Random blocks plus blocks of every code in every slot: each pair's two lanes against lowp's values."""
    p = placement(dtype)
    count = 1 << dtype.nbits
    rng = np.random.default_rng(dtype.nbits * 7 + (half == "bfloat16"))
    every = np.stack([np.roll(np.arange(p.slots * count) % count, shift)[:p.slots]
                      for shift in range(0, p.slots * count, 1)])  # each slot takes each code
    codes = np.concatenate([every, rng.integers(0, count, (512, p.slots))]).astype(np.uint8)
    words = p.pack(torch.from_numpy(codes)).numpy().view(np.uint32)
    ops = rules.PortableOps()
    names = [f"p{j}" for j in range(p.slots // 2)]
    inputs = {f"w{i}": np.ascontiguousarray(words[:, i]) for i in range(p.words)}
    out = run_cpu(lambda b, i: dict(zip(names, rules.placed_block(ops, [b[f"w{k}"][i] for k in range(p.words)],
                                                                 p, half))),
                  inputs, {name: np.zeros(len(codes), np.uint32) for name in names})
    values = np.array(lowp.all_values(dtype), dtype=np.float64)
    for j, name in enumerate(names):
        for lane in range(2):
            got = (out[name] >> np.uint32(16 * lane)) & np.uint32(0xFFFF)
            want = half_bits(values[codes[:, 2 * j + lane]], half)
            assert got.tolist() == want.tolist(), (dtype, half, j, lane)


@pytest.mark.parametrize("dtype", [dtypes.float6_e3m2, dtypes.float4_e2m1, dtypes.int5b], ids=str)
def test_placed_block_scale_is_folded(dtype):
    """scale 2**-k: floats whose factor it cancels take no multiply (their placed pattern is the value times
    scale), integers fold it into their fma."""
    p = placement(dtype)
    calls = []

    class Counting(rules.PortableOps):
        def bind(self, value):  # outside a function being built
            return value

        def fma2(self, *args):
            calls.append("fma2")
            return super().fma2(*args)

    words = [tirx.Var(f"w{i}", "uint32") for i in range(p.words)]
    factor = 2.0 ** (15 - rules.bias(dtype)) if dtype.is_float else 1.0
    rules.placed_block(Counting(), words, p, "float16", scale=1.0 / factor)
    assert calls == ([] if dtype.is_float else ["fma2"] * (p.slots // 2))
    codes = np.arange(p.slots * 2, dtype=np.uint8).reshape(2, p.slots) % (1 << dtype.nbits)
    packed = p.pack(torch.from_numpy(codes)).numpy().view(np.uint32)
    names = [f"p{j}" for j in range(p.slots // 2)]
    out = run_cpu(lambda b, i: dict(zip(names, rules.placed_block(rules.PortableOps(),
                                                                 [b[f"w{k}"][i] for k in range(p.words)], p,
                                                                 "float16", scale=0.25 / factor))),
                  {f"w{k}": np.ascontiguousarray(packed[:, k]) for k in range(p.words)},
                  {name: np.zeros(2, np.uint32) for name in names})
    values = np.array(lowp.all_values(dtype), dtype=np.float64) * 0.25 / factor
    for j, name in enumerate(names):
        for lane in range(2):
            got = (out[name] >> np.uint32(16 * lane)) & np.uint32(0xFFFF)
            assert got.tolist() == half_bits(values[codes[:, 2 * j + lane]], "float16").tolist()
    with pytest.raises(ValueError, match="not a power of two"):
        rules.placed_block(Counting(), words, p, "float16", scale=0.3)
