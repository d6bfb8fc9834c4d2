"""The lowering pipeline without a GPU: tile programs, IRModules, the kernel ABI and its
destination-passing form inside a Relax function, and IR dumps."""
import subprocess
import sys

import pytest
import torch

import tilus_tvm as tilus
from tests.helpers import load_tutorial
from tests.lang import kernels as K
from tilus_tvm import float32, int32
from tilus_tvm.ir import inst as ir
from tilus_tvm.ir.stmt import instructions


def meta(*shape, dtype=torch.float16):
    return torch.empty(*shape, dtype=dtype, device="meta")


def matmul_args(m=4096, n=4096, k=4096):
    return m, n, k, meta(m, k), meta(k, n), meta(m, n)


def test_tile_program_accepts_meta_tensors_and_prints_every_tensor():
    program = load_tutorial("03_matmul").Matmul().tile_program(*matmul_args(), target="sm_90")
    text = str(program)
    assert program.shared_bytes == 0 and program.arch == "sm_90"
    for name in ("a_ptr", "b_ptr", "c_ptr", "acc", "dot", "load_global", "store_global"):
        assert name in text, name
    assert "for " in text  # the k loop, indented
    assert sum(isinstance(i, ir.Dot) for i in instructions(program.body)) == 1


def test_lower_gives_the_module_that_compile_builds():
    kernel = load_tutorial("03_matmul").Matmul()
    mod = kernel.lower(*matmul_args(), target="sm_90")
    func = mod["matmul"]
    names = [p.name for p in func.params]
    assert names == ["m_size", "a_ptr", "b_ptr", "c_ptr"]  # the Script's order, compile-time n, k left out
    script = func.script()
    assert 'a_ptr: T.Buffer((m_size, 4096), "float16")' in script  # shaped: checked by TVM's entry code
    assert "c_ptr: T.Buffer((m_size, 4096)" in script
    assert list(func.attrs["tilus.reads"]) == ["a_ptr", "b_ptr"] and list(func.attrs["tilus.writes"]) == ["c_ptr"]


def test_views_with_strides_keep_a_flat_buffer():
    kernel = K.ColumnOfColumnMajor()
    func = kernel.lower(128, 5, 0, torch.zeros(5, 128).t(), torch.zeros(128), target="sm_80")
    text = func.script()
    assert "T.Buffer((" in text and "_numel" in text  # the strided source stays a flat buffer


def test_destination_passing_form_orders_inputs_then_outputs():
    kernel = load_tutorial("03_matmul").Matmul()
    func = kernel.lower(*matmul_args(), target="sm_90", dps=True)["matmul"]
    assert [p.name for p in func.params] == ["a_ptr", "b_ptr", "c_ptr"]  # m_size comes from a_ptr's shape
    assert func.attrs["tirx.is_scheduled"]


def test_destination_passing_form_keeps_scalars_no_shape_gives():
    func = K.Scale().lower(100, 2.0, meta(100, dtype=torch.float32), meta(100, dtype=torch.float32),
                         target="sm_80", dps=True)["scale"]
    assert [p.name for p in func.params] == ["x_ptr", "alpha", "y_ptr"]


def test_destination_passing_form_refuses_in_place_and_output_less_kernels():
    class InPlace(tilus.Script):
        def __call__(self, n: int32, x_ptr: ~float32):
            self.attrs.blocks = 1
            self.attrs.warps = 1
            g = self.global_view(x_ptr, dtype=float32, shape=[n])
            self.store_global(g, self.load_global(g, offsets=[0], shape=[32]) + 1.0, offsets=[0])

    with pytest.raises(tilus.CompileError, match="reads and writes x_ptr"):
        InPlace().lower(32, meta(32, dtype=torch.float32), target="sm_80", dps=True)
    class Hello(tilus.Script):
        def __call__(self):
            self.attrs.blocks = 1
            self.attrs.warps = 1
            self.printf("Hello, World!")

    with pytest.raises(tilus.CompileError, match="writes no tensor"):
        Hello().lower(target="sm_80", dps=True)


def test_destination_passing_matmul_in_a_relax_function_compiles_for_sm_90():
    import tvm
    from tvm import relax

    kernel = load_tutorial("03_matmul").Matmul()
    func = kernel.lower(*matmul_args(), target="sm_90", dps=True)["matmul"]
    builder = relax.BlockBuilder()
    n = tvm.tirx.Var("n", "int64")
    x = relax.Var("x", relax.TensorType([n, 4096], "float16"))
    w = relax.Var("w", relax.TensorType([4096, 4096], "float16"))
    with builder.function("main", [x, w]):
        gv = builder.add_func(func, "matmul")
        with builder.dataflow():
            y = builder.emit(relax.call_tir(gv, [x, w], relax.TensorType([n, 4096], "float16")))
            out = builder.emit_output(y)
        builder.emit_func_output(out)
    mod = builder.get()
    target = tvm.target.Target({"kind": "cuda", "arch": "sm_90"}, host="llvm")
    executable = tvm.compile(mod, target=target, tir_pipeline="tirx")
    sources = []

    def collect(module):
        if module.kind == "cuda":
            sources.append(module.inspect_source())
        for sub in module.imports:
            collect(sub)

    collect(executable.mod)
    assert sources and "matmul_kernel" in sources[0] and "mma.sync" in sources[0]


def test_layout_package_imports_neither_tvm_nor_torch():
    code = ("import sys, tilus_tvm.layout, tilus_tvm.cute, tilus_tvm\n"
            "print(sorted(m for m in ('tvm', 'torch', 'numpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_ir_dumps_one_file_per_pass(tmp_path, monkeypatch):
    from tilus_tvm import option

    monkeypatch.setenv("TILUS_TVM_DUMP_IR", str(tmp_path))
    try:
        load_tutorial("03_matmul").Matmul().lower(*matmul_args(), target="sm_90")
    finally:
        option.dump_ir(None)
    files = sorted(p.name for p in (tmp_path / "matmul").iterdir())
    assert files == ["00_transpile.txt", "01_layout_inference.txt", "02_shared_layout_inference.txt",
                     "03_shared_memory.txt", "04_kernel_abi.txt", "05_tir.py"]
    assert "layout=" in (tmp_path / "matmul" / "01_layout_inference.txt").read_text()


def test_verifier_runs_between_passes_and_names_the_pass(monkeypatch):
    from tilus_tvm import pipeline
    from tilus_tvm.errors import VerificationError

    passes = pipeline._pass_list()

    def broken():
        def forget_a_layout(state):
            for inst in instructions(state.func.body):
                if isinstance(inst, ir.Dot):
                    inst.a.layout = None

        return passes[:1] + [("forget_a_layout", forget_a_layout)] + passes[1:]

    monkeypatch.setattr(pipeline, "_pass_list", broken)
    with pytest.raises(VerificationError, match="forget_a_layout"):
        load_tutorial("03_matmul").Matmul().lower(*matmul_args(), target="sm_90")
