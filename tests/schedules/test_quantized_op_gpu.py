"""quantized_matmul under torch.compile on the GPU (tilus_tvm/schedules/quantized_op.py): inductor's graph, its CUDA
graphs (mode="reduce-overhead") and a batch that varies (dynamic=True) give the eager call's bits, the out= form
writes its NaN-poisoned output, and torch.library.opcheck accepts the operators' registration."""
import pytest
import torch

from tilus_tvm.schedules import pack_weight, quantized_matmul
from tilus_tvm.schedules.quantized_configs import Config

pytestmark = pytest.mark.gpu


def weight(name="uint4b", k=1024, n=384, group=128, zero_points=False, seed=0):
    generator = torch.Generator().manual_seed(seed)
    codes = torch.randint(0, 16 if name.endswith("4b") else 256, (k, n), generator=generator)
    if name.startswith("int"):
        codes -= 8
    scales = ((torch.rand(k // group, n, generator=generator) + 0.5) / k ** 0.5).half().cuda()
    zeros = (torch.rand(k // group, n, generator=generator) * 4).round().half().cuda() if zero_points else None
    return pack_weight(codes.cuda(), name, group).to("cuda"), scales, zeros


def activations(m, k=1024, seed=1):
    return torch.randn(m, k, generator=torch.Generator().manual_seed(seed)).half().cuda()


@pytest.mark.parametrize("zero_points", [False, True])
def test_inductor_fullgraph_gives_the_eager_bits(zero_points):
    packed, scales, zeros = weight(zero_points=zero_points)
    a = activations(5)
    eager = quantized_matmul(a, packed, scales, zeros)
    compiled = torch.compile(lambda x: quantized_matmul(x, packed, scales, zeros), fullgraph=True)
    assert torch.equal(compiled(a), eager)
    bias = torch.randn(384).half().cuda()
    fused = torch.compile(lambda x: torch.relu(quantized_matmul(x, packed, scales, zeros) + bias), fullgraph=True)
    torch.testing.assert_close(fused(a), torch.relu(eager + bias), rtol=1e-3, atol=1e-3)


def test_out_form_and_a_given_configuration():
    packed, scales, _ = weight("int4b", group=64)
    a = activations(3)
    config = Config(warps=2, units_per_warp=1, split_k=2)
    eager = quantized_matmul(a, packed, scales, config=config)
    out = torch.full((3, 384), float("nan"), dtype=torch.float16, device="cuda")
    result = torch.compile(lambda x, o: quantized_matmul(x, packed, scales, out=o, config=config),
                           fullgraph=True)(a, out)
    assert result.data_ptr() == out.data_ptr()
    assert torch.equal(out, eager)


def test_cuda_graphs_of_reduce_overhead():
    packed, scales, _ = weight("uint8")
    compiled = torch.compile(lambda x: quantized_matmul(x, packed, scales) * 2, mode="reduce-overhead",
                             fullgraph=True)
    for seed in range(4):  # warm-up runs, then replays of the captured graph on new inputs
        a = activations(8, seed=seed)
        torch.testing.assert_close(compiled(a).clone(), quantized_matmul(a, packed, scales) * 2, rtol=0, atol=0)


def test_dynamic_batch():
    packed, scales, _ = weight()
    compiled = torch.compile(lambda x: quantized_matmul(x, packed, scales), fullgraph=True, dynamic=True)
    for m in (1, 7, 16, 70):
        a = activations(m, seed=m)
        assert torch.equal(compiled(a), quantized_matmul(a, packed, scales)), m


def test_opcheck():
    packed, scales, zeros = weight(zero_points=True)
    a = activations(4)
    options = (packed.format.spec, None, None, "", None, False)
    torch.library.opcheck(torch.ops.tilus_tvm.quantized_matmul.default, (a, packed.storage, scales, zeros, *options))
    out = torch.empty(4, 384, dtype=torch.float16, device="cuda")
    torch.library.opcheck(torch.ops.tilus_tvm.quantized_matmul_out.default,
                          (a, packed.storage, scales, zeros, out, *options))
