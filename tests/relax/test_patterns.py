"""The rewrites of tilus_tvm/relax/patterns.py compute what the operators did.

The kernels run only on a GPU, so here each kernel call is replaced by a stand-in: the same math in
Relax operators on the arguments the kernel would get (rows, weights column-major, [B, S, H, D]
attention operands or one fused [B, S, 3H, D] QKV tensor, eps, scale). The dispatched module then runs on the CPU (llvm) and must agree
with the original: what is checked is everything around the kernel -- flattening to rows, weight
layout, permutations, reshapes back, scalar arguments.
"""
import numpy as np
import pytest
import tvm
from tvm import relax, tirx

from tilus_tvm.relax import DispatchKernels
from tilus_tvm.relax.dispatch import DispatchContext
from tilus_tvm.schedules.attention import LOG2E, FlashAttention
from tilus_tvm.schedules.elementwise import ResidualAdd, SwiGLU
from tilus_tvm.schedules.matmul import Matmul
from tilus_tvm.schedules.norms import LayerNorm, RMSNorm
from tilus_tvm.schedules.softmax import OnlineSoftmax, Softmax

from tests.relax.test_dispatch import small_block_module, tensor


def stand_in(context: DispatchContext, kernel, args, out):
    """What ``kernel`` computes on ``args``, in Relax operators."""
    emit = context.emit
    if isinstance(kernel, Matmul):
        _, _, _, a, w = args
        b = emit(relax.op.permute_dims(w)) if kernel.b_layout == "col" else w
        return relax.op.matmul(a, b)
    if isinstance(kernel, RMSNorm):
        _, hidden, eps, x, w = args
        return relax.op.nn.rms_norm(x, emit(relax.op.reshape(w, [hidden])), axes=[-1], epsilon=eps)
    if isinstance(kernel, LayerNorm):
        _, hidden, eps, x, g, b = args
        return relax.op.nn.layer_norm(x, emit(relax.op.reshape(g, [hidden])), emit(relax.op.reshape(b, [hidden])),
                                      axes=[-1], epsilon=eps)
    if isinstance(kernel, (Softmax, OnlineSoftmax)):
        return relax.op.nn.softmax(args[2])
    if isinstance(kernel, ResidualAdd):
        return relax.op.add(args[1], args[2])
    if isinstance(kernel, SwiGLU):
        halves = emit(relax.op.split(args[1], 2, axis=1))
        gate, up = (emit(relax.TupleGetItem(halves, i)) for i in range(2))
        return relax.op.multiply(emit(relax.op.nn.silu(gate)), up)
    if isinstance(kernel, FlashAttention) and kernel.heads:  # [B, S, H, D] operands, or one [B, S, 3H, D]
        rows, seq_q, seq_k, scale_log2, q, k, v = args
        assert abs(scale_log2 / LOG2E * kernel.head_dim ** 0.5 - 1) < 1e-6
        if kernel.packed_qkv:
            assert q.same_as(k) and k.same_as(v)
            thirds = emit(relax.op.split(q, 3, axis=2))
            q, k, v = (emit(relax.TupleGetItem(thirds, i)) for i in range(3))
        return relax.op.nn.attention(q, k, v, causal_mask="TopLeft" if kernel.causal else None)
    if isinstance(kernel, FlashAttention):
        rows, seq_q, seq_k, scale_log2, q, k, v = args

        def bshd(t, seq):  # [B*H, S, D] -> [1, S, B*H, D]
            return emit(relax.op.permute_dims(emit(relax.op.reshape(t, [1, rows, seq, kernel.head_dim])), [0, 2, 1, 3]))

        scale = scale_log2 / LOG2E
        assert abs(scale * kernel.head_dim ** 0.5 - 1) < 1e-6  # the default: TVM's CPU attention with an explicit
        o = emit(relax.op.nn.attention(bshd(q, seq_q), bshd(k, seq_k), bshd(v, seq_k),  # float32 scale goes float32
                                       causal_mask="TopLeft" if kernel.causal else None))
        return relax.op.reshape(emit(relax.op.permute_dims(o, [0, 2, 1, 3])), [rows, seq_q, kernel.head_dim])
    raise AssertionError(f"no stand-in for {type(kernel).__name__}")


@pytest.fixture
def stand_ins(monkeypatch):
    monkeypatch.setattr(DispatchContext, "kernel", stand_in)


def run_on_cpu(mod, *args):
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    return vm["main"](*[tvm.runtime.tensor(a) for a in args]).numpy()


def test_the_decoder_block_rewrites_compute_the_block(stand_ins):
    mod = small_block_module(batch=2, seq="seq")
    dispatch = DispatchKernels("sm_90")
    dispatched = dispatch(mod)
    assert all(d.dispatched for d in dispatch.decisions) and len(dispatch.decisions) == 10
    rng = np.random.default_rng(0)
    shapes = [(256,), (768, 256), (256, 256), (256,), (1024, 256), (256, 512)]
    weights = [(1 + 0.1 * rng.standard_normal(s)) if len(s) == 1 else 0.05 * rng.standard_normal(s) for s in shapes]
    for seq in (3, 9):  # one module, two sequence lengths
        x = rng.standard_normal((2, seq, 256))
        args = [a.astype("float16") for a in [x] + weights]
        expected = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())["forward"](
            *[tvm.runtime.tensor(a) for a in args]).numpy().astype("float32")
        got = relax.VirtualMachine(tvm.compile(dispatched, target="llvm"), tvm.cpu())["forward"](
            *[tvm.runtime.tensor(a) for a in args]).numpy().astype("float32")
        np.testing.assert_allclose(got, expected, rtol=2e-2, atol=2e-2 * np.abs(expected).max())


def test_row_kernel_and_row_major_weight_rewrites_compute_the_operators(stand_ins):
    m = tirx.Var("m", "int64")
    x, w, g, b = tensor("x", [2, m, 64]), tensor("w", [64, 32]), tensor("g", [32]), tensor("b", [32])
    builder = relax.BlockBuilder()
    with builder.function("main", [x, w, g, b]):
        with builder.dataflow():
            y = builder.emit(relax.op.matmul(x, w))  # a row-major weight
            y = builder.emit(relax.op.nn.layer_norm(y, g, b, axes=[-1], epsilon=1e-5))
            out = builder.emit_output(builder.emit(relax.op.nn.softmax(y)))
        builder.emit_func_output(out)
    mod = builder.get()
    dispatch = DispatchKernels("sm_80")
    dispatched = dispatch(mod)
    assert [(d.pattern, d.dispatched) for d in dispatch.decisions] == [
        ("matmul", True), ("layer_norm", True), ("softmax", True)]
    rng = np.random.default_rng(1)
    args = [rng.standard_normal(s).astype("float16") for s in ((2, 5, 64), (64, 32), (32,), (32,))]
    np.testing.assert_allclose(run_on_cpu(dispatched, *args).astype("float32"),
                               run_on_cpu(mod, *args).astype("float32"), atol=2e-3)
