"""Bit placements (tilus_tvm/bit_placement.py): every storage bit holds one code bit, packing round-trips, and
the decode rule (cast_rules.placed_block, compiled for the CPU) gives every code's exact value in both lanes."""
import numpy as np
import pytest
import torch
from tvm import tirx

import tilus_tvm as tilus
from tilus_tvm import dtypes, lowp
from tilus_tvm.errors import ScriptError
from tilus_tvm.bit_placement import placeable, placement
from tilus_tvm.dtypes import float_type, int_type
from tilus_tvm.instructions import cast_rules as rules
from tilus_tvm.layout import spatial
from tests.instructions.test_cast_rules import half_bits, run_cpu

PLACEABLE = [int_type(n, s) for n in (3, 5, 6, 7) for s in (False, True)] + [
    dtypes.float6_e3m2, dtypes.float6_e2m3, dtypes.float4_e2m1, float_type(1, 1), float_type(2, 2), float_type(3, 1),
    float_type(2, 3, signed=False), float_type(4, 2), float_type(3, 3)]
# (type, the 16-bit type its placement is designed for): floats have a design for each, integers one
DESIGNS = [(t, "float16") for t in PLACEABLE] + [(t, "bfloat16") for t in PLACEABLE if t.is_float]


def design_id(design) -> str:
    return f"{design[0]}-{design[1]}"


def test_which_types_are_placeable():
    assert all(placeable(t) for t in PLACEABLE)
    for name in ("uint4b", "int4b", "uint2b", "int1b", "uint8", "int8", "float8_e4m3", "float8_e5m2", "float16"):
        assert not placeable(name), name
    assert not placeable(float_type(5, 1))  # exponent of 5 bits: beyond float16's finite values
    with pytest.raises(ValueError, match="uint4b has no bit placement"):
        placement("uint4b")


@pytest.mark.parametrize("design", DESIGNS, ids=design_id)
def test_every_bit_of_a_block_holds_one_code_bit(design):
    dtype = design[0]
    p = placement(*design)
    assert p.half == design[1]
    held = [bit for row in p.source for bit in row]
    assert len(held) == 16 * p.words and None not in held
    assert sorted(held) == [(pair, bit) for pair in range(p.slots // 2) for bit in range(dtype.nbits)]
    assert p.slots * dtype.nbits == 32 * p.words


@pytest.mark.parametrize("design", DESIGNS, ids=design_id)
def test_pack_and_unpack_round_trip(design):
    dtype = design[0]
    p = placement(*design)
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


def test_floats_have_a_design_for_bfloat16():
    """A float's fields sit 6 bits below its sign in float16 and 9 in bfloat16, so a design for one costs the other
    more pieces: designed for bfloat16, float4_e2m1 takes 11 masks and shifts into bfloat16 (17 on the float16
    design), float6_e3m2 21 (36), float6_e2m3 29 (35). An integer's magic number takes its code at the same
    places in both, so it has one design, whichever is asked for."""
    for name, for_float16, for_bfloat16 in (("float4_e2m1", (10, 17), (15, 11)), ("float6_e3m2", (25, 36), (32, 21)),
                                             ("float6_e2m3", (29, 35), (37, 29))):
        by_half = {half: placement(name, half) for half in ("float16", "bfloat16")}
        assert (by_half["float16"].cost("float16"), by_half["float16"].cost("bfloat16")) == for_float16, name
        assert (by_half["bfloat16"].cost("float16"), by_half["bfloat16"].cost("bfloat16")) == for_bfloat16, name
    for dtype in (dtypes.uint3b, dtypes.int5b, dtypes.uint6b, dtypes.int7b):
        assert placement(dtype, "bfloat16") == placement(dtype) and placement(dtype).half == "float16"
    with pytest.raises(ValueError, match="half=float32 must be float16 or bfloat16"):
        placement(dtypes.float4_e2m1, "float32")


@pytest.mark.parametrize("half", ["float16", "bfloat16"])
@pytest.mark.parametrize("design", DESIGNS, ids=design_id)
def test_placed_block_decodes_every_code(half, design):
    """Random blocks plus blocks of every code in every slot, each design read into each 16-bit type: each pair's
    two lanes against lowp's values."""
    dtype = design[0]
    p = placement(*design)
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


def random_scales(half: str, bound: float, count: int, seed: int) -> np.ndarray:
    """Scales of both signs from the 16-bit type's smallest magnitudes up to the largest whose product with
    ``bound`` stays finite (what the cast's check lets into the fma), rounded into ``half``, zero and the
    extremes first."""
    rng = np.random.default_rng(seed)
    largest = 65504.0 if half == "float16" else 3.3895e38
    top = int(np.floor(np.log2(largest / bound)))
    low = -24 if half == "float16" else -120
    values = (rng.choice([-1.0, 1.0], count) * np.exp2(rng.uniform(low, top, count))).astype(np.float32)
    values[:4] = [0.0, 2.0 ** (top - 1), -(2.0 ** (top - 1)), 2.0 ** low]
    return torch.tensor(values).to(torch.float16 if half == "float16" else torch.bfloat16).float().numpy()


@pytest.mark.parametrize("half", ["float16", "bfloat16"])
@pytest.mark.parametrize("design", [d for d in DESIGNS if d[0].is_float or not d[0].signed], ids=design_id)
def test_placed_block_affine_takes_a_scale(half, design):
    """Each pair's fma taking a scale: an unsigned integer under its place's magic number (``h * s - base * s``),
    a float's placed pattern times ``s * factor``; one rounding, the value the separate multiply gives (an
    integer's zero code times a negative scale: +0, where the separate multiply gives -0)."""
    from tests.instructions.test_cast_rules import rounded_bits

    dtype = design[0]
    p = placement(*design)
    count = 2048
    rng = np.random.default_rng(dtype.nbits * 11 + dtype.is_float)
    codes = rng.integers(0, 1 << dtype.nbits, (count, p.slots)).astype(np.uint8)
    words = p.pack(torch.from_numpy(codes)).numpy().view(np.uint32)
    bound = rules.rebias_factor(dtype, half) if dtype.is_float else float(1 << rules.HALF_FORMAT[half][1])
    scales = random_scales(half, bound, count, dtype.nbits)
    names = [f"p{j}" for j in range(p.slots // 2)]

    def build(b, i):
        s = rules._half_to_f32(b["s"][i], half)

        def both(x):  # a float32 exact in the 16-bit type, in both lanes
            bits = rules._f32_to_half_rounded(x, half)
            return bits | (bits << rules.u32(16))

        def coefficients(j, base, factor):
            add = both(s * rules.f32(-base)) if base else rules.u32(int(half_bits([-0.0], half)[0]) * 0x10001)
            return both(s * rules.f32(factor)), add

        return dict(zip(names, rules.placed_block_affine(rules.PortableOps(), [b[f"w{k}"][i] for k in range(p.words)],
                                                         p, half, coefficients)))

    inputs = {**{f"w{k}": np.ascontiguousarray(words[:, k]) for k in range(p.words)}, "s": rounded_bits(scales, half)}
    out = run_cpu(build, inputs, {name: np.zeros(count, np.uint32) for name in names})
    values = np.array(lowp.all_values(dtype), dtype=np.float64)
    for j, name in enumerate(names):
        for lane in range(2):
            exact = values[codes[:, 2 * j + lane]] * scales
            want = rounded_bits(exact, half)
            if dtype.is_integer:
                want = np.where(exact == 0, 0, want)
            got = (out[name] >> np.uint32(16 * lane)) & np.uint32(0xFFFF)
            assert got.tolist() == want.tolist(), (dtype, half, j, lane)
    with pytest.raises(ValueError, match="int5b is signed"):
        rules.placed_block_affine(rules.PortableOps(), [tirx.Var(f"w{k}", "uint32") for k in range(5)],
                                  placement(dtypes.int5b), half, lambda *_: None)


class PlacedCast(tilus.Script):
    """A [32, 128] tile of float6_e3m2 codes (16 a thread: one placement block), cast into float16 by its
    placement; ``case`` names a misuse."""

    def __init__(self, case: str = "ok"):
        super().__init__()
        self.case = case
        self.layout = spatial(32, 4).local(1, 32)
        self.narrow = spatial(32, 4).local(1, 8)
        self.fp6, self.u3 = placement(dtypes.float6_e3m2), placement(dtypes.uint3b)

    def __call__(self, x_ptr: ~dtypes.float6_e3m2, y_ptr: ~dtypes.float16):
        self.attrs.blocks = 1
        self.attrs.warps = 4
        gx = self.global_view(x_ptr, dtype=dtypes.float6_e3m2, shape=[32, 128])
        gy = self.global_view(y_ptr, dtype=dtypes.float16, shape=[32, 128])
        x = self.load_global(gx, offsets=[0, 0], shape=[32, 128], layout=self.layout)
        fp6, case = self.fp6, self.case
        if case == "ok":  # the multiply by 2**12 folded away
            y = self.cast(x, dtypes.float16, placement=fp6, scale=2.0 ** -12)
        elif case == "not_a_placement":
            y = self.cast(x, dtypes.float16, placement="float6_e3m2")
        elif case == "scale_alone":
            y = self.cast(x, dtypes.float16, scale=0.5)
        elif case == "other_type":
            y = self.cast(x, dtypes.float16, placement=self.u3)
        elif case == "float32":
            y = self.cast(x, dtypes.float32, placement=fp6)
        elif case == "not_a_power_of_two":
            y = self.cast(x, dtypes.float16, placement=fp6, scale=0.3)
        elif case == "other_layout":
            y = self.cast(x, dtypes.float16, placement=fp6, layout=self.narrow)
        else:  # "partial_block": 8 codes a thread
            y = self.cast(self.load_global(gx, offsets=[0, 0], shape=[32, 32], layout=self.narrow),
                          dtypes.float16, placement=fp6)
        self.store_global(gy, y, offsets=[0, 0])


def placed_cast_args():
    from tilus_tvm.lowp import storage_torch_dtypes

    return (torch.zeros(dtypes.float6_e3m2.storage_bytes(32 * 128), dtype=storage_torch_dtypes("float6_e3m2")[0]),
            torch.zeros(32 * 128, dtype=torch.float16))


def test_placed_cast_lowers_to_masks_and_no_multiply_when_the_scale_folds_it():
    source = PlacedCast().compile(*placed_cast_args(), target="sm_90").cuda_source
    assert "lop3.b32" in source and "fma.rn.f16x2" not in source


@pytest.mark.parametrize("case, message", [
    ("not_a_placement", r"cast: placement must be a tilus_tvm.bit_placement.BitPlacement, got 'float6_e3m2'"),
    ("scale_alone", r"cast: placement must be .*BitPlacement \(scale is for placed codes only\), got None"),
    ("other_type", r"cast: x must be a register tensor of uint3b, the placement's type"),
    ("float32", r"cast: placed codes convert into float16 or bfloat16, not float32"),
    ("not_a_power_of_two", r"cast: scale must be a power of two \(it multiplies exactly\), got 0.3"),
    ("other_layout", r"cast: placed codes keep their layout"),
    ("partial_block", r"cast: a float6_e3m2 placement block is 16 codes; x's layout gives each thread 8"),
])
def test_placed_cast_misuse_is_a_script_error_naming_the_argument(case, message):
    with pytest.raises(ScriptError, match=message):
        PlacedCast(case).tile_program(*placed_cast_args(), target="sm_90")
