"""tilus_tvm.relax.call: kernels as R.call_tir in TVMScript and BlockBuilder code (tilus_tvm/relax/call.py)."""
import re

import pytest
from tvm import relax, tirx
from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T

import tilus_tvm as tilus
import tilus_tvm.relax as tilus_relax
from tilus_tvm import float32, int32
from tilus_tvm.relax import RelaxError
from tests.lang.kernels import Scale
from tilus_tvm.schedules.matmul import Matmul
from tilus_tvm.schedules.norms import RMSNorm

THIN = dict(block_m=16, block_n=128, block_k=64, warps=4, stages=4)  # quick to lower


class ReadOnly(tilus.Script):
    def __call__(self, n: int32, x_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        gx = self.global_view(x_ptr, dtype=float32, shape=[n])
        self.load_global(gx, offsets=[0], shape=[32])
        self.printf("read")


class Hello(tilus.Script):
    def __call__(self):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        self.printf("Hello, World!")


def cuda_sources(module) -> list[str]:
    found = [module.inspect_source()] if module.kind == "cuda" else []
    for imported in module.imports:
        found += cuda_sources(imported)
    return found


MATMUL = Matmul(b_layout="col", **THIN)


@I.ir_module
class TwoMatmuls:
    @R.function
    def main(x: R.Tensor(("n", 512), "float16"), w: R.Tensor((512, 512), "float16")):
        n = T.int64()
        with R.dataflow():
            y = tilus_relax.call(MATMUL, n, 512, 512, x, w, out=R.Tensor((n, 512), "float16"), target="sm_90")
            z = tilus_relax.call(MATMUL, n, 512, 512, y, w, out=R.Tensor(("n", 512), "float16"), target="sm_90")
            u = R.add(z, x)
            R.output(u)
        return u


def test_call_in_an_ir_module_adds_one_marked_prim_func_and_call_tir():
    names = [gv.name_hint for gv in TwoMatmuls.get_global_vars()]
    kernels = [n for n in names if n.startswith("tilus_matmul_float16_")]
    assert len(kernels) == 1  # both calls share the specialisation's PrimFunc
    func = TwoMatmuls[kernels[0]]
    assert func.attrs["tirx.is_scheduled"] and int(func.attrs["op_pattern"]) == 8 and func.attrs["tilus.kernel"]
    assert func.attrs["global_symbol"] == kernels[0]
    text = TwoMatmuls.script()
    assert text.count(f"R.call_tir(cls.{kernels[0]}, (x, w), out_ty=R.Tensor((n, 512), dtype=\"float16\"))") == 1
    assert text.count(f"R.call_tir(cls.{kernels[0]}, (y, w)") == 1


def test_the_module_with_a_dynamic_dimension_compiles_for_sm_90():
    executable = tilus_relax.build(TwoMatmuls, "sm_90")
    (source,) = cuda_sources(executable.mod)
    kernels = set(re.findall(r"__global__ void (?:__launch_bounds__\([^)]*\) )?(\w+)\(", source))
    assert any(k.startswith("tilus_matmul_float16_") for k in kernels) and "add_kernel" in kernels
    assert "mma.sync" in source and executable.tilus_archs == ["sm_90"]


def test_names_are_the_same_in_every_process():
    import subprocess
    import sys

    code = ("import tilus_tvm.relax as r, tvm\nfrom tvm import relax, tirx\n"
            "from tilus_tvm.schedules.matmul import Matmul\n"
            "bb = relax.BlockBuilder(); n = tirx.Var('n', 'int64')\n"
            "x = relax.Var('x', relax.TensorType([n, 512], 'float16'))\n"
            "w = relax.Var('w', relax.TensorType([512, 512], 'float16'))\n"
            "with bb.function('main', [x, w]):\n"
            "    bb.emit_func_output(bb.emit(r.call(Matmul(b_layout='col', block_m=16, block_n=128, block_k=64, "
            "warps=4, stages=4), n, 512, 512, x, w, out=relax.TensorType([n, 512], 'float16'), target='sm_90')))\n"
            "print(sorted(g.name_hint for g in bb.get().get_global_vars()))")
    outputs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
               for _ in range(2)}
    assert len(outputs) == 1 and "tilus_matmul_float16_" in outputs.pop()


def test_call_in_block_builder_code_passes_scalars_no_shape_gives_as_prim_values():
    builder = relax.BlockBuilder()
    n = tirx.Var("n", "int64")
    x = relax.Var("x", relax.TensorType([n, 4096], "float16"))
    w = relax.Var("w", relax.TensorType([1, 4096], "float16"))
    with builder.function("main", [x, w]):
        with builder.dataflow():
            y = builder.emit(tilus_relax.call(RMSNorm(4096, 4, "float16"), n, 4096, 1e-6, x, w,
                                              out=R.Tensor(("n", 4096), "float16"), target="sm_90"))
            out = builder.emit_output(y)
        builder.emit_func_output(out)
    mod = builder.get()
    kernel = next(gv for gv in mod.get_global_vars() if gv.name_hint.startswith("tilus_rms_norm"))
    assert [p.name for p in mod[kernel].params] == ["x_ptr", "w_ptr", "eps", "y_ptr"]
    assert "(x, w, T.float32(9.9999999999999995e-07))" in mod.script()
    tilus_relax.build(mod, "sm_90")


def test_a_run_time_int_scalar_is_cast_to_the_parameter_dtype():
    builder = relax.BlockBuilder()
    n = tirx.Var("n", "int64")
    x = relax.Var("x", relax.TensorType([n], "float32"))
    with builder.function("main", [x]):
        y = builder.emit(tilus_relax.call(Scale(), n, 2.0, x, out=relax.TensorType([n], "float32"), target="sm_90"))
        builder.emit_func_output(y)
    text = builder.get().script()
    assert "(x, T.float32(2.0))" in text  # n is x's length: TVM binds it from the shape


# --- refusals ---------------------------------------------------------------------------------------
def call_in_builder(kernel, *args, out, params=None):
    builder = relax.BlockBuilder()
    with builder.function("main", params or []):
        expr = tilus_relax.call(kernel, *args, out=out, target="sm_90")
        builder.emit_func_output(builder.emit(expr))


@pytest.fixture
def tensors():
    n = tirx.Var("n", "int64")
    return {"n": n, "x": relax.Var("x", relax.TensorType([n, 512], "float16")),
            "w": relax.Var("w", relax.TensorType([512, 512], "float16")),
            "x_bf16": relax.Var("xb", relax.TensorType([n, 512], "bfloat16")),
            "x_narrow": relax.Var("xn", relax.TensorType([n, 256], "float16")),
            "v32": relax.Var("v", relax.TensorType([n], "float32")),
            "v16": relax.Var("h", relax.TensorType([n], "float16"))}


def test_the_wrong_number_of_outputs_is_refused_with_the_signature(tensors):
    t = tensors
    out = relax.TensorType([t["n"], 512], "float16")
    with pytest.raises(RelaxError, match=r"call\(Matmul\): the kernel takes 6 arguments \(m_size: int32, "
                                         r"n_size: int, k_size: int, a_ptr: ~void, b_ptr: ~void, c_ptr: ~void\); "
                                         r"got 5 arguments and 2 outputs"):
        call_in_builder(MATMUL, t["n"], 512, 512, t["x"], t["w"], out=[out, out], params=[t["x"], t["w"]])
    with pytest.raises(RelaxError, match=r"out= is required"):
        call_in_builder(MATMUL, t["n"], 512, 512, t["x"], t["w"], out=None, params=[t["x"], t["w"]])


def test_an_input_in_an_output_position_is_refused(tensors):
    t = tensors
    out = relax.TensorType([t["n"], 512], "float16")
    with pytest.raises(RelaxError, match=r"parameter k_size \(k_size: int\) cannot be an output"):
        call_in_builder(MATMUL, t["n"], 512, out=[out, out, out, out], params=[])


def test_dtype_mismatches_are_refused_naming_the_argument(tensors):
    t = tensors
    with pytest.raises(RelaxError, match=r"call\(Scale\): argument x_ptr must be a float32 tensor \(~float32\), "
                                         r"got float16"):
        call_in_builder(Scale(), t["n"], 2.0, t["v16"], out=relax.TensorType([t["n"]], "float32"), params=[t["v16"]])
    with pytest.raises(RelaxError, match=r"output y_ptr \(out\[0\]\) must be a float32 tensor \(~float32\), "
                                         r"got float16"):
        call_in_builder(Scale(), t["n"], 2.0, t["v32"], out=relax.TensorType([t["n"]], "float16"), params=[t["v32"]])
    with pytest.raises(RelaxError, match=r"does not compile for these arguments: global_view: dtype float16 differs "
                                         r"from the pointer's element type bfloat16 \(parameter a_ptr"):
        call_in_builder(MATMUL, t["n"], 512, 512, t["x_bf16"], t["w"], out=relax.TensorType([t["n"], 512], "float16"),
                        params=[t["x_bf16"], t["w"]])


def test_kernels_without_outputs_are_refused(tensors):
    t = tensors
    with pytest.raises(RelaxError, match=r"call\(Hello\): the kernel has no tensor parameter, so it has no output"):
        call_in_builder(Hello(), out=relax.TensorType([4], "float32"))
    with pytest.raises(RelaxError, match=r"call\(ReadOnly\): the kernel writes no tensor, so it has no output"):
        call_in_builder(ReadOnly(), t["n"], out=relax.TensorType([t["n"]], "float32"))


def test_shapes_that_cannot_fit_and_symbolic_constants_are_refused(tensors):
    t = tensors
    with pytest.raises(RelaxError, match=r"argument a_ptr has shape \(n, 256\), the kernel expects \(m_size, 512\): "
                                         r"dimension 1 is 256, expected 512"):
        call_in_builder(MATMUL, t["n"], 512, 512, t["x_narrow"], t["w"], out=relax.TensorType([t["n"], 512], "float16"),
                        params=[t["x_narrow"], t["w"]])
    with pytest.raises(RelaxError, match=r"argument n_size is a compile-time int \(one kernel is built per value, so "
                                         r"it cannot be symbolic\)"):
        call_in_builder(MATMUL, t["n"], t["n"], 512, t["x"], t["w"], out=relax.TensorType([t["n"], 512], "float16"),
                        params=[t["x"], t["w"]])
    with pytest.raises(RelaxError, match=r"argument a_ptr must be a Relax tensor"):
        call_in_builder(MATMUL, t["n"], 512, 512, 3, t["w"], out=relax.TensorType([t["n"], 512], "float16"),
                        params=[t["w"]])
    with pytest.raises(RelaxError, match=r"out\[0\] names dimension 'm', which is not a dimension of any input"):
        call_in_builder(MATMUL, t["n"], 512, 512, t["x"], t["w"], out=R.Tensor(("m", 512), "float16"),
                        params=[t["x"], t["w"]])


def test_call_outside_a_module_says_where_it_works(tensors):
    t = tensors
    with pytest.raises(RelaxError, match=r"no module is being built; use it inside an @I.ir_module"):
        tilus_relax.call(MATMUL, t["n"], 512, 512, t["x"], t["w"], out=relax.TensorType([t["n"], 512], "float16"),
                         target="sm_90")


def test_a_target_older_than_sm_80_is_refused(tensors):
    t = tensors
    with pytest.raises(RelaxError, match=r"unknown target 'sm_75' \(tilus-tvm kernels use Ampere instructions"):
        tilus_relax.call(MATMUL, t["n"], 512, 512, t["x"], t["w"], out=relax.TensorType([t["n"], 512], "float16"),
                         target="sm_75")
