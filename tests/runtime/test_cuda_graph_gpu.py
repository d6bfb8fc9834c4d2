"""Kernels captured in a CUDA graph (as serving stacks run decode steps) replay correctly: they launch
on torch's current stream, so ``torch.cuda.graph`` records them, workspaces and semaphores included.
As with any torch code, each call is made once before the capture (it compiles and allocates)."""
from dataclasses import replace
import math

import pytest
import torch

from tilus_tvm.schedules.matmul import matmul
from tilus_tvm.schedules.quantized_matmul import choose_config, pack_weight, quantized_matmul
from tilus_tvm.schedules.quantized_weight import dequantize
from tilus_tvm.schedules.softmax import softmax

pytestmark = pytest.mark.gpu


def replay_with(graph, static, fresh):
    """Copy each fresh tensor into its captured one, replay, wait."""
    for dst, src in zip(static, fresh):
        dst.copy_(src)
    graph.replay()
    torch.cuda.synchronize()


def capture(fn):
    fn()  # compile, allocate workspaces
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph


@pytest.mark.parametrize("m,n,k,splits", [(64, 256, 512, 1), (4, 512, 4096, 4)])
def test_matmul_replays(m, n, k, splits):
    """splits=4: MatmulSplitK, whose semaphores are a workspace that must come back to zero."""
    a = torch.randn(m, k, device="cuda").half()
    b = torch.randn(k, n, device="cuda").half()
    out = torch.full((m, n), float("nan"), device="cuda").half()
    graph = capture(lambda: matmul(a, b, out=out, splits=splits))
    for seed in range(3):
        fresh = [torch.randn(m, k, device="cuda").half(), torch.randn(k, n, device="cuda").half()]
        out.fill_(float("nan"))
        replay_with(graph, [a, b], fresh)
        expected = fresh[0].float() @ fresh[1].float()
        torch.testing.assert_close(out.float(), expected, rtol=2e-2, atol=2e-2 * math.sqrt(k),
                                   msg=lambda text: f"replay {seed}: {text}")


@pytest.mark.parametrize("split_reduce", ["kernel", "serial"])
def test_quantized_decode_replays(split_reduce):
    k, n = 4096, 512
    generator = torch.Generator().manual_seed(1)
    w = torch.randint(0, 16, (k, n), generator=generator).float()
    packed = pack_weight(w.cuda(), "uint4b", 128).to("cuda")
    scales = ((torch.rand(k // 128, n, generator=generator) + 0.5) / math.sqrt(k)).half().cuda()
    config = replace(choose_config(1, packed.format), split_reduce=split_reduce)
    assert config.split_k > 1  # the case with a second kernel or semaphores
    a = torch.randn(1, k, device="cuda").half()
    out = torch.empty(1, n, device="cuda").half()
    graph = capture(lambda: quantized_matmul(a, packed, scales, out=out, config=config))
    weight = dequantize(packed, scales, None)
    for seed in range(3):
        fresh = torch.randn(1, k, device="cuda").half()
        out.fill_(float("nan"))
        replay_with(graph, [a], [fresh])
        reference = fresh.float() @ weight
        torch.testing.assert_close(out.float(), reference, rtol=2e-2, atol=2e-2 * reference.abs().max().item(),
                                   msg=lambda text: f"replay {seed}: {text}")


def test_softmax_replays():
    x = torch.randn(8, 3000, device="cuda").half()
    out = torch.empty_like(x)
    graph = capture(lambda: softmax(x, out=out))
    fresh = torch.randn(8, 3000, device="cuda").half()
    replay_with(graph, [x], [fresh])
    torch.testing.assert_close(out.float(), torch.softmax(fresh.float(), -1), rtol=1e-2, atol=1e-3)
