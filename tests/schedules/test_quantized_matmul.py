"""quantized_matmul on the CPU: the packed weight layout (round trips for every width, agreement with
the kernel's mma fragment layout), lowering and PTX of the kernel's paths, and every bad input refused
before a launch. Numbers are checked on a GPU in test_quantized_matmul_gpu.py."""
import math
import re

import pytest
import torch

import tilus_tvm as tilus
from tilus_tvm import dtypes, lowp
from tilus_tvm.errors import LaunchError, ScriptError
from tilus_tvm.ir import inst as ir
from tilus_tvm.ir.stmt import instructions
from dataclasses import asdict, replace

from tilus_tvm.schedules.quantized_matmul import (Config, QuantizedMatmul, choose_config, kernel_layouts, pack_weight,
                                                  quantize_weight, quantized_matmul)
from tilus_tvm.schedules.quantized_weight import WeightFormat, dequantize, unit_layout
from tests.helpers import launches, private_cache  # noqa: F401 - fixtures (private_cache autouse)

WEIGHT_TYPES = ["uint4b", "int4b", "uint2b", "uint3b", "uint6b", "uint8", "int8", "int1b", "int5b", "uint7b",
                "float8_e4m3", "float8_e5m2", "float6_e3m2", "float6_e2m3", "float4_e2m1"]


def random_values(dtype, k, n, generator=None):
    """Values of ``dtype`` (finite codes only) [k, n]."""
    finite = torch.tensor([v for v in lowp.all_values(dtype) if math.isfinite(v)], dtype=torch.float32)
    return finite[torch.randint(0, len(finite), (k, n), generator=generator)]


@pytest.mark.parametrize("name", WEIGHT_TYPES)
@pytest.mark.parametrize("k,n,group", [(256, 96, 128), (64, 40, 32), (96, 17, None), (128, 33, 64)])
@pytest.mark.parametrize("activations,k_tile", [(None, None), ("bfloat16", 0)])
def test_pack_weight_round_trip(name, k, n, group, activations, k_tile):
    """Every type packs and unpacks to its codes, by default in tiles of 2 k-steps (K's k-steps padded to whole
    tiles with code 0), with k_tile=0 granule-major, dense: N padded to whole granules, nothing else."""
    dtype = dtypes.as_dtype(name)
    w = random_values(dtype, k, n)
    packed = pack_weight(w, dtype, group, activations=activations) if k_tile is None else \
        pack_weight(w, dtype, group, activations=activations, k_tile=k_tile)
    fmt = packed.format
    assert fmt.k_tile == (2 if k_tile is None else 0)
    assert packed.storage.dtype == torch.int32 and tuple(packed.storage.shape) == fmt.storage_shape
    assert fmt.lane_bytes % 4 == 0 and fmt.vector_bytes in (4, 8, 16)
    assert torch.equal(packed.codes(), lowp.encode(w, dtype))
    stored_k = fmt.tiles * fmt.k_tile * fmt.kt if fmt.k_tile else k
    assert packed.storage.numel() * 4 == math.ceil(n / (16 * fmt.units)) * 16 * fmt.units * stored_k * dtype.nbits // 8


@pytest.mark.parametrize("name", ["uint4b", "int5b", "uint2b", "float6_e3m2", "uint8", "uint1b"])
@pytest.mark.parametrize("k_tile", [2, 4, 8])
def test_k_steps_in_tiles_round_trip(name, k_tile):
    """pack_weight(k_tile=T) stores [tiles, granules, T, chunks, 32, V/4], the k-steps padded with code 0 to whole
    tiles: tile j of granule g holds the words of its k-steps j*T .. j*T + T - 1 that granule-major storage holds."""
    dtype = dtypes.as_dtype(name)
    w = random_values(dtype, 384, 40)  # (3 k-steps of 128 inputs, or 6 of 64: not whole tiles of 4 or 8)
    plain, tiled = pack_weight(w, dtype, 128, k_tile=0), pack_weight(w, dtype, 128, k_tile=k_tile)
    fmt = tiled.format
    steps, tiles = fmt.steps, -(-fmt.steps // k_tile)
    assert fmt.k_tile == k_tile and fmt != plain.format and "k-steps in tiles of" in fmt.describe()
    assert tuple(tiled.storage.shape) == fmt.storage_shape
    assert fmt.storage_shape == (tiles, fmt.granules, k_tile) + plain.format.storage_shape[2:]
    assert torch.equal(tiled.codes(), plain.codes()) and torch.equal(tiled.codes(), lowp.encode(w, dtype))
    as_granules = tiled.storage.transpose(0, 1).reshape(fmt.granules, tiles * k_tile, *plain.storage.shape[2:])
    assert torch.equal(as_granules[:, :steps], plain.storage) and not as_granules[:, steps:].any()
    strides = fmt.view_strides  # [granules, tiles, T, ...] into the storage
    shape = fmt.storage_shape
    assert strides[:3] == [math.prod(shape[2:]), math.prod(shape[1:]), math.prod(shape[3:])]
    with pytest.raises(ScriptError, match="k_tile=3 must be 0"):
        pack_weight(w, dtype, 128, k_tile=3)


def test_a_k_step_spans_whole_groups():
    """A k-step is the largest of 128, 64, 32 inputs dividing K and made of whole groups (at most 64 inputs or one
    group for weights wider than 4 bits): small groups share a step, their scales each on its own columns."""
    from tilus_tvm.schedules.quantized_weight import step_k

    assert [step_k(8192, g, 4) for g in (32, 64, 128, 8192)] == [128, 128, 128, 128]
    assert [step_k(8192, g, 5) for g in (32, 64, 128, 8192)] == [64, 64, 128, 128]
    assert [step_k(960, g, 2) for g in (32, 64, 960)] == [64, 64, 64]  # 960 = 15 x 64
    assert [step_k(480, g, 8) for g in (32, 480)] == [32, 32]  # 480 = 15 x 32
    fmt = WeightFormat(dtypes.uint2b, 8192, 28672, 32)
    assert fmt.kt == 128 and fmt.vector_bytes == 16 and fmt.storage_shape[1] == 64
    assert WeightFormat(dtypes.int5b, 8192, 28672, 32).kt == 64


def test_pack_weight_takes_packed_tensors_and_rounds_values():
    w = torch.tensor([[0.4, 2.6], [7.5, -3.0]]).repeat(16, 8)  # [32, 16]
    from_values = pack_weight(w, "uint4b", 32)
    from_packed = pack_weight(tilus.from_torch(w, "uint4b"), "uint4b", 32)
    assert torch.equal(from_values.storage, from_packed.storage)
    assert from_values.codes()[:2, :2].tolist() == [[0, 3], [8, 0]]  # nearest even, saturated at 0


@pytest.mark.parametrize("kt", [32, 64, 128])
@pytest.mark.parametrize("warps,units,block_m", [(4, 2, 8), (2, 1, 16), (4, 4, 64), (8, 2, 8)])
def test_packed_lanes_are_the_kernels_mma_fragments(kt, warps, units, block_m):
    """Slot s of thread t in the kernel's A operand layout is the element pack_weight gave that lane
    there: warp w's unit u, at the unit layout's position of (lane, s mod the unit's slots)."""
    fmt = WeightFormat(dtypes.uint4b, 15 * kt, 1024, kt)  # (K an odd multiple of the group: k-steps of one group)
    assert fmt.kt == kt
    _, a, x, b, _ = kernel_layouts(fmt, warps, units, block_m, dtypes.float16)
    unit = unit_layout(kt)
    for thread in range(warps * 32):
        warp, lane = divmod(thread, 32)
        for slot in range(a.local_size):
            index, inner = divmod(slot, unit.local_size)
            row, col = unit.logical(lane, inner)
            assert a.logical(thread, slot) == (warp * units * 16 + index * 16 + row, col)
    for thread in range(0, warps * 32, 7):  # the activations as loaded are the B operand transposed
        for slot in range(b.local_size):
            assert x.logical(thread, slot) == b.logical(thread, slot)[::-1]


def test_quantize_weight_and_dequantize():
    torch.manual_seed(0)
    w = torch.randn(256, 64)
    for name, zero_points in (("int4b", False), ("uint4b", True), ("float8_e4m3", False), ("uint8", True)):
        packed, scales, zeros = quantize_weight(w, name, 64, zero_points=zero_points)
        assert scales.shape == (4, 64) and scales.dtype == torch.float16
        assert (zeros is not None) == zero_points
        error = (dequantize(packed, scales, zeros) - w).abs().max()
        step = scales.float().max() * (1 if dtypes.as_dtype(name).is_integer else 32)
        assert error <= step, (name, float(error))
        tiled, _, _ = quantize_weight(w, name, 64, zero_points=zero_points, k_tile=4)
        assert tiled.format.k_tile == 4
        assert torch.equal(dequantize(tiled, scales, zeros), dequantize(packed, scales, zeros))


def test_small_floats_pack_for_bfloat16_activations():
    """pack_weight(..., activations=bfloat16) places a small float's bits for bfloat16's conversion: other words,
    the same codes. Integers and unplaced types are stored the same for both; quantize_weight with bfloat16 scales
    packs for bfloat16; any other type is refused, naming the argument."""
    w = random_values(dtypes.float4_e2m1, 256, 96)
    for_f16 = pack_weight(w, "float4_e2m1", 128)
    for_bf16 = pack_weight(w, "float4_e2m1", 128, activations=torch.bfloat16)
    assert (for_f16.format.placed_for, for_bf16.format.placed_for) == ("float16", "bfloat16")
    assert for_bf16.format.placement.half == "bfloat16" and "placed for bfloat16" in for_bf16.format.describe()
    assert not torch.equal(for_f16.storage, for_bf16.storage) and torch.equal(for_f16.codes(), for_bf16.codes())
    for name in ("uint4b", "uint3b", "int5b", "float8_e4m3"):
        values = random_values(dtypes.as_dtype(name), 256, 96)
        plain, for_bf16 = pack_weight(values, name, 128), pack_weight(values, name, 128, activations="bfloat16")
        assert plain.format == for_bf16.format and torch.equal(plain.storage, for_bf16.storage), name
    packed, scales, _ = quantize_weight(torch.randn(256, 64, dtype=torch.bfloat16), "float6_e3m2", 64)
    assert scales.dtype == torch.bfloat16 and packed.format.placed_for == "bfloat16"
    for bad in ("float32", 3):
        with pytest.raises(ScriptError, match=f"activations={bad!r} must be float16 or bfloat16"):
            pack_weight(w, "float4_e2m1", 128, activations=bad)


@pytest.mark.parametrize("name", ["float4_e2m1", "float6_e3m2"])
def test_weights_placed_for_bfloat16_convert_in_fewer_instructions(name):
    """Into bfloat16 at decode, a float placed for bfloat16 takes fewer masks and shifts than one placed for float16
    (float4_e2m1: 11 against 17 for 8 codes; float6_e3m2: 21 against 36 for 16), the same rebias multiplies (an
    fma with -0 a pair)."""
    counts = {}
    for placed in ("float16", "bfloat16"):
        fmt = WeightFormat(dtypes.as_dtype(name), 1024, 512, 128, placed)
        config = choose_config(1, fmt, wgmma=True, dtype="bfloat16")
        code = ptx(compile_kernel(fmt, 1, config, target="sm_90a", dtype=torch.bfloat16)[1], "sm_90a")
        counts[placed] = (len(re.findall(r"\blop3\.b32", code)) + len(re.findall(r"\bsh[lr]\.b32", code)),
                          len(re.findall(r"\bfma\.rn\.bf16x2", code)))
    assert counts["bfloat16"][0] < 0.8 * counts["float16"][0], counts
    assert counts["bfloat16"][1] == counts["float16"][1] > 0, counts


def meta(*shape, dtype=torch.float16):
    return torch.empty(*shape, dtype=dtype, device="meta")


def tile_program(kernel, fmt, m, target, workspace=(1,)):
    """``kernel``'s tile program for ``m`` rows of ``fmt`` (meta tensors as compile_kernel's arguments, the split
    partial sums' float32 workspace of shape ``workspace``)."""
    return kernel.tile_program(m, meta(m, fmt.k), meta(*fmt.storage_shape, dtype=torch.int32),
                               meta(fmt.groups, fmt.n), meta(fmt.groups, fmt.n), meta(m, fmt.n),
                               meta(*workspace, dtype=torch.float32), target=target)


def compile_kernel(fmt, m, config, zero_points=False, target="sm_90", dtype=torch.float16, dependent_launch=False):
    kernel = QuantizedMatmul(fmt, dtypes.as_dtype(dtype), zero_points, **asdict(config),
                             dependent_launch=dependent_launch)
    args = (m, torch.zeros(m, fmt.k, dtype=dtype), torch.zeros(fmt.storage_shape, dtype=torch.int32),
            torch.zeros(fmt.groups, fmt.n, dtype=dtype), torch.zeros(fmt.groups, fmt.n, dtype=dtype),
            torch.zeros(m, fmt.n, dtype=dtype), torch.zeros(config.split_k, m, fmt.n))
    return kernel, kernel.compile(*args, target=target)


def ptx(compiled, target):
    import tvm
    from tvm.support import nvcc

    with tvm.target.Target({"kind": "cuda", "arch": target}, host="llvm"):
        nvcc.compile_cuda(compiled.cuda_source, target_format="cubin", arch=target, compiler="nvcc")
        return nvcc.compile_cuda(compiled.cuda_source, target_format="ptx", arch=target, compiler="nvcc").decode()


def table_choice(name, m, k=8192, n=28672, group=128, **kwargs):
    """choose_config's configuration for m rows of ``name`` weights [k, n] in groups of ``group`` (None: per
    channel) on a 132-SM sm_90a GPU; ``kwargs`` (wgmma=, zero_points=, dtype=) override."""
    return choose_config(m, WeightFormat(dtypes.as_dtype(name), k, n, group or k), 132, **{"wgmma": True, **kwargs})


@pytest.mark.parametrize("target", ["sm_80", "sm_90"])
def test_decode_kernel_streams_weights_into_registers(target):
    fmt = WeightFormat(dtypes.uint4b, 1024, 512, 128)
    register_row = replace(choose_config(1, WeightFormat(dtypes.uint2b, 1024, 512, 128)), split_k=1)  # (u4: the ring)
    kernel, compiled = compile_kernel(fmt, 1, register_row, target=target)
    program = str(tile_program(kernel, fmt, 1, target))
    assert "convert_layout" not in program and "shared_tensor" not in program
    code = ptx(compiled, target)
    assert re.search(r"ld\.global\.nc\.v4\.u32", code)  # 16-byte weight vectors
    assert "lop3.b32" in code and "fma.rn.f16x2" in code  # interleaved u4 words: one mask and one fma a pair
    assert "tilus_prmt(" not in compiled.cuda_source
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in code
    assert "bar.sync" not in code  # nothing shared between warps


def test_decode_kernel_streams_weights_through_a_tma_ring():
    """weight_stages: TMA copies each k-step's [granules, chunks, 32 lanes x words] tile into a ring; the warps
    read their 16-byte vectors from shared memory; no global load of weights by the threads."""
    fmt = WeightFormat(dtypes.uint4b, 1024, 512, 128)
    config = replace(choose_config(1, fmt), weight_ring=0, weight_stages=4)
    _, compiled = compile_kernel(fmt, 1, config, target="sm_90")
    code = ptx(compiled, "sm_90")
    assert "cp.async.bulk.tensor.4d" in code and "mbarrier.try_wait.parity" in code
    assert re.search(r"ld\.shared\.v4\.u32", code) and not re.search(r"ld\.global\.nc\.v4\.u32", code)
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in code
    with pytest.raises(ScriptError, match="weight_stages=1 must be 0"):
        QuantizedMatmul(fmt, weight_stages=1)


def test_weight_ring_released_by_one_arrival_a_warp():
    """weight_stages with release_barriers: no block-wide barrier in the k-loop; each warp meets at __syncwarp and
    its lane 0 arrives once on the stage's release barrier (initialised for one arrival a warp); only the thread
    that refills a stage waits for that barrier."""
    fmt = WeightFormat(dtypes.uint4b, 1024, 512, 128)
    config = replace(choose_config(1, fmt), weight_ring=0, weight_stages=3, release_barriers=True)
    _, compiled = compile_kernel(fmt, 1, config, target="sm_90a")
    source = compiled.cuda_source[compiled.cuda_source.rindex("__global__"):]
    loop = source[source.index("for (int v"):]
    loop = loop[:loop.index("__syncthreads") if "__syncthreads" in loop else len(loop)]
    assert "mbarrier_arrive_nocount" in loop and "tvm_builtin_cuda_warp_sync();" in loop
    assert re.search(r"tvm_builtin_cuda_warp_sync\(\);\s*if \(\(\(\(int\)threadIdx.x\) % 32\) == 0\) \{\s*"
                     r"tvm_builtin_ptx_mbarrier_arrive_nocount", loop)
    inits = re.findall(r"mbarrier_init_init_shared_b64\([^;]*\(uint\)(\d+)\);", source)
    assert sorted(inits) == ["1"] * 3 + ["4"] * 3  # the TMA's arrival a stage; the 4 warps' releases
    assert "bar.warp.sync" in ptx(compiled, "sm_90a")
    with pytest.raises(ScriptError, match="release_barriers is for stages that TMA fills"):
        QuantizedMatmul(fmt, release_barriers=True)


@pytest.mark.parametrize("prefetch,unroll", [(2, 2), (3, 6)])
def test_fixed_slots_unroll_the_k_loop(prefetch, unroll):
    """fixed_slots: the k-loop is unrolled by the least multiple of the queues' depths (weights `prefetch`,
    activations and scales 2), each slot refilled with the step `depth` ahead once its step has used it; a tail
    shorter than the unrolling is guarded. Rotating queues (the default) keep one step a loop iteration."""
    fmt = WeightFormat(dtypes.uint2b, 1024, 512, 128)  # 8 k-steps
    config = Config(block_m=8, prefetch=prefetch, split_k=1, fixed_slots=True)
    kernel, compiled = compile_kernel(fmt, 1, config)
    assert kernel.queue_depths() == (prefetch, 2, 2, 0, unroll)
    source = compiled.cuda_source[compiled.cuda_source.rindex("__global__"):]
    rounds = -(-8 // unroll)
    assert re.search(rf"for \(int v\w* = 0; v\w* < {rounds}; \+\+v\w*\)", source)
    # the tail's guard: steps 6 * v + u < 8 for u >= 2 is v < 1
    assert bool(re.search(r"if \(v\w* < 1\)", source)) == (8 % unroll != 0)
    assert "mma.sync.aligned.m16n8k16" in ptx(compiled, "sm_90")
    rotating = QuantizedMatmul(fmt, block_m=8, prefetch=prefetch)
    assert rotating.queue_depths() == (prefetch, 1, 1, 0, 1)
    assert QuantizedMatmul(fmt, zero_points=True, fixed_slots=True).queue_depths()[3] == 2
    per_channel = WeightFormat(dtypes.uint2b, 1024, 512, 1024)
    assert QuantizedMatmul(per_channel, zero_points=True, fixed_slots=True).queue_depths()[2:4] == (0, 1)
    with pytest.raises(ScriptError, match="fixed_slots=1 must be True or False"):
        QuantizedMatmul(fmt, fixed_slots=1)


def test_the_hopper_decode_row_splits_grids_smaller_than_the_sms():
    """On sm_90a the 4-6-bit decode row (the released TMA ring) serves grids of fewer blocks than SMs too, splitting
    K in up to 4 (a 7B model's 11008 and 12288 channels, a 70B model's 10240: 80-96 blocks of 128 channels); a grid
    that would need 8 splits (1x11008x4096, 1x28672x8192) leaves the batch to the short-grid ring row (see
    test_grids_short_of_the_sms_take_the_short_grid_ring)."""
    for k, n in ((4096, 11008), (4096, 12288), (8192, 10240)):
        for name in ("uint4b", "int5b", "uint6b", "float4_e2m1"):
            for m in (1, 8):
                config = choose_config(m, WeightFormat(dtypes.as_dtype(name), k, n, 128), 132, wgmma=True)
                assert (config.weight_stages, config.release_barriers, config.split_k) == (3, True, 4), (k, n, name)
        assert not choose_config(1, WeightFormat(dtypes.uint4b, k, n, 128), 132).weight_stages  # (not without sm_90a)
    for k, n in ((11008, 4096), (28672, 8192)):
        assert choose_config(1, WeightFormat(dtypes.uint4b, k, n, 128), 132, wgmma=True).units_per_warp == 1
    # and the 9-16-row row, for 4- to 6-bit weights (7-bit ones keep the register row there)
    for name in ("uint4b", "int5b", "uint6b", "float4_e2m1"):
        for m in (12, 16):
            config = choose_config(m, WeightFormat(dtypes.as_dtype(name), 4096, 11008, 128), 132, wgmma=True)
            assert (config.weight_stages, config.block_m, config.stages, config.split_k) == (3, 16, 2, 4), (name, m)
    assert not choose_config(16, WeightFormat(dtypes.uint7b, 4096, 11008, 128), 132, wgmma=True).weight_stages
    big = choose_config(16, WeightFormat(dtypes.uint7b, 8192, 28672, 128), 132, wgmma=True)
    assert (big.weight_stages, big.split_k) == (3, 2)  # (a grid that fills the SMs: the row, as before)


def test_the_hopper_decode_row_splits_k_inside_the_block():
    """Where the 4-6-bit decode row would split K in two over the grid, it splits it over two groups of warps of a
    block instead (k_groups=2, its activations staged, two blocks an SM asked), up to 8 rows, and so do the 2- and
    3-bit rows (the same tile in their place, a ring of 4 k-steps for 2-bit weights, two warps of 4 units a group for
    3-bit weights where a k-step is one scale group); so does the 9-16-row ring tile
    for 4-bit weights in groups of 64 or more; a K split in 4, an odd number of k-steps, 7- and 8-bit weights, 2-7-bit
    weights but 2-4-bit at 9-16 rows and GPUs without sm_90a keep the grid's split; at 9-16 rows 2-3-bit weights
    take the 4-bit tile of two groups of two warps where a k-step is one scale group."""
    def chosen(m, name, k=8192, n=28672, group=128, **kwargs):
        config = choose_config(m, WeightFormat(dtypes.as_dtype(name), k, n, group), 132, **{"wgmma": True, **kwargs})
        return config.split_k, config.k_groups

    for m in (1, 4, 5, 8):
        for name in ("uint4b", "int4b", "float4_e2m1", "int5b", "uint6b", "float6_e3m2", "uint3b", "int3b", "uint2b"):
            assert chosen(m, name) == (1, 2), (m, name)
            decode = choose_config(m, WeightFormat(dtypes.as_dtype(name), 8192, 28672, 128), 132, wgmma=True)
            three = name in ("uint3b", "int3b")  # (two warps of 4 units a group where a k-step is one scale group)
            assert (decode.warps, decode.units_per_warp, decode.block_m, decode.stage_activations, decode.stages,
                    decode.prefetch, decode.min_blocks, decode.weight_stages) == \
                (2 if three else 4, 4 if three else 2, 8, True, 2, 1, 2, 4 if name == "uint2b" else 3), (m, name)
        for group in (32, 64):  # (3-bit weights: two or more scale groups a k-step keep 4 warps of 2 units)
            wide = choose_config(m, WeightFormat(dtypes.uint3b, 8192, 28672, group), 132, wgmma=True)
            assert (wide.warps, wide.units_per_warp, wide.k_groups) == (4, 2, 2), (m, group)
        assert chosen(m, "uint7b") == chosen(m, "uint8") == (2, 1), m
        for group in (32, 64):
            assert chosen(m, "uint3b", group=group) == chosen(m, "uint2b", group=group) == (1, 2), (m, group)
    assert chosen(1, "uint2b", wgmma=False) == chosen(1, "uint3b", group=64, wgmma=False) == (2, 1)
    for m in (9, 12, 16):
        assert chosen(m, "uint4b") == chosen(m, "float4_e2m1") == (1, 2), m
        assert chosen(m, "int5b") == chosen(m, "uint6b") == chosen(m, "uint7b") == (2, 1), m
        assert chosen(m, "uint2b") == chosen(m, "uint3b") == chosen(m, "int3b") == (1, 2), m
        assert chosen(m, "uint2b", group=64) == chosen(m, "uint3b", group=32) == (2, 1), m
        narrow = choose_config(m, WeightFormat(dtypes.uint3b, 8192, 28672, 128), 132, wgmma=True)
        assert (narrow.warps, narrow.units_per_warp, narrow.block_m, narrow.weight_stages) == (2, 4, 16, 3), m
        assert chosen(m, "uint4b", k=4096, n=11008) == (4, 1), m
    sixteen = choose_config(16, WeightFormat(dtypes.uint4b, 8192, 28672, 128), 132, wgmma=True)
    assert (sixteen.stage_activations, sixteen.block_m, sixteen.min_blocks) == (True, 16, 2)
    for group, split in ((64, (1, 2)), (32, (2, 1)), (None, (1, 2))):  # (groups of 32: four a k-step, kept split)
        fmt = WeightFormat(dtypes.uint4b, 8192, 28672, group or 8192)
        config = choose_config(16, fmt, 132, wgmma=True)
        assert (config.split_k, config.k_groups) == split, group
    assert chosen(1, "uint4b", k=8192 + 128) == (2, 1)  # 65 k-steps
    assert chosen(1, "uint4b", k=4096, n=11008) == (4, 1)
    assert chosen(1, "uint4b", wgmma=False)[1] == 1


def test_biased_codes():
    """biased_codes: the 2-bit decode row in groups of warps (1-8 rows on sm_90a), in groups of one k-step, converts
    each code pair by one lop3 under its place's own magic number, with no paired fma, and takes the biases' dot off
    each group's (one more mma a k16 step: ptxas shares the identical mma of a warp's two units); with zero points
    (ZERO_POINT_BIASED) also the 4-bit decode rows and groups of 64, each channel's zero point then coming off as its
    product with the group's activation sums. The other rows, smaller groups and per-channel scales convert exactly.
    Every configuration it cannot serve is refused by name."""
    for m in (1, 4, 8):
        for name in ("uint2b", "int2b"):
            assert table_choice(name, m).biased_codes, (name, m)
            assert table_choice(name, m, dtype="bfloat16").biased_codes, (name, m)
            for group in (32, 64, None):
                assert not table_choice(name, m, group=group).biased_codes, (name, m, group)
        for name in ("uint2b", "int2b", "uint4b", "int4b"):  # with zero points: groups of 64 or more
            for group in (128, 64):
                assert table_choice(name, m, group=group, zero_points=True).biased_codes, (name, m, group)
            for group in (32, None):
                assert not table_choice(name, m, group=group, zero_points=True).biased_codes, (name, m, group)
        for name in ("uint4b", "uint3b", "int5b", "uint8", "float4_e2m1"):
            assert not table_choice(name, m).biased_codes, (name, m)
        for name in ("uint3b", "int5b", "uint8", "float4_e2m1"):  # (not interleaved integer codes)
            assert not table_choice(name, m, zero_points=True).biased_codes, (name, m)
    for m in (9, 16, 64, 256):
        assert not table_choice("uint2b", m).biased_codes, m
        assert not table_choice("uint4b", m, zero_points=True).biased_codes, m
    assert not table_choice("uint2b", 1, wgmma=False).biased_codes
    assert not table_choice("uint4b", 1, wgmma=False, zero_points=True).biased_codes
    # the 7B and 70B decode shapes: the 4-bit ring row split in 4 with zero points, not the 2-bit register row
    for k, n in ((4096, 11008), (4096, 12288), (8192, 10240)):
        assert table_choice("uint4b", 1, k=k, n=n, zero_points=True).biased_codes, (k, n)
        assert not table_choice("uint4b", 1, k=k, n=n).biased_codes, (k, n)
        assert not table_choice("uint4b", 1, k, n, 64, zero_points=True).biased_codes, (k, n)
    assert not table_choice("uint2b", 1, k=4096, n=11008).biased_codes
    assert not table_choice("uint2b", 1, k=4096, n=11008, zero_points=True).biased_codes

    fmt = WeightFormat(dtypes.uint2b, 1024, 512, 128)
    row = replace(table_choice("uint2b", 1), split_k=1)
    programs = {}
    for biased in (False, True):
        kernel, compiled = compile_kernel(fmt, 1, replace(row, biased_codes=biased), target="sm_90a")
        programs[biased] = (compiled, tile_program(kernel, fmt, 1, "sm_90a"))
    dots = {}
    for biased, (compiled, program) in programs.items():
        body = list(instructions(program.body))
        casts = [inst for inst in body if isinstance(inst, ir.Cast) and inst.x.dtype == dtypes.uint2b]
        assert casts and all(c.biased == biased for c in casts)
        dots[biased] = sum(isinstance(inst, ir.DotSplit) for inst in body)
        allocations = [inst for inst in body if isinstance(inst, ir.AllocateRegister)
                       and isinstance(inst.init, ir.SlotValues)]
        assert len(allocations) == int(biased)
        if biased:  # place 0, 2, 4, 6, 8 of each half, then the word shifted by 10: places 0, 2, 4
            assert set(allocations[0].init.values) == {1024.0, 256.0, 64.0, 16.0, 4.0}
        code = ptx(compiled, "sm_90a")
        assert "mma.sync.aligned.m16n8k16" in code
        assert ("fma.rn.f16x2" in code) != biased, biased  # the conversion's paired fma, gone when biased
    assert dots[True] == 2 * dots[False] > 0  # (the biases' dot beside each of the weights')
    # with zero points: no paired fma either (the exact conversion's takes the zero point), and a third dot, of ones
    row = replace(table_choice("uint2b", 1, zero_points=True), split_k=1)
    assert row.biased_codes
    mma = {}
    for biased in (False, True):
        kernel, compiled = compile_kernel(fmt, 1, replace(row, biased_codes=biased), zero_points=True,
                                          target="sm_90a")
        code = ptx(compiled, "sm_90a")
        assert ("fma.rn.f16x2" in code) != biased, biased
        mma[biased] = code.count("mma.sync.aligned.m16n8k16")
    assert mma[True] == 3 * mma[False] > 0
    for kwargs, zero_points, name, group, match in (
            ({"biased_codes": 1}, False, "uint2b", 128, "biased_codes=1 must be True or False"),
            ({"biased_codes": True}, False, "uint3b", 128, "1-, 2- or 4-bit integer codes"),
            ({"biased_codes": True}, False, "float4_e2m1", 128, "1-, 2- or 4-bit integer codes"),
            ({"biased_codes": True, "scale_weights": True}, False, "uint2b", 128, "and scale_weights"),
            ({"biased_codes": True}, False, "uint2b", None, "in groups")):
        with pytest.raises(ScriptError, match=match):
            QuantizedMatmul(WeightFormat(dtypes.as_dtype(name), 1024, 512, group or 1024), dtypes.float16, zero_points,
                            **kwargs)



def test_zero_point_sums():
    """zero_point_sums: integer codes with zero points on the rows of ZERO_POINT_SUMS (3-bit weights' decode row in
    groups, the 9-16-row rows of 5-, 6- and 8-bit weights) take each channel's zero point
    off as its product with the group's activation sums: one more mma a k16 step (a dot of ones), no subtraction
    from the converted weights. Every configuration it cannot serve is refused by name."""
    def chosen(name, m, *args, **kwargs):
        return table_choice(name, m, *args, **{"zero_points": True, **kwargs}).zero_point_sums

    for m in (1, 4, 8):
        assert chosen("uint3b", m) and chosen("int3b", m), m
        assert not chosen("uint3b", m, group=64) and not chosen("uint3b", m, zero_points=False), m
        for name in ("uint4b", "int5b", "uint6b", "uint7b", "uint8", "int8", "uint2b"):
            assert not chosen(name, m), (name, m)
    for m in (12, 16):
        for name in ("int5b", "uint5b", "uint6b", "int6b", "uint8", "int8"):
            assert chosen(name, m) and not chosen(name, m, zero_points=False), (name, m)
        for name in ("uint2b", "int2b", "uint3b", "uint4b", "uint7b"):
            assert not chosen(name, m), (name, m)
    assert not chosen("uint2b", 1, 4096, 11008) and not chosen("int2b", 1, 28672, 8192)
    assert not chosen("uint3b", 1, 4096, 11008) and not chosen("uint4b", 1, 28672, 8192)
    assert not chosen("uint3b", 1, wgmma=False) and not chosen("uint8", 16, group=32)  # (k-steps of 64 inputs)
    assert not chosen("float8_e4m3", 16) and not chosen("uint8", 64)

    fmt = WeightFormat(dtypes.uint3b, 1024, 512, 128)
    row = replace(choose_config(1, WeightFormat(dtypes.uint3b, 8192, 28672, 128), 132, wgmma=True, zero_points=True),
                  split_k=1)
    assert row.zero_point_sums
    mma, subs = {}, {}
    for sums in (False, True):
        kernel, compiled = compile_kernel(fmt, 1, replace(row, zero_point_sums=sums), zero_points=True,
                                          target="sm_90a")
        body = list(instructions(tile_program(kernel, fmt, 1, "sm_90a").body))
        # (the weights [.., block_n, kt] less the zero points: gone with the sums)
        subs[sums] = sum(isinstance(inst, ir.Binary) and inst.op == "sub" and inst.lhs.dtype.name == "float16"
                         for inst in body)
        mma[sums] = ptx(compiled, "sm_90a").count("mma.sync.aligned.m16n8k16")
    assert mma[True] == 2 * mma[False] > 0  # (a dot of ones beside each of the weights')
    assert subs[False] > 0 and subs[True] == 0
    three = WeightFormat(dtypes.uint3b, 1024, 512, 128)
    for kwargs, zero_points, fmt, match in (
            ({"zero_point_sums": 1}, True, three, "zero_point_sums=1 must be True or False"),
            ({"zero_point_sums": True}, False, three, "without zero points"),
            ({"zero_point_sums": True, "scale_weights": True}, True, three, "and scale_weights"),
            ({"zero_point_sums": True, "warps": 8, "block_m": 64, "stage_activations": True, "scale_weights": True,
              "warpgroup_mma": True}, True, three, "and warpgroup_mma"),
            ({"zero_point_sums": True}, True, WeightFormat(dtypes.uint3b, 1024, 512, 1024), "in groups")):
        with pytest.raises(ScriptError, match=match):
            QuantizedMatmul(fmt, dtypes.float16, zero_points, **kwargs)


def test_zero_point_splits():
    """ZERO_POINT_SPLITS: with zero points, 8-bit integer weights on the 7-8-bit ring row split K in 4 where the row
    splits it in 2 (int8 with a ring of 4 k-steps), up to 8 rows; the same weights without zero points, other widths,
    other shapes and batches keep the table's row, and the configuration it gives compiles."""
    def chosen(name, m, *args, **kwargs):
        return table_choice(name, m, *args, **{"zero_points": True, **kwargs})

    for m in (1, 4, 8):
        plain = chosen("uint8", m, zero_points=False)
        assert plain.split_k == 2 and plain.weight_stages == 3, m
        assert chosen("uint8", m) == replace(plain, split_k=4), m
        assert chosen("int8", m) == replace(chosen("int8", m, zero_points=False), split_k=4, weight_stages=4), m
        assert chosen("uint7b", m) == chosen("uint7b", m, zero_points=False), m
    for args in (("uint8", 16), ("int8", 1, 28672, 8192), ("uint8", 1, 4096, 11008), ("int8", 1, 8192, 28672, 8192)):
        assert chosen(*args).split_k == chosen(*args, zero_points=False).split_k, args
    assert chosen("uint8", 1, wgmma=False) == chosen("uint8", 1, wgmma=False, zero_points=False)
    assert chosen("uint8", 1, 2048, 28672).split_k == 2  # (16 k-steps: 4 splits would keep 4 each)
    fmt = WeightFormat(dtypes.int8, 2048, 512, 128)
    config = chosen("int8", 1)
    kernel, compiled = compile_kernel(fmt, 1, config, zero_points=True, target="sm_90a")
    assert "cp.async.bulk.tensor" in ptx(compiled, "sm_90a")


def test_k_split_over_groups_of_warps():
    """k_groups=2: blocks of twice the warps, each group converting and multiplying every other k-step of a stage
    (TMA boxes of two k-steps; the release barriers wait for all 8 warps), the groups' partial sums added through
    shared memory once after the loop; every configuration it cannot serve is refused by name."""
    fmt = WeightFormat(dtypes.uint4b, 1024, 512, 128)
    row = replace(choose_config(1, WeightFormat(dtypes.uint4b, 8192, 28672, 128), 132, wgmma=True), split_k=1)
    assert row.k_groups == 2
    kernel, compiled = compile_kernel(fmt, 1, row, target="sm_90a")
    assert re.search(r"__launch_bounds__\(256", compiled.cuda_source)
    source = compiled.cuda_source[compiled.cuda_source.rindex("__global__"):]
    inits = re.findall(r"mbarrier_init_init_shared_b64\([^;]*\(uint\)(\d+)\);", source)
    assert sorted(inits) == ["1"] * 3 + ["8"] * 3  # the TMA's arrival a stage; the 8 warps' releases
    program = tile_program(kernel, fmt, 1, "sm_90a")

    body = list(instructions(program.body))
    dots = [inst for inst in body if isinstance(inst, ir.DotSplit)]
    assert dots and all(d.config.batch == 2 and d.a.shape == (2, 128, 128) for d in dots)
    sums = [inst for inst in body if isinstance(inst, ir.Reduce)]
    assert len(sums) == 1 and sums[0].x.shape == (2, 128, 8) and tuple(sums[0].output.shape) == (128, 8)
    code = ptx(compiled, "sm_90a")
    assert "cp.async.bulk.tensor.4d" in code and "mma.sync.aligned.m16n8k16" in code and "bar.sync" in code
    for kwargs, match in (({"k_groups": 3}, "k_groups=3 must be 1, 2 or 4"),
                          ({"k_groups": 4, "warps": 8}, "at most 16"),
                          ({"k_groups": 2}, "needs the TMA ring of weights"),
                          ({"k_groups": 2, "weight_ring": 3}, "needs the TMA ring of weights"),
                          ({"k_groups": 2, "weight_stages": 3, "split_k": 3}, "8 k-steps of 128 inputs split in 3"),
                          ({"k_groups": 4, "weight_stages": 3, "split_k": 4}, "multiple of k_groups")):
        with pytest.raises(ScriptError, match=match):
            QuantizedMatmul(fmt, **kwargs)
    with pytest.raises(ScriptError, match="multiple of k_groups"):  # 3 k-steps
        QuantizedMatmul(WeightFormat(dtypes.uint4b, 384, 512, 128), k_groups=2, weight_stages=3)
    tiled = WeightFormat(dtypes.uint4b, 8192, 512, 128, k_tile=2)  # a stage of 4 k-steps would span two tiles
    with pytest.raises(ScriptError, match="tile of the weight's storage, which holds 2"):
        QuantizedMatmul(tiled, warps=4, k_groups=4, weight_stages=3)
    QuantizedMatmul(replace(tiled, k_tile=4), warps=4, k_groups=4, weight_stages=3)
    # tiled weights' splits take whole tiles in turn: any split of 43 k-steps in 11 tiles of 4 keeps groups whole
    QuantizedMatmul(WeightFormat(dtypes.uint4b, 43 * 128, 512, 128, k_tile=4), warps=4, k_groups=2, weight_stages=3,
                    split_k=3)


@pytest.mark.parametrize("name,m,k,n,wgmma,path", [
    ("uint4b", 1, 8192, 28672, True, "bulk.tensor.5d"),  # the TMA ring, a stage of two k-steps (k_groups=2)
    ("uint4b", 1, 4096, 11008, True, "bulk.tensor.5d"),  # the TMA ring, one k-step a stage, K split in 4
    ("uint4b", 1, 8192, 28672, False, "cp.async.cg"),  # the per-thread cp.async ring
    ("uint2b", 1, 8192, 28672, False, "ld.global"),  # straight to registers
    ("uint4b", 128, 28672, 8192, True, "wgmma.mma_async"),  # wgmma, K split in 3 (strided: tiles z, z + 3, ...)
])
def test_weights_in_tiles_of_k_steps_take_every_load_path(name, m, k, n, wgmma, path):
    """With pack_weight(k_tile=2), the kernel views the storage granule first, [granules, tiles, 2, ...], and every
    way of loading the weights reads k-step s at tile s // 2, place s % 2 (the TMA ring's stages are boxes of a 5-d
    tensor map, [tiles, granules, 2, chunks, 32 x words])."""
    fmt = WeightFormat(dtypes.as_dtype(name), k, n, 128, k_tile=2)
    config = choose_config(m, fmt, 132, wgmma=wgmma)
    target = "sm_90a" if wgmma else "sm_80"
    kernel, compiled = compile_kernel(fmt, m, config, target=target)
    shape = fmt.storage_shape
    program = str(tile_program(kernel, fmt, m, target, workspace=(config.split_k, m, n)))
    view = f"int32[{shape[1]}, (end + 2 - 1) // 2, 2, {shape[3]}, 32, {shape[5]}] strides={fmt.view_strides}"
    assert view in program
    assert path in ptx(compiled, target)


def test_grids_short_of_the_sms_take_the_short_grid_ring():
    """On sm_90a, up to 8 rows of 3- to 8-bit weights whose grid is short of the SMs and needs more K splits than
    the rows before allow take one unit a warp, staged activations and the released TMA ring, K split until 4
    blocks an SM (3 for 6- to 8-bit weights); 2-bit weights, 9 rows and more, and GPUs without sm_90a keep their
    rows."""
    ring = ("weight_stages", "release_barriers", "fixed_slots", "stage_activations", "units_per_warp")
    expected = {(11008, 4096): (8, 8), (28672, 8192): (8, 4), (8192, 8192): (8, 4), (4096, 11008): (4, 4),
                (8192, 10240): (4, 4)}  # (K, N): splits for 3-5-bit and for 6-8-bit weights
    for (k, n), (narrow, wide) in expected.items():
        for name in ("uint3b", "uint4b", "int5b", "float4_e2m1", "uint6b", "float6_e2m3", "uint7b", "uint8",
                     "float8_e4m3"):
            dtype = dtypes.as_dtype(name)
            if (k, n) in ((4096, 11008), (8192, 10240)) and dtype.nbits in (4, 5, 6):
                continue  # (the 4-6-bit row serves these at 4 splits with two units a warp)
            for m in (1, 8):
                config = choose_config(m, WeightFormat(dtype, k, n, 128), 132, wgmma=True)
                assert tuple(getattr(config, f) for f in ring) == (3, True, True, True, 1), (k, n, name, m)
                assert config.split_k == (narrow if dtype.nbits <= 5 else wide), (k, n, name, m, config.split_k)
    for k, n in expected:
        assert not choose_config(1, WeightFormat(dtypes.uint2b, k, n, 128), 132, wgmma=True).weight_stages
        assert not choose_config(1, WeightFormat(dtypes.uint4b, k, n, 128), 132).weight_stages
        assert choose_config(16, WeightFormat(dtypes.uint3b, k, n, 128), 132, wgmma=True).block_m == 16
    # a grid that fills the SMs keeps the rows before (1x8192x28672: 224 blocks of 128 channels)
    assert choose_config(1, WeightFormat(dtypes.uint4b, 8192, 28672, 128), 132, wgmma=True).units_per_warp == 2


def test_the_short_grid_ring_builds_for_every_group_and_width():
    """The short-grid ring row's kernel builds (TMA ring, staged activations, K split in 8) for formats whose k-steps
    span several groups, with zero points and bfloat16, and ptxas takes it (on a GPU of 16 SMs a 512-channel grid
    of 8 blocks is short of them)."""
    for name, group, dtype in (("int3b", 32, torch.bfloat16), ("float6_e3m2", 64, torch.bfloat16),
                               ("float8_e5m2", 128, torch.float16), ("uint4b", 32, torch.bfloat16)):
        fmt = WeightFormat(dtypes.as_dtype(name), 8192, 512, group)
        config = choose_config(1, fmt, 16, wgmma=True)
        chosen = (config.weight_stages, config.stage_activations, config.units_per_warp, config.split_k)
        assert chosen == (3, True, 1, 8), (name, group)
        _, compiled = compile_kernel(fmt, 1, config, zero_points=True, target="sm_90a", dtype=dtype)
        assert "cp.async.bulk.tensor" in compiled.cuda_source, name
        if name == "int3b":
            assert "cp.async.bulk.tensor" in ptx(compiled, "sm_90a")


def test_uneven_k_splits():
    """split_k need not divide the k-steps: split z takes steps [z * S // split_k, (z + 1) * S // split_k), its
    bounds and its loop's trip count computed at run time; an even split keeps them compile-time constants."""
    fmt = WeightFormat(dtypes.uint4b, 11 * 128, 512, 128)  # 11 k-steps
    _, uneven = compile_kernel(fmt, 1, Config(prefetch=2, split_k=3))
    source = uneven.cuda_source[uneven.cuda_source.rindex("__global__"):]
    assert re.search(r"\(\(\(int\)blockIdx\.z\) \* 11\) / 3\)", source)
    assert re.search(r"for \(int v\w* = 0; v\w* < \(", source)  # a run-time trip count
    even = WeightFormat(dtypes.uint4b, 12 * 128, 512, 128)
    _, split = compile_kernel(even, 1, Config(prefetch=2, split_k=3))
    assert re.search(r"for \(int v\w* = 0; v\w* < 4; \+\+v\w*\)", split.cuda_source)


def test_decode_kernel_streams_weights_through_a_per_thread_ring():
    """weight_ring: each thread cp.asyncs its own 16-byte weight vectors into a ring and reads them back after its
    own wait: no barrier, no global load of weights into registers; misuse is refused by name."""
    fmt = WeightFormat(dtypes.uint4b, 1024, 512, 128)
    config = choose_config(1, fmt)
    assert (config.warps, config.units_per_warp, config.weight_ring) == (4, 1, 4)  # the table's decode row for u4
    _, compiled = compile_kernel(fmt, 1, config, target="sm_80")
    code = ptx(compiled, "sm_80")
    assert "cp.async.cg.shared.global" in code and "cp.async.wait_group 3;" in code
    assert re.search(r"ld\.shared\.v4\.u32", code) and not re.search(r"ld\.global\.nc\.v4\.u32", code)
    assert "bar.sync" not in code.split("cp.async.wait_all")[0]  # (the split-K reduction's barrier comes after)
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in code
    staged = replace(config, block_m=16, stage_activations=True, stages=4)
    _, compiled = compile_kernel(fmt, 16, staged, target="sm_80")  # activations in the same cp.async groups
    assert "cp.async.wait_group 3;" in compiled.cuda_source
    for kwargs, message in (({"weight_ring": 1}, "weight_ring=1 must be 0"),
                            ({"weight_ring": 3, "weight_stages": 3}, "two rings for the same weights"),
                            ({"weight_ring": 3, "stage_activations": True, "stages": 2}, "must equal stages=2"),
                            ({"weight_ring": 3, "warpgroup_mma": True, "warps": 4, "stage_activations": True,
                              "stages": 3, "scale_weights": True}, "weight_ring is for mma.sync")):
        with pytest.raises(ScriptError, match=message):
            QuantizedMatmul(fmt, **kwargs)


def kernel_body(compiled) -> str:
    source = compiled.cuda_source
    return source[source.index("{", source.rindex("__global__")):]


@pytest.mark.parametrize("name,m,k,n,zero_points,overrides", [
    ("uint4b", 1, 4096, 11008, False, {}),  # the TMA ring of weights, K split in 4 (serial reduction, workspaces)
    ("uint2b", 1, 8192, 28672, True, {}),  # groups of warps, staged activations, biased codes with zero points
    ("uint4b", 16, 8192, 28672, False, {}),  # the 16-row tile
    ("uint4b", 4, 4096, 4096, False, {}),  # weights straight to registers, activations in registers
    ("uint3b", 128, 4096, 11008, False, {}),  # wgmma: activations by TMA, SplitKSum's workspace
    ("uint4b", 16, 1024, 512, False, {"weight_ring": 3, "weight_stages": 0, "stage_activations": True,
                                      "stages": 3}),  # the per-thread ring: words and activations in one group
])
def test_dependent_launch_waits_before_the_activations(name, m, k, n, zero_points, overrides):
    """dependent_launch: the kernel issues the first k-steps' weights, scales and zero points, then waits for the work
    before it; every read of the activations and every write of the output and the workspaces come after that wait
    (the per-thread ring, whose copy groups hold words and activations alike, waits before its first copy). On the
    TMA ring of weights it lets the next call start once its k-loop is done. The kernel without it has none of
    this."""
    fmt = WeightFormat(dtypes.as_dtype(name), k, n, 128)
    config = replace(table_choice(name, m, k=k, n=n, zero_points=zero_points), **overrides)
    _, compiled = compile_kernel(fmt, m, config, zero_points, target="sm_90a", dependent_launch=True)
    body = kernel_body(compiled)
    assert body.count("griddepcontrol_wait()") == 1
    wait = body.index("griddepcontrol_wait()")
    if config.weight_stages:  # the next call may start once this one's k-loop is done (else as each block exits)
        assert body.count("griddepcontrol_launch_dependents()") == 1
        assert wait < body.index("griddepcontrol_launch_dependents()") < body.index("out_ptr_ptr")
    else:
        assert "griddepcontrol_launch_dependents()" not in body
    late = ["a_ptr_ptr", "out_ptr_ptr", "workspace", "bulk_tensor_2d"]  # activations (TMA: 2-D), output, workspaces
    assert all(wait < body.index(text) for text in late if text in body), [t for t in late if t in body]
    early = ["s_ptr_ptr", "bulk_tensor_4d", "bulk_tensor_5d"]  # scales, the weights' TMA (4-/5-D)
    if not config.weight_ring:
        assert any(text in body[:wait] for text in early)
        assert "a_ptr_ptr" in body[wait:] or "bulk_tensor_2d" in body[wait:]  # (read by threads or by TMA)
    else:
        assert "w_ptr_ptr" not in body[:wait]
    assert "griddepcontrol.wait;" in compiled.ptx
    plain = compile_kernel(fmt, m, config, zero_points, target="sm_90a")[1]
    assert "griddepcontrol" not in plain.cuda_source


def test_dependent_launch_misuse():
    fmt = WeightFormat(dtypes.uint4b, 1024, 512, 128)
    with pytest.raises(ScriptError, match="dependent_launch must be a bool, got 1"):
        QuantizedMatmul(fmt, dependent_launch=1)
    with pytest.raises(ScriptError, match="needs sm_90 or newer, the target is sm_80"):
        compile_kernel(fmt, 1, choose_config(1, fmt), target="sm_80", dependent_launch=True)
    packed = pack_weight(torch.zeros(1024, 512), "uint4b", 128)
    a, scales = torch.zeros(1, 1024, dtype=torch.float16), torch.ones(8, 512, dtype=torch.float16)
    with pytest.raises(LaunchError, match="dependent_launch=True needs a Hopper GPU"):
        quantized_matmul(a, packed, scales, dependent_launch=True)
    with pytest.raises(LaunchError, match="dependent_launch must be a bool"):
        quantized_matmul(a, packed, scales, dependent_launch="yes")


def test_wgmma_activations_by_tma():
    """With warpgroup_mma the staged activations come by TMA (one barrier a stage) unless tma_activations=False;
    TMA without wgmma is refused."""
    fmt = WeightFormat(dtypes.uint4b, 1024, 512, 128)
    config = choose_config(128, fmt, wgmma=True)
    _, compiled = compile_kernel(fmt, 128, config, target="sm_90a")
    assert "cp.async.bulk.tensor.2d" in compiled.ptx and "cp.async.cg" not in compiled.ptx
    _, compiled = compile_kernel(fmt, 128, replace(config, tma_activations=False), target="sm_90a")
    assert "cp.async.bulk.tensor" not in compiled.ptx and "cp.async.cg" in compiled.ptx
    with pytest.raises(ScriptError, match="tma_activations=True must be None"):
        QuantizedMatmul(fmt, tma_activations=True)


def test_wgmma_stages_released_by_barriers():
    """release_barriers: every thread arrives on its stage's release barrier after its wgmma, and only the thread
    that refills the stage waits for it: no block-wide barrier in the k-loop (with cp.async activations the
    option is refused)."""
    fmt = WeightFormat(dtypes.uint4b, 1024, 512, 128)
    config = replace(choose_config(256, fmt, wgmma=True), release_barriers=True)
    _, compiled = compile_kernel(fmt, 256, config, target="sm_90a")
    body = compiled.cuda_source[compiled.cuda_source.rindex("__global__"):]
    loop = body[body.index("tilus_wgmma_fence"):body.rindex("mbarrier_arrive_nocount")]
    assert "__syncthreads" not in loop and "mbarrier.arrive.shared.b64 _" in ptx(compiled, "sm_90a")
    _, synced = compile_kernel(fmt, 256, replace(config, release_barriers=False), target="sm_90a")
    assert "mbarrier_arrive_nocount" not in synced.cuda_source
    for kwargs in ({}, {"warpgroup_mma": True, "warps": 4, "stage_activations": True, "scale_weights": True,
                        "tma_activations": False}):
        with pytest.raises(ScriptError, match="release_barriers is for stages that TMA fills"):
            QuantizedMatmul(fmt, release_barriers=True, **kwargs)


@pytest.mark.parametrize("name,group,m,zero_points,dtype", [
    ("int3b", 32, 5, True, torch.float16), ("float8_e4m3", None, 16, False, torch.bfloat16),
    ("float6_e3m2", 64, 96, False, torch.float16), ("uint2b", 128, 200, True, torch.bfloat16),
    ("float4_e2m1", 32, 1, False, torch.float16), ("uint8", 64, 3, True, torch.float16)])
def test_kernel_paths_lower(name, group, m, zero_points, dtype):
    fmt = WeightFormat(dtypes.as_dtype(name), 256, 200, group or 256)
    config = choose_config(m, fmt)
    kernel, compiled = compile_kernel(fmt, m, config, zero_points=zero_points, dtype=dtype)
    code = ptx(compiled, "sm_90")
    assert "mma.sync.aligned.m16n8k16" in code
    if config.stage_activations:
        assert "cp.async" in code and "ldmatrix" in code


def test_split_k_writes_partials_and_sums_them():
    from tilus_tvm.schedules.quantized_matmul import SplitKSum

    fmt = WeightFormat(dtypes.uint4b, 8192, 28672, 128)
    config = replace(choose_config(1, fmt, multiprocessors=132), split_reduce="kernel")
    # the ring row: 448 blocks of 64 channels, fewer than the 6 per SM it asks for, so K is split in two
    assert config.split_k == 2 and config.block_m == 8 and config.units_per_warp == 1
    assert choose_config(1, WeightFormat(dtypes.uint4b, 4096, 4096, 128), 132).split_k == 4
    assert choose_config(256, fmt, 132).split_k == 1 and choose_config(256, fmt, 132).stage_activations
    kernel, compiled = compile_kernel(fmt, 1, config)
    program = str(tile_program(kernel, fmt, 1, "sm_90", workspace=(2, 1, 28672)))
    assert "attrs.blocks = [(m_size + 8 - 1) // 8, 448, 2]" in program and "pointer=ws_ptr" in program
    # a split's weight view ends with the split but steps through the whole weight: the storage's strides
    shape = fmt.storage_shape
    strides = [math.prod(shape[d + 1:]) for d in range(len(shape))]
    assert fmt.storage_strides == strides
    assert f"int32[{shape[0]}, end, {shape[2]}, 32, {shape[4]}] strides={strides} pointer=w_ptr" in program
    total = SplitKSum(2, dtypes.float16).compile(28672, torch.zeros(2, 28672), torch.zeros(28672, dtype=torch.float16),
                                                 target="sm_90")
    assert "split_k_sum" in total.cuda_source


@pytest.mark.parametrize("target", ["sm_80", "sm_90"])
def test_serial_split_reduction_adds_the_splits_in_the_kernel(target):
    """split_reduce="serial": every split stores its partial sums in the kernel's own workspace and arrives at
    its tile's counter (a fence and an atomic add); the last to arrive adds them up in split order, writes
    the output and clears the counter. No block waits for another."""
    fmt = WeightFormat(dtypes.uint4b, 8192, 28672, 128)
    config = replace(choose_config(1, fmt, multiprocessors=132), split_reduce="serial")
    kernel, compiled = compile_kernel(fmt, 3, config, target=target)
    program = str(tile_program(kernel, fmt, 3, target))
    assert "arrive_last(" in program and "lock_semaphore" not in program
    assert "allocate_global(requires_clean=True)" in program  # the counters, zeroed once
    code = ptx(compiled, target)
    assert re.search(r"atom\.global\.add\.[us]32", code) and "bar.red.or.pred" in code and "membar.gl" in code
    assert "ld.acquire.gpu.global" not in code  # nothing spins
    assert code.count("mma.sync.aligned.m16n8k16") >= 1


def test_serial_split_reduction_launches_one_kernel(launches):
    packed = pack_weight(random_values(dtypes.uint4b, 1024, 256), "uint4b", 128)
    a, scales = torch.zeros(3, 1024, dtype=torch.float16), torch.ones(8, 256, dtype=torch.float16)
    quantized_matmul(a, packed, scales, config=Config(split_k=2, prefetch=2, split_reduce="serial"))
    ((kernel, args),) = launches
    assert kernel.hyper_parameters()["split_reduce"] == "serial" and args[-1].numel() == 1  # no SplitKSum workspace
    launches.clear()
    quantized_matmul(a, packed, scales, config=Config(split_k=2, prefetch=2, split_reduce="kernel"))
    assert [type(k).__name__ for k, _ in launches] == ["QuantizedMatmul", "SplitKSum"]
    launches.clear()
    packed = pack_weight(random_values(dtypes.uint4b, 4096, 256), "uint4b", 128)
    a, scales = torch.zeros(3, 4096, dtype=torch.float16), torch.ones(32, 256, dtype=torch.float16)
    quantized_matmul(a, packed, scales)  # the table splits K at this shape, and the kernel adds the splits up
    ((kernel, _),) = launches
    assert kernel.hyper_parameters()["split_k"] > 1 and kernel.hyper_parameters()["split_reduce"] == "serial"
    with pytest.raises(ScriptError, match="split_reduce='tree' must be one of 'kernel', 'serial'"):
        quantized_matmul(a, packed, scales, config=Config(split_k=2, split_reduce="tree"))


def test_bad_input_is_refused_before_launch():
    w = random_values(dtypes.uint4b, 256, 64)
    packed = pack_weight(w, "uint4b", 128)
    a = torch.zeros(3, 256, dtype=torch.float16)
    scales = torch.ones(2, 64, dtype=torch.float16)
    with pytest.raises(LaunchError, match="packed for uint4b, dtype=int4b was asked for"):
        quantized_matmul(a, packed, scales, dtype="int4b")
    with pytest.raises(LaunchError, match="packed for group size 128, group_size=64"):
        quantized_matmul(a, packed, scales, group_size=64)
    with pytest.raises(LaunchError, match=r"scales has shape \[4, 64\], .* needs \[K / group, N\] = \[2, 64\]; "
                                          r"4 rows would be groups of 64"):
        quantized_matmul(a, packed, torch.ones(4, 64, dtype=torch.float16))
    with pytest.raises(LaunchError, match=r"zeros has shape \[2, 32\]"):
        quantized_matmul(a, packed, scales, torch.ones(2, 32, dtype=torch.float16))
    with pytest.raises(LaunchError, match="must be a QuantizedWeight made by pack_weight"):
        quantized_matmul(a, w, scales)
    with pytest.raises(LaunchError, match=r"a must be a tensor \[..., K=256\]"):
        quantized_matmul(torch.zeros(3, 128, dtype=torch.float16), packed, scales)
    with pytest.raises(LaunchError, match="a must be float16 or bfloat16"):
        quantized_matmul(a.float(), packed, scales)
    with pytest.raises(LaunchError, match="scales must have a's dtype"):
        quantized_matmul(a, packed, scales.float())
    with pytest.raises(LaunchError, match="out must be a contiguous"):
        quantized_matmul(a, packed, scales, out=torch.zeros(3, 65, dtype=torch.float16))
    with pytest.raises(ScriptError, match="K=200 must be a multiple of the group size 128"):
        pack_weight(torch.zeros(200, 16), "uint4b", 128)
    with pytest.raises(ScriptError, match="group_size must be 32, 64, 128 or K=256"):
        pack_weight(torch.zeros(256, 16), "uint4b", 96)
    with pytest.raises(ScriptError, match="float16 .16 bits. is not a supported width"):
        pack_weight(torch.zeros(256, 16), "float16", 128)
    with pytest.raises(ScriptError, match="float8_e8m0 has values float16 or bfloat16 cannot hold"):
        pack_weight(torch.zeros(256, 16), "float8_e8m0", 128)
    with pytest.raises(ScriptError, match="must be 2-D"):
        pack_weight(torch.zeros(256), "uint4b", 128)
    fmt = WeightFormat(dtypes.int3b, 224, 64, 32)  # 7 k-steps of one group of 32: 96 bits a lane, units in pairs
    with pytest.raises(ScriptError, match="units_per_warp=1 must be a positive multiple of 2"):
        QuantizedMatmul(fmt, units_per_warp=1)
    with pytest.raises(ScriptError, match="block_m=12 must be a positive multiple of 8"):
        QuantizedMatmul(fmt, units_per_warp=2, block_m=12)
    with pytest.raises(ScriptError, match="split_k=8 must be between 1 and the 7 k-steps"):
        QuantizedMatmul(fmt, units_per_warp=2, split_k=8)
    with pytest.raises(ScriptError, match="prefetch=5 must be 1 to 4"):
        QuantizedMatmul(fmt, units_per_warp=2, prefetch=5)
    with pytest.raises(ScriptError, match=r"min_blocks=33 must be in \[0, 32\]"):
        QuantizedMatmul(fmt, units_per_warp=2, min_blocks=33)
    with pytest.raises(ScriptError, match="units_per_warp=2 and block_m=256 give each thread 256 float32 "
                                          "accumulators, more than the 255 registers"):
        QuantizedMatmul(fmt, units_per_warp=2, block_m=256, stage_activations=True, scale_weights=True,
                        warpgroup_mma=True)
    QuantizedMatmul(fmt, units_per_warp=2, block_m=248, stage_activations=True, scale_weights=True,
                    warpgroup_mma=True)  # 248 a thread
    with pytest.raises(LaunchError, match="config must be a tilus_tvm.schedules.quantized_matmul.Config"):
        quantized_matmul(a, packed, scales, config=(4, 2, 8))


def test_the_zero_point_rule_rests_on_a_spill(tmp_path):
    """WGMMA_ZERO_POINT_SPILLS's premise, from ptxas at sm_90a: uint8 with zero points spills on the 256-channel tile
    (float16 activations) and not on the tiles taken instead; u4 with zero points does not spill there."""
    import re
    import shutil
    import subprocess

    from tilus_tvm.schedules.quantized_configs import WGMMA_CONFIGS, WGMMA_MEDIUM, WGMMA_THREE_GROUPS, fit_units

    if shutil.which("nvcc") is None:
        pytest.skip("no nvcc")

    def spills(name, tile):
        fmt = WeightFormat(dtypes.as_dtype(name), 1024, 1024, 128)
        _, compiled = compile_kernel(fmt, 256, fit_units(tile, fmt), zero_points=True, target="sm_90a")
        source = tmp_path / f"{name}_{tile.warps}_{tile.units_per_warp}.cu"
        source.write_text(compiled.cuda_source)
        command = ["nvcc", "-cubin", "-arch=sm_90a", "-Xptxas", "-v", "-o", str(source.with_suffix(".cubin")), str(source)]
        report = subprocess.run(command, capture_output=True, text=True, check=True).stderr
        return sum(int(v) for v in re.findall(r"(\d+) bytes spill stores", report))

    wide = WGMMA_CONFIGS[-1][1]
    assert spills("uint8", wide) > 0
    assert spills("uint8", WGMMA_MEDIUM) == 0 and spills("uint8", WGMMA_THREE_GROUPS) == 0
    assert spills("uint4b", wide) == 0


@pytest.mark.parametrize("name,group", [("uint4b", 128), ("float8_e4m3", None), ("int3b", 32)])
def test_warpgroup_mma_kernel_issues_register_a_wgmma(name, group):
    fmt = WeightFormat(dtypes.as_dtype(name), 1024, 512, group or 1024)
    config = choose_config(256, fmt, 132, wgmma=True)
    _, compiled = compile_kernel(fmt, 256, config, target="sm_90a")
    code = ptx(compiled, "sm_90a")
    n = config.block_m
    assert re.search(rf"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.f16.f16 \{{[^}}]*\}}, \{{", code)
    assert "mma.sync" not in code and "wgmma.wait_group.sync.aligned 0" in code
    with pytest.raises(ScriptError, match="warpgroup_mma needs whole warpgroups"):
        QuantizedMatmul(fmt, warps=2, units_per_warp=config.units_per_warp, stage_activations=True, scale_weights=True,
                        warpgroup_mma=True)


def test_wgmma_tiles_from_65_rows_take_scales_into_the_conversion():
    """fused_scales: the wgmma tiles of more than 64 rows convert unsigned 1-, 2- and 4-bit codes without zero points
    with the group scale in the paired fma (the place-4 magic number 64, 0x5400, appears only there, beside a check of
    the thread's scales), and so do bit-placed unsigned integers and floats and uint8 (three times the conversion's
    fmas of fused_scales=False, which multiplies element by element: the fused branch's, and the other branch's
    conversion and paired multiply); the 64-row tile, signed codes, zero points, groups smaller than a k-step,
    per-channel scales and fp8 into float16 keep the separate multiply; fused_scales=True where it cannot apply
    is refused. With bfloat16 activations uint8 and fp8 take the scale too."""
    magic_64 = ("0x54005400", str(0x54005400))

    def source(name, m, group=128, zero_points=False, dtype=torch.float16, **overrides):
        fmt = WeightFormat(dtypes.as_dtype(name), 1024, 512, group)
        config = replace(choose_config(m, fmt, 132, wgmma=True), **overrides)
        kernel, compiled = compile_kernel(fmt, m, config, zero_points=zero_points, target="sm_90a", dtype=dtype)
        return kernel, compiled.cuda_source.lower()

    for name in ("uint4b", "uint2b", "uint1b"):
        kernel, code = source(name, 256, block_m=128)
        assert kernel.fused_scales and any(c in code for c in magic_64), name
    for name in ("uint3b", "uint7b", "float6_e2m3", "uint8"):
        fused, code = source(name, 256, block_m=128)
        separate, plain = source(name, 256, block_m=128, fused_scales=False)
        assert fused.fused_scales and not separate.fused_scales, name
        fmas = [c.split("__global__", 1)[1].count("tilus_fma_f16x2(") for c in (code, plain)]
        assert fmas[0] == 3 * fmas[1], (name, fmas)  # (the fused fmas; the conversion's and a paired multiply)
    for name in ("uint8", "float8_e4m3", "float8_e5m2"):  # bfloat16 activations
        fused, code = source(name, 256, block_m=128, dtype=torch.bfloat16)
        separate, plain = source(name, 256, block_m=128, dtype=torch.bfloat16, fused_scales=False)
        assert fused.fused_scales and not separate.fused_scales, name
        fmas = [c.split("__global__", 1)[1].count("tilus_fma_bf16x2(") for c in (code, plain)]
        assert fmas[0] == 3 * fmas[1], (name, fmas)
    for name, m, group, zero_points, overrides in (("uint4b", 64, 128, False, {"block_m": 64}),
                                                   ("int4b", 256, 128, False, {}), ("uint4b", 256, 32, False, {}),
                                                   ("uint4b", 256, 1024, False, {})):
        kernel, code = source(name, m, group, zero_points, **overrides)
        assert not kernel.fused_scales and not any(c in code for c in magic_64), (name, m, group, zero_points)
    kernel, _ = source("uint8", 256, warps=12, units_per_warp=1, block_m=128)  # (measured slower fused there)
    assert not kernel.fused_scales and not kernel.scales_in_cast
    kernel, code = source("uint4b", 256, 128, True)  # the zero point goes into the fma, the scale after it
    assert kernel.scales_in_cast and not kernel.fused_scales and any(c in code for c in magic_64)
    fmt = WeightFormat(dtypes.uint4b, 1024, 512, 128)
    assert QuantizedMatmul(fmt, warps=8, units_per_warp=1, block_m=64, stage_activations=True, scale_weights=True,
                           warpgroup_mma=True, fused_scales=True).fused_scales  # (asked for: the 64-row tile too)
    for name, zero_points, group, dtype in (("int4b", False, 128, "float16"), ("uint4b", True, 128, "float16"),
                                            ("int5b", False, 128, "float16"), ("float8_e4m3", False, 128, "float16"),
                                            ("int8", False, 128, "bfloat16"), ("uint4b", False, 1024, "float16")):
        with pytest.raises(ScriptError, match="fused_scales=True takes unsigned integer codes .* or 8-bit floats"):
            QuantizedMatmul(WeightFormat(dtypes.as_dtype(name), 1024, 512, group), dtype, zero_points=zero_points,
                            warps=8, units_per_warp=1 if name != "uint8" else 2, block_m=128, stage_activations=True,
                            scale_weights=True, warpgroup_mma=True, fused_scales=True)
    with pytest.raises(ScriptError, match="fused_scales=1 must be None, True or False"):
        QuantizedMatmul(fmt, fused_scales=1)


def test_nine_to_sixteen_row_rows_ask_for_four_blocks_an_sm():
    """The 9-16-row rows (2- and 3-bit weights, and on sm_90a the TMA ring of 4- to 7-bit weights) launch with at most
    128 registers a thread, so that 4 blocks fit an SM where k-steps of several groups would take more (2 blocks of
    twice the warps where K is split inside the block, or at one scale group a k-step of two groups of two warps);
    the decode rows up to 8 rows ask for none, or 2 blocks of 8 warps where they split K inside the block."""
    for name, group, wgmma, k, n in (("uint2b", 32, False, 8192, 28672), ("uint3b", 64, True, 8192, 28672),
                                     ("uint4b", 32, True, 8192, 28672), ("int5b", 128, True, 8192, 28672)):
        fmt = WeightFormat(dtypes.as_dtype(name), k, n, group)
        config = choose_config(16, fmt, 132, wgmma=wgmma)
        assert config.min_blocks == 4 and config.block_m == 16, (name, group, config)
        decode = choose_config(1, fmt, 132, wgmma=wgmma)
        assert decode.min_blocks == (2 if decode.k_groups > 1 else 0), (name, group, decode)
    for k, n, group, bounds in ((4096, 11008, 32, "(128, 4)"), (8192, 28672, 64, "(256, 2)"),
                                (8192, 28672, 128, "(128, 2)")):
        fmt = WeightFormat(dtypes.uint4b, k, n, group)
        kernel, compiled = compile_kernel(fmt, 16, choose_config(16, fmt, 132, wgmma=True), target="sm_90a")
        assert f"__launch_bounds__{bounds}" in compiled.cuda_source


def test_table_rows_for_five_and_seven_bit_weights():
    """3- to 8-bit decode on sm_90a takes the TMA weight ring, released by the warps, with fixed register slots,
    where the grid fills the SMs unsplit (the per-thread ring elsewhere, and on other GPUs; for 2 bits only in groups
    of warps);
    7-bit at 9-16 rows takes blocks of 8 warps where two splits suffice."""
    five = WeightFormat(dtypes.int5b, 8192, 28672, 128)
    hopper = choose_config(1, five, 132, wgmma=True)
    assert (hopper.weight_stages, hopper.weight_ring, hopper.units_per_warp, hopper.split_k, hopper.k_groups) == \
        (3, 0, 2, 1, 2)  # (K split in two inside the block: test_the_hopper_decode_row_splits_k_inside_the_block)
    assert hopper.release_barriers and hopper.fixed_slots and hopper.stage_activations  # (staged with k_groups)
    eight = choose_config(8, WeightFormat(dtypes.float8_e4m3, 8192, 28672, 128), 132, wgmma=True)
    assert (eight.weight_stages, eight.units_per_warp, eight.split_k, eight.stage_activations) == (3, 1, 2, True)
    # 2-bit weights: the register row (where it splits K in two: the staged ring in two groups of warps,
    # test_the_hopper_decode_row_splits_k_inside_the_block)
    assert not choose_config(1, WeightFormat(dtypes.uint2b, 4096, 11008, 64), 132, wgmma=True).weight_stages
    three = WeightFormat(dtypes.uint3b, 8192 + 128, 28672, 64)  # (65 k-steps: K stays split over the grid)
    for m in (1, 4, 8):  # one unit a warp (896 blocks split in two), activations in registers (even k-steps: in groups)
        u3 = choose_config(m, three, 132, wgmma=True)
        assert (u3.weight_stages, u3.weight_ring, u3.units_per_warp, u3.split_k, u3.stage_activations) == (3, 0, 1, 2,
                                                                                                            False)
        assert u3.release_barriers and u3.fixed_slots
    assert choose_config(1, three, 132).weight_ring == 4  # (elsewhere the per-thread ring)
    # the weight ring is unswizzled (a warp reads a stage's rows whole), so its stages need 128-byte boundaries only,
    # not the 1024 of TMA's 128-byte swizzle: formats whose k-step is not a multiple of 1024 bytes take it too
    for name, group, m in (("int5b", 32, 1), ("uint7b", 64, 8), ("uint3b", 64, 1), ("int3b", 64, 4),
                           ("int5b", 32, 16), ("uint7b", 32, 16)):
        fmt = WeightFormat(dtypes.as_dtype(name), 8192, 28672, group)
        assert choose_config(m, fmt, 132, wgmma=True).weight_stages == 3, (name, group, m)
    odd = WeightFormat(dtypes.int3b, 1024, 256, 64)  # stages of 1536 bytes
    kernel = QuantizedMatmul(odd, units_per_warp=1, weight_stages=3, release_barriers=True, split_k=2)
    lowered = kernel.compile(1, torch.zeros(1, 1024, dtype=torch.float16), torch.zeros(odd.storage_shape,
                                                                                       dtype=torch.int32),
                             torch.zeros(16, 256, dtype=torch.float16), torch.zeros(16, 256, dtype=torch.float16),
                             torch.zeros(1, 256, dtype=torch.float16), torch.zeros(1), target="sm_90a")
    assert "cp.async.bulk.tensor" in lowered.cuda_source
    # 1x4096x11008: 172 blocks of one unit; unsplit they fill the SMs, but filling 6 an SM takes 4 splits, more than
    # the 3-bit row's two: the short-grid ring row, activations staged (test_grids_short_of_the_sms_take_...)
    short = choose_config(1, WeightFormat(dtypes.uint3b, 4096, 11008, 128), 132, wgmma=True)
    assert (short.weight_stages, short.stage_activations, short.split_k) == (3, True, 4)
    for name in ("uint4b", "int5b", "float6_e2m3", "uint7b"):  # 9-16 rows: the ring, activations staged two deep
        wide = choose_config(16, WeightFormat(dtypes.as_dtype(name), 8192, 28672, 128), 132, wgmma=True)
        # (4-bit weights: K split in two inside the block, see test_the_hopper_decode_row_splits_k_inside_the_block,
        # over two groups of two warps of 4 units)
        assert (wide.weight_stages, wide.stage_activations, wide.stages, wide.split_k * wide.k_groups,
                wide.warps * wide.units_per_warp) == (3, True, 2, 2, 8)
        assert (wide.warps, wide.units_per_warp) == ((2, 4) if name == "uint4b" else (4, 2))
    for name, group in (("uint8", 128), ("uint3b", 64)):  # (3-bit weights in groups of 128: two groups of warps)
        fmt = WeightFormat(dtypes.as_dtype(name), 8192, 28672, group)
        assert not choose_config(16, fmt, 132, wgmma=True).weight_stages
    # 86 tiles at 16x4096x11008: the ring with K split in 4 (test_the_hopper_decode_row_splits_grids_smaller_than_the_sms)
    assert choose_config(16, WeightFormat(dtypes.uint4b, 4096, 11008, 128), 132, wgmma=True).split_k == 4
    assert choose_config(1, five, 132).weight_ring == 4 and not choose_config(1, five, 132).weight_stages
    # 1x11008x4096: 32 or 64 blocks; K's 86 k-steps split in 8 (unevenly), more than the per-thread ring's two, so
    # the register row, or on sm_90a the short-grid ring row
    few_channels = choose_config(1, WeightFormat(dtypes.int5b, 11008, 4096, 128), 132)
    assert (few_channels.weight_stages, few_channels.weight_ring, few_channels.split_k) == (0, 0, 8)
    few_channels = choose_config(1, WeightFormat(dtypes.int5b, 11008, 4096, 128), 132, wgmma=True)
    assert (few_channels.weight_stages, few_channels.units_per_warp, few_channels.split_k) == (3, 1, 8)
    for narrow in (dtypes.uint2b, dtypes.int3b):  # 9-16 rows: activations staged two k-steps deep
        assert choose_config(16, WeightFormat(narrow, 8192, 28672, 128), 132, wgmma=True).stages == 2
    assert choose_config(16, WeightFormat(dtypes.uint4b, 8192, 28672, 128), 132).stages == 3
    seven = choose_config(16, WeightFormat(dtypes.uint7b, 8192, 28672, 128), 132)
    assert (seven.warps, seven.split_k, seven.stage_activations) == (8, 2, True)
    assert choose_config(16, WeightFormat(dtypes.uint7b, 4096, 11008, 128), 132).warps == 4
