"""On the GPU: the tensorized TE matmul and the emitter-built warp kernel against torch.

The TVM modules are called with torch CUDA tensors directly (DLPack, primer section 8); outputs
start poisoned (NaN, or a sentinel for int32). A CUDA error is sticky for the process: after a
failure here, later GPU tests in the same run fail too -- run with ``-x``.
"""
import pytest
import tvm

from tests.intrin.matmul import MATMUL_DTYPES, schedule_matmul, target, te_matmul, warp_mma_kernel

pytestmark = pytest.mark.gpu

SIZE = 512


def _arch(torch) -> str:
    major, minor = torch.cuda.get_device_capability()
    return f"sm_{major}{minor}"


def _random(torch, shape, dtype):
    if dtype == torch.int8:
        return torch.randint(-8, 8, shape, dtype=dtype, device="cuda")
    return (torch.rand(shape, device="cuda") * 2 - 1).to(dtype)


@pytest.mark.parametrize("cp_async", [False, True], ids=["vector_copy", "cp_async"])
@pytest.mark.parametrize("in_dtype,out_dtype", MATMUL_DTYPES)
def test_tensorized_matmul_matches_torch(in_dtype, out_dtype, cp_async):
    torch = pytest.importorskip("torch")
    mod = schedule_matmul(te_matmul(SIZE, SIZE, SIZE, in_dtype, out_dtype), in_dtype, out_dtype, cp_async)
    kernel = tvm.compile(mod, target=target(_arch(torch)))["main"]
    in_type, out_type = getattr(torch, in_dtype), getattr(torch, out_dtype)
    a, b = _random(torch, (SIZE, SIZE), in_type), _random(torch, (SIZE, SIZE), in_type)
    if out_type == torch.int32:
        c = torch.full((SIZE, SIZE), -12345, dtype=out_type, device="cuda")
        kernel(a, b, c)
        torch.testing.assert_close(c.cpu().long(), a.cpu().long() @ b.cpu().long(), rtol=0, atol=0)
    else:
        c = torch.full((SIZE, SIZE), float("nan"), dtype=out_type, device="cuda")
        kernel(a, b, c)
        # |sums| reach ~30; an f16 accumulator rounds (to ~0.016 there) after each of the 32 k-steps
        atol = 0.25 if out_type == torch.float16 else 1e-3
        torch.testing.assert_close(c.float(), torch.matmul(a.float(), b.float()), rtol=0, atol=atol)


@pytest.mark.parametrize("k_valid", [16, 8, 3, 0])
def test_warp_kernel_from_emitters_matches_torch(k_valid):
    torch = pytest.importorskip("torch")
    kernel = tvm.compile(warp_mma_kernel(), target=target(_arch(torch)), tir_pipeline="tirx")["warp_mma"]
    a, b = _random(torch, (16, 16), torch.float16), _random(torch, (16, 16), torch.float16)
    c = torch.full((16, 16), float("nan"), device="cuda")
    kernel(a, b, c, k_valid)
    b_filled = b.double().clone()
    b_filled[k_valid:] = 0  # the rows cp.async zero-filled
    torch.testing.assert_close(c.double(), a.double() @ b_filled, rtol=1e-5, atol=1e-5)
