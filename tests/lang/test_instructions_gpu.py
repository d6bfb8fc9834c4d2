"""Each instruction family on the GPU against torch, with fresh random data and poisoned outputs."""
import subprocess
import sys

import pytest
import torch

from tests.helpers import ROOT
from tests.lang import kernels as K
from tilus_tvm import bfloat16, float16, float32, int8, int32
from tilus_tvm.layout import column_spatial, local, spatial

pytestmark = pytest.mark.gpu


def nan_like(t):
    return torch.full_like(t, float("nan"))


@pytest.mark.parametrize("m", [1, 31, 32, 100])
@pytest.mark.parametrize("block_m, n, warps", [(32, 48, 2), (16, 64, 4), (8, 40, 1)])
def test_elementwise_broadcast_where(m, block_m, n, warps):
    x = torch.randn(m, n, device="cuda")
    y = torch.randn(m, 1, device="cuda")
    z = torch.full_like(x, float("nan"))
    K.Elementwise(block_m, n, warps)(m, x, y, z)
    expected = torch.maximum(torch.where(x > 0, x * y, torch.exp(x) - 1), torch.tensor(-0.5, device="cuda"))
    torch.testing.assert_close(z, expected)


@pytest.mark.parametrize("m", [1, 8, 77])
@pytest.mark.parametrize("block_m, n, warps", [(8, 128, 4), (4, 64, 1), (16, 32, 8), (2, 256, 2)])
def test_softmax(m, block_m, n, warps):
    x = torch.randn(m, n, device="cuda") * 3
    y = torch.full_like(x, float("nan"))
    K.Softmax(block_m, n, warps)(m, x, y)
    torch.testing.assert_close(y, torch.softmax(x, dim=1))


@pytest.mark.parametrize("rows, cols, warps", [(64, 32, 4), (128, 8, 8), (32, 64, 1), (48, 16, 2)])
def test_column_reductions(rows, cols, warps):
    x = torch.randn(rows, cols, device="cuda")
    out = torch.full((3, cols), float("nan"), device="cuda")
    K.ColumnReduce(rows, cols, warps)(x, out)
    torch.testing.assert_close(out[0], x.sum(0), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out[1], x.amax(0))
    torch.testing.assert_close(out[2], x.amin(0))


@pytest.mark.parametrize("swizzle", [True, False])
def test_shared_round_trip(swizzle):
    x = torch.randn(32, 64, device="cuda").half()
    y = nan_like(x)
    K.SharedRoundTrip(swizzle)(x, y)
    torch.testing.assert_close(y, x + x)


DOT_CASES = [
    (64, 64, 32, float16, float32, 4),
    (64, 128, 64, float16, float32, 4),
    (128, 64, 16, float16, float32, 8),
    (16, 8, 16, float16, float32, 1),
    (16, 8, 16, float16, float32, 4),  # more warps than atoms: replicated warps
    (32, 32, 32, float16, float16, 2),
    (64, 32, 64, bfloat16, float32, 4),
    (32, 32, 64, int8, int32, 2),
    (32, 48, 8, float16, float32, 2),  # k = 8: the m16n8k8 atom
    (32, 32, 32, float32, float32, 4),  # CUDA cores
    (24, 12, 10, float16, float32, 2),  # not a multiple of any atom: CUDA cores
    (5, 7, 3, float32, float32, 1),
]


@pytest.mark.parametrize("m, n, k, a_dtype, c_dtype, warps", DOT_CASES)
@pytest.mark.parametrize("with_c", [True, False])
def test_dot(m, n, k, a_dtype, c_dtype, warps, with_c):
    if a_dtype is int8:
        a = torch.randint(-8, 8, (m, k), device="cuda", dtype=torch.int8)
        b = torch.randint(-8, 8, (k, n), device="cuda", dtype=torch.int8)
        expected = (a.cpu().int() @ b.cpu().int()).cuda()  # torch has no integer matmul on CUDA
        c = torch.full((m, n), -12345, device="cuda", dtype=torch.int32)
    else:
        a = torch.randn(m, k, device="cuda").to(a_dtype.torch_dtype) / 4
        b = torch.randn(k, n, device="cuda").to(a_dtype.torch_dtype) / 4
        expected = a.float() @ b.float()
        c = torch.full((m, n), float("nan"), device="cuda", dtype=c_dtype.torch_dtype)
    if with_c:
        expected = expected + 1
    K.dot_kernel(m, n, k, a_dtype, c_dtype, warps=warps, with_c=with_c)(a, b, c)
    if a_dtype is int8:
        assert torch.equal(c, expected)
    else:
        tol = 2e-2 if c_dtype is float16 or a_dtype is bfloat16 else 1e-3
        torch.testing.assert_close(c.float(), expected.float(), rtol=tol, atol=tol)


@pytest.mark.parametrize("a_layout", [spatial(16, 8).local(4, 4), column_spatial(8, 16).local(8, 2),
                                      local(2, 8).spatial(32, 4)])
def test_dot_with_author_layout_is_converted(a_layout):
    """An operand loaded in a layout the author chose is converted (through shared memory) for mma."""
    m, n, k = 64, 32, 32
    a = torch.randn(m, k, device="cuda").half() / 4
    b = torch.randn(k, n, device="cuda").half() / 4
    c = torch.full((m, n), float("nan"), device="cuda")
    K.dot_kernel(m, n, k, float16, float32, warps=4, a_layout=a_layout)(a, b, c)
    torch.testing.assert_close(c, a.float() @ b.float() + 1, rtol=1e-3, atol=1e-3)


def test_scalar_control_flow():
    n = 9
    out = torch.full((n,), -999, dtype=torch.int32, device="cuda")
    K.ScalarControl()(n, out)
    expected = [sum(range(i)) if i % 2 == 0 else -i for i in range(n)]
    assert out.tolist() == expected


def test_loop_carried_register_tensor():
    steps = 5
    x = torch.randn(steps, 64, device="cuda")
    out = torch.full((64,), float("nan"), device="cuda")
    K.LoopCarried()(steps, x, out)
    expected = torch.zeros(64, device="cuda")
    for k in range(steps):
        expected = expected * 0.5 + x[k]
    torch.testing.assert_close(out, expected)


def test_casts_with_compile_time_scale():
    x = torch.randn(100, device="cuda")
    y = nan_like(x)
    K.Casts()(3, x, y)
    torch.testing.assert_close(y, x.half().bfloat16().float() * 3)


PRINTF_SCRIPT = """
import torch
from tests.lang.kernels import Printf
Printf()(42)
torch.cuda.synchronize()
"""


def test_printf_once_per_block():
    result = subprocess.run([sys.executable, "-c", PRINTF_SCRIPT], capture_output=True, text=True, cwd=ROOT,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    lines = sorted(line for line in result.stdout.splitlines() if line.startswith("block"))
    assert lines == ["block 0 value 42", "block 1 value 42"]


def test_launch_on_a_side_stream():
    """Kernels run on torch's current stream."""
    kernel = K.Elementwise(32, 48, 2)
    x = torch.randn(64, 48, device="cuda")
    y = torch.randn(64, 1, device="cuda")
    z = nan_like(x)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        kernel(64, x, y, z)
        done = z.clone()
    stream.synchronize()
    expected = torch.maximum(torch.where(x > 0, x * y, torch.exp(x) - 1), torch.tensor(-0.5, device="cuda"))
    torch.testing.assert_close(done, expected)


def test_empty_grid_is_a_no_op():
    x = torch.randn(0, 48, device="cuda")
    K.Elementwise(32, 48, 2)(0, x, torch.randn(0, 1, device="cuda"), x)
    torch.cuda.synchronize()


def test_scalar_int32_out_of_range_rejected():
    import tilus_tvm as tilus

    out = torch.zeros(4, dtype=torch.int32, device="cuda")
    with pytest.raises(tilus.LaunchError, match="out of range for int32"):
        K.ScalarControl()(2**31, out)


def test_vector_loads_along_a_column_major_dimension():
    m, n = 128, 5
    x = torch.randn(n, m, device="cuda").t()  # [m, n] with strides (1, m)
    out = torch.full((m,), float("nan"), device="cuda")
    for j in range(n):
        K.ColumnOfColumnMajor()(m, n, j, x, out)
        torch.testing.assert_close(out, x[:, j])


def test_dynamic_shared_memory_above_48kb():
    x = torch.randn(192, 128, device="cuda")
    y = nan_like(x)
    K.LargeShared()(x, y)
    torch.testing.assert_close(y, x * 2)
