"""quantized_matmul under torch.compile (tilus_tvm/schedules/quantized_op.py), on the CPU: the traced graph holds the
custom operator with the weight's format and the configuration as text that round-trips, the out= form holds the
mutating operator, and bad arguments fail while the graph is traced with the eager call's message. The compiled
calls' results are checked on the GPU (test_quantized_op_gpu.py)."""
from dataclasses import replace

import pytest
import torch

import tilus_tvm as tilus
from tilus_tvm.schedules import pack_weight, quantized_matmul
from tilus_tvm.schedules.quantized_configs import Config
from tilus_tvm.schedules.quantized_weight import WeightFormat


@pytest.mark.parametrize("fmt", [WeightFormat(tilus.uint4b, 256, 128, 128, k_tile=2),
                                 WeightFormat(tilus.int3b, 512, 80, 32),
                                 WeightFormat(tilus.float6_e3m2, 256, 64, 256, "bfloat16", 4),
                                 WeightFormat(tilus.float8_e4m3, 128, 16, 64, k_tile=8)])
def test_weight_spec_round_trips(fmt):
    assert WeightFormat.from_spec(fmt.spec) == fmt


@pytest.mark.parametrize("config", [Config(), Config(warps=8, split_reduce="kernel", tma_activations=False,
                                                     fused_scales=True, weight_stages=3)])
def test_config_text_round_trips(config):
    assert Config.from_text(config.text) == config
    assert Config.from_text(replace(config, warps=1).text).warps == 1  # (made again by a replace)


def weight(k=256, n=128, name="uint4b", group=128, seed=0):
    generator = torch.Generator().manual_seed(seed)
    codes = torch.randint(0, 1 << tilus.dtypes.as_dtype(name).nbits, (k, n), generator=generator)
    scales = (torch.rand(k // group, n, generator=generator) + 0.5).to(torch.float16)
    return pack_weight(codes, name, group), scales


class Graphs:
    """A torch.compile backend that keeps the traced graphs and runs nothing (the kernels need a GPU)."""

    def __init__(self):
        self.graphs = []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        return lambda *args: [torch.empty(0)] * len(gm.graph.find_nodes(op="output")[0].args[0])

    def calls(self, op):
        """The graphs' calls of ``op`` (an operator's packet, or its overload)."""
        return [node for gm in self.graphs for node in gm.graph.nodes if node.target in (op, op.default)]


def test_compile_traces_the_call_into_one_graph():
    packed, scales = weight()
    config = Config(warps=2, units_per_warp=1)
    graphs = Graphs()
    torch.compile(lambda a: quantized_matmul(a, packed, scales, config=config) * 2, fullgraph=True,
                  backend=graphs)(torch.randn(3, 256).half())
    (node,) = graphs.calls(torch.ops.tilus_tvm.quantized_matmul)
    assert WeightFormat.from_spec(node.args[4]) == packed.format
    assert Config.from_text(node.args[7]) == config
    assert node.meta["example_value"].shape == (3, 128)


def test_compile_out_form_writes_out():
    packed, scales = weight(name="int4b", group=64)
    out = torch.empty(2, 5, 128, dtype=torch.float16)
    graphs = Graphs()
    torch.compile(lambda a: quantized_matmul(a, packed, scales, out=out, dtype="int4b", group_size=64),
                  fullgraph=True, backend=graphs)(torch.randn(2, 5, 256).half())
    (node,) = graphs.calls(torch.ops.tilus_tvm.quantized_matmul_out)
    assert node.args[6:8] == ("int4b", 64)
    assert not graphs.calls(torch.ops.tilus_tvm.quantized_matmul)


def test_dynamic_batch_traces_a_closure_weight():
    """dynamic=True makes the ints of a closure's objects symbolic: the texts passed to the operator are made with
    the objects, not while tracing (formatting a symbolic int there is unsupported)."""
    packed, scales = weight(k=1024, n=384)
    config = Config(warps=2, split_k=2)
    graphs = Graphs()
    compiled = torch.compile(lambda a: quantized_matmul(a, packed, scales, config=config), fullgraph=True,
                             dynamic=True, backend=graphs)
    for m in (1, 7, 16, 70):
        compiled(torch.randn(m, 1024).half())
    nodes = graphs.calls(torch.ops.tilus_tvm.quantized_matmul)
    assert nodes and all(node.args[4] == packed.format.spec and node.args[7] == config.text for node in nodes)
    assert len(graphs.graphs) <= 2  # (1 row, then every batch in one graph with a symbolic batch)


def test_compile_with_zero_points_and_batch_dims():
    packed, scales = weight(name="uint3b", group=32)
    zeros = torch.full_like(scales, 3.0)
    graphs = Graphs()
    torch.compile(lambda a: quantized_matmul(a, packed, scales, zeros), fullgraph=True,
                  backend=graphs)(torch.randn(4, 2, 256).half())
    (node,) = graphs.calls(torch.ops.tilus_tvm.quantized_matmul)
    assert node.meta["example_value"].shape == (4, 2, 128)
    assert node.args[3] is not None


@pytest.mark.parametrize("call,message", [
    (lambda a, w, s: quantized_matmul(a, w, s[:1]), r"scales has shape \[1, 128\]"),
    (lambda a, w, s: quantized_matmul(a.float(), w, s), "a must be float16 or bfloat16"),
    (lambda a, w, s: quantized_matmul(a[:, :128], w, s), r"a must be a tensor \[..., K=256\]"),
    (lambda a, w, s: quantized_matmul(a, w, s, dtype="int4b"), "packed for uint4b, dtype=int4b"),
    (lambda a, w, s: quantized_matmul(a, w, s, group_size=64), "packed for group size 128"),
    (lambda a, w, s: quantized_matmul(a, w, s, out=torch.empty(3, 127, dtype=torch.float16)),
     r"out must be a contiguous torch.float16 tensor of shape \[3, 128\]"),
    (lambda a, w, s: quantized_matmul(a, w, s, config=replace(Config(), split_reduce="sideways")), "split_reduce"),
    (lambda a, w, s: quantized_matmul(a, w.storage, s), "packed_weight must be a QuantizedWeight"),
    (lambda a, w, s: quantized_matmul(a, w, s, config={"warps": 2}), "config must be a tilus_tvm"),
])
def test_bad_arguments_fail_while_tracing(call, message):
    packed, scales = weight()
    graphs = Graphs()
    with pytest.raises(Exception, match=message):
        torch.compile(lambda a: call(a, packed, scales), fullgraph=True, backend=graphs)(torch.randn(3, 256).half())
    assert not graphs.graphs  # nothing got as far as a graph


def test_eager_checks_are_the_traced_checks():
    """The eager call raises the same error (before it needs a GPU)."""
    packed, scales = weight()
    with pytest.raises(tilus.errors.LaunchError, match=r"scales has shape \[1, 128\]"):
        quantized_matmul(torch.randn(3, 256).half(), packed, scales[:1])
    with pytest.raises(tilus.errors.LaunchError, match="on one device"):
        quantized_matmul(torch.randn(3, 256).half(), packed, scales, out=torch.empty(3, 128, dtype=torch.float16,
                                                                                       device="meta"))
