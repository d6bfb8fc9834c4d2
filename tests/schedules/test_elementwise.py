"""ResidualAdd and SwiGLU: 16-byte vectors in the PTX (CPU), a build of a Relax call with one tensor argument
(RewriteDataflowReshape asks its PrimFunc whether it is a reshape), and results against torch (GPU)."""
import pytest
import torch
from tvm import relax, tirx

import tilus_tvm.relax as tilus_relax
from tilus_tvm.errors import ScriptError
from tilus_tvm.schedules.elementwise import ResidualAdd, SwiGLU


def test_vector_loads_and_stores():
    x = torch.empty(100, 4096, dtype=torch.float16)
    ptx = ResidualAdd(4096).compile(100, x, x, x, target="sm_90").ptx
    assert ptx.count("ld.global.nc.v4") + ptx.count("ld.global.v4") == 8 and ptx.count("st.global.v4") == 4
    gate_up, out = torch.empty(100, 2 * 11008, dtype=torch.bfloat16), torch.empty(100, 11008, dtype=torch.bfloat16)
    ptx = SwiGLU(11008, "bfloat16").compile(100, gate_up, out, target="sm_90").ptx
    assert ptx.count("st.global.v4") == 4 and "ex2.approx" in ptx


def test_bad_configuration():
    with pytest.raises(ScriptError, match="n must be a positive int"):
        SwiGLU(0)
    with pytest.raises(ScriptError, match="dtype must be float16, bfloat16 or float32"):
        ResidualAdd(64, "int8")


@pytest.mark.parametrize("op", ["softmax", "swiglu"])
def test_a_call_with_one_tensor_argument_builds(op):
    x = relax.Var("x", relax.TensorType([2, tirx.Var("n", "int64"), 1024], "float16"))
    builder = relax.BlockBuilder()
    with builder.function("main", [x]):
        with builder.dataflow():
            if op == "softmax":
                y = builder.emit(relax.op.nn.softmax(x))
            else:
                halves = builder.emit(relax.op.split(x, 2, axis=-1))
                gate, up = (builder.emit(relax.TupleGetItem(halves, i)) for i in range(2))
                y = builder.emit(relax.op.multiply(builder.emit(relax.op.nn.silu(gate)), up))
            out = builder.emit_output(y)
        builder.emit_func_output(out)
    dispatch = tilus_relax.DispatchKernels("sm_90")
    mod = dispatch(builder.get())
    assert [d.dispatched for d in dispatch.decisions] == [True]
    tilus_relax.build(mod, "sm_90")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("rows, n", [(1, 8), (3, 1000), (77, 4096), (513, 11008)])
def test_results_match_torch(dtype, rows, n):
    torch.manual_seed(rows + n)
    x = torch.randn(rows, n, dtype=dtype, device="cuda")
    y = torch.randn(rows, n, dtype=dtype, device="cuda")
    out = torch.full((rows, n), float("nan"), dtype=dtype, device="cuda")
    ResidualAdd(n, dtype=str(dtype).replace("torch.", ""))(rows, x, y, out)
    torch.testing.assert_close(out, x + y, rtol=0, atol=0)
    gate_up = torch.randn(rows, 2 * n, dtype=dtype, device="cuda")
    out.fill_(float("nan"))
    SwiGLU(n, dtype=str(dtype).replace("torch.", ""))(rows, gate_up, out)
    gate, up = gate_up.float().chunk(2, dim=-1)
    torch.testing.assert_close(out.float(), torch.nn.functional.silu(gate) * up, rtol=1e-2, atol=1e-2)
