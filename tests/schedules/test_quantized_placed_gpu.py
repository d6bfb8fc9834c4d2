"""quantized_matmul on the GPU for the types stored by their bit placement (integers of 3, 5, 6, 7 bits and the
small floats): every path against the torch reference, and every code exact. Apart from
test_quantized_matmul_gpu.py so that each file's GPU run fits one test group's time."""
import pytest
import torch

from tilus_tvm import dtypes, lowp
from tilus_tvm.schedules.quantized_matmul import pack_weight, quantized_matmul

from tests.schedules.test_quantized_matmul_gpu import check

pytestmark = pytest.mark.gpu


PLACED = ["uint3b", "int3b", "uint5b", "int5b", "int6b", "uint7b", "int7b", "float6_e3m2", "float6_e2m3",
          "float4_e2m1", "float3_e1m1", "float5_e2m2"]


@pytest.mark.parametrize("name", PLACED)
@pytest.mark.parametrize("m,group,dtype,zero_points", [
    (1, 128, torch.float16, False),  # decode registers / ring; floats fold 2**k into the float32 scales
    (16, None, torch.float16, False),  # staged activations, per channel (folded at the end)
    (3, 32, torch.bfloat16, True),  # bfloat16 keeps the multiply; integer zero points
    (150, 64, torch.float16, False),  # large batch: scales into the weights (wgmma on sm_90)
])
def test_bit_placed_types(name, m, group, dtype, zero_points):
    """Integers of 3, 5, 6, 7 bits and small floats, stored by their bit placement, on every path."""
    zero_points = zero_points and dtypes.as_dtype(name).is_integer
    check(name, m, 512, 200, group, zero_points=zero_points, dtype=dtype, seed=len(name))


@pytest.mark.parametrize("name", ["float6_e3m2", "float6_e2m3", "float4_e2m1", "float3_e1m1", "float5_e2m2"])
@pytest.mark.parametrize("m,group,dtype", [
    (1, 128, torch.bfloat16),  # the decode row (K split inside the block)
    (8, 32, torch.bfloat16),  # groups smaller than a k-step
    (16, None, torch.bfloat16),  # staged activations, per channel
    (150, 64, torch.bfloat16),  # wgmma on sm_90: the scale in the conversion's multiply
    (5, 128, torch.float16),  # placed for bfloat16, read into float16
])
def test_floats_placed_for_bfloat16(name, m, group, dtype):
    """Small floats packed for bfloat16 activations (pack_weight(..., activations="bfloat16")) on every path, and
    into float16 activations too."""
    check(name, m, 512, 200, group, dtype=dtype, seed=m, placed_for="bfloat16")


@pytest.mark.parametrize("name", ["float4_e2m1", "float6_e3m2", "float6_e2m3", "float3_e1m1", "int5b", "uint3b"])
@pytest.mark.parametrize("m,group,dtype,placed_for", [
    (1, 128, torch.float16, None), (16, None, torch.float16, None), (8, 32, torch.float16, None),
    (100, 128, torch.float16, None), (1, 128, torch.bfloat16, "bfloat16"), (16, 64, torch.bfloat16, "bfloat16"),
    (100, 128, torch.bfloat16, "bfloat16")])
def test_bit_placed_codes_are_exact(name, m, group, dtype, placed_for):
    """Every code of the type, its smallest magnitudes included (whose folded float16 patterns are subnormal; placed
    for bfloat16, subnormal bfloat16 patterns before the multiply): one-hot activation rows pick weight rows, so
    each output is one weight times its scale (a power of two), exactly."""
    k, n = 256, 256
    values = torch.tensor(lowp.all_values(dtypes.as_dtype(name)), dtype=torch.float32)
    rows = torch.arange(k)[:, None] * 7 + torch.arange(n)[None, :]
    w = values[rows % len(values)]
    packed = pack_weight(w.cuda(), name, group, activations=placed_for).to("cuda")
    groups = k // (group or k)
    scales = torch.full((groups, n), 0.5, dtype=dtype, device="cuda")
    picked = (torch.arange(m) * 37 + 3) % k
    a = torch.zeros(m, k, dtype=dtype, device="cuda")
    a[torch.arange(m), picked] = 1.0
    out = torch.full((m, n), float("nan"), dtype=dtype, device="cuda")
    quantized_matmul(a, packed, scales, out=out)
    expected = (w[picked.cpu()] * 0.5).to(dtype)
    assert torch.equal(out.cpu(), expected), (out.cpu().float() - expected.float()).abs().max()
