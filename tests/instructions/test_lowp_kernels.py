"""Packed low-precision tensors in kernels, lowered and compiled on the CPU: pointer parameters,
loads and stores (runs and element by element), shared memory, casts and their fast paths, views,
layout conversions and initialisation. The numbers are checked on a GPU in test_lowp_gpu.py."""
import re

import pytest
import torch
import tvm

import tilus_tvm as tilus
from tilus_tvm import dtypes
from tilus_tvm.errors import LaunchError, ScriptError
from tilus_tvm.lowp import storage_torch_dtypes
from tests.instructions import lowp_kernels as K
from tests.helpers import CaseScript
from tests.helpers import private_cache  # noqa: F401 - autouse: a cache directory per test


def tensor_for(dtype, numel: int):
    """A CPU tensor that a ~dtype parameter takes, holding ``numel`` elements."""
    dtype = dtypes.as_dtype(dtype)
    torch_dtype = storage_torch_dtypes(dtype)[0]
    count = numel if torch_dtype != torch.uint8 or dtype.nbits == 8 else dtype.storage_bytes(numel)
    return torch.zeros(count, dtype=torch_dtype)


def compiled(kernel, *args, target="sm_90"):
    return kernel.compile(*args, target=target)


def ptx_of(kernel, *args, target="sm_90"):
    """The PTX, after building a cubin too (ptxas checks the inline assembly)."""
    from tvm.support import nvcc

    source = compiled(kernel, *args, target=target).cuda_source
    arch = target
    with tvm.target.Target({"kind": "cuda", "arch": arch}, host="llvm"):
        nvcc.compile_cuda(source, target_format="cubin", arch=arch, compiler="nvcc")
        return nvcc.compile_cuda(source, target_format="ptx", arch=arch, compiler="nvcc").decode()


CASTS = [("uint4b", "float16"), ("int4b", "float16"), ("uint2b", "bfloat16"), ("int3b", "float16"),
         ("uint6b", "float32"), ("float4_e2m1", "bfloat16"), ("float6_e3m2", "float16"), ("float8_e4m3", "float16"),
         ("float8_e5m2", "float32"), ("float8_e8m0", "float32"), ("float16", "uint4b"), ("float32", "int6b"),
         ("float16", "float8_e4m3"), ("bfloat16", "float6_e2m3"), ("uint4b", "int2b"), ("float32", "uint8"),
         ("int8", "float16"), ("uint8", "bfloat16")]


@pytest.mark.parametrize("target", ["sm_80", "sm_90"])
@pytest.mark.parametrize("src,dst", CASTS, ids=[f"{a}-{b}" for a, b in CASTS])
def test_cast_copy_lowers(src, dst, target):
    kernel = K.cast_copy(dtypes.as_dtype(src), dtypes.as_dtype(dst), rows=32, cols=64)
    source = compiled(kernel, 100, tensor_for(src, 100 * 64), tensor_for(dst, 100 * 64), target=target).cuda_source
    assert "cast_copy_kernel" in source
    if dtypes.as_dtype(src).nbits < 8:  # a sub-byte parameter is its bytes
        assert re.search(r"uchar\* __restrict__ x_ptr", source)


def test_u4_to_f16_is_prmt_lop3_fma_and_vector_loads():
    kernel = K.cast_copy(dtypes.uint4b, dtypes.float16, rows=32, cols=64)
    ptx = ptx_of(kernel, 100, tensor_for("uint4b", 6400), tensor_for("float16", 6400))
    assert "prmt.b32" in ptx and "lop3.b32" in ptx and "fma.rn.f16x2" in ptx
    assert re.search(r"ld\.global(\.nc)?\.v2\.[ub]32", ptx)  # 16 codes a thread: 8 bytes at once
    assert "cvt.rn.f16.f32" not in ptx  # no element went through float32


@pytest.mark.parametrize("src", ["uint8", "int8"])
def test_8bit_integers_to_f16_are_prmt_fma_not_cvt(src):
    kernel = K.cast_copy(dtypes.as_dtype(src), dtypes.float16, rows=32, cols=64)
    ptx = ptx_of(kernel, 100, tensor_for(src, 6400), tensor_for("float16", 6400))
    assert "prmt.b32" in ptx and "fma.rn.f16x2" in ptx
    assert not re.search(r"cvt\.rn\.f16\.[su]", ptx)  # no per-element integer conversion


@pytest.mark.parametrize("src,dst,rows", [("uint2b", "float16", 32), ("int2b", "bfloat16", 32),
                                          ("int1b", "float16", 64)])
def test_one_and_two_bit_integers_convert_a_word_at_a_time(src, dst, rows):
    kernel = K.cast_copy(dtypes.as_dtype(src), dtypes.as_dtype(dst), rows=rows, cols=64)
    ptx = ptx_of(kernel, 100, tensor_for(src, 6400), tensor_for(dst, 6400))
    fma = "fma.rn.f16x2" if dst == "float16" else "fma.rn.bf16x2"
    pairs = rows * 64 // 128 // 2  # a thread's codes (one 32-bit word of them) in pairs
    assert ptx.count(fma) == pairs and ptx.count("prmt.b32") >= pairs


def mma_words_layout():
    """[32, 128] over 4 warps, 32 consecutive codes of a row a thread (whole words of 1-, 2- and 4-bit codes)."""
    from tilus_tvm.layout import spatial

    return spatial(32, 4).local(1, 32)


@pytest.mark.parametrize("src,dst", [("uint4b", "float16"), ("int4b", "bfloat16"), ("uint2b", "float16"),
                                     ("int1b", "bfloat16")])
def test_interleaved_words_cast_by_one_mask_a_pair(src, dst):
    """Codes stored interleaved (interleave_local) cast into the plain order: one lop3 and one paired fma
    per two codes, no prmt, no shared memory (the registers are renamed, not converted)."""
    from tilus_tvm.layout import interleave_local

    n = dtypes.as_dtype(src).nbits
    plain = mma_words_layout()
    kernel = K.reordered_cast(dtypes.as_dtype(src), dtypes.as_dtype(dst), interleave_local(plain, 32 // n), plain)
    source = compiled(kernel, tensor_for(src, 32 * 128), tensor_for(dst, 32 * 128)).cuda_source
    assert "__shared__" not in source and "tilus_prmt(" not in source
    ptx = ptx_of(kernel, tensor_for(src, 32 * 128), tensor_for(dst, 32 * 128))
    fma = "fma.rn.f16x2" if dst == "float16" else "fma.rn.bf16x2"
    assert ptx.count(fma) == 16 and ptx.count("lop3.b32") >= 16


def test_cast_into_another_register_order_of_the_same_threads_is_free_and_checked():
    """Any reordering of a thread's registers is a renaming (element by element when no fast path fits);
    a layout of other threads is refused where the cast is written."""
    from tilus_tvm.layout import interleave_local, spatial

    plain = mma_words_layout()
    kernel = K.reordered_cast(dtypes.uint3b, dtypes.float32, plain, interleave_local(plain, 4))
    source = compiled(kernel, tensor_for("uint3b", 32 * 128), tensor_for("float32", 32 * 128)).cuda_source
    assert "__shared__" not in source
    other_threads = spatial(4, 32).local(8, 4)
    with pytest.raises(ScriptError, match="does not give each thread the elements"):
        K.reordered_cast(dtypes.float16, dtypes.float32, plain, other_threads).tile_program(
            tensor_for("float16", 32 * 128), tensor_for("float32", 32 * 128))


def test_cast_with_a_layout_refuses_out_and_other_shapes():
    from tilus_tvm import float16, float32
    from tilus_tvm.layout import spatial

    plain = mma_words_layout()

    class Both(tilus.Script):
        def __call__(self, x_ptr: ~float16, y_ptr: ~float32):
            self.attrs.blocks = 1
            self.attrs.warps = 4
            x = self.load_global(self.global_view(x_ptr, dtype=float16, shape=[32, 128]), offsets=[0, 0],
                                 shape=[32, 128], layout=plain)
            y = self.register_tensor(dtype=float32, shape=[32, 128], layout=plain)
            self.cast(x, float32, layout=plain, out=y)

    class OtherShape(tilus.Script):
        def __call__(self, x_ptr: ~float16, y_ptr: ~float32):
            self.attrs.blocks = 1
            self.attrs.warps = 4
            x = self.load_global(self.global_view(x_ptr, dtype=float16, shape=[32, 128]), offsets=[0, 0],
                                 shape=[32, 128], layout=plain)
            self.cast(x, float32, layout=spatial(32, 4).local(1, 16))

    args = (tensor_for("float16", 32 * 128), tensor_for("float32", 32 * 128))
    with pytest.raises(ScriptError, match="give layout or out, not both"):
        Both().tile_program(*args)
    with pytest.raises(ScriptError, match=r"has shape \[32, 64\], the tensor has shape \[32, 128\]"):
        OtherShape().tile_program(*args)


def test_e2m1_to_f16_is_a_prmt_lookup():
    kernel = K.cast_copy(dtypes.float4_e2m1, dtypes.float16, rows=32, cols=64)
    ptx = ptx_of(kernel, 100, tensor_for("float4_e2m1", 6400), tensor_for("float16", 6400))
    assert ptx.count("prmt.b32") >= 4 * 16 // 4  # four a 16-bit half word, 16 codes a thread
    assert "fma.rn.f16x2" not in ptx and "cvt.rn.f16" not in ptx  # exact bytes: no arithmetic


def test_fp8_uses_cvt_from_sm_89_and_bit_placement_before():
    kernel = K.cast_copy(dtypes.float8_e4m3, dtypes.float16, rows=32, cols=64)
    args = (100, tensor_for("float8_e4m3", 6400), tensor_for("float16", 6400))
    assert "cvt.rn.f16x2.e4m3x2" in ptx_of(kernel, *args, target="sm_90")
    sm80 = ptx_of(kernel, *args, target="sm_80")
    assert "e4m3" not in sm80 and "fma.rn.f16x2" in sm80  # fields placed, then one paired multiply
    back = K.cast_copy(dtypes.float32, dtypes.float8_e4m3, rows=32, cols=64)
    assert "cvt.rn.satfinite.e4m3x2.f32" in ptx_of(back, 100, tensor_for("float32", 6400),
                                                   tensor_for("float8_e4m3", 6400))


def test_element_by_element_loads_and_atomic_stores():
    layout = K.column_runs_layout(32, 64, 4)
    kernel = K.cast_copy(dtypes.uint3b, dtypes.uint3b, rows=32, cols=64, layout=layout)
    ptx = ptx_of(kernel, 100, tensor_for("uint3b", 6400), tensor_for("uint3b", 6400))
    assert re.search(r"ld\.global(\.nc)?\.u8", ptx)  # one or two bytes per element
    assert "atom.global.and.b32" in ptx and "atom.global.or.b32" in ptx


def test_shared_round_trip_lowers():
    for name in ("uint4b", "float6_e3m2", "int1b"):
        kernel = K.shared_round_trip(dtypes.as_dtype(name), rows=32, cols=64)
        ptx = ptx_of(kernel, tensor_for(name, 2048), tensor_for(name, 2048))
        assert "st.shared" in ptx and "ld.shared" in ptx


@pytest.mark.parametrize("into", [False, True], ids=["new", "out="])
def test_view_words_as_codes(into):
    kernel = K.view_words(dtypes.uint4b, dtypes.float16, words_per_thread=4, into=into)
    ptx = ptx_of(kernel, torch.zeros(128, 4, dtype=torch.int32), torch.zeros(128, 32, dtype=torch.float16))
    assert re.search(r"ld\.global(\.nc)?\.v4\.[ub]32", ptx)
    program = str(kernel.tile_program(torch.zeros(128, 4, dtype=torch.int32), torch.zeros(128, 32, dtype=torch.float16),
                                      target="sm_90"))
    assert "register_view(x=" in program and "convert_layout" not in program
    assert ("%q = register_view(x=%w)" in program) == into  # the view writes the tensor made for it


def test_relayout_and_init_lower():
    kernel = K.relayout(dtypes.int4b, 32, 64)
    program = str(kernel.tile_program(tensor_for("int4b", 2048), tensor_for("int4b", 2048), target="sm_90"))
    assert "convert_layout" in program
    ptx_of(kernel, tensor_for("int4b", 2048), tensor_for("int4b", 2048))
    for init in (-3, 2.5, lambda i, j: i - j):
        ptx_of(K.relayout(dtypes.int4b, 32, 64, init=init), tensor_for("int4b", 2048), tensor_for("int4b", 2048))


def test_packed_arguments_are_checked():
    kernel = K.cast_copy(dtypes.uint4b, dtypes.float16, rows=32, cols=64)
    with pytest.raises(LaunchError, match=r"x_ptr must be a uint4b tensor .*torch.uint8 tensor of its packed bytes"):
        kernel.compile(10, torch.zeros(320, dtype=torch.float16), torch.zeros(640, dtype=torch.float16),
                       target="sm_90")
    fp8 = K.cast_copy(dtypes.float8_e4m3, dtypes.float16, rows=32, cols=64)
    with pytest.raises(LaunchError, match="float8_e4m3"):
        fp8.compile(10, torch.zeros(640, dtype=torch.uint8), torch.zeros(640, dtype=torch.float16), target="sm_90")


def test_packed_tensors_are_kernel_arguments():
    """A PackedTensor passes for a pointer of its type, as Tilus's tensors do: its packed bytes for a packed type,
    its typed view for the others; one of another type is refused, naming both."""
    kernel = K.cast_copy(dtypes.uint4b, dtypes.float16, rows=32, cols=64)
    x = tilus.randint(0, 16, [10, 64], tilus.uint4b, device="cpu")
    y = tilus.empty([10, 64], tilus.float16, device="cpu")
    by_storage = kernel.compile(10, x.storage, y.torch(), target="sm_90").cuda_source
    assert kernel.compile(10, x, y, target="sm_90").cuda_source == by_storage
    with pytest.raises(LaunchError, match=r"x_ptr must be a uint4b tensor \(~uint4b\), got a PackedTensor of int4b"):
        kernel.compile(10, tilus.zeros([10, 64], tilus.int4b, device="cpu"), y, target="sm_90")
    with pytest.raises(LaunchError, match="y_ptr must be a float16 tensor .*got a PackedTensor of bfloat16"):
        kernel.compile(10, x, tilus.zeros([10, 64], tilus.bfloat16, device="cpu"), target="sm_90")
    with pytest.raises(LaunchError, match="must be a torch tensor or a PackedTensor, got list"):
        kernel.compile(10, [0] * 320, y, target="sm_90")


def test_arithmetic_on_packed_tensors_is_refused():
    class AddCodes(tilus.Script):
        def __call__(self, x_ptr: ~dtypes.uint4b):
            self.attrs.blocks = 1
            self.attrs.warps = 1
            gx = self.global_view(x_ptr, dtype=dtypes.uint4b, shape=[64])
            x = self.load_global(gx, offsets=[0], shape=[64])
            self.store_global(gx, x + 1, offsets=[0])

    with pytest.raises(ScriptError, match=r"packed uint4b codes, which have no arithmetic; convert first"):
        AddCodes().tile_program(tensor_for("uint4b", 64), target="sm_90")


def test_view_checks_bits_and_threads():
    from tilus_tvm.layout import local, spatial

    class BadView(tilus.Script):
        def __call__(self, w_ptr: ~dtypes.int32):
            self.attrs.blocks = 1
            self.attrs.warps = 1
            gw = self.global_view(w_ptr, dtype=dtypes.int32, shape=[32, 2])
            w = self.load_global(gw, offsets=[0, 0], shape=[32, 2], layout=spatial(32, 1).local(1, 2))
            self.view(w, dtype=dtypes.uint4b, layout=spatial(32, 1).local(1, 8))

    with pytest.raises(ScriptError, match=r"holds 2 x 32 bits of int32, but layout .* spreads 8 x 4 bits of uint4b "
                                          r"over 32 threads: 64 bits per thread against 32"):
        BadView().tile_program(torch.zeros(64, dtype=torch.int32), target="sm_90")

    class NoLayout(tilus.Script):
        def __call__(self, w_ptr: ~dtypes.int32):
            self.attrs.blocks = 1
            self.attrs.warps = 1
            gw = self.global_view(w_ptr, dtype=dtypes.int32, shape=[32])
            self.view(self.load_global(gw, offsets=[0], shape=[32]), dtype=dtypes.uint4b)

    with pytest.raises(ScriptError, match="needs layout="):
        NoLayout().tile_program(torch.zeros(32, dtype=torch.int32), target="sm_90")


def test_a_packed_view_writes_into_out():
    """out= of a packed view: its layout must be the view's, its dtype and shape the view's; without a
    layout (the same width) the view has x's layout, which out must have too."""
    from tilus_tvm.layout import spatial

    class Into(CaseScript):
        def __call__(self, w_ptr: ~dtypes.int32, y_ptr: ~dtypes.float8_e4m3):
            self.attrs.blocks = 1
            self.attrs.warps = 1
            gw = self.global_view(w_ptr, dtype=dtypes.int32, shape=[32, 2])
            w = self.load_global(gw, offsets=[0, 0], shape=[32, 2], layout=spatial(32, 1).local(1, 2))
            codes = spatial(32, 1).local(1, 16)
            q = self.register_tensor(dtype=dtypes.uint4b, shape=[32, 16], layout=spatial(16, 2).local(2, 8)
                                     if self.case == "layout" else codes)
            self.view(w, dtype=dtypes.int4b if self.case == "dtype" else dtypes.uint4b, layout=codes, out=q)
            b = self.view(w, dtype=dtypes.uint8, layout=spatial(32, 1).local(1, 8))  # 8 bytes -> 8 fp8 codes
            y = self.register_tensor(dtype=dtypes.float8_e4m3, shape=[32, 8],
                                     layout=spatial(32, 1).local(1, 8) if self.case != "same_width" else
                                     spatial(8, 4).local(4, 2))
            self.view(b, dtype=dtypes.float8_e4m3, out=y)
            self.store_global(self.global_view(y_ptr, dtype=dtypes.float8_e4m3, shape=[32, 8]), y, offsets=[0, 0])

    args = (torch.zeros(32, 2, dtype=torch.int32), tensor_for("float8_e4m3", 256))
    program = str(Into("ok").tile_program(*args, target="sm_90"))
    assert "%q = register_view(x=%w)" in program and "%y = register_view(x=%b)" in program
    ptx_of(Into("ok"), *args)
    for case, message in [("layout", r"view: out q: uint4b\[32, 16\] has layout .*, not the layout given to the view"),
                          ("dtype", r"view: out q: uint4b\[32, 16\] must be a register tensor of dtype int4b"),
                          ("same_width", r"view: out y: float8_e4m3\[32, 8\] has layout .*, not the layout of b: "
                                         r"uint8\[32, 8\]")]:
        with pytest.raises(ScriptError, match=message):
            Into(case).tile_program(*args, target="sm_90")


@pytest.mark.parametrize("name", ["uint4b", "int3b", "int1b"])
def test_views_of_packed_register_tensors_lower(name):
    """Slices, transposes and reshapes of packed register tensors (GPU: the values, in test_lowp_gpu) build;
    the free ones cut codes out of words (shifts, no shared memory beyond the two gathers' scratch)."""
    outputs = [torch.zeros(s) for s in ((32, 32), (32, 32), (64,), (64, 32), (64, 32))]
    code = ptx_of(K.packed_views(dtypes.as_dtype(name)), tensor_for(name, 32 * 64), *outputs)
    assert "shr.u32" in code or "shf.r" in code or "bfe.u32" in code


def test_assigning_into_part_of_a_packed_register_tensor_is_refused():
    from tilus_tvm.errors import CompileError

    class PatchCodes(tilus.Script):
        def __call__(self, y_ptr: ~dtypes.uint4b):
            self.attrs.blocks = 1
            self.attrs.warps = 1
            x = self.register_tensor(dtype=dtypes.uint4b, shape=[32, 8], init=1)
            x[:, 0:4] = 3
            self.store_global(self.global_view(y_ptr, dtype=dtypes.uint4b, shape=[32, 8]), x, offsets=[0, 0])

    with pytest.raises(CompileError, match="assigning into part of a packed uint4b register tensor is not supported"):
        compiled(PatchCodes(), tensor_for("uint4b", 256))
