"""Every example compiles for sm_80 and sm_90 on a machine without a GPU; the TIR is well formed and
the PTX holds the intended instructions."""
import pytest
import torch
import tvm

import tilus_tvm as tilus
from tilus_tvm import bfloat16, float16, float32, int8, int32
from tilus_tvm.ir import inst as ir
from tilus_tvm.ir.stmt import instructions
from tests.helpers import load_tutorial
from tests.lang import kernels as K
from tests.helpers import private_cache  # noqa: F401 - autouse: a cache directory per test


def f16(*shape):
    return torch.zeros(*shape, dtype=torch.float16)


def example_kernels():
    """(name, kernel, compile arguments) of every example and test kernel."""
    return [
        ("add_one", load_tutorial("02_add_one").AddOneKernel(128, 4), (16, torch.zeros(16), torch.zeros(16))),
        ("matmul", load_tutorial("03_matmul").Matmul(), (16, 4096, 4096, f16(16, 4096), f16(4096, 4096), f16(16, 4096))),
        ("matmul_v0", load_tutorial("04_matmul_v0").MatmulV0(),
         (4096, 4096, 4096, f16(4096, 4096), f16(4096, 4096), f16(4096, 4096))),
        ("elementwise", K.Elementwise(), (10, torch.zeros(10, 48), torch.zeros(10, 1), torch.zeros(10, 48))),
        ("softmax", K.Softmax(), (10, torch.zeros(10, 128), torch.zeros(10, 128))),
        ("column_reduce", K.ColumnReduce(), (torch.zeros(64, 32), torch.zeros(3, 32))),
        ("shared", K.SharedRoundTrip(), (f16(32, 64), f16(32, 64))),
        ("scalar_control", K.ScalarControl(), (5, torch.zeros(5, dtype=torch.int32))),
        ("loop_carried", K.LoopCarried(), (3, torch.zeros(3, 64), torch.zeros(64))),
        ("printf", K.Printf(), (3,)),
        ("casts", K.Casts(), (2, torch.zeros(100), torch.zeros(100))),
        ("dot_bf16", K.dot_kernel(64, 32, 64, bfloat16, float32),
         (torch.zeros(64, 64, dtype=torch.bfloat16), torch.zeros(64, 32, dtype=torch.bfloat16), torch.zeros(64, 32))),
        ("dot_int8", K.dot_kernel(32, 32, 64, int8, int32),
         (torch.zeros(32, 64, dtype=torch.int8), torch.zeros(64, 32, dtype=torch.int8),
          torch.zeros(32, 32, dtype=torch.int32))),
    ]


EXAMPLES = [name for name, _, _ in example_kernels()]


def hello_world_kernel():
    # tutorials/01_hello_world.py launches at import; build the same kernel here
    class MyKernel(tilus.Script):
        def __call__(self):
            self.attrs.blocks = 1
            self.attrs.warps = 1
            self.printf("Hello, World!")

    return MyKernel()


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("name", ["hello_world"] + EXAMPLES)
def test_example_compiles_to_ptx(name, arch):
    if name == "hello_world":
        kernel, args = hello_world_kernel(), ()
    else:
        kernel, args = next((k, a) for n, k, a in example_kernels() if n == name)
    compiled = kernel.compile(*args, target=arch)
    tvm.tirx.analysis.verify_well_formed(compiled.prim_func)
    assert f".target {arch}" in compiled.ptx
    assert ".entry" in compiled.ptx


def test_matmul_ptx_has_mma_and_builds_a_cubin():
    kernel = load_tutorial("03_matmul").Matmul()
    compiled = kernel.compile(16, 4096, 4096, f16(16, 4096), f16(4096, 4096), f16(16, 4096), target="sm_80")
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in compiled.ptx
    from tvm.support import nvcc

    with compiled.target:  # a cubin runs ptxas over the inline assembly too
        cubin = nvcc.compile_cuda(compiled.cuda_source, target_format="cubin", arch="sm_80", compiler="nvcc")
    assert len(cubin) > 1000


def test_matmul_v0_loads_fragments_with_vectors():
    kernel = load_tutorial("04_matmul_v0").MatmulV0()
    compiled = kernel.compile(4096, 4096, 4096, f16(4096, 4096), f16(4096, 4096), f16(4096, 4096), target="sm_90")
    assert "mma.sync.aligned.m16n8k16" in compiled.ptx
    assert "half2" in compiled.cuda_source  # a0/a1 of the A fragment are one 32-bit load


def test_prim_func_prints_and_parses_back():
    kernel = load_tutorial("02_add_one").AddOneKernel(128, 4)
    compiled = kernel.compile(16, torch.zeros(16), torch.zeros(16), target="sm_80")
    text = compiled.prim_func.script()
    assert "T.prim_func" in text and "blockIdx.x" in text and "threadIdx.x" in text
    reparsed = tvm.script.from_source(text)
    assert reparsed.script() == text  # TVMScript round trip


def test_compile_is_cached_in_memory_and_shows_progress(capsys):
    kernel = load_tutorial("02_add_one").AddOneKernel(64, 2)
    first = kernel.compile(16, torch.zeros(16), torch.zeros(16), target="sm_80")
    assert "[Building] add_one_kernel" in capsys.readouterr().err
    assert kernel.compile(16, torch.zeros(16), torch.zeros(16), target="sm_80") is first


def test_compile_time_values_select_specialisations():
    kernel = load_tutorial("03_matmul").Matmul()
    one = kernel.compile(4, 256, 64, f16(4, 64), f16(64, 256), f16(4, 256), target="sm_80")
    two = kernel.compile(4, 384, 64, f16(4, 64), f16(64, 384), f16(4, 384), target="sm_80")
    assert one is not two and one.display_name == "matmul-256-64" and two.display_name == "matmul-384-64"


def test_export_writes_a_library(tmp_path):
    kernel = load_tutorial("02_add_one").AddOneKernel(128, 4)
    compiled = kernel.compile(16, torch.zeros(16), torch.zeros(16), target="sm_80")
    path = compiled.export(tmp_path / "add_one.so")
    data = open(path, "rb").read()
    assert data[:4] == b"\x7fELF" and b"add_one_kernel_kernel" in data
    loaded = tilus.load_kernel(path)  # launchable later (the launch itself is a GPU test)
    assert (loaded.name, loaded.grid([1000]), loaded.prim_func.script()) == \
        ("add_one_kernel", (8,), compiled.prim_func.script())
    assert [s.annotation for s in loaded.specs] == [s.annotation for s in compiled.specs]


def test_layouts_chosen_for_the_seed_matmul():
    """dot fixes its operand layouts and the loads feeding it take them: no conversion is needed."""
    from tilus_tvm.instructions.dot import dot_layouts

    kernel = load_tutorial("03_matmul").Matmul()
    a, b, c = (torch.empty(4096, 4096, dtype=torch.float16, device="meta") for _ in range(3))
    func = kernel.tile_program(4096, 4096, 4096, a, b, c, target="sm_90")
    insts = list(instructions(func.body))
    assert not [i for i in insts if isinstance(i, ir.ConvertLayout)]
    (dot,) = [i for i in insts if isinstance(i, ir.Dot)]
    assert (dot.config.kind, dot.config.warps_m * dot.config.warps_n, dot.config.atom.name) == ("mma", 4, "m16n8k16")
    a_layout, b_layout, c_layout = dot_layouts(dot.config)
    assert (dot.a.layout, dot.b.layout, dot.output.layout) == (a_layout, b_layout, c_layout)
    loads = [i for i in insts if isinstance(i, ir.LoadGlobal)]
    assert [load.output.layout for load in loads] == [a_layout, b_layout]


def test_author_layout_inserts_a_conversion():
    from tilus_tvm.layout import spatial

    kernel = K.dot_kernel(64, 32, 32, float16, float32, a_layout=spatial(16, 8).local(4, 4))
    a, b, c = (torch.empty(s, dtype=d, device="meta") for s, d in (((64, 32), torch.float16), ((32, 32), torch.float16), ((64, 32), torch.float32)))
    func = kernel.tile_program(a, b, c, target="sm_80")
    conversions = [i for i in instructions(func.body) if isinstance(i, ir.ConvertLayout)]
    assert len(conversions) == 1 and conversions[0].x.layout == spatial(16, 8).local(4, 4)


def test_vector_accesses_follow_the_unit_stride_dimension():
    compiled = K.ColumnOfColumnMajor().compile(128, 5, 0, torch.zeros(5, 128).t(), torch.zeros(128), target="sm_80")
    assert "float4" in compiled.cuda_source  # 16-byte accesses along dimension 0 of the view


def test_no_vector_accesses_for_unaligned_pointers():
    storage = torch.zeros(129)
    aligned = K.ColumnOfColumnMajor().compile(128, 1, 0, storage[:128].view(1, 128).t(), storage[:128],
                                              target="sm_80")
    unaligned = K.ColumnOfColumnMajor().compile(128, 1, 0, storage[1:].view(1, 128).t(), storage[1:],
                                                target="sm_80")
    assert "float4" in aligned.cuda_source and "float4" not in unaligned.cuda_source
