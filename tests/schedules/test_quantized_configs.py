"""The hand table of QuantizedMatmul configurations (tilus_tvm/schedules/quantized_configs.py): which tile, load
path and K split a batch gets, by its rows, the weights' format, the GPU's SMs, the activations' type and zero points."""
import doctest

import pytest

from tilus_tvm import dtypes
from tilus_tvm.schedules import quantized_configs
from tilus_tvm.schedules.quantized_configs import choose_config
from tilus_tvm.schedules.quantized_weight import WeightFormat


def test_doctests():
    assert doctest.testmod(quantized_configs).failed == 0


def test_a_grid_short_at_its_most_splits_takes_narrower_blocks():
    """1x11008x4096 (a 7B model's down projection): 32 blocks of 128 channels, split in 8 (86 k-steps, each split
    keeping 8 or more), are 256 blocks, short of two an SM on 132 SMs, so the blocks take one unit a warp: 64
    blocks of 64 channels, split in 8. Grids that fill at their splits keep two units."""
    for m in (1, 16, 32):
        for name in ("uint4b", "uint2b", "uint8"):
            config = choose_config(m, WeightFormat(dtypes.as_dtype(name), 11008, 4096, 128), 132, wgmma=True)
            assert (config.warps, config.units_per_warp, config.split_k) == (4, 1, 8), (m, name, config)
    assert choose_config(1, WeightFormat(dtypes.uint4b, 11008, 4096, 128), 264).units_per_warp == 1
    for k, n in ((4096, 11008), (4096, 12288), (28672, 8192), (8192, 10240)):
        assert choose_config(1, WeightFormat(dtypes.uint4b, k, n, 128), 132).units_per_warp == 2
    # fewer SMs: 256 blocks are enough
    assert choose_config(1, WeightFormat(dtypes.uint4b, 11008, 4096, 128), 108).units_per_warp == 2
    # a format whose lanes pair units (k-steps of 32 inputs) keeps its two
    paired = WeightFormat(dtypes.int3b, 4064, 512, 32)
    assert paired.units == 2 and choose_config(1, paired, 132).units_per_warp == 2


def test_wgmma_rows_of_the_table():
    fmt = WeightFormat(dtypes.uint4b, 4096, 4096, 128)
    assert not choose_config(48, fmt, 132, wgmma=True).warpgroup_mma
    assert not choose_config(256, fmt, 132).warpgroup_mma  # not without sm_90a
    wide = WeightFormat(dtypes.uint4b, 8192, 28672, 128)
    small, large = choose_config(64, wide, 132, wgmma=True), choose_config(256, wide, 132, wgmma=True)
    assert small.warpgroup_mma and small.block_m == 64 and large.block_m == 128 and large.split_k == 1
    three_bit = WeightFormat(dtypes.int3b, 4064, 4096, 32)  # k-steps of 32: units of two 16-channel blocks
    assert choose_config(64, three_bit, 132, wgmma=True).units_per_warp == 2
    few_channels = WeightFormat(dtypes.uint4b, 4096, 11008, 128)  # 43 blocks of 256 channels: one warpgroup a block
    assert (choose_config(128, few_channels, 132, wgmma=True).warps, choose_config(128, few_channels, 132,
                                                                                   wgmma=True).block_m) == (4, 64)
    assert choose_config(128, WeightFormat(dtypes.uint4b, 8192, 28672, 128), 132, wgmma=True).warps == 8


def test_zero_points_keep_uint8_off_the_tile_where_it_spills():
    """uint8 weights with zero points and float16 activations take the medium tile on grids the 256-channel tile
    leaves short of the SMs, three warpgroups on full ones; without zero points, with bfloat16 activations and for
    other types the table is unchanged."""
    def tile(m, name, k=8192, n=28672, **kwargs):
        config = choose_config(m, WeightFormat(dtypes.as_dtype(name), k, n, 128), 132, wgmma=True, **kwargs)
        return config.warps, config.units_per_warp, config.block_m, config.split_k

    for m, k, n, expected in ((128, 8192, 28672, (4, 2, 128, 1)), (256, 4096, 14336, (4, 2, 128, 1)),
                              (512, 28672, 8192, (4, 2, 128, 1)), (256, 8192, 28672, (12, 1, 128, 1)),
                              (1024, 8192, 28672, (12, 1, 128, 1))):
        assert tile(m, "uint8", k, n, zero_points=True) == expected, (m, k, n)
        assert tile(m, "uint8", k, n)[:2] == (8, 2)  # the 256-channel tile
        assert tile(m, "uint8", k, n, zero_points=True, dtype="bfloat16") == tile(m, "uint8", k, n)
        for other in ("uint4b", "int8", "uint7b"):
            assert tile(m, other, k, n, zero_points=True) == tile(m, other, k, n), (other, m)
    for m in (16, 64):  # the 9-16-row row and the 64-row tile: no change
        assert tile(m, "uint8", zero_points=True) == tile(m, "uint8")
    assert tile(1, "uint8", zero_points=True) == tile(1, "uint8")[:3] + (4,)  # (the decode row: ZERO_POINT_SPLITS)


def test_fp8_tiles_follow_the_activations():
    """fp8 weights: the medium tile on grids the 256-channel tile leaves short of the SMs with float16 activations,
    the 256-channel tile there with bfloat16 ones, which take three warpgroups on full grids instead; where even the
    64-row tiles leave SMs idle, float16 splits the medium tile in 4 and bfloat16 three warpgroups in 3."""
    for name in ("float8_e4m3", "float8_e5m2"):
        for m, k, n, float16, bfloat16 in ((128, 8192, 28672, (4, 2, 1), (8, 2, 1)),
                                          (256, 4096, 14336, (4, 2, 1), (8, 2, 1)),
                                          (256, 8192, 28672, (8, 2, 1), (12, 1, 1)),
                                          (320, 8192, 28672, (8, 2, 1), (12, 1, 1)),
                                          (64, 8192, 28672, (8, 1, 1), (8, 1, 1)),
                                          (1, 8192, 28672, (4, 1, 2), (4, 1, 2)),
                                          (128, 28672, 8192, (4, 2, 4), (12, 1, 3)),
                                          (96, 28672, 8192, (4, 2, 4), (12, 1, 3))):
            fmt = WeightFormat(dtypes.as_dtype(name), k, n, 128)
            for dtype, expected in (("float16", float16), ("bfloat16", bfloat16)):
                config = choose_config(m, fmt, 132, wgmma=True, dtype=dtype)
                assert (config.warps, config.units_per_warp, config.split_k) == expected, (name, m, k, n, dtype)


@pytest.mark.parametrize("m,k,n,name,tile", [
    (192, 4096, 11008, "uint4b", (4, 2, 64)),  # 86 blocks of 128 rows x 256 channels; 258 of 64 x 128: one wave
    (160, 8192, 10240, "uint2b", (4, 2, 64)),
    (320, 4096, 11008, "uint4b", (8, 2, 128)),  # 64-row tiles: 430 blocks, more than a wave
    (192, 8192, 28672, "float8_e4m3", (8, 2, 128)),  # 224 blocks: the SMs are full
    (256, 4096, 11008, "float8_e4m3", (12, 1, 128)),  # 116 blocks of 192 channels: one wave, as 86 of 256
    (256, 4096, 11008, "uint4b", (12, 1, 128)),
    (256, 4096, 11008, "uint3b", (12, 1, 128)),
    (512, 4096, 11008, "uint8", (12, 1, 128)),  # 232 blocks or 172: two waves either way
    (256, 8192, 10240, "uint4b", (12, 1, 128)),  # 108 blocks: one wave, 3/4 of the channels a block
    (256, 8192, 28672, "uint4b", (8, 2, 128)),  # 300 blocks of 192 channels would be three waves, 224 are two
    (320, 4096, 11008, "float6_e3m2", (8, 2, 128)),  # 174 blocks or 129: two waves of 192 against one of 256
    (512, 8192, 28672, "float8_e4m3", (12, 1, 128)),  # 5 waves of 192 channels against 4 of 256: 0.94
    (2048, 5120, 13824, "uint4b", (8, 2, 128)),  # 9 waves of 192 channels against 7 of 256: 0.96, under the margin
    (128, 8192, 28672, "float8_e5m2", (4, 2, 128)),  # fp8: a warpgroup of 128 channels, 224 blocks
    (128, 8192, 28672, "uint8", (8, 2, 128)),  # (uint8 lost with it)
    (128, 4096, 11008, "float8_e4m3", (4, 2, 64)),  # 43 blocks, under half the SMs: 64-row tiles, as before
    (64, 4096, 11008, "float8_e4m3", (8, 1, 64))])  # the 64-row row is left as it is
def test_wgmma_tiles_where_the_grid_is_short_of_the_sms(m, k, n, name, tile):
    config = choose_config(m, WeightFormat(dtypes.as_dtype(name), k, n, 128), 132, wgmma=True)
    assert config.warpgroup_mma and config.split_k == 1
    assert (config.warps, config.units_per_warp, config.block_m) == tile


@pytest.mark.parametrize("m,k,n,name,tile,split", [
    (64, 8192, 10240, "uint4b", (8, 1, 64), 3),  # 80 blocks: 3 splits are one wave of two blocks an SM
    (49, 8192, 10240, "float8_e4m3", (8, 1, 64), 3),
    (64, 28672, 8192, "uint8", (4, 2, 64), 4),  # 64 blocks of the small tile: 4 splits of 56 k-steps
    (64, 4096, 11008, "uint4b", (8, 1, 64), 1),  # 32 k-steps: a split would keep fewer than 20
    (64, 11008, 4096, "uint4b", (4, 2, 64), 4),  # 32 blocks: 128, one an SM
    (64, 5120, 13824, "uint4b", (8, 1, 64), 1),  # 108 blocks: 2 splits would give 84 SMs two blocks, 48 one
    (64, 8192, 28672, "uint4b", (8, 1, 64), 1),  # 224 blocks: the SMs are full
    (65, 8192, 10240, "uint4b", (4, 2, 64), 1),  # 160 blocks of 64 rows: the SMs are full
    # from 65 rows, where the 64-row tiles too leave SMs idle: three warpgroups, one block an SM
    (128, 11008, 4096, "uint8", (12, 1, 128), 6),  # 22 blocks: 6 splits of 14-15 k-steps
    (256, 11008, 4096, "uint4b", (12, 1, 128), 3),  # 44 blocks
    (128, 28672, 8192, "uint4b", (12, 1, 128), 3),  # 43 blocks
    (128, 8192, 8192, "uint3b", (12, 1, 128), 3),
    (128, 4096, 4096, "uint4b", (4, 2, 64), 1),  # 22 blocks split in 2 (32 k-steps) fill a third: 64-row tiles
    # ... but fp8 (float16 activations) takes the medium tile in 4 (56 k-steps), as many blocks as 64 rows in 2
    (128, 28672, 8192, "float8_e4m3", (4, 2, 128), 4),
    (96, 28672, 8192, "float8_e4m3", (4, 2, 128), 4),
    (128, 8192, 8192, "float8_e4m3", (12, 1, 128), 3),  # (the medium tile's splits would keep fewer than 40 k-steps)
    (128, 8192, 28672, "uint4b", (8, 2, 128), 1),  # 112 blocks: 2 splits would give 92 SMs two blocks, 40 one
    (192, 28672, 8192, "uint4b", (4, 2, 64), 1)])  # 192 blocks: the SMs are full
def test_wgmma_splits_where_the_grid_is_short_of_the_sms(m, k, n, name, tile, split):
    config = choose_config(m, WeightFormat(dtypes.as_dtype(name), k, n, 128), 132, wgmma=True)
    assert config.warpgroup_mma and (config.warps, config.units_per_warp, config.block_m) == tile
    assert config.split_k == split
    assert config.split_reduce == ("kernel" if split > 1 else "serial")  # SplitKSum adds wgmma splits up
    assert choose_config(m, WeightFormat(dtypes.as_dtype(name), k, n, 128), 16, wgmma=True).split_k == 1  # grid fills


@pytest.mark.parametrize("name,queues", [("int4b", (2, False)), ("uint3b", (2, False)), ("float4_e2m1", (2, False)),
                                         ("uint8", (2, False)), ("float8_e4m3", (2, False)), ("uint2b", (2, True)),
                                         ("uint7b", (2, True)), ("uint4b", (1, False)), ("int5b", (1, False)),
                                         ("float6_e3m2", (1, False))])
def test_the_64_row_wgmma_tile_on_a_short_grid_keeps_two_steps_of_weights_in_flight(name, queues):
    """Up to 64 rows, where the 64-row tile leaves SMs without a block and K stays unsplit (86 blocks at 4096 x 11008,
    108 at 5120 x 13824), the types that measured faster so keep two k-steps of weights in flight (2- and 7-bit ones in
    fixed register slots); grids that fill the SMs or split K, and the tiles from 65 rows, keep one."""
    dtype = dtypes.as_dtype(name)
    for m, k, n in ((64, 4096, 11008), (49, 5120, 13824)):
        config = choose_config(m, WeightFormat(dtype, k, n, 128), 132, wgmma=True)
        assert (config.warps, config.block_m, config.split_k) == (8, 64, 1)
        assert (config.prefetch, config.fixed_slots) == queues
    for m, k, n in ((64, 8192, 28672), (64, 8192, 10240), (128, 4096, 11008), (256, 8192, 28672)):
        config = choose_config(m, WeightFormat(dtype, k, n, 128), 132, wgmma=True)
        assert config.warpgroup_mma and (config.prefetch, config.fixed_slots) == (1, False)
    # (132 SMs: the same shape on 16 fills the SMs)
    assert choose_config(64, WeightFormat(dtype, 4096, 11008, 128), 16, wgmma=True).prefetch == 1
