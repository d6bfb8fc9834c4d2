"""DispatchKernels: which operators go to tilus kernels, and the logged reasons for the others
(tilus_tvm/relax/dispatch.py, tilus_tvm/relax/patterns.py)."""
import logging
import re

import pytest
import tvm
from tvm import relax, tirx
from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import op

import tilus_tvm.relax as tilus_relax
from tilus_tvm.relax import DispatchKernels, Pattern
from tilus_tvm.relax.patterns import PATTERNS


class SmallBlock(nn.Module):
    """The tutorial's decoder block at toy sizes: hidden 256, 4 heads of 64, intermediate 512."""

    def __init__(self, hidden=256, heads=4, intermediate=512):
        self.hidden, self.heads = hidden, heads
        self.input_norm = nn.RMSNorm(hidden, axes=-1, epsilon=1e-6, bias=False)
        self.qkv = nn.Linear(hidden, 3 * hidden, bias=False)
        self.o_proj = nn.Linear(hidden, hidden, bias=False)
        self.post_norm = nn.RMSNorm(hidden, axes=-1, epsilon=1e-6, bias=False)
        self.gate_up = nn.Linear(hidden, 2 * intermediate, bias=False)
        self.down = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x):
        batch, seq, _ = x.shape
        head_dim = self.hidden // self.heads
        qkv = op.reshape(self.qkv(self.input_norm(x)), (batch, seq, 3, self.heads, head_dim))
        q, k, v = (op.reshape(t, (batch, seq, self.heads, head_dim)) for t in op.split(qkv, 3, axis=2))
        attention = op.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o_proj(op.reshape(attention, (batch, seq, self.hidden)))
        gate, up = op.split(self.gate_up(self.post_norm(x)), 2, axis=-1)
        return x + self.down(op.silu(gate) * up)


def small_block_module(batch=2, seq="seq"):
    model = SmallBlock()
    model.to("float16")
    mod, _ = model.export_tvm(spec={"forward": {"x": nn.spec.Tensor((batch, seq, 256), "float16")}})
    return mod


def function_with(build_body, params):
    """A one-function module: ``build_body(builder, *params)`` returns the output expression."""
    builder = relax.BlockBuilder()
    with builder.function("main", params):
        with builder.dataflow():
            out = builder.emit_output(builder.emit(build_body(*params)))
        builder.emit_func_output(out)
    return builder.get()


def tensor(name, shape, dtype="float16"):
    return relax.Var(name, relax.TensorType(shape, dtype))


def test_the_decoder_block_goes_to_tilus_kernels(caplog):
    dispatch = DispatchKernels("sm_90")
    with caplog.at_level(logging.INFO, logger="tilus_tvm.relax"):
        mod = dispatch(small_block_module())
    done = [(d.op, d.pattern) for d in dispatch.decisions if d.dispatched]
    assert done == [("relax.nn.rms_norm", "rms_norm"), ("relax.matmul", "matmul"),
                    ("relax.nn.attention", "flash_attention"), ("relax.matmul", "matmul"),
                    ("relax.add", "residual_add"), ("relax.nn.rms_norm", "rms_norm"), ("relax.matmul", "matmul"),
                    ("relax.multiply", "swiglu"), ("relax.matmul", "matmul"), ("relax.add", "residual_add")]
    assert not [d for d in dispatch.decisions if not d.dispatched]
    text = mod.script()
    for gone in ("R.matmul(", "R.nn.rms_norm(", "R.nn.attention(", "R.permute_dims(qkv_weight", "R.add(", "R.nn.silu(",
                 "R.split("):  # the QKV split and the MLP's split are read in place by the kernels
        assert gone not in text
    names = sorted(gv.name_hint for gv in mod.get_global_vars())
    assert [re.sub(r"_[0-9a-f]{10}$", "", n) for n in names] == [
        "forward", "tilus_flash_attention_float16"] + ["tilus_matmul_float16"] * 4 + [
        "tilus_residual_add_float16", "tilus_rms_norm_float16", "tilus_swi_glu_float16"]
    assert re.search(r"rms_norm = relax.nn.rms_norm: dispatched to tilus_rms_norm_float16_\w+ \(rms_norm\)",
                     caplog.text)
    executable = tilus_relax.build(mod, "sm_90")  # a dynamic sequence length, compiled once
    assert executable.tilus_archs == ["sm_90"]


def test_the_gated_activation_fuses_into_the_wgmma_matmul():
    """On sm_90a the MLP's matmul (MatmulWgmma, symbolic rows) takes silu(gate) * up into its epilogue: no
    SwiGLU kernel, and the plain gate/up matmul's PrimFunc is gone with the call."""
    dispatch = DispatchKernels("sm_90a")
    mod = dispatch(small_block_module())
    done = [(d.op, d.pattern) for d in dispatch.decisions if d.dispatched]
    assert ("relax.multiply", "gated_linear") in done and ("relax.multiply", "swiglu") not in done
    names = sorted(re.sub(r"_[0-9a-f]{10}$", "", gv.name_hint) for gv in mod.get_global_vars())
    assert names == ["forward", "tilus_flash_attention_wgmma_float16"] + ["tilus_matmul_wgmma_float16"] * 4 + [
        "tilus_residual_add_float16", "tilus_rms_norm_float16"]
    text = mod["forward"].script()
    assert "R.nn.silu(" not in text and "R.split(" not in text
    # the fused call writes [rows, intermediate] from the [2 * intermediate, hidden] weight
    assert re.search(r"R.call_tir\(tilus_matmul_wgmma_float16_\w+, \(\w+, gate_up_weight\), "
                     r"out_ty=R.Tensor\(\(2 \* seq, 512\)", text)
    executable = tilus_relax.build(mod, "sm_90a")
    assert executable.tilus_archs == ["sm_90a"]


def test_weights_under_permute_dims_are_read_column_major():
    mod = DispatchKernels("sm_90")(small_block_module(batch=1, seq=1))
    kernels = [mod[gv] for gv in mod.get_global_vars() if gv.name_hint.startswith("tilus_matmul")]
    # b column-major: the weight itself, [n, k], is the kernel's b buffer (no transpose materialised)
    shapes = sorted(tuple(int(d.value) for d in f.params[1].ty.shape) for f in kernels)
    assert shapes == [(256, 256), (256, 512), (768, 256), (1024, 256)]


def decisions_for(build_body, params, target="sm_90", patterns=None):
    dispatch = DispatchKernels(target, patterns=patterns)
    dispatch(function_with(build_body, params))
    return dispatch.decisions


@pytest.mark.parametrize("case, reason", [
    ("float32", "dtype float32: Matmul takes float16 or bfloat16"),
    ("k100", "K = 100 is not a multiple of 8 (Matmul loads 16-byte rows)"),
    ("batched", "b is 3-D: Matmul multiplies by a 2-D weight"),
    ("symbolic_weight", "b has the symbolic shape"),
    ("out_dtype", "out_dtype float32: Matmul writes the inputs' dtype float16"),
])
def test_matmuls_that_stay_on_tvms_path_say_why(case, reason, caplog):
    m = tirx.Var("m", "int64")
    operands = {
        "float32": [tensor("a", [m, 64], "float32"), tensor("b", [64, 64], "float32")],
        "k100": [tensor("a", [m, 100]), tensor("b", [100, 64])],
        "batched": [tensor("a", [4, m, 64]), tensor("b", [4, 64, 64])],
        "symbolic_weight": [tensor("a", [m, 64]), tensor("b", [64, m])],
        "out_dtype": [tensor("a", [m, 64]), tensor("b", [64, 64])],
    }
    out_dtype = "float32" if case == "out_dtype" else None
    body, params = (lambda a, b: relax.op.matmul(a, b, out_dtype=out_dtype)), operands[case]
    with caplog.at_level(logging.INFO, logger="tilus_tvm.relax"):
        (decision,) = decisions_for(body, params)
    assert not decision.dispatched and reason in decision.detail
    assert f"not dispatched (matmul): {reason}" in caplog.text


def test_row_kernels_and_their_refusals():
    m = tirx.Var("m", "int64")
    x, g, b = tensor("x", [m, 768]), tensor("g", [768]), tensor("b", [768])
    decisions = decisions_for(lambda x, g, b: relax.op.nn.layer_norm(relax.op.nn.softmax(x), g, b, axes=[-1]),
                              [x, g, b])
    assert [(d.pattern, d.dispatched) for d in decisions] == [("softmax", True), ("layer_norm", True)]
    (decision,) = decisions_for(lambda x: relax.op.nn.softmax(x, axis=0), [tensor("x", [m, 768])])
    assert decision.detail == "softmax over axes [0]; the kernel works over the last axis only"
    (decision,) = decisions_for(lambda x: relax.op.nn.softmax(x), [tensor("x", [4, m])])
    assert "the last dimension m is symbolic" in decision.detail
    (decision,) = decisions_for(lambda x: relax.op.nn.softmax(x), [tensor("x", [4, 64], "float64")])
    assert decision.detail == "dtype float64: the kernel takes float16, bfloat16 or float32"


def test_attention_refusals():
    s = tirx.Var("s", "int64")
    q = tensor("q", [1, s, 8, 64])
    kv = tensor("kv", [1, s, 2, 64])
    (decision,) = decisions_for(lambda q, kv: relax.op.nn.attention(q, kv, kv), [q, kv])
    assert "grouped-query attention" in decision.detail and not decision.dispatched
    (decision,) = decisions_for(lambda q: relax.op.nn.attention(q, q, q), [tensor("q", [1, s, 8, 96])])
    assert "head_dim 96" in decision.detail
    k = tensor("k", [1, tirx.Var("t", "int64"), 8, 64])
    (decision,) = decisions_for(lambda q, k: relax.op.nn.attention(q, k, k, causal_mask="BottomRight"), [q, k])
    assert "causal_mask 'BottomRight' with different query and key lengths" in decision.detail
    (decision,) = decisions_for(lambda q: relax.op.nn.attention(q, q, q, causal_mask="BottomRight"), [q])
    assert decision.dispatched  # equal lengths: bottom-right is top-left


def test_a_pattern_whose_kernel_module_is_missing_is_skipped_with_the_reason(caplog):
    missing = Pattern("future_softmax", "relax.nn.softmax", "tilus_tvm.schedules.not_written_yet", lambda c, call: None)
    x = tensor("x", [4, 768])
    with caplog.at_level(logging.INFO, logger="tilus_tvm.relax"):
        decisions = decisions_for(lambda x: relax.op.nn.softmax(x), [x], patterns=(missing,) + PATTERNS)
    assert [(d.pattern, d.dispatched) for d in decisions] == [("future_softmax", False), ("softmax", True)]
    assert "tilus_tvm.schedules.not_written_yet cannot be imported" in decisions[0].detail
    assert "not dispatched (future_softmax)" in caplog.text


def test_the_dequantise_matmul_hook_recognises_a_dequantised_weight():
    m = tirx.Var("m", "int64")
    x, q, scale = tensor("x", [m, 64]), tensor("q", [128, 64], "int8"), tensor("scale", [128], "float16")

    def body(x, q, scale):
        return relax.op.matmul(x, relax.op.permute_dims(relax.op.dequantize(q, scale, relax.const(0, "int8"), axis=0,
                                                                            out_dtype="float16")))

    builder = relax.BlockBuilder()
    with builder.function("main", [x, q, scale]):
        with builder.dataflow():
            weight = builder.emit(relax.op.dequantize(q, scale, relax.const(0, "int8"), axis=0, out_dtype="float16"))
            out = builder.emit_output(builder.emit(relax.op.matmul(x, builder.emit(relax.op.permute_dims(weight)))))
        builder.emit_func_output(out)
    dispatch = DispatchKernels("sm_90")
    dispatch(builder.get())
    assert [(d.pattern, d.dispatched) for d in dispatch.decisions] == [("dequantize_matmul", False), ("matmul", True)]
    assert "not by QuantizedLinear's dequantize" in dispatch.decisions[0].detail


def test_without_a_cuda_target_nothing_is_dispatched(caplog):
    mod = function_with(lambda x: relax.op.nn.softmax(x), [tensor("x", [4, 768])])
    with caplog.at_level(logging.INFO, logger="tilus_tvm.relax"):
        out = DispatchKernels(tvm.target.Target("llvm"))(mod)
        DispatchKernels("sm_75")(mod)
    assert out.script() == mod.script()
    assert "target llvm is not CUDA; nothing dispatched" in caplog.text
    assert "no usable CUDA target (unknown target 'sm_75'" in caplog.text


def test_dispatch_is_a_pass_in_a_sequential():
    mod = function_with(lambda x: relax.op.nn.softmax(x), [tensor("x", [4, 768])])
    seq = tvm.transform.Sequential([DispatchKernels("sm_90").as_pass(), relax.transform.DeadCodeElimination()])
    assert "R.call_tir(cls.tilus_softmax_float16" in seq(mod).script()


def test_a_kernel_that_fails_leaves_the_call_on_tvms_path_with_a_warning(caplog):
    def broken(context, call):
        raise tilus_relax.RelaxError("call(Broken): the kernel does not compile for these arguments")

    pattern = Pattern("broken_softmax", "relax.nn.softmax", "tilus_tvm.schedules.softmax", broken)
    with caplog.at_level(logging.WARNING, logger="tilus_tvm.relax"):
        decisions = decisions_for(lambda x: relax.op.nn.softmax(x), [tensor("x", [4, 768])], patterns=(pattern,))
    assert [(d.pattern, d.dispatched) for d in decisions] == [("broken_softmax", False)]
    assert "not dispatched (broken_softmax): the kernel failed: call(Broken)" in caplog.text


def test_on_sm_90a_attention_takes_the_wgmma_kernel():
    """sm_90a: the block's attention dispatches to FlashAttentionWgmma (sm_90: mma.sync's FlashAttention)."""
    for arch, wgmma in (("sm_90a", True), ("sm_90", False)):
        mod = DispatchKernels(arch)(small_block_module())
        names = [gv.name_hint for gv in mod.get_global_vars() if gv.name_hint.startswith("tilus_flash_attention")]
        assert len(names) == 1 and names[0].startswith("tilus_flash_attention_wgmma_float16") == wgmma, names
