"""quantized_matmul on the GPU against a torch reference (dequantise, then matmul in float32): every
listed weight type, group sizes and per-channel scales, zero points, float16 and bfloat16, decode
batches and staged large batches, shapes that are not multiples of the tiles; outputs NaN-poisoned."""
import math
from dataclasses import asdict, replace

import pytest
import torch

from tilus_tvm import dtypes, lowp
from tilus_tvm.schedules.quantized_configs import (HOPPER_CONFIGS, WGMMA_MEDIUM, WGMMA_SMALL, WGMMA_THREE_GROUPS,
                                                   Config, choose_config)
from tilus_tvm.schedules.quantized_matmul import pack_weight, quantized_matmul
from tilus_tvm.schedules.quantized_weight import WeightFormat, dequantize
from tilus_tvm.utils import check_dependent_chain

pytestmark = pytest.mark.gpu


def random_weight(name, k, n, generator):
    dtype = dtypes.as_dtype(name)
    finite = torch.tensor([v for v in lowp.all_values(dtype) if math.isfinite(v)], dtype=torch.float32)
    return finite[torch.randint(0, len(finite), (k, n), generator=generator)]


def check(name, m, k, n, group, zero_points=False, dtype=torch.float16, seed=0, config=None, placed_for=None,
          k_tile=None):
    generator = torch.Generator().manual_seed(seed)
    w = random_weight(name, k, n, generator)
    groups = k // (group or k)
    packed = pack_weight(w.cuda(), name, group, activations=placed_for, k_tile=k_tile).to("cuda")
    scales = (torch.rand(groups, n, generator=generator) + 0.5).div(math.sqrt(k)).to(dtype).cuda()
    zeros = (torch.rand(groups, n, generator=generator) * 4).round().to(dtype).cuda() if zero_points else None
    a = torch.randn(m, k, generator=generator).to(dtype).cuda()
    out = torch.full((m, n), float("nan"), dtype=dtype, device="cuda")
    quantized_matmul(a, packed, scales, zeros, out=out, config=config)
    reference = a.float() @ dequantize(packed, scales, zeros)
    scale = reference.abs().max().item()
    torch.testing.assert_close(out.float(), reference, rtol=2e-2, atol=2e-2 * scale,
                               msg=lambda text: f"{name} m={m} k={k} n={n} group={group}: {text}")


@pytest.mark.parametrize("name", ["uint4b", "int4b", "uint2b", "uint3b", "uint6b", "uint8", "int8",
                                  "float8_e4m3", "float8_e5m2", "float6_e3m2", "float6_e2m3", "float4_e2m1"])
def test_every_listed_type_decode_batch(name):
    check(name, m=3, k=512, n=200, group=128)


@pytest.mark.parametrize("name", ["uint8", "int8", "float8_e4m3", "float8_e5m2"])
@pytest.mark.parametrize("m,zero_points", [(1, False), (9, True), (130, False), (256, True)])
def test_eight_bit_weights_into_bfloat16(name, m, zero_points):
    """8-bit weights with bfloat16 activations: their codes' fast path into bfloat16 (the top bit picking the fma's
    addend for integers, placed fields and a carry for the floats' reserved codes) at decode rows and on the
    wgmma tiles, floats without zero points."""
    check(name, m, 1024, 456, 128, zero_points=zero_points and name.startswith(("uint", "int")),
          dtype=torch.bfloat16, seed=m)


@pytest.mark.parametrize("m,k,n,group", [(1, 256, 16, 32), (5, 384, 77, 64), (16, 1024, 300, None),
                                         (9, 256, 1000, 32), (1, 4096, 512, 128)])
def test_shapes_and_groups_u4(m, k, n, group):
    """(1, 4096, 512): few blocks, so K is split (split_k 4) and the kernel adds the splits up."""
    check("uint4b", m, k, n, group, seed=m)


def test_zero_points_and_bfloat16():
    check("uint4b", 7, 512, 130, 128, zero_points=True, dtype=torch.bfloat16)
    check("int3b", 2, 256, 70, 32, zero_points=True)  # 3-bit codes at group 32: units of two 16-channel blocks


@pytest.mark.parametrize("name,m,k,group,zero_points", [("uint2b", 12, 1024, 128, False), ("int3b", 16, 768, 64, True),
                                                         ("uint3b", 9, 1024, None, False)])
def test_two_and_three_bits_at_nine_to_sixteen_rows(name, m, k, group, zero_points):
    """The table's row for them: activations staged by cp.async two k-steps deep, K split."""
    check(name, m, k, 520, group, zero_points=zero_points)


@pytest.mark.parametrize("name,m", [("uint4b", 64), ("float8_e4m3", 150), ("int3b", 40)])
def test_large_batches_stage_activations(name, m):
    check(name, m, 512, 192, 64 if name != "int3b" else 32, zero_points=name == "int3b")


def test_batched_input_shape_and_config_override():
    generator = torch.Generator().manual_seed(5)
    w = random_weight("uint4b", 256, 64, generator)
    packed = pack_weight(w, "uint4b", 128).to("cuda")
    scales = torch.full((2, 64), 0.01, dtype=torch.float16, device="cuda")
    a = torch.randn(2, 3, 256, generator=generator).half().cuda()
    out = quantized_matmul(a, packed, scales, config=Config(warps=2, units_per_warp=1, scale_weights=True, split_k=2,
                                                            prefetch=2))
    assert out.shape == (2, 3, 64)
    reference = a.float().reshape(6, 256) @ dequantize(packed, scales)
    torch.testing.assert_close(out.float().reshape(6, 64), reference, rtol=2e-2, atol=2e-2 * reference.abs().max().item())


@pytest.mark.parametrize("m,k,n,split", [(1, 4096, 1024, 2), (3, 2048, 640, 4), (9, 1024, 256, 2)])
def test_serial_split_reduction(m, k, n, split):
    """split_reduce="serial": the splits add up in the kernel; launched twice (new data, the same kernel and
    workspaces), so the second launch finds the semaphores the first one cleared."""
    config = Config(block_m=8 if m <= 8 else 16, prefetch=2, split_k=split, split_reduce="serial")
    for seed in (0, 1):
        check("uint4b", m, k, n, 128, seed=seed, config=config)


@pytest.mark.parametrize("overrides", [{"prefetch": 2}, {"prefetch": 2, "fixed_slots": True},
                                       {"units_per_warp": 1, "weight_ring": 4},
                                       {"weight_stages": 3, "release_barriers": True, "fixed_slots": True},
                                       {"stage_activations": True, "stages": 3, "split_reduce": "kernel"}])
def test_per_channel_zero_points_in_every_split(overrides):
    """Per-channel scales and zero points with K split in 3 (unevenly): every split subtracts the channel's one
    zero point (the splits after the first once read past the zero points' single row), on each load path."""
    if overrides.get("weight_stages") and torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("TMA needs sm_90")
    config = Config(**{"block_m": 8, "split_k": 3, **overrides})
    for seed in (0, 1):
        check("uint4b", 5, 10 * 128, 264, None, zero_points=True, seed=seed, config=config)


# Hopper's register-A wgmma: converted weights stay in registers as A, staged activations are B
WARPGROUP_MMA = Config(warps=8, units_per_warp=1, block_m=128, stage_activations=True, stages=3, scale_weights=True,
                       warpgroup_mma=True)


@pytest.mark.parametrize("name,m,group,zero_points,dtype,units,block_m", [
    ("uint4b", 256, 128, False, torch.float16, 1, 256), ("int4b", 100, 64, False, torch.bfloat16, 1, 128),
    ("uint2b", 130, 32, False, torch.float16, 1, 64), ("float8_e4m3", 64, None, False, torch.float16, 2, 64),
    ("int3b", 77, 32, True, torch.float16, 2, 128), ("uint8", 300, 128, True, torch.float16, 1, 256)])
def test_warpgroup_mma(name, m, group, zero_points, dtype, units, block_m):
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma needs an sm_90a GPU (H100, H200)")
    check(name, m, 512, 300, group, zero_points=zero_points, dtype=dtype,
          config=replace(WARPGROUP_MMA, units_per_warp=units, block_m=block_m))


@pytest.mark.parametrize("name,m,k,group,zero_points,units,block_m,warps,stages,split", [
    ("uint4b", 256, 2048, 128, False, 1, 256, 8, 3, 1), ("int4b", 200, 1024, 64, True, 2, 128, 8, 4, 1),
    ("float8_e4m3", 77, 1536, None, False, 2, 64, 4, 3, 1), ("int3b", 130, 1024, 32, False, 2, 128, 4, 2, 2),
    ("uint2b", 64, 4096, 128, False, 1, 64, 8, 3, 2)])
def test_warpgroup_mma_stages_released_by_barriers(name, m, k, group, zero_points, units, block_m, warps, stages, split):
    """release_barriers: each activation stage is released by an mbarrier every thread arrives on, and only the
    thread that refills it waits, so the warpgroups drift apart; 12 to 16 k-steps a block (every stage reused many
    times, its barriers through both parities), against torch, twice (new data, the same kernel)."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma needs sm_90a")
    config = Config(warps=warps, units_per_warp=units, block_m=block_m, stage_activations=True, stages=stages,
                    scale_weights=True, warpgroup_mma=True, release_barriers=True, split_k=split)
    for seed in (0, 1):
        check(name, m, k, 320, group, seed=seed, zero_points=zero_points, config=config)


@pytest.mark.parametrize("name,m,k,n,group,split,stages", [
    ("uint4b", 1, 4096, 1024, 128, 2, 4), ("uint2b", 3, 2048, 640, 64, 1, 3), ("int3b", 16, 1024, 300, None, 1, 6),
    ("uint8", 8, 1024, 256, 128, 2, 2), ("float6_e3m2", 1, 2048, 512, 32, 4, 4), ("float4_e2m1", 5, 384, 77, 64, 1, 8),
    ("int5b", 2, 2048, 520, 128, 2, 3)])
@pytest.mark.parametrize("release", [False, True])
def test_weights_through_a_tma_ring(name, m, k, n, group, split, stages, release):
    """weight_stages: the weights of ``stages - 1`` k-steps in flight through TMA (Hopper), against torch; each
    stage released by a block barrier a step, or (release_barriers) by every thread's arrival on its barrier."""
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("TMA needs sm_90")
    config = Config(block_m=8 if m <= 8 else 16, prefetch=2, split_k=split, weight_stages=stages,
                    stage_activations=m > 8, stages=3, release_barriers=release)
    for seed in (0, 1):
        check(name, m, k, n, group, seed=seed, config=config)


@pytest.mark.parametrize("name,m,k,n,group,zero_points,dtype,overrides", [
    ("uint2b", 1, 1024, 384, 128, False, torch.float16, {"prefetch": 2}),  # registers, unrolled by 2
    ("int4b", 3, 896, 200, 128, True, torch.bfloat16, {"prefetch": 3}),  # unrolled by 6, 7 steps: a guarded tail
    ("uint3b", 2, 1152, 256, 64, False, torch.float16, {"prefetch": 1, "split_k": 3}),  # 18 steps, 6 a split
    ("uint4b", 1, 2048, 512, 128, True, torch.float16, {"units_per_warp": 1, "weight_ring": 4}),
    ("float6_e3m2", 16, 1024, 256, 32, False, torch.float16, {"stage_activations": True, "stages": 3}),
    ("uint4b", 5, 1024, 300, None, True, torch.float16, {"prefetch": 2}),  # per channel: one zero-point slot
    ("int5b", 1, 2048, 512, 128, False, torch.float16, {"weight_stages": 3, "release_barriers": True}),
    ("float8_e4m3", 8, 1536, 640, 128, True, torch.bfloat16, {"units_per_warp": 1, "stage_activations": True,
                                                              "stages": 3, "weight_stages": 3,
                                                              "release_barriers": True}),
    # the sm_90a 3-bit row: one unit a warp, activations in registers, K split in two
    ("uint3b", 4, 1536, 264, 128, False, torch.float16, {"units_per_warp": 1, "weight_stages": 3,
                                                          "release_barriers": True, "split_k": 2}),
    ("int3b", 8, 1024, 200, 128, True, torch.bfloat16, {"units_per_warp": 1, "weight_stages": 3,
                                                        "release_barriers": True, "split_k": 2}),
    # the sm_90a 9-16-row row: the ring, activations staged by cp.async two k-steps deep
    ("int5b", 12, 1536, 264, 128, True, torch.bfloat16, {"stage_activations": True, "stages": 2, "weight_stages": 3,
                                                         "release_barriers": True, "split_k": 2}),
    ("uint4b", 16, 1024, 520, None, False, torch.float16, {"stage_activations": True, "stages": 2,
                                                            "weight_stages": 3, "release_barriers": True})])
def test_fixed_register_slots(name, m, k, n, group, zero_points, dtype, overrides):
    """fixed_slots: the k-loop unrolled so that every register queue (weights, activations, scales, zero points)
    keeps its slots in place, on each load path, against torch (TMA rows on sm_90 only)."""
    if overrides.get("weight_stages") and torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("TMA needs sm_90")
    config = Config(**{"block_m": 8 if m <= 8 else 16, "split_k": 1, "fixed_slots": True, **overrides})
    for seed in (0, 1):
        check(name, m, k, n, group, zero_points=zero_points, dtype=dtype, seed=seed, config=config)


@pytest.mark.parametrize("name,group,m,zero_points,dtype", [
    ("uint2b", 32, 1, False, torch.float16), ("uint4b", 32, 5, True, torch.bfloat16), ("int3b", 64, 12, True,
                                                                                          torch.float16),
    ("uint2b", 64, 16, False, torch.bfloat16), ("float6_e3m2", 32, 32, False, torch.float16),
    ("int4b", 32, 96, True, torch.float16), ("uint8", 64, 200, False, torch.bfloat16)])
def test_groups_smaller_than_a_k_step(name, group, m, zero_points, dtype):
    """A k-step of 128 inputs spans 2 or 4 groups (each group's scales and zero points on its own columns), on the
    rows choose_config picks for the batch (registers, staged, scaled weights, wgmma on sm_90a), against torch."""
    check(name, m, 1024, 200, group, zero_points=zero_points, dtype=dtype)


def hopper_row(rows, widths):
    """The configuration of the sm_90a table's row for these batches and weight widths."""
    return next(config for limit, served, config, _, _ in HOPPER_CONFIGS if (limit, served) == (rows, widths))


@pytest.mark.parametrize("name,m,k,n,group,zero_points,row", [
    ("uint3b", 1, 1536, 264, 64, False, (8, (3,))), ("int3b", 5, 1024, 200, 64, True, (8, (3,))),  # 1536-byte stages
    ("int5b", 1, 1024, 520, 32, False, (8, (4, 5, 6))), ("uint5b", 12, 1024, 264, 32, True, (16, (4, 5, 6))),  # 2560
    ("uint7b", 8, 1536, 320, 64, False, (8, (7, 8))), ("uint7b", 16, 1024, 300, 32, True, (16, (7,))),  # 3584
    ("int3b", 4, 1024, 200, 32, True, (8, (3, 4, 5))),  # the short-grid ring rows
    ("float6_e3m2", 8, 1536, 264, 64, False, (8, (6, 7, 8)))])
def test_unswizzled_weight_ring(name, m, k, n, group, zero_points, row):
    """The sm_90a table's TMA weight-ring rows for formats whose k-step of a block's weights is not a multiple of
    1024 bytes (the ring's stages are unswizzled, 128-byte aligned), split in two, against torch, twice."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the sm_90a rows")
    config = replace(hopper_row(*row), split_k=2)
    for seed in (0, 1):
        check(name, m, k, n, group, zero_points=zero_points, seed=seed, config=config)


@pytest.mark.parametrize("name,m,k,group,split,overrides", [
    ("uint4b", 1, 11 * 128, 128, 3, {"prefetch": 2}),  # registers: 3 + 4 + 4 steps
    ("uint4b", 2, 11 * 128, 128, 4, {"prefetch": 2, "split_reduce": "kernel"}),  # SplitKSum adds them up
    ("uint3b", 1, 13 * 128, 128, 4, {"units_per_warp": 1, "weight_ring": 4}),  # copies past a split masked
    ("float6_e3m2", 12, 7 * 64, 64, 2, {"stage_activations": True, "stages": 3}),
    ("int4b", 1, 13 * 128, 128, 5, {"prefetch": 2, "fixed_slots": True}),  # a run-time tail guard
    ("uint4b", 1, 11 * 128, 128, 3, {"weight_stages": 3, "release_barriers": True, "fixed_slots": True}),
    ("uint8", 3, 9 * 128, 128, 4, {"units_per_warp": 1, "stage_activations": True, "stages": 3,
                                   "weight_stages": 3, "release_barriers": True, "fixed_slots": True})])
def test_uneven_k_splits(name, m, k, group, split, overrides):
    """split_k that does not divide the k-steps (split z takes [z * S // split_k, (z + 1) * S // split_k)), on
    each load path, the splits added by the last to arrive or by SplitKSum, against torch."""
    if overrides.get("weight_stages") and torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("TMA needs sm_90")
    config = Config(**{"block_m": 8 if m <= 8 else 16, "split_k": split, **overrides})
    for seed in (0, 1):
        check(name, m, k, 264, group, seed=seed, config=config)


@pytest.mark.parametrize("name,m,k,n,group,zero_points,dtype,tile", [
    ("uint4b", 192, 512, 11008, 128, True, torch.bfloat16, WGMMA_SMALL),  # 128-row tiles: 86 blocks; 64-row: 258
    ("int5b", 160, 384, 11008, 32, False, torch.float16, WGMMA_SMALL),
    ("float8_e4m3", 128, 512, 28672, 64, False, torch.bfloat16, WGMMA_MEDIUM),  # fp8: a warpgroup of 128 channels
    ("float8_e5m2", 100, 384, 28672, 128, False, torch.float16, WGMMA_MEDIUM),
    # three warpgroups of 64 channels: 116 blocks of 192 channels, one wave as the 86 of 256
    ("uint4b", 256, 512, 11008, 128, True, torch.bfloat16, WGMMA_THREE_GROUPS),
    ("int5b", 200, 384, 11008, 32, False, torch.float16, WGMMA_THREE_GROUPS),
    ("float8_e4m3", 250, 512, 11008, 64, True, torch.float16, WGMMA_THREE_GROUPS),
    ("float6_e3m2", 512, 640, 11008, None, False, torch.bfloat16, WGMMA_THREE_GROUPS),  # two waves, per channel
    ("uint3b", 256, 1024, 10240, 128, False, torch.float16, WGMMA_THREE_GROUPS)])
def test_wgmma_tiles_of_grids_short_of_the_sms(name, m, k, n, group, zero_points, dtype, tile):
    """The tiles the sm_90a table takes from 65 rows where its 256-channel tiles leave SMs idle, as choose_config
    picks them for 132 SMs, against torch on every output."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma needs sm_90a")
    config = choose_config(m, WeightFormat(dtypes.as_dtype(name), k, n, group or k), 132, wgmma=True)
    assert (config.warps, config.units_per_warp, config.block_m) == (tile.warps, tile.units_per_warp, tile.block_m)
    check(name, m, k, n, group, zero_points=zero_points, dtype=dtype, config=config)


@pytest.mark.parametrize("name,m,k,group,zero_points,dtype", [
    ("int4b", 64, 640, 64, True, torch.bfloat16), ("uint2b", 50, 640, 32, True, torch.float16),
    ("uint7b", 64, 768, 128, False, torch.float16), ("float4_e2m1", 57, 640, None, False, torch.bfloat16),
    ("uint3b", 64, 384, 128, True, torch.float16), ("uint8", 49, 512, 64, False, torch.float16)])
def test_the_64_row_wgmma_tile_on_a_short_grid(name, m, k, group, zero_points, dtype):
    """Up to 64 rows on a grid short of the SMs (86 blocks of 128 channels, K unsplit), two k-steps of weights in
    flight (2- and 7-bit weights in fixed slots of a k-loop unrolled by two, an odd number of k-steps too), as
    choose_config picks it for 132 SMs, against torch on every output."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma needs sm_90a")
    config = choose_config(m, WeightFormat(dtypes.as_dtype(name), k, 11008, group or k), 132, wgmma=True)
    assert config.warpgroup_mma and config.block_m == 64 and config.split_k == 1 and config.prefetch == 2
    check(name, m, k, 11008, group, zero_points=zero_points, dtype=dtype, config=config)


@pytest.mark.parametrize("name,m,tma", [("uint4b", 200, False), ("int3b", 130, None), ("float8_e4m3", 64, False)])
def test_warpgroup_mma_activations_by_tma_or_cp_async(name, m, tma):
    """The wgmma path's activations: TMA (tma_activations None: when aligned) or cp.async (False)."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma needs sm_90a")
    check(name, m, 512, 384, 64, config=Config(**{**WARPGROUP_MMA.__dict__, "tma_activations": tma}))


@pytest.mark.parametrize("name,m,k,n,group,split,ring,units", [
    ("uint4b", 1, 4096, 1024, 128, 2, 4, 2), ("uint2b", 3, 2048, 640, 64, 1, 3, 2),
    ("int3b", 16, 1024, 300, None, 1, 6, 2), ("uint8", 8, 1024, 256, 128, 2, 2, 4),
    ("float6_e3m2", 1, 2048, 512, 32, 4, 4, 2), ("float4_e2m1", 5, 384, 77, 64, 1, 8, 1),
    ("int4b", 12, 768, 200, 128, 3, 3, 2), ("uint4b", 1, 8192, 2048, 128, 2, 4, 1)])
def test_weights_through_a_per_thread_cp_async_ring(name, m, k, n, group, split, ring, units):
    """weight_ring: each thread copies its own words of ``ring - 1`` k-steps ahead with cp.async and reads them
    back without a barrier (from 9 rows with the activations staged in the same groups), against torch."""
    staged = m > 8
    config = Config(block_m=8 if m <= 8 else 16, units_per_warp=units, split_k=split, weight_ring=ring,
                    stage_activations=staged, stages=ring if staged else 2)
    for seed in (0, 1):
        check(name, m, k, n, group, seed=seed, config=config)


@pytest.mark.parametrize("name,m,k,n,group,zero_points,dtype,sms,tile,split", [
    ("uint4b", 64, 8192, 1024, 128, False, torch.float16, 132, (4, 2, 64), 3),
    ("float8_e4m3", 50, 8192, 1024, 128, False, torch.bfloat16, 132, (4, 2, 64), 3),
    ("int3b", 57, 8192, 1024, 32, True, torch.float16, 132, (4, 2, 64), 3),
    ("uint8", 128, 8192, 1024, 128, False, torch.float16, 132, (4, 2, 64), 3),  # beyond 64 rows: the small tile
    ("float8_e4m3", 100, 41088, 512, 128, True, torch.float16, 16, (4, 2, 128), 8),  # the medium tile, 321 k-steps
    ("float8_e5m2", 128, 41088, 512, 64, False, torch.float16, 16, (4, 2, 128), 8),
    ("float8_e5m2", 128, 41088, 512, 64, False, torch.bfloat16, 16, (12, 1, 128), 5),  # bfloat16: three warpgroups
    # three warpgroups where the 64-row tiles too would leave SMs idle: 64 k-steps in 5 (12-13 each), channels masked
    ("uint4b", 128, 8192, 576, 128, True, torch.bfloat16, 16, (12, 1, 128), 5),
    ("int5b", 100, 8192, 500, 32, False, torch.float16, 16, (12, 1, 128), 5),
    ("float8_e4m3", 256, 8192, 384, 64, True, torch.float16, 16, (12, 1, 128), 4)])
def test_wgmma_rows_split_where_the_grid_is_short_of_the_sms(name, m, k, n, group, zero_points, dtype, sms, tile,
                                                             split):
    """On sm_90a a grid short of the SMs splits K (1024 channels at 64 rows: 8 blocks, 64 k-steps split in 3,
    unevenly; from 65 rows the 64-row tiles, the 128-row medium tile where its splits keep 40 k-steps for fp8 with
    float16 activations, or three warpgroups of 64 channels), the splits added up by SplitKSum, as choose_config picks
    it for ``sms`` SMs and the activations' type, against torch on every output."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma needs sm_90a")
    config = choose_config(m, WeightFormat(dtypes.as_dtype(name), k, n, group), sms, wgmma=True,
                           zero_points=zero_points, dtype=dtypes.as_dtype(dtype).name)
    assert config.warpgroup_mma and (config.warps, config.units_per_warp, config.block_m) == tile
    assert config.split_k == split and config.split_reduce == "kernel"
    check(name, m, k, n, group, zero_points=zero_points, dtype=dtype, config=config)


@pytest.mark.parametrize("name,m,k,n,group,zero_points,dtype,overrides", [
    ("uint4b", 1, 2048, 512, 128, False, torch.float16, {}),
    ("int4b", 3, 2048, 264, 32, True, torch.bfloat16, {"split_k": 2}),  # 4 groups a k-step, serial sum
    ("uint6b", 8, 1024, 300, None, True, torch.float16, {"split_k": 2, "split_reduce": "kernel"}),  # per channel
    ("float6_e3m2", 5, 2048, 512, 64, False, torch.float16, {"k_groups": 4}),  # 16 warps, 4 k-steps a stage
    ("uint3b", 2, 1536, 264, 128, False, torch.float16, {"units_per_warp": 1}),
    ("float4_e2m1", 1, 1024, 77, 128, False, torch.float16, {}),
    ("uint4b", 4, 1024, 256, 128, True, torch.float16, {"fixed_slots": False, "release_barriers": False}),
    # activations staged by cp.async (a stage: one [block_m, kt] tile a group), read by ldmatrix through a permuted view
    ("uint4b", 8, 2048, 512, 128, False, torch.float16, {"stage_activations": True, "stages": 2, "prefetch": 1,
                                                          "min_blocks": 2}),  # (the decode row's tile)
    ("int5b", 5, 2048, 264, 32, True, torch.bfloat16, {"stage_activations": True, "stages": 2, "prefetch": 1,
                                                        "split_k": 2}),
    ("uint6b", 1, 1024, 300, None, True, torch.float16, {"stage_activations": True, "stages": 3}),
    ("uint3b", 8, 2048, 512, 128, False, torch.float16, {"stage_activations": True, "stages": 2, "prefetch": 1,
                                                          "min_blocks": 2}),  # (the 2-3-bit rows' place too)
    ("uint2b", 8, 3072, 264, 32, True, torch.bfloat16, {"stage_activations": True, "stages": 2, "prefetch": 1,
                                                         "min_blocks": 2, "weight_stages": 4}),  # (2 bits: 4 stages)
    ("int3b", 5, 2048, 512, 64, False, torch.float16, {"stage_activations": True, "stages": 2, "prefetch": 1,
                                                        "min_blocks": 2}),
    ("uint2b", 3, 2048, 264, None, True, torch.bfloat16, {"stage_activations": True, "stages": 2, "prefetch": 1}),
    ("uint4b", 16, 2048, 512, 128, False, torch.float16, {"block_m": 16, "stage_activations": True, "stages": 2}),
    # the 9-16-row tile of two warps of 4 units a group, N not a whole number of its 128 channels
    ("uint4b", 16, 2048, 264, 128, False, torch.float16, {"warps": 2, "units_per_warp": 4, "block_m": 16,
                                                          "stage_activations": True, "stages": 2, "prefetch": 1,
                                                          "min_blocks": 2}),
    ("int4b", 11, 2048, 300, 128, True, torch.bfloat16, {"warps": 2, "units_per_warp": 4, "block_m": 16,
                                                         "stage_activations": True, "stages": 2, "prefetch": 1,
                                                         "min_blocks": 2}),
    # the 3-bit decode row's tile of two warps of 4 units a group, N not a whole number of its 128 channels
    ("uint3b", 1, 2048, 264, 128, False, torch.float16, {"warps": 2, "units_per_warp": 4, "stage_activations": True,
                                                         "stages": 2, "prefetch": 1, "min_blocks": 2}),
    ("int3b", 7, 2048, 300, 128, True, torch.bfloat16, {"warps": 2, "units_per_warp": 4, "stage_activations": True,
                                                        "stages": 2, "prefetch": 1, "min_blocks": 2}),
    ("uint3b", 8, 1024, 200, None, True, torch.float16, {"warps": 2, "units_per_warp": 4, "stage_activations": True,
                                                         "stages": 2, "prefetch": 1, "min_blocks": 2}),
    # ... which 2-3-bit weights take at 9-16 rows
    ("uint2b", 16, 2048, 264, 128, False, torch.float16, {"warps": 2, "units_per_warp": 4, "block_m": 16,
                                                          "stage_activations": True, "stages": 2, "prefetch": 1,
                                                          "min_blocks": 2}),
    ("int3b", 12, 1024, 300, None, True, torch.bfloat16, {"warps": 2, "units_per_warp": 4, "block_m": 16,
                                                          "stage_activations": True, "stages": 2, "prefetch": 1,
                                                          "min_blocks": 2}),
    ("int5b", 12, 2048, 264, 32, True, torch.bfloat16, {"block_m": 16, "stage_activations": True, "stages": 2,
                                                         "split_k": 2, "min_blocks": 4}),
    ("float6_e2m3", 9, 1024, 300, None, True, torch.float16, {"block_m": 16, "stage_activations": True, "stages": 3,
                                                                "k_groups": 4}),
    ("uint7b", 16, 2048, 320, 64, False, torch.float16, {"block_m": 16, "stage_activations": True, "stages": 2,
                                                          "prefetch": 1, "fixed_slots": False})])
def test_k_split_over_groups_of_warps(name, m, k, n, group, zero_points, dtype, overrides):
    """k_groups: the block's K split over groups of warps (a batched dot_split, one k-step a group of a stage of
    the TMA ring), the groups' partial sums added through shared memory at the end, against torch, twice. Weights in
    pack_weight's tiles of 2 k-steps, or for four groups (a stage of 4 k-steps, more than a tile) granule-major."""
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("TMA needs sm_90")
    config = Config(**{"units_per_warp": 2, "block_m": 8, "prefetch": 2, "weight_stages": 3, "release_barriers": True,
                       "fixed_slots": True, "k_groups": 2, "split_k": 1, **overrides})
    k_tile = 0 if config.k_groups == 4 else None
    for seed in (0, 1):
        check(name, m, k, n, group, zero_points=zero_points, dtype=dtype, seed=seed, config=config, k_tile=k_tile)


@pytest.mark.parametrize("name,dtype,kind", [("uint4b", torch.float16, "small"), ("uint4b", torch.float16, "large"),
                                             ("uint4b", torch.float16, "mixed"), ("uint2b", torch.float16, "mixed"),
                                             ("uint1b", torch.bfloat16, "mixed"), ("uint4b", torch.bfloat16, "large"),
                                             ("uint3b", torch.float16, "mixed"), ("uint7b", torch.bfloat16, "mixed"),
                                             ("uint6b", torch.float16, "large"), ("uint8", torch.float16, "mixed"),
                                             ("float6_e3m2", torch.float16, "mixed"),
                                             ("float6_e2m3", torch.bfloat16, "mixed"),
                                             ("float4_e2m1", torch.float16, "small")])
def test_scales_taken_into_the_conversion(name, dtype, kind):
    """fused_scales (the wgmma tiles from 65 rows): every output equal, bit for bit, to the same tile multiplying the
    scales separately, and close to torch's; scales around 1/sqrt(k), all of 64 and more (every thread takes the
    separate multiply in float16), or mixed by channel (threads of one warp taking different paths: large, negative,
    tiny). 1-, 2- and 4-bit codes interleaved; 3-, 6- and 7-bit codes and small floats by their bit placement (a
    float16 float6_e3m2 takes the fma below 16, its rebias factor being 2**12); uint8."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma needs an sm_90a GPU (H100, H200)")
    m, k, n, group = 200, 1024, 520, 128
    generator = torch.Generator().manual_seed(7)
    w = random_weight(name, k, n, generator)
    packed = pack_weight(w.cuda(), name, group).to("cuda")
    scales = (torch.rand(k // group, n, generator=generator) + 0.5) / math.sqrt(k)
    if kind == "large":
        scales = scales * 4096
    elif kind == "mixed":
        scales[:, ::3] *= 4096
        scales[:, 1::7] *= -1
        scales[:, 2::11] *= 2.0 ** -12
    scales = scales.to(dtype).cuda()
    # (activations scaled down where scales are large, so that no output overflows float16)
    a = (torch.randn(m, k, generator=generator) * (1.0 if kind == "small" else 2.0 ** -8)).to(dtype).cuda()
    tile = Config(warps=8, units_per_warp=2, block_m=128, stage_activations=True, stages=3, scale_weights=True,
                  warpgroup_mma=True, release_barriers=True)
    outs = []
    for fused in (None, False):
        out = torch.full((m, n), float("nan"), dtype=dtype, device="cuda")
        quantized_matmul(a, packed, scales, out=out, config=replace(tile, fused_scales=fused))
        outs.append(out)
    assert torch.equal(outs[0], outs[1]), (name, dtype, kind)
    reference = a.float() @ dequantize(packed, scales)
    torch.testing.assert_close(outs[0].float(), reference, rtol=2e-2, atol=2e-2 * reference.abs().max().item())


_TMA_RING = {"block_m": 8, "prefetch": 2, "weight_stages": 3, "release_barriers": True, "fixed_slots": True}


@pytest.mark.parametrize("name,m,k,n,group,zero_points,dtype,k_tile,overrides", [
    # the table's rows (no overrides), K not a whole number of tiles
    ("uint4b", 1, 11 * 128, 512, 128, False, torch.float16, 2, None),
    ("int5b", 3, 21 * 64, 264, 64, True, torch.bfloat16, 4, None),
    ("uint3b", 8, 9 * 128, 520, 128, False, torch.float16, 8, None),
    ("uint2b", 1, 2048, 264, 32, True, torch.float16, 2, None),
    ("uint8", 2, 10 * 128, 300, 128, False, torch.float16, 4, None),
    ("float6_e3m2", 16, 1024, 300, None, False, torch.float16, 4, None),
    ("float4_e2m1", 12, 2048, 512, 128, False, torch.float16, 2, None),
    ("uint4b", 130, 1024, 456, 128, True, torch.float16, 2, None),  # wgmma
    ("float8_e4m3", 200, 15 * 128, 200, 128, False, torch.bfloat16, 8, None),
    # each load path, K split: split z takes tiles z, z + split_k, ... (the last one padded), as many each or not
    ("uint4b", 1, 11 * 128, 264, 128, False, torch.float16, 2, {"split_k": 3, "prefetch": 2}),  # registers
    ("uint4b", 2, 19 * 128, 264, 128, False, torch.float16, 4, {"split_k": 4, "prefetch": 2, "fixed_slots": True,
                                                                "split_reduce": "kernel"}),
    ("uint3b", 1, 13 * 128, 264, 128, False, torch.float16, 4, {"split_k": 4, "units_per_warp": 1,
                                                                "weight_ring": 4}),  # the cp.async ring
    ("uint4b", 1, 11 * 128, 264, 128, False, torch.float16, 2, {"split_k": 3, **_TMA_RING}),  # TMA, a k-step a stage
    ("uint4b", 8, 2048, 512, 128, False, torch.float16, 2, {**_TMA_RING, "k_groups": 2}),  # TMA, two a stage
    ("float6_e3m2", 5, 2048, 512, 64, False, torch.float16, 4, {**_TMA_RING, "k_groups": 4}),  # four a stage
    ("uint4b", 16, 2048, 512, 128, False, torch.float16, 8, {**_TMA_RING, "block_m": 16, "stage_activations": True,
                                                             "stages": 2, "prefetch": 1, "k_groups": 2}),
    ("float4_e2m1", 24, 43 * 128, 264, 128, False, torch.float16, 4, {**_TMA_RING, "split_k": 3, "k_groups": 2}),
    ("uint4b", 96, 43 * 128, 384, 128, True, torch.float16, 2, {**asdict(WGMMA_THREE_GROUPS), "split_k": 5,
                                                                "split_reduce": "kernel"}),  # wgmma
    # more splits than tiles: the last splits take none (partial sums of 0)
    ("uint4b", 1, 3 * 128, 264, 128, False, torch.float16, 2, {"split_k": 3, **_TMA_RING}),
    ("uint8", 70, 2 * 128, 384, 128, False, torch.float16, 2, {**asdict(WGMMA_THREE_GROUPS), "split_k": 2,
                                                               "split_reduce": "kernel"})])
def test_weights_in_tiles_of_k_steps(name, m, k, n, group, zero_points, dtype, k_tile, overrides):
    """pack_weight(k_tile=T): the table's rows and each load path (registers, the cp.async ring, the TMA ring of one,
    two or four k-steps a stage, wgmma) read k-step s at tile s // T, place s % T, and K's splits take tiles in turn
    (strided_splits: as many tiles each or not, the last one padded), against torch, twice."""
    capability = torch.cuda.get_device_capability()
    if overrides and (overrides.get("weight_stages") and capability[0] < 9
                      or overrides.get("warpgroup_mma") and capability != (9, 0)):
        pytest.skip("TMA needs sm_90, wgmma sm_90a")
    config = Config(**{"block_m": 8 if m <= 8 else 16, **overrides}) if overrides else None
    for seed in (0, 1):
        check(name, m, k, n, group, zero_points=zero_points, dtype=dtype, seed=seed, config=config, k_tile=k_tile)


_DECODE_GROUPS = {"stage_activations": True, "stages": 2, "prefetch": 1, "min_blocks": 2, "weight_stages": 3,
                  "release_barriers": True, "fixed_slots": True, "k_groups": 2}


@pytest.mark.parametrize("name,m,k,n,group,dtype,positive,overrides,zero_points", [
    ("uint2b", 1, 2048, 264, 128, torch.float16, False, {**_DECODE_GROUPS, "weight_stages": 4}, False),  # the u2 row
    ("uint2b", 8, 4096, 520, 128, torch.float16, True, {**_DECODE_GROUPS, "weight_stages": 4}, False),
    ("int2b", 7, 2048, 300, 64, torch.bfloat16, False, _DECODE_GROUPS, False),  # two groups a k-step: the bias sliced
    ("uint1b", 3, 1024, 200, 32, torch.float16, True, _DECODE_GROUPS, False),
    ("int1b", 2, 1024, 136, 128, torch.bfloat16, False, _DECODE_GROUPS, False),
    ("uint2b", 12, 2048, 264, 128, torch.float16, True, {**_DECODE_GROUPS, "warps": 2, "units_per_warp": 4,
                                                         "block_m": 16}, False),  # the 9-16-row tile
    ("int2b", 16, 1024, 300, 128, torch.bfloat16, False, {**_DECODE_GROUPS, "warps": 2, "units_per_warp": 4,
                                                          "block_m": 16}, False),
    ("uint4b", 5, 2048, 264, 128, torch.float16, True, _DECODE_GROUPS, False),
    ("uint2b", 5, 1024, 264, 64, torch.float16, False, {}, False),  # registers, no staging, no ring
    ("uint2b", 9, 2048, 130, 128, torch.float16, True, {"block_m": 16, "stage_activations": True, "split_k": 2}, False),
    # with zero points: each channel's zero point times the group's activation sums (a dot of ones)
    ("uint2b", 1, 2048, 264, 128, torch.float16, False, {**_DECODE_GROUPS, "weight_stages": 4}, True),
    ("uint2b", 8, 4096, 520, 128, torch.bfloat16, True, {**_DECODE_GROUPS, "weight_stages": 4}, True),
    ("uint4b", 5, 2048, 264, 128, torch.float16, True, _DECODE_GROUPS, True),
    ("uint4b", 1, 4096, 392, 64, torch.bfloat16, False, _DECODE_GROUPS, True),  # two groups a k-step
    ("int2b", 3, 1024, 136, 32, torch.float16, True, _DECODE_GROUPS, True),
    ("uint1b", 2, 1024, 200, 128, torch.float16, False, _DECODE_GROUPS, True),
    ("uint2b", 16, 2048, 264, 128, torch.float16, True, {**_DECODE_GROUPS, "warps": 2, "units_per_warp": 4,
                                                         "block_m": 16}, True),
    ("uint4b", 4, 1024, 264, 64, torch.float16, False, {}, True)])  # registers, no staging, no ring
def test_biased_codes(name, m, k, n, group, dtype, positive, overrides, zero_points):
    """biased_codes: the codes convert with their place's magic number left in (one lop3 a pair) and each group's
    dot takes off the dot of those biases with the same activations (and with zero points, each channel's zero
    point times the group's activation sums). Against torch, and within a few units of the output's last place of
    the same tile converting each pair exactly: activations of both signs, or all positive (the biased sums then
    largest, up to ~1024 times the true ones: the float32 accumulators' cancellation)."""
    if overrides.get("weight_stages") and torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("TMA needs sm_90")
    generator = torch.Generator().manual_seed(m)
    w = random_weight(name, k, n, generator)
    packed = pack_weight(w.cuda(), name, group).to("cuda")
    scales = ((torch.rand(k // group, n, generator=generator) + 0.5) / math.sqrt(k)).to(dtype).cuda()
    zeros = None
    if zero_points:  # integers of the code range, as asymmetric quantization gives
        low, high = int(w.min().item()), int(w.max().item())
        zeros = torch.randint(low, high + 1, (k // group, n), generator=generator).to(dtype).cuda()
    a = torch.rand(m, k, generator=generator) + 0.5 if positive else torch.randn(m, k, generator=generator)
    a = a.to(dtype).cuda()
    config = Config(**{"units_per_warp": 2, "block_m": 8, **overrides})
    check_against_exact(a, packed, scales, zeros, config, "biased_codes")


def check_against_exact(a, packed, scales, zeros, config, option):
    """quantized_matmul with ``config``'s boolean ``option`` on, against torch and within 4 units of the output's
    last place of the same configuration with it off (the exact path)."""
    m, n = a.shape[0], packed.format.n
    outs = []
    for on in (True, False):
        out = torch.full((m, n), float("nan"), dtype=a.dtype, device="cuda")
        quantized_matmul(a, packed, scales, zeros, out=out, config=replace(config, **{option: on}))
        outs.append(out.float())
    reference = a.float() @ dequantize(packed, scales, zeros)
    scale = reference.abs().max().item()
    torch.testing.assert_close(outs[0], reference, rtol=2e-2, atol=2e-2 * scale)
    ulp = 2.0 ** (math.frexp(scale)[1] - (11 if a.dtype == torch.float16 else 8))  # the largest output's last place
    assert (outs[0] - outs[1]).abs().max().item() <= 4 * ulp, (option, config)


_SIXTEEN_ROW_RING = {"block_m": 16, "prefetch": 1, "stage_activations": True, "stages": 2, "weight_stages": 3,
                     "release_barriers": True, "fixed_slots": True, "min_blocks": 4}


@pytest.mark.parametrize("name,m,k,n,group,dtype,overrides", [
    ("uint3b", 1, 2048, 264, 128, torch.float16, {**_DECODE_GROUPS, "warps": 2, "units_per_warp": 4}),  # u3 row
    ("int3b", 8, 2048, 520, 64, torch.bfloat16, {**_DECODE_GROUPS, "warps": 2, "units_per_warp": 4}),
    ("int5b", 16, 2048, 264, 128, torch.float16, {**_SIXTEEN_ROW_RING, "split_k": 2}),  # 9-16 rows, 5-6 bits
    ("uint6b", 12, 1024, 136, 32, torch.bfloat16, _SIXTEEN_ROW_RING),  # four groups a k-step
    ("uint8", 16, 2048, 200, 128, torch.float16, {"block_m": 16, "prefetch": 1, "stage_activations": True,
                                                  "stages": 3, "split_k": 2}),  # 8-bit weights, 9-16 rows
    ("int8", 9, 1024, 72, 64, torch.float16, {"block_m": 16, "prefetch": 1, "stage_activations": True,
                                              "stages": 3}),
    ("uint2b", 1, 4096, 392, 128, torch.float16, {"block_m": 8, "prefetch": 2, "split_k": 4}),  # the register row
    ("uint7b", 3, 1024, 130, 128, torch.bfloat16, {})])
def test_zero_point_sums(name, m, k, n, group, dtype, overrides):
    """zero_point_sums: codes converted exactly, each channel's zero point taken off as its product with the group's
    activation sums (a dot of ones) instead of from every converted pair. Against torch, and within a few units of
    the output's last place of the same tile subtracting the zero points from the weights."""
    if overrides.get("weight_stages") and torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("TMA needs sm_90")
    generator = torch.Generator().manual_seed(m + k)
    w = random_weight(name, k, n, generator)
    packed = pack_weight(w.cuda(), name, group).to("cuda")
    scales = ((torch.rand(k // group, n, generator=generator) + 0.5) / math.sqrt(k)).to(dtype).cuda()
    low, high = int(w.min().item()), int(w.max().item())
    zeros = torch.randint(low, high + 1, (k // group, n), generator=generator).to(dtype).cuda()
    a = torch.randn(m, k, generator=generator).to(dtype).cuda()
    config = Config(**{"units_per_warp": 2, "block_m": 8, **overrides})
    check_against_exact(a, packed, scales, zeros, config, "zero_point_sums")


@pytest.mark.parametrize("name,m,k,n,zero_points,table_shape,overrides", [
    ("uint4b", 1, 4096, 11008, False, None, {}),  # the TMA ring of weights, K split in 4 (serial, workspaces)
    ("uint2b", 3, 2048, 8192, True, (8192, 28672), {}),  # groups of warps, staged activations, biased codes
    ("uint4b", 16, 1024, 4096, False, (8192, 28672), {}),  # the 16-row tile (groups of warps)
    ("uint4b", 16, 1024, 4096, False, None, {}),  # activations staged by cp.async, weights to registers
    ("int5b", 4, 1024, 1024, False, None, {}),  # the per-thread cp.async ring of weights
    ("uint4b", 16, 1024, 2048, False, None, {"weight_ring": 3, "weight_stages": 0, "stage_activations": True,
                                             "stages": 3}),  # ... with the activations in its copy groups
    ("uint3b", 128, 1024, 4096, False, None, {}),  # wgmma on Hopper
    ("uint4b", 128, 4096, 4096, False, (28672, 8192), {}),  # wgmma, K split and added up by SplitKSum
])
def test_dependent_launches_in_a_row(name, m, k, n, zero_points, table_shape, overrides):
    """Calls with dependent_launch=True, each taking the output of the one before as its activations, give the
    same bits as the same calls without, launched one by one and replayed from a CUDA graph over NaN-poisoned
    outputs: no call reads its activations before the call before it has written them. ``table_shape``: the
    configuration is the table's for that K x N (a large decode shape's tile, on a smaller weight)."""
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("programmatic dependent launch needs sm_90")
    generator = torch.Generator().manual_seed(3)
    w = random_weight(name, k, n, generator)
    packed = pack_weight(w.cuda(), name, 128).to("cuda")
    rms = w.pow(2).mean().sqrt().item()
    signs = torch.randint(0, 2, (k // 128, n), generator=generator) * 2 - 1  # (outputs of unit size, uncorrelated)
    scales = ((torch.rand(k // 128, n, generator=generator) + 0.5) * signs / (math.sqrt(k) * rms)).half().cuda()
    zeros = (torch.rand(k // 128, n, generator=generator) * 3).round().half().cuda() if zero_points else None
    capability = torch.cuda.get_device_capability()
    table_k, table_n = table_shape or (k, n)
    config = replace(choose_config(m, WeightFormat(dtypes.as_dtype(name), table_k, table_n, 128),
                                   torch.cuda.get_device_properties(0).multi_processor_count,
                                   wgmma=capability == (9, 0), zero_points=zero_points), **overrides)
    x0 = torch.randn(m, k, generator=generator).half().cuda()
    check_dependent_chain(lambda x, out, dependent: quantized_matmul(x, packed, scales, zeros, out=out, config=config,
                                                                     dependent_launch=dependent), x0, n)
