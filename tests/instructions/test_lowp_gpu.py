"""Packed low-precision tensors on the GPU, against tilus_tvm.lowp: every code of every type of at most
8 bits through cast (to and from float32/float16/bfloat16), and loads, stores, shared memory, views,
layout conversions and initialisation on ragged tiles. Outputs start poisoned (NaN / 0xFF)."""
import numpy as np
import pytest
import torch

import tilus_tvm as tilus
from tilus_tvm import dtypes, lowp
from tilus_tvm.dtypes import float_type
from tests.instructions import lowp_kernels as K
from tests.instructions.test_cast_rules import probe_values

pytestmark = pytest.mark.gpu

TYPES = list(dict.fromkeys([t for t in dtypes.registered_dtypes() if lowp.is_low_precision(t)] +
                            [float_type(1, 1), float_type(3, 4), float_type(3, 3, signed=False)]))
THREADS, CODES = 128, 8


def packed(codes: torch.Tensor, dtype) -> torch.Tensor:
    return lowp.pack_codes(codes, dtype.nbits)


def test_every_code_of_every_type_through_cast():
    count = len(TYPES)
    w = torch.zeros(count, THREADS, 8, dtype=torch.uint8)
    p32 = torch.empty(count, THREADS, CODES)
    codes = torch.empty(count, THREADS, CODES, dtype=torch.int64)
    for i, dtype in enumerate(TYPES):
        codes[i] = torch.arange(THREADS * CODES).reshape(THREADS, CODES) % (1 << dtype.nbits)
        w[i, :, :dtype.nbits] = packed(codes[i], dtype).reshape(THREADS, dtype.nbits)
        probes = torch.from_numpy(probe_values(dtype))
        p32[i] = probes[torch.randperm(len(probes))[:THREADS * CODES]].reshape(THREADS, CODES)
    p16 = p32.clamp(-65504, 65504).to(torch.float16)
    p16[:, 0, :4] = torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0], dtype=torch.float16)
    outputs = [torch.full((count, THREADS, CODES), float("nan"), dtype=t, device="cuda")
               for t in (torch.float32, torch.float16, torch.bfloat16)]
    encoded = [torch.full((count, THREADS, 8), 0xFF, dtype=torch.uint8, device="cuda") for _ in range(2)]
    K.every_code(TYPES)(w.cuda(), p32.cuda(), p16.cuda(), *outputs, *encoded)
    f32, f16, bf16 = (t.cpu() for t in outputs)
    e32, e16 = (t.cpu() for t in encoded)
    for i, dtype in enumerate(TYPES):
        values = lowp.decode(codes[i], dtype).to(torch.float32)
        for got, torch_dtype in ((f32[i], torch.float32), (f16[i], torch.float16), (bf16[i], torch.bfloat16)):
            want = values.to(torch_dtype)
            assert torch.equal(torch.isnan(got), torch.isnan(want)), (dtype, torch_dtype)
            same = torch.isnan(want) | ((got == want) & (torch.signbit(got) == torch.signbit(want)))
            assert same.all(), (dtype, torch_dtype, codes[i][~same][:6].tolist(), got[~same][:6].tolist())
        for got, probes in ((e32[i], p32[i]), (e16[i], p16[i])):
            want = lowp.encode(probes, dtype).to(torch.int64)
            got_codes = torch.stack([lowp.unpack_codes(row[:dtype.nbits].contiguous(), dtype.nbits, CODES)
                                     for row in got]).to(torch.int64)
            bad = got_codes != want
            assert not bad.any(), (dtype, probes[bad][:6].tolist(), got_codes[bad][:6].tolist(), want[bad][:6].tolist())


def random_packed(dtype, numel: int) -> torch.Tensor:
    codes = torch.randint(0, 1 << dtype.nbits, (numel,))
    return packed(codes, dtype).cuda()


@pytest.mark.parametrize("name", ["uint4b", "float6_e3m2", "int1b", "float8_e5m2"])
def test_packed_global_round_trip_ragged(name):
    dtype = dtypes.as_dtype(name)
    m, cols = 100, 64  # 4 blocks of 32 rows, the last one partly outside
    x = random_packed(dtype, m * cols)
    if dtype.torch_name is not None:
        x = x.view(dtype.torch_dtype)
    y = torch.full_like(x.view(torch.uint8), 0xFF).view(x.dtype)
    K.cast_copy(dtype, dtype, rows=32, cols=64)(m, x, y)
    assert torch.equal(y.view(torch.uint8), x.view(torch.uint8))


@pytest.mark.parametrize("name", ["int5b", "uint3b"])
def test_element_by_element_loads_and_atomic_stores(name):
    """A layout whose slots run down columns: every element read from its bytes, written with atomics
    into bytes other threads write too (5-bit elements straddle words)."""
    dtype = dtypes.as_dtype(name)
    layout = K.column_runs_layout(32, 64, 4)
    m = 70
    x = random_packed(dtype, m * 64)
    y = torch.full_like(x, 0xFF)
    K.cast_copy(dtype, dtype, rows=32, cols=64, layout=layout)(m, x, y)
    assert torch.equal(y, x)


def test_u4_to_f16_and_back_on_ragged_tiles():
    m = 77
    codes = torch.randint(0, 16, (m, 64))
    x = packed(codes, dtypes.uint4b).cuda()
    y = torch.full((m, 64), float("nan"), dtype=torch.float16, device="cuda")
    K.cast_copy(dtypes.uint4b, dtypes.float16, rows=32, cols=64)(m, x, y)
    assert torch.equal(y.cpu(), codes.to(torch.float16))
    values = (torch.randn(m, 64) * 6).to(torch.float16)
    z = torch.full((dtypes.uint4b.storage_bytes(m * 64),), 0xFF, dtype=torch.uint8, device="cuda")
    K.cast_copy(dtypes.float16, dtypes.uint4b, rows=32, cols=64)(m, values.cuda(), z)
    assert torch.equal(z.cpu(), packed(lowp.encode(values, dtypes.uint4b), dtypes.uint4b))


@pytest.mark.parametrize("src,dst", [("uint4b", "float16"), ("int4b", "bfloat16"), ("uint2b", "float16"),
                                     ("int2b", "bfloat16"), ("uint1b", "bfloat16"), ("int1b", "float16")])
def test_biased_cast_is_the_value_plus_its_slots_bias(src, dst):
    """cast(x, biased=True) minus cast_bias(...) is every code's value, exactly (the biases are exact integers
    up to 2**mantissa, the value within a few units of them)."""
    from tilus_tvm.layout import interleave_local, spatial

    source, target = dtypes.as_dtype(src), dtypes.as_dtype(dst)
    plain = spatial(32, 4).local(1, 32)
    codes = torch.randint(0, 1 << source.nbits, (32 * 128,))
    x, values = packed(codes, source).cuda(), lowp.decode(codes, source).reshape(32, 128)
    y, b = (torch.full((32, 128), -12345.0, dtype=target.torch_dtype, device="cuda") for _ in range(2))
    K.biased_cast(source, target, interleave_local(plain, 32 // source.nbits), plain)(x, y, b)
    assert (b >= 1).all()
    assert torch.equal((y.double() - b.double()).cpu(), values.double()), (src, dst)


REORDERED = [("uint4b", "float16", True), ("int4b", "float16", True), ("int4b", "bfloat16", True),
             ("uint2b", "bfloat16", True), ("int2b", "float16", True), ("uint1b", "float16", True),
             ("int1b", "bfloat16", True), ("uint3b", "float32", False), ("float16", "float32", False),
             ("float6_e2m3", "float16", False), ("uint4b", "uint4b", False)]


@pytest.mark.parametrize("src,dst,interleaved", REORDERED, ids=[f"{a}-{b}" for a, b, _ in REORDERED])
def test_cast_into_another_register_order(src, dst, interleaved):
    """cast(x, dtype, layout=) with x's registers in another order: interleaved words of 1-, 2- and 4-bit
    integers (the lop3 path), and other reorderings (element by element); every element in place."""
    from tilus_tvm.layout import interleave_local, spatial

    source, target = dtypes.as_dtype(src), dtypes.as_dtype(dst)
    plain = spatial(32, 4).local(1, 32)
    src_layout, dst_layout = (interleave_local(plain, 32 // source.nbits), plain) if interleaved else \
        (plain, interleave_local(plain, 4))
    if lowp.is_packed(source):
        codes = torch.randint(0, 1 << source.nbits, (32 * 128,))
        x, values = packed(codes, source).cuda(), lowp.decode(codes, source).reshape(32, 128)
    else:
        values = torch.randn(32, 128).to(source.torch_dtype)
        x = values.cuda()
    if lowp.is_packed(target):
        y = torch.full((target.storage_bytes(32 * 128),), 0xFF, dtype=torch.uint8, device="cuda")
        K.reordered_cast(source, target, src_layout, dst_layout)(x, y)
        assert torch.equal(y.cpu(), x.cpu())
        return
    y = torch.full((32, 128), -12345.0, dtype=target.torch_dtype, device="cuda")
    K.reordered_cast(source, target, src_layout, dst_layout)(x, y)
    assert torch.equal(y.cpu(), values.to(target.torch_dtype)), (src, dst)


AFFINE = [("uint4b", "float16", False, True, False), ("uint4b", "float16", True, True, False),
          ("int4b", "float16", True, False, False), ("int4b", "bfloat16", False, True, False),
          ("uint2b", "bfloat16", True, True, False), ("uint1b", "float16", False, True, False),
          ("uint4b", "bfloat16", False, True, False), ("float6_e2m3", "float16", True, True, False),
          ("uint3b", "float16", False, True, True), ("uint6b", "bfloat16", False, True, True),
          ("uint7b", "float16", False, True, True), ("float6_e3m2", "float16", False, True, True),
          ("float4_e2m1", "bfloat16", False, True, True), ("float6_e2m3", "float16", True, True, True),
          ("int5b", "float16", False, True, True), ("uint8", "float16", False, True, False),
          ("uint8", "bfloat16", True, True, False), ("int8", "bfloat16", False, True, False),
          ("float8_e5m2", "bfloat16", False, True, False), ("float8_e4m3", "bfloat16", True, True, False)]


@pytest.mark.parametrize("src,dst,minus,times,placed", AFFINE,
                         ids=[f"{a}-{b}-{m}-{t}{'-placed' if p else ''}" for a, b, m, t, p in AFFINE])
def test_cast_with_minus_and_times(src, dst, minus, times, placed):
    """cast(x, dtype, minus=z, times=s) equals the separate steps (cast, subtract, multiply, each rounded) on
    every element, one z and s a thread: integer zero points and scales below 64 (the fma takes them), and in
    other threads of the same warps fractional or large zero points, scales of 64 and more, negative and tiny
    ones (those threads take the separate steps); codes by their bit placement (unsigned integers and floats take
    a scale alone into the fma, placed floats while ``|s|`` times their rebias factor is finite) and uint8 alike,
    and float6 unplaced, int5b and zero points with placed codes (no fused path)."""
    check_affine_cast(src, dst, minus, times, placed)


ODD_SLOTS = [("uint8", "bfloat16", False), ("float8_e5m2", "bfloat16", False), ("float8_e4m3", "bfloat16", False),
             ("uint8", "float16", False), ("float8_e4m3", "bfloat16", True)]


@pytest.mark.parametrize("src,dst,minus", ODD_SLOTS, ids=[f"{a}-{b}-{m}" for a, b, m in ODD_SLOTS])
def test_cast_with_times_of_an_odd_number_of_slots(src, dst, minus):
    """Three 8-bit codes a thread, on every element as the separate steps give them: without zero points the fused
    paths take the scale into the first pair's fma and convert the last code by itself (the branch of the fused
    pairs, run nowhere else: every kernel's threads hold even slots); with them, the separate steps."""
    check_affine_cast(src, dst, minus, True, False, per_thread=3)


def check_affine_cast(src, dst, minus, times, placed, per_thread=32):
    """Run ``K.affine_cast`` on random codes of ``src`` in a [32, 4 * per_thread] tile (``per_thread`` slots a
    thread) with the rows' z and s of test_cast_with_minus_and_times, and compare every element with the separate
    steps."""
    from tilus_tvm.bit_placement import placement
    from tilus_tvm.layout import interleave_local, spatial

    source, target = dtypes.as_dtype(src), dtypes.as_dtype(dst)
    plain = spatial(32, 4).local(1, per_thread)
    cols = 4 * per_thread
    src_layout = interleave_local(plain, 32 // source.nbits) if source.nbits in (1, 2, 4) and not source.is_float \
        else plain
    generator = torch.Generator().manual_seed(source.nbits + 10 * minus + 20 * times)
    codes = torch.randint(0, 1 << source.nbits, (32 * cols,), generator=generator)
    values = lowp.decode(codes, source).reshape(32, cols)
    codes_placement = placement(source) if placed else None
    if placed:  # each thread's 32 codes are whole blocks of the placement, in order
        x = codes_placement.pack(codes.reshape(-1, codes_placement.slots).to(torch.uint8)).view(torch.uint8)
        x = x.reshape(-1).cuda()
    else:
        x = packed(codes, source).cuda()
        if source.nbits == 8 and source.torch_dtype is not None:  # int8 and fp8 codes: their torch dtype
            x = x.view(source.torch_dtype)
    half = target.torch_dtype
    z = torch.randint(-40, 41, (32, 1), generator=generator).float()
    z[3], z[7], z[11], z[12] = 0.5, 1500.0, -1016.0, 1016.0  # (fractional, beyond the fused limit, at it)
    s = (torch.rand(32, 1, generator=generator) + 0.5) / 64
    s[2], s[5], s[9], s[13], s[14] = 64.0, -3.0, 2.0 ** -20, 1000.0, -0.0078125  # (>= 64: separate; 1000 too)
    z, s = z.to(half), s.to(half)
    expected = values.to(half)
    if minus:
        expected = (expected - z).to(half)
    if times:
        expected = (expected * s).to(half)
    y = torch.full((32, cols), -12345.0, dtype=half, device="cuda")
    K.affine_cast(source, target, src_layout, plain, minus, times, placement=codes_placement)(x, z.cuda(), s.cuda(), y)
    # every element exactly, NaN where expected (fp8's reserved codes; +0 and -0 compare equal)
    torch.testing.assert_close(y.cpu(), expected, rtol=0, atol=0, equal_nan=True,
                               msg=lambda text: f"{(src, dst, minus, times, placed)}: {text}")


@pytest.mark.parametrize("name", ["uint4b", "float6_e3m2"])
def test_shared_round_trip(name):
    dtype = dtypes.as_dtype(name)
    x = random_packed(dtype, 32 * 64)
    y = torch.full_like(x, 0xFF)
    K.shared_round_trip(dtype, 32, 64)(x, y)
    assert torch.equal(y, x)


@pytest.mark.parametrize("into", [False, True], ids=["new", "out="])
def test_view_words_as_u4_codes(into):
    words = torch.randint(-2**31, 2**31 - 1, (128, 4), dtype=torch.int32)
    y = torch.full((128, 32), float("nan"), dtype=torch.float16, device="cuda")
    K.view_words(dtypes.uint4b, dtypes.float16, words_per_thread=4, into=into)(words.cuda(), y)
    codes = lowp.unpack_codes(words.view(torch.uint8).reshape(-1), 4, 128 * 32).reshape(128, 32)
    assert torch.equal(y.cpu(), codes.to(torch.float16))


def test_layout_conversion_and_init_of_packed_tensors():
    x = random_packed(dtypes.int4b, 32 * 64)
    y = torch.full_like(x, 0xFF)
    K.relayout(dtypes.int4b, 32, 64)(x, y)
    assert torch.equal(y, x)
    K.relayout(dtypes.int4b, 32, 64, init=lambda i, j: i - j)(x, y)
    rows, cols = torch.meshgrid(torch.arange(32), torch.arange(64), indexing="ij")
    want = lowp.encode((rows - cols).to(torch.float64), dtypes.int4b)  # saturated to [-8, 7]
    assert torch.equal(y.cpu(), packed(want, dtypes.int4b))


@pytest.mark.parametrize("name", ["uint4b", "int3b", "uint2b", "float6_e3m2", "int1b", "float8_e4m3"])
def test_slices_transposes_and_reshapes_of_packed_register_tensors(name):
    """Register views of packed tensors move codes, not the words that hold them (a slice of a 4-bit
    tensor used to copy whole words as if each held one code)."""
    dtype = dtypes.as_dtype(name)
    codes = torch.randint(0, 1 << dtype.nbits, (32 * 64,))
    x = packed(codes, dtype).cuda()
    if dtype.torch_name is not None:
        x = x.view(dtype.torch_dtype)
    values = lowp.decode(codes, dtype).to(torch.float32).reshape(32, 64)
    # float8_e4m3 holds NaN codes, so the poison is a finite value none of these types can hold, and
    # NaN must land exactly where the reference has NaN
    poison = -12345.0
    outputs = [torch.full(shape, poison, device="cuda") for shape in ((32, 32), (32, 32), (64,), (64, 32), (64, 32))]
    K.packed_views(dtype)(x, *outputs)
    expected = [values[:, 16:48], values[:, 8:40], values[5], values.t(), values.reshape(64, 32)]
    for label, got, want in zip("abcde", outputs, expected):
        torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0, equal_nan=True, msg=f"{name} view {label}")


def test_packed_tensors_made_on_the_gpu_launch_kernels(monkeypatch):
    """Tilus's tensor constructors on the GPU (the default device there), passed to a kernel as PackedTensors: the
    careful path takes their storage at the first launch; the next ones go to the launcher of those torch tensors
    (arguments.bind, the careful check, is not called again)."""
    from tilus_tvm.lang import arguments

    kernel = K.cast_copy(dtypes.uint4b, dtypes.float16, rows=32, cols=64)
    x = tilus.randint(0, 16, [96, 64], tilus.uint4b)
    y = tilus.full([96, 64], float("nan"), tilus.float16)
    assert x.device.type == "cuda" and y.device.type == "cuda"
    for launch in range(3):
        if launch == 1:
            monkeypatch.setattr(arguments, "bind", lambda *a, **k: pytest.fail("the careful path was taken"))
        kernel(96, x, y)
        torch.cuda.synchronize()
        assert torch.equal(y.torch().float(), x.to_torch().float())
        y = tilus.full([96, 64], float("nan"), tilus.float16)
    monkeypatch.undo()
    with pytest.raises(tilus.LaunchError, match="x_ptr must be a uint4b tensor"):
        kernel(96, tilus.zeros([96, 64], tilus.int4b), y)
    n = tilus.randn([4096], tilus.float8_e4m3)
    assert n.to_torch().abs().max() <= 448 and torch.equal(n.to_torch(), n.torch().float())
