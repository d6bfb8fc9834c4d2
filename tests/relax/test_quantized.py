"""Weight-only quantized linears in Relax: QuantizedLinear (tilus_tvm/relax/quantized.py) and the
dequantize_matmul pattern of DispatchKernels (tilus_tvm/relax/patterns.py)."""
import logging
import re

import pytest
import torch
import tvm
from tvm import relax
from tvm.relax.frontend import nn

import tilus_tvm.relax as tilus_relax
from tilus_tvm.errors import RelaxError
from tilus_tvm.relax.patterns import PATTERNS
from tilus_tvm.relax.quantized import (QuantizedLinear, code_position, dequantize_te, format_attrs, linear_params,
                                       weight_format)
from tilus_tvm.schedules.quantized_weight import dequantize, pack_weight, quantize_weight


def export(layer, batch, k, dtype="float16"):
    return layer.export_tvm({"forward": {"x": nn.spec.Tensor((batch, k), dtype)}})


def run_on(device, executable, x, values, specs):
    vm = relax.VirtualMachine(executable, device)
    args = [tvm.runtime.tensor(x.cpu().numpy(), device)] + [tvm.runtime.tensor(values[name], device)
                                                            for name, _ in specs]
    return torch.from_numpy(vm["forward"](*args).numpy())


@pytest.mark.parametrize("name", ["uint4b", "uint2b", "uint3b", "int1b", "uint8", "int5b"])
@pytest.mark.parametrize("k, n, group", [(256, 96, 128), (128, 48, 32), (512, 40, 64), (64, 32, 64)])
def test_code_position_is_the_packing_of_pack_weight(name, k, n, group):
    """The code of w[k, n] read from pack_weight's storage where code_position says it is (interleaved
    formats included), for every k and n."""
    from tilus_tvm import lowp

    fmt = weight_format(name, k, n, group, k_tile=0)
    codes = torch.randint(0, 1 << fmt.dtype.nbits, (k, n))
    storage = pack_weight(lowp.decode(codes, fmt.dtype).float(), name, group, k_tile=0).storage
    lanes = storage.permute(0, 1, 3, 2, 4).contiguous()  # [granules, steps, 32, chunks, V/4]: a lane's bytes
    if fmt.placement is not None:  # bit-placed blocks: the slots' codes come back by the placement
        stream = fmt.placement.unpack(lanes.reshape(fmt.granules, k // fmt.kt, 32, -1))
    else:
        stream = lowp.unpack_codes(lanes.reshape(-1).view(torch.uint8), fmt.dtype.nbits, lanes.numel() * 32 //
                                   fmt.dtype.nbits).reshape(fmt.granules, k // fmt.kt, 32, -1)
    kk, nn_ = torch.meshgrid(torch.arange(k), torch.arange(n), indexing="ij")
    granule, step, lane, slot = code_position(fmt, kk, nn_)
    assert torch.equal(stream[granule, step, lane, slot].to(torch.int64), codes)


@pytest.mark.parametrize("weight_dtype, group, zero_points, k_tile", [
    ("uint4b", 128, False, None), ("int4b", 32, True, 0), ("int3b", 64, False, 4), ("uint8", None, True, None),
    ("uint2b", 64, False, 8), ("int6b", 32, True, None), ("uint7b", None, False, 0)])
def test_the_undispatched_layer_computes_x_times_the_dequantized_weight_on_the_cpu(weight_dtype, group, zero_points,
                                                                                   k_tile):
    """The dequantize PrimFunc reads pack_weight's storage: in tiles of 2 k-steps (the default), granule-major
    (k_tile=0), and in tiles of 4 or 8 with K's k-steps padded to whole tiles."""
    k, n = 256, 80
    layer = QuantizedLinear(k, n, weight_dtype, group_size=group, zero_points=zero_points, k_tile=k_tile)
    mod, specs = export(layer, 3, k)
    assert "R.matmul(" in mod.script()
    torch.manual_seed(hash((weight_dtype, group)) % 1000)
    qw, scales, zeros = quantize_weight(torch.randn(k, n), weight_dtype, group, zero_points=zero_points,
                                        k_tile=k_tile)
    assert qw.format == layer.format
    x = torch.randn(3, k).half()
    got = run_on(tvm.cpu(), tvm.compile(mod, "llvm"), x, linear_params(qw, scales, zeros), specs).float()
    expected = x.float() @ dequantize(qw, scales, zeros).half().float()
    torch.testing.assert_close(got, expected, rtol=2e-2, atol=2e-2 * expected.abs().max().item())


@pytest.mark.parametrize("batch", [1, 16, "n"])
def test_the_layer_is_dispatched_to_quantized_matmul_and_builds_for_sm_90(batch, caplog):
    layer = QuantizedLinear(4096, 1024, "uint4b", group_size=128, zero_points=True)
    mod, _ = export(layer, batch, 4096)
    split = batch != "n"  # few static rows: K split over blocks, the float32 partial sums added by R.sum
    dispatch = tilus_relax.DispatchKernels("sm_90")
    with caplog.at_level(logging.INFO, logger="tilus_tvm.relax"):
        mod = dispatch(mod)
    assert [(d.pattern, d.dispatched) for d in dispatch.decisions] == [("dequantize_matmul", True)]
    assert re.search(r"matmul = relax.matmul: dispatched to tilus_quantized_matmul_\w+ \(dequantize_matmul\)",
                     caplog.text)
    text = mod.script()
    assert "R.matmul(" not in text
    names = [gv.name_hint for gv in mod.get_global_vars()]
    assert not [name for name in names if "dequantize" in name]  # the weight is never dequantised
    assert sorted(re.sub(r"_[0-9a-f]{10}$", "", name) for name in names if name != "forward") == [
        "tilus_quantized_matmul_float16" + ("_float32" if split else "")]
    assert ("R.sum(" in text) == split
    executable = tilus_relax.build(mod, "sm_90")
    assert executable.tilus_archs == ["sm_90"]


@pytest.mark.parametrize("weight_dtype, group, dtype, reason", [
    ("uint4b", 16, "float16", "group_size must be 32, 64, 128"),
    ("uint4b", 128, "float32", "x is float32: QuantizedMatmul takes float16 or bfloat16"),
    ("uint1b", 64, "float16", None),
])
def test_unsupported_layers_stay_on_tvms_path_with_the_reason_logged(weight_dtype, group, dtype, reason, caplog):
    layer = QuantizedLinear(256, 64, weight_dtype, group_size=group, dtype=dtype)
    mod, _ = export(layer, 2, 256, dtype)
    dispatch = tilus_relax.DispatchKernels("sm_90", patterns=[p for p in PATTERNS if p.name == "dequantize_matmul"])
    with caplog.at_level(logging.INFO, logger="tilus_tvm.relax"):
        out = dispatch(mod)
    if reason is None:  # a width the kernel has: dispatched (the control case)
        assert [d.dispatched for d in dispatch.decisions] == [True]
        return
    assert [(d.pattern, d.dispatched) for d in dispatch.decisions] == [("dequantize_matmul", False)]
    assert reason in dispatch.decisions[0].detail and reason in caplog.text
    assert "R.matmul(" in out.script() and "tilus_dequantize" in out.script()
    tvm.compile(out, "llvm")  # still a valid module on TVM's path


def test_a_transposed_dequantized_weight_is_reported():
    layer = QuantizedLinear(128, 128, "uint4b", group_size=64)

    class Transposed(nn.Module):
        def __init__(self):
            self.layer = layer

        def forward(self, x):
            w = nn.op.tensor_expr_op(*_dequantize_args(self.layer), attrs=format_attrs(self.layer.format, False))
            return nn.op.matmul(x, nn.op.permute_dims(w))

    mod, _ = Transposed().export_tvm({"forward": {"x": nn.spec.Tensor((2, 128), "float16")}})
    dispatch = tilus_relax.DispatchKernels("sm_90")
    dispatch(mod)
    assert not dispatch.decisions[0].dispatched and "transposed" in dispatch.decisions[0].detail


def _dequantize_args(layer):
    return (dequantize_te(layer.format, False, "float16"), "tilus_dequantize", [layer.weight, layer.scales])


def test_the_module_to_dtype_keeps_the_integer_storage():
    layer = QuantizedLinear(256, 64, "int4b", group_size=64, zero_points=True)
    layer.to("bfloat16")
    mod, specs = export(layer, 1, 256, "bfloat16")
    types = {name: param.dtype for name, param in specs}
    assert types == {"weight": "int32", "scales": "bfloat16", "zeros": "bfloat16"}


@pytest.mark.parametrize("kwargs, message", [
    (dict(weight_dtype="float8_e4m3"), "weight_dtype float8_e4m3 is not supported"),
    (dict(weight_dtype="int9b"), "weight_dtype"),
    (dict(group_size=48), "group_size=48 must be None"),
    (dict(dtype="int8"), "dtype must be one of"),
    (dict(k_tile=3), "k_tile=3 must be 0 (granule-major storage) or 2, 4, 8"),
])
def test_bad_layers_are_refused_naming_the_argument(kwargs, message):
    with pytest.raises(RelaxError, match=re.escape(message)):
        QuantizedLinear(256, 64, **kwargs)


def test_linear_params_checks_the_scales():
    qw, scales, _ = quantize_weight(torch.randn(256, 64), "uint4b", 128)
    with pytest.raises(RelaxError, match="scales has shape"):
        linear_params(qw, scales[:1])
    values = linear_params(qw, scales)
    assert values["weight"].shape == tuple(qw.format.storage_shape) and values["weight"].dtype == "int32"


@pytest.mark.gpu
@pytest.mark.parametrize("weight_dtype, group, zero_points, batch", [("uint4b", 128, False, 1), ("int4b", 32, True, 5),
                                                                    ("uint8", None, False, 40)])
def test_the_dispatched_layer_on_the_gpu_matches_torch(weight_dtype, group, zero_points, batch):
    arch = "sm_{}{}".format(*torch.cuda.get_device_capability())
    k, n = 1024, 384
    layer = QuantizedLinear(k, n, weight_dtype, group_size=group, zero_points=zero_points)
    mod, specs = export(layer, 1 if batch == 1 else "m", k)  # batch 1: static, K split
    dispatch = tilus_relax.DispatchKernels(arch)
    mod = dispatch(mod)
    assert [d.dispatched for d in dispatch.decisions] == [True]
    qw, scales, zeros = quantize_weight(torch.randn(k, n), weight_dtype, group, zero_points=zero_points)
    values = linear_params(qw, scales, zeros)
    executable = tilus_relax.build(mod, arch)
    for rows in ((1,) if batch == 1 else (batch, 3 * batch + 1)):  # one compiled module, two batch sizes
        x = torch.randn(rows, k).half()
        got = run_on(tvm.cuda(), executable, x, values, specs).float()
        expected = x.float() @ dequantize(qw, scales, zeros)
        torch.testing.assert_close(got, expected, rtol=1e-2, atol=1e-2 * expected.abs().max().item())


def test_linear_params_checks_the_weight_against_the_layer():
    """A weight stored otherwise than the layer reads it (granule-major for a layer in tiles of 2, the default) is
    named before any parameter is bound."""
    layer = QuantizedLinear(256, 64, "uint4b", group_size=128)
    qw, scales, _ = quantize_weight(torch.randn(256, 64), "uint4b", 128, k_tile=0)
    with pytest.raises(RelaxError, match=r"the weight is uint4b .*, the layer wants .*k-steps in tiles of 2.*k_tile=2"):
        linear_params(qw, scales, layer=layer)
    assert linear_params(qw, scales, layer=QuantizedLinear(256, 64, "uint4b", group_size=128, k_tile=0))
    qw, scales, _ = quantize_weight(torch.randn(256, 64), "uint4b", 128)
    assert linear_params(qw, scales, layer=layer)["weight"].shape == tuple(layer.weight.shape)
