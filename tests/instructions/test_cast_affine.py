"""cast(x, dtype, minus=, times=) without a GPU: what it lowers to and how misuse is refused (the values are
checked on the GPU by tests/instructions/test_lowp_gpu.py, and the fma's arithmetic on the CPU by
test_cast_rules.py's test_interleaved_int_word_affine)."""
import pytest
import torch

import tilus_tvm as tilus
from tilus_tvm import dtypes
from tilus_tvm.errors import ScriptError
from tilus_tvm.layout import interleave_local, spatial
from tests.instructions import lowp_kernels as K
from tilus_tvm.bit_placement import placement

PLAIN = spatial(32, 4).local(1, 32)


def args(source, target):
    half = target.torch_dtype
    return (torch.zeros(source.storage_bytes(32 * 128), dtype=torch.uint8), torch.zeros(32, 1, dtype=half),
            torch.zeros(32, 1, dtype=half), torch.zeros(32, 128, dtype=half))


@pytest.mark.parametrize("src,minus,times,fused", [("uint4b", False, True, True), ("uint4b", True, True, True),
                                                   ("int4b", True, False, True), ("int4b", False, True, False),
                                                   ("uint2b", False, True, True)])
def test_interleaved_codes_take_minus_or_times_into_their_fma(src, minus, times, fused):
    """Fused: one fma a pair under each place's magic number (64 = 0x5400 at bit 4 of a 4-bit pair), behind a
    check of the thread's values, with the separate steps as the other branch; a signed code's scale alone is
    never fused (its addend is not exact)."""
    source, target = dtypes.as_dtype(src), dtypes.float16
    kernel = K.affine_cast(source, target, interleave_local(PLAIN, 32 // source.nbits), PLAIN, minus, times)
    code = kernel.compile(*args(source, target), target="sm_90").cuda_source.lower()
    place_magic = {"uint4b": 0x54005400, "int4b": 0x54005400 ^ 0x00800080, "uint2b": 0x4C004C00}[src]
    assert any(c in code for c in (hex(place_magic), str(place_magic))) == fused


class Misuse(tilus.Script):
    def __init__(self, case):
        super().__init__()
        self.case = case

    def __call__(self, x_ptr: ~tilus.uint4b, z_ptr: ~tilus.float16, y_ptr: ~tilus.float16):
        self.attrs.blocks = 1
        self.attrs.warps = 4
        gx = self.global_view(x_ptr, dtype=tilus.uint4b, shape=[32, 128])
        gz = self.global_view(z_ptr, dtype=tilus.float16, shape=[32, 128])
        gy = self.global_view(y_ptr, dtype=tilus.float16, shape=[32, 128])
        x = self.load_global(gx, offsets=[0, 0], shape=[32, 128], layout=PLAIN)
        if self.case == "dtype":
            y = self.cast(x, tilus.float16, minus=self.load_global(gz, offsets=[0, 0], shape=[32, 1]).to(tilus.float32))
        elif self.case == "shape":
            y = self.cast(x, tilus.float16, times=self.load_global(gz, offsets=[0, 0], shape=[32, 2]))
        elif self.case == "rank":
            y = self.cast(x, tilus.float16, times=self.load_global(gz, offsets=[0, 0], shape=[32, 1]).reshape([32]))
        else:  # "scalar"
            y = self.cast(x, tilus.float16, minus=1.0)
        self.store_global(gy, y, offsets=[0, 0])


@pytest.mark.parametrize("case,message", [
    ("dtype", r"cast: minus must be a register tensor of float16 \(the result's type\), got .*float32"),
    ("shape", r"cast: times of shape \[32, 2\] does not broadcast to x's \[32, 128\]"),
    ("rank", r"cast: times of shape \[32\] does not broadcast to x's \[32, 128\]"),
    ("scalar", r"cast: minus must be a register tensor of float16 \(the result's type\), got 1.0")])
def test_minus_and_times_misuse_is_a_script_error_naming_the_argument(case, message):
    with pytest.raises(ScriptError, match=message):
        Misuse(case).tile_program(torch.zeros(32 * 64, dtype=torch.uint8), torch.zeros(32, 128, dtype=torch.float16),
                                  torch.zeros(32, 128, dtype=torch.float16), target="sm_90")


def placed_kernel_source(name: str, minus: bool) -> str:
    """The kernel of a cast of codes by their bit placement with times (and, with ``minus``, minus): constant
    tensors of [32, 1], broadcast."""
    dtype = dtypes.as_dtype(name)
    codes_placement = placement(dtype)

    class PlacedAffine(tilus.Script):
        def __call__(self, x_ptr: ~dtype, y_ptr: ~tilus.float16):
            self.attrs.blocks = 1
            self.attrs.warps = 4
            gx = self.global_view(x_ptr, dtype=dtype, shape=[32, 128])
            gy = self.global_view(y_ptr, dtype=tilus.float16, shape=[32, 128])
            x = self.load_global(gx, offsets=[0, 0], shape=[32, 128], layout=PLAIN)
            z = self.register_tensor(dtype=tilus.float16, shape=[32, 1], init=0.75) if minus else None
            s = self.register_tensor(dtype=tilus.float16, shape=[32, 1], init=3.0)
            self.store_global(gy, self.cast(x, tilus.float16, placement=codes_placement, minus=z, times=s),
                              offsets=[0, 0])

    from tilus_tvm.lowp import storage_torch_dtypes

    x = torch.zeros(dtype.storage_bytes(32 * 128), dtype=storage_torch_dtypes(name)[0])
    compiled = PlacedAffine().compile(x, torch.zeros(32 * 128, dtype=torch.float16), target="sm_90")
    return compiled.cuda_source.split("__global__", 1)[1]


@pytest.mark.parametrize("name", ["uint3b", "uint6b", "float6_e3m2", "float4_e2m1"])
def test_placed_codes_take_times_alone_into_their_fma(name):
    """Unsigned placed integers and placed floats: the scale in each pair's fma, behind a check of the thread's
    scales, the separate steps the other branch (the conversion's fma or multiply, then a paired multiply: three
    pair fmas in all for each of a thread's 16 pairs); uint3b's codes at place 3 sit under its own magic number,
    128 (0x5800)."""
    kernel = placed_kernel_source(name, minus=False)
    assert "if (" in kernel and "tilus_fma_f16x2(" in kernel
    assert kernel.count("tilus_fma_f16x2(") == 3 * 16, name  # (32 codes a thread)
    if name == "uint3b":
        assert any(c in kernel.lower() for c in (hex(0x58005800), str(0x58005800)))


@pytest.mark.parametrize("name", ["float6_e3m2", "int5b"])
def test_placed_codes_with_minus_or_signed_keep_the_separate_steps(name):
    """A zero point, or a signed integer's scale, leaves placed codes the placement's masks and fma, then a
    subtraction and a multiply, each two slots an fma (no check of the thread's values: nothing to fall back
    from)."""
    minus = name == "float6_e3m2"
    kernel = placed_kernel_source(name, minus=minus)
    assert "tilus_lop3_and_or(" in kernel
    assert "floorf" not in kernel and "if (" not in kernel  # (the fused path's check and branch)
    assert kernel.count("tilus_fma_f16x2(") == (3 if minus else 2) * 16


def test_uint8_takes_times_alone_into_its_fma():
    """uint8 into float16 in its own layout: one prmt and one fma a pair with the scale (beside the separate steps'
    prmt, fma and paired multiply, behind the check); int8 keeps the separate multiply, two slots an fma."""
    kernels = {}
    for name in ("uint8", "int8"):
        source = dtypes.as_dtype(name)
        kernel = K.affine_cast(source, dtypes.float16, PLAIN, PLAIN, False, True)
        x = torch.zeros(32 * 128, dtype=torch.uint8 if name == "uint8" else torch.int8)
        kernels[name] = kernel.compile(x, *args(source, dtypes.float16)[1:], target="sm_90").cuda_source.split(
            "__global__", 1)[1]
    assert "if (" in kernels["uint8"] and kernels["uint8"].count("tilus_fma_f16x2(") == 3 * 16
    assert "if (" not in kernels["int8"] and kernels["int8"].count("tilus_fma_f16x2(") == 2 * 16


def test_eight_bit_codes_take_times_alone_into_bfloat16():
    """uint8 and 8-bit floats into bfloat16 in their own layout: the scale in each pair's fma (beside the separate
    steps' conversion and paired multiply, behind the check); int8 keeps the separate multiply. A thread of an odd
    number of slots converts its last one by itself (compiled by nvcc for sm_90a)."""
    from tests.schedules.test_quantized_matmul import ptx

    def source_of(name, layout, cols):
        source = dtypes.as_dtype(name)
        kernel = K.affine_cast(source, dtypes.bfloat16, layout, layout, False, True)
        x = torch.zeros(32 * cols, dtype=source.torch_dtype)
        half = torch.bfloat16
        compiled = kernel.compile(x, torch.zeros(32, 1, dtype=half), torch.zeros(32, 1, dtype=half),
                                  torch.zeros(32, cols, dtype=half), target="sm_90a")
        return compiled, compiled.cuda_source.split("__global__", 1)[1]

    for name in ("uint8", "float8_e4m3", "float8_e5m2", "int8"):
        _, code = source_of(name, PLAIN, 128)
        fused = name != "int8"
        assert ("if (" in code) == fused, name
        assert code.count("tilus_fma_bf16x2(") == (3 if fused else 2) * 16, name
    for name in ("uint8", "float8_e5m2"):
        compiled, code = source_of(name, spatial(32, 4).local(1, 3), 12)
        assert code.count("tilus_fma_bf16x2(") == 3, name  # (one pair fused, one converted and multiplied)
        assert "fma.rn.bf16x2" in ptx(compiled, "sm_90a"), name  # (nvcc builds it: ptx() compiles a cubin too)


def test_biased_cast_is_one_lop3_a_pair_and_no_fma():
    """cast(..., biased=True) of interleaved codes: one lop3 a pair under each place's own magic number (uint2b's
    places 0, 2, 4, 6, 8: 0x6400, 0x5C00, 0x5400, 0x4C00, 0x4400), no paired fma; cast_bias's constants stored once."""
    from tests.schedules.test_quantized_matmul import ptx

    source = dtypes.uint2b
    kernel = K.biased_cast(source, dtypes.float16, interleave_local(PLAIN, 16), PLAIN)
    half = torch.zeros(32, 128, dtype=torch.float16)
    compiled = kernel.compile(torch.zeros(source.storage_bytes(32 * 128), dtype=torch.uint8), half, half,
                              target="sm_90")
    code = ptx(compiled, "sm_90")
    assert "fma.rn.f16x2" not in code and code.count("lop3.b32") >= 16  # (a thread's 32 codes: 16 pairs)
    source_text = compiled.cuda_source.lower()
    for magic in (0x64006400, 0x5C005C00, 0x54005400, 0x4C004C00, 0x44004400):
        assert any(c in source_text for c in (hex(magic), str(magic))), hex(magic)


class BiasedMisuse(tilus.Script):
    def __init__(self, case):
        super().__init__()
        self.case = case

    def __call__(self, x_ptr: ~tilus.uint4b, y_ptr: ~tilus.float16):
        self.attrs.blocks = 1
        self.attrs.warps = 4
        gx = self.global_view(x_ptr, dtype=tilus.uint4b, shape=[32, 128])
        gy = self.global_view(y_ptr, dtype=tilus.float16, shape=[32, 128])
        x = self.load_global(gx, offsets=[0, 0], shape=[32, 128], layout=interleave_local(PLAIN, 8))
        if self.case == "order":
            y = self.cast(self.load_global(gx, offsets=[0, 0], shape=[32, 128], layout=PLAIN), tilus.float16,
                          layout=PLAIN, biased=True)
        elif self.case == "minus":
            y = self.cast(x, tilus.float16, layout=PLAIN, biased=True,
                          minus=self.register_tensor(dtype=tilus.float16, shape=[32, 1], init=1.0))
        elif self.case == "target":
            y = self.cast(x, tilus.float32, layout=PLAIN, biased=True).to(tilus.float16)
        elif self.case == "layout":
            y = self.cast(x, tilus.float16, biased=True)
        elif self.case == "bias_type":
            y = self.cast_bias(tilus.uint3b, tilus.float16, PLAIN)
        else:  # "bias_words": 4 codes a thread, not a word of 8
            y = self.cast_bias(tilus.uint4b, tilus.float16, spatial(32, 4).local(1, 4)).to(tilus.float16)
            gy = self.global_view(y_ptr, dtype=tilus.float16, shape=[32, 16])
        self.store_global(gy, y, offsets=[0, 0])


@pytest.mark.parametrize("case,message", [
    ("order", r"cast: biased takes x in interleaved order"),
    ("minus", r"cast: biased takes no placement, scale, minus, times or out"),
    ("target", r"cast: biased codes convert into float16 or bfloat16, not float32"),
    ("layout", r"cast: biased needs layout"),
    ("bias_type", r"cast_bias: biased codes are 1-, 2- or 4-bit integers, not uint3b"),
    ("bias_words", r"cast_bias: layout .* gives each thread 4 registers, not whole words of 8 uint4b codes")])
def test_biased_cast_misuse_is_a_script_error_naming_the_argument(case, message):
    with pytest.raises(ScriptError, match=message):
        BiasedMisuse(case).tile_program(torch.zeros(32 * 64, dtype=torch.uint8),
                                        torch.zeros(32, 128, dtype=torch.float16), target="sm_90")
