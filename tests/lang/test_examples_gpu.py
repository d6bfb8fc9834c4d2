"""The seed tutorial's programs on the GPU, with the seed's shapes and with shapes that are not
multiples of the tiles. Outputs are poisoned with NaN first, so an element never written fails."""
import math
import subprocess
import sys

import pytest
import torch

import tilus_tvm as tilus
from tests.helpers import ROOT, TUTORIALS, load_tutorial

pytestmark = pytest.mark.gpu


def test_hello_world_prints_once():
    result = subprocess.run([sys.executable, str(TUTORIALS / "01_hello_world.py")], capture_output=True, text=True,
                            cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("Hello, World!") == 1


def test_add_one_refuses_cpu_tensors_like_the_seed_passed():
    module = load_tutorial("02_add_one")
    kernel = module.AddOneKernel(block_n=128, warps=4)
    a = torch.arange(16, dtype=torch.float32)
    with pytest.raises(tilus.LaunchError, match="a_ptr is a tensor on cpu"):
        kernel(16, a, torch.empty_like(a))


@pytest.mark.parametrize("block_n, warps", [(128, 4), (16, 4), (256, 1), (1024, 8), (96, 2)])
@pytest.mark.parametrize("n", [1, 16, 127, 128, 129, 1000, 100_003])
def test_add_one(n, block_n, warps):
    module = load_tutorial("02_add_one")
    kernel = module.AddOneKernel(block_n=block_n, warps=warps)
    a = torch.randn(n, device="cuda")
    b = torch.full_like(a, float("nan"))
    kernel(n, a, b)
    torch.testing.assert_close(b, a + 1, rtol=0, atol=0)


def test_add_one_tutorial_main(capsys):
    load_tutorial("02_add_one").main()
    out = capsys.readouterr().out
    assert "refused:" in out and "tensor([ 1.,  2.," in out


def test_matmul_tutorial_main_seed_shapes():
    load_tutorial("03_matmul").main()


@pytest.mark.parametrize("m, n, k", [(1, 4096, 4096), (37, 200, 72), (130, 128, 16), (64, 136, 40), (3, 8, 8),
                                     (257, 384, 1000)])
def test_matmul_shapes(m, n, k):
    kernel = load_tutorial("03_matmul").Matmul()
    a = torch.randn(m, k, dtype=torch.float16, device="cuda") / math.sqrt(k)
    b = torch.randn(k, n, dtype=torch.float16, device="cuda") / math.sqrt(k)
    c = torch.full((m, n), float("nan"), dtype=torch.float16, device="cuda")
    kernel(m, n, k, a, b, c)
    torch.testing.assert_close(c.float(), a.float() @ b.float(), rtol=1e-2, atol=1e-2)


def test_matmul_v0_tutorial_main(capsys):
    pytest.importorskip("pandas")
    load_tutorial("04_matmul_v0").main()
    out = capsys.readouterr().out
    assert "torch" in out and "tilus" in out


@pytest.mark.parametrize("m, n, k", [(4096, 4096, 4096), (1, 64, 16), (100, 72, 50), (65, 65, 65)])
def test_matmul_v0_shapes(m, n, k):
    pytest.importorskip("pandas")
    kernel = load_tutorial("04_matmul_v0").MatmulV0()
    a = (torch.rand(m, k, dtype=torch.float16, device="cuda") - 0.5) / math.sqrt(k)
    b = (torch.rand(k, n, dtype=torch.float16, device="cuda") - 0.5) / math.sqrt(k)
    c = torch.full((m, n), float("nan"), dtype=torch.float16, device="cuda")
    kernel(m, n, k, a, b, c)
    torch.testing.assert_close(c.float(), a.float() @ b.float(), rtol=1e-2, atol=1e-2)


def test_unaligned_views_are_correct():
    """A view starting one element into its storage cannot use 16-byte vectors: a specialisation
    without vector accesses is compiled for it."""
    kernel = load_tutorial("03_matmul").Matmul()
    m, n, k = 64, 128, 64
    a_store = torch.randn(m * k + 1, dtype=torch.float16, device="cuda") / 8
    a = a_store[1:].view(m, k)
    b = torch.randn(k, n, dtype=torch.float16, device="cuda") / 8
    c = torch.full((m, n), float("nan"), dtype=torch.float16, device="cuda")
    kernel(m, n, k, a, b, c)
    torch.testing.assert_close(c.float(), a.float() @ b.float(), rtol=1e-2, atol=1e-2)


EXPORTED = """
import sys, torch, tilus_tvm as tilus
kernel = tilus.load_kernel(sys.argv[1])
a = torch.randn(300, device="cuda")
b = torch.full_like(a, float("nan"))
kernel(300, a, b)
assert torch.equal(b, a + 1), "wrong result"
print("loaded kernel ok", kernel.from_cache)
"""


def test_exported_kernel_runs_in_a_fresh_process(tmp_path):
    kernel = load_tutorial("02_add_one").AddOneKernel(block_n=128, warps=4)
    compiled = kernel.compile(300, torch.zeros(300), torch.zeros(300))
    path = compiled.export(tmp_path / "add_one.so")
    result = subprocess.run([sys.executable, "-c", EXPORTED, path], capture_output=True, text=True, cwd=ROOT,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    assert "loaded kernel ok" in result.stdout
