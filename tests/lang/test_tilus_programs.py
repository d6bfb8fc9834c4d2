"""Tilus-style programs (tests/lang/tilus_programs.py) lower and compile for sm_80 and sm_90 without a
GPU: the layouts they pin from ``self.cuda`` and ``tilus_tvm.ir.layout.ops`` are the ones the
instructions use (no layout conversion), and the PTX holds the tensor-core instructions."""
import re

import pytest
import torch
import tvm

import tilus_tvm as tilus
from tilus_tvm.instructions.dot import dot_layouts
from tilus_tvm.ir import inst as ir
from tilus_tvm.ir.stmt import instructions
from tests.lang import tilus_programs as P


@pytest.fixture(autouse=True)
def private_cache(tmp_path):
    tilus.option.cache_dir(tmp_path)
    yield
    tilus.option.set_option("cache_dir", None)


def meta(*shape, dtype=torch.float16):
    return torch.empty(*shape, dtype=dtype, device="meta")


def programs():
    """(name, kernel, arguments, patterns the PTX must hold)."""
    bf16, i8, i32, f32 = torch.bfloat16, torch.int8, torch.int32, torch.float32
    return [
        ("swizzled_matmul", P.SwizzledMatmul(), (100, 128, 96, 0.5, meta(100, 96), meta(96, 128), meta(100, 128)),
         [r"mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.f16\.f16\.f32", r"ldmatrix"]),
        ("pipelined_bf16", P.PipelinedBf16Matmul(),
         (100, 130, 200, meta(100, 200, dtype=bf16), meta(200, 130, dtype=bf16), meta(100, 130, dtype=bf16)),
         [r"mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.bf16\.bf16\.f32", r"cp\.async", r"ldmatrix"]),
        ("int8_gemm", P.Int8Gemm(),
         (50, 40, 128, meta(50, 128, dtype=i8), meta(128, 40, dtype=i8), meta(50, 40, dtype=i32)),
         [r"mma\.sync\.aligned\.m16n8k32\.row\.col\.s32\.s8\.s8\.s32"]),
        ("tile_attention", P.TileAttention(), (100, 96, meta(100, 64), meta(96, 64), meta(96, 64), meta(100, 64)),
         [r"mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.f16\.f16\.f32", r"ex2\.approx"]),
        ("row_scale", P.RowScale(), (20, meta(20, 256, dtype=f32), meta(1, 256, dtype=f32), meta(20, 256, dtype=f32)),
         [r"ld\.global(\.nc)?\.v4\.f32"]),
    ]


NAMES = [name for name, *_ in programs()]


def program(name):
    return next((kernel, args, ptx) for n, kernel, args, ptx in programs() if n == name)


@pytest.mark.parametrize("name", NAMES)
def test_pinned_layouts_need_no_conversion(name):
    kernel, args, _ = program(name)
    insts = list(instructions(kernel.tile_program(*args, target="sm_80").body))
    assert [i for i in insts if isinstance(i, ir.ConvertLayout)] == []
    mma = getattr(kernel, "mma", None) or getattr(kernel, "qk", None)
    for dot in (i for i in insts if isinstance(i, ir.Dot)):
        # the dot runs on the warp grid of the configuration the program asked for
        config = kernel.pv if name == "tile_attention" and dot.b.shape[1] == kernel.head_size else mma
        assert (dot.config.warps_m, dot.config.warps_n) == config.warp_spatial
        assert dot_layouts(dot.config) == (config.la, config.lb, config.lc)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("name", NAMES)
def test_program_compiles_to_ptx(name, arch):
    kernel, args, wanted = program(name)
    compiled = kernel.compile(*args, target=arch)
    tvm.tirx.analysis.verify_well_formed(compiled.prim_func)
    assert f".target {arch}" in compiled.ptx
    for pattern in wanted:
        assert re.search(pattern, compiled.ptx), f"{name} ({arch}): {pattern!r} missing from the PTX"


def test_the_compile_cache_goes_where_option_cache_dir_says(tmp_path):
    kernel, args, _ = program("row_scale")
    tilus.option.cache_dir(tmp_path / "moved")
    kernel.compile(*args, target="sm_80")
    entries = [p for p in (tmp_path / "moved").iterdir() if not p.name.startswith(".")]
    assert len(entries) == 1 and (entries[0] / "kernel.so").exists()
    assert tilus.utils.clear_cache() == (tmp_path / "moved").resolve()
    assert list((tmp_path / "moved").iterdir()) == []


def test_debug_dump_ir_writes_under_the_cache_dir(tmp_path):
    kernel, args, _ = program("row_scale")
    tilus.option.cache_dir(tmp_path)
    tilus.option.debug.dump_ir()
    try:
        kernel.lower(*args, target="sm_90")
    finally:
        tilus.option.debug.dump_ir(False)
    files = sorted(p.name for p in (tmp_path / "ir" / "row_scale").iterdir())
    assert files[0] == "00_transpile.txt" and files[-1].endswith("_tir.py")
