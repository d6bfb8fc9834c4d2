"""Run every kernel family once on small, ragged shapes (the pipelined Matmul with 3 and 4 stages,
the split-K matmul with its workspace and semaphores, and the library's attention (prefill and
decode, both ways of reading the cache), norms, softmax and quantized matmul); meant to be run
under compute-sanitizer:

    compute-sanitizer --tool memcheck python scripts/sanitize_kernels.py
    compute-sanitizer --tool racecheck python scripts/sanitize_kernels.py
    compute-sanitizer --tool racecheck python scripts/sanitize_kernels.py quantized   # quantized_matmul only
    compute-sanitizer --tool memcheck python scripts/sanitize_kernels.py quantized uint8 uint2b   # these weights
    compute-sanitizer --tool memcheck python scripts/sanitize_kernels.py others   # all but quantized_matmul

Ragged shapes make the masked edges of loads and stores execute. Results are checked too.
"""
import itertools
import math
import pathlib
import sys
from dataclasses import replace

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from tests.helpers import load_tutorial  # noqa: E402
from tests.lang import kernels as K  # noqa: E402
from tilus_tvm import float16, float32, int8, int32  # noqa: E402
from tilus_tvm.layout import spatial  # noqa: E402


def check(name, got, expected, tol=1e-2):
    torch.testing.assert_close(got.float(), expected.float(), rtol=tol, atol=tol)
    print(f"ok {name}")


def main(quantized: bool = True):
    cuda = dict(device="cuda")
    a = torch.randn(37, **cuda)
    b = torch.empty_like(a)
    load_tutorial("02_add_one").AddOneKernel(16, 4)(37, a, b)
    check("add_one", b, a + 1)

    for module, cls in (("03_matmul", "Matmul"), ("04_matmul_v0", "MatmulV0")):
        m, n, k = 37, 72, 40
        x = torch.randn(m, k, dtype=torch.float16, **cuda) / math.sqrt(k)
        y = torch.randn(k, n, dtype=torch.float16, **cuda) / math.sqrt(k)
        z = torch.empty(m, n, dtype=torch.float16, **cuda)
        getattr(load_tutorial(module), cls)()(m, n, k, x, y, z)
        check(cls, z, x.float() @ y.float())

    x, y = torch.randn(45, 48, **cuda), torch.randn(45, 1, **cuda)
    z = torch.empty_like(x)
    K.Elementwise(32, 48, 2)(45, x, y, z)
    check("elementwise", z, torch.clamp(torch.where(x > 0, x * y, torch.exp(x) - 1), min=-0.5))

    x = torch.randn(13, 128, **cuda)
    z = torch.empty_like(x)
    K.Softmax(8, 128, 4)(13, x, z)
    check("softmax", z, torch.softmax(x, 1), 1e-4)

    x = torch.randn(64, 32, **cuda)
    z = torch.empty(3, 32, **cuda)
    K.ColumnReduce(64, 32, 4)(x, z)
    check("column_reduce", z, torch.stack([x.sum(0), x.amax(0), x.amin(0)]), 1e-4)

    x = torch.randn(32, 64, dtype=torch.float16, **cuda)
    z = torch.empty_like(x)
    K.SharedRoundTrip(True)(x, z)
    check("shared", z, x + x)

    for m, n, k, dtype, acc, layout in [(64, 32, 32, float16, float32, spatial(16, 8).local(4, 4)),
                                        (32, 32, 64, int8, int32, None), (24, 12, 10, float16, float32, None)]:
        if dtype is int8:
            x = torch.randint(-8, 8, (m, k), dtype=torch.int8, **cuda)
            y = torch.randint(-8, 8, (k, n), dtype=torch.int8, **cuda)
        else:
            x = torch.randn(m, k, **cuda).to(dtype.torch_dtype)
            y = torch.randn(k, n, **cuda).to(dtype.torch_dtype)
        z = torch.empty(m, n, dtype=acc.torch_dtype, **cuda)
        K.dot_kernel(m, n, k, dtype, acc, a_layout=layout)(x, y, z)
        check(f"dot {m}x{n}x{k} {dtype.name}", z, (x.cpu().float() @ y.cpu().float()).cuda() + 1)
    from tilus_tvm.schedules.matmul import Matmul

    for config, (m, n, k) in (((64, 128, 32, 4, 3), (127, 255, 63)), ((128, 256, 64, 8, 3), (300, 520, 1000)),
                              ((64, 128, 64, 4, 4), (1000, 1000, 200))):
        for b_layout in ("row", "col"):
            x = torch.randn(m, k, dtype=torch.float16, **cuda) / math.sqrt(k)
            y = torch.randn(k, n, dtype=torch.float16, **cuda) / math.sqrt(k)
            z = torch.full((m, n), float("nan"), dtype=torch.float16, **cuda)
            Matmul(*config, b_layout=b_layout)(m, n, k, x, y.t().contiguous() if b_layout == "col" else y, z)
            check(f"pipelined Matmul {config} {b_layout} {m}x{n}x{k}", z, x.float() @ y.float())
    from tilus_tvm.schedules.matmul_splitk import MatmulSplitK

    for config, splits, (m, n, k) in (((16, 128, 64, 4, 4), 6, (37, 200, 777)),
                                      ((32, 128, 64, 4, 3), 3, (5, 130, 1000))):
        for b_layout in ("row", "col"):
            x = torch.randn(m, k, dtype=torch.float16, **cuda) / math.sqrt(k)
            y = torch.randn(k, n, dtype=torch.float16, **cuda) / math.sqrt(k)
            kernel = MatmulSplitK(*config, splits=splits, b_layout=b_layout)
            for launch in range(2):  # the second launch reuses the workspace and its semaphores
                z = torch.full((m, n), float("nan"), dtype=torch.float16, **cuda)
                kernel(m, n, k, x, y.t().contiguous() if b_layout == "col" else y, z)
                check(f"split-K {config} splits={splits} {b_layout} {m}x{n}x{k} launch {launch}", z,
                      x.float() @ y.float())
    library_kernels(cuda, quantized)
    torch.cuda.synchronize()
    print("all kernels ran")


def library_kernels(cuda, quantized: bool = True):
    """The schedules/ functions on lengths that are not multiples of their tiles."""
    import torch.nn.functional as F

    from tilus_tvm.schedules import decode_attention, flash_attention, layer_norm, rms_norm, softmax
    from tilus_tvm.schedules.decode_attention import DecodeConfig

    for head_dim, causal, (lq, lk) in ((64, True, (77, 77)), (128, False, (50, 133)), (128, True, (129, 129))):
        q = torch.randn(2, 3, lq, head_dim, dtype=torch.float16, **cuda)
        k, v = (torch.randn(2, 3, lk, head_dim, dtype=torch.float16, **cuda) for _ in range(2))
        check(f"flash_attention d={head_dim} causal={causal} {lq}x{lk}", flash_attention(q, k, v, causal=causal),
              F.scaled_dot_product_attention(q, k, v, is_causal=causal))
    for head_dim, config in ((64, None), (128, None), (128, DecodeConfig(stages=0)), (128, DecodeConfig(stages=2))):
        batch, heads, capacity = 3, 4, 1000
        lens = torch.tensor([1, 517, 1000], dtype=torch.int32, **cuda)
        q = torch.randn(batch, heads, 1, head_dim, dtype=torch.float16, **cuda)
        k, v = (torch.randn(batch, heads, capacity, head_dim, dtype=torch.float16, **cuda) for _ in range(2))
        got = decode_attention(q, k, v, lens, config=config, split_len=256 if config else None)
        expected = torch.cat([F.scaled_dot_product_attention(q[i:i + 1], k[i:i + 1, :, :n], v[i:i + 1, :, :n])
                              for i, n in enumerate(lens.tolist())])
        check(f"decode_attention d={head_dim} {config or 'default'}", got, expected)
    x = torch.randn(37, 1000, dtype=torch.float16, **cuda)
    w, b = torch.randn(1000, dtype=torch.float16, **cuda), torch.randn(1000, dtype=torch.float16, **cuda)
    check("layer_norm 37x1000", layer_norm(x, w, b), F.layer_norm(x.float(), (1000,), w.float(), b.float()), 2e-2)
    check("rms_norm 37x1000", rms_norm(x, w), F.rms_norm(x.float(), (1000,), w.float(), 1e-6), 2e-2)
    long_rows = torch.randn(5, 20000, dtype=torch.float16, **cuda)
    check("softmax online 5x20000", softmax(long_rows, online=True), torch.softmax(long_rows.float(), -1), 1e-3)
    if quantized:
        quantized_kernels(cuda)


def dequantized_product(a, codes, scales, group, zeros=None):
    """``a @ w`` in float32 for the weights ``(codes - zeros) * scales`` (float16, a scale and a zero point a group
    of rows; ``codes * scales`` without zero points)."""
    if zeros is not None:
        codes = codes - zeros.float().repeat_interleave(group, 0)
    return a.float() @ (codes.half() * scales.repeat_interleave(group, 0)).float()


def quantized_kernels(cuda, types=None):
    """quantized_matmul's kernels, for every weight type below or only ``types`` (names; under memcheck the whole
    list takes longer than one call of the device tool: run it in parts)."""
    from tilus_tvm.schedules import pack_weight, quantized_matmul
    from tilus_tvm.schedules.quantized_matmul import Config

    # the table's load paths: the per-thread weight ring (u4 at 1 and 5 rows), activations staged through
    # shared memory (u4 at 12 rows, uint8 at 3 rows, and the large-batch path at 70 rows); bit-placed words
    # (uint3b at 1 row, uint6b at 16); 2-bit codes (their decode row at 3 rows: biased codes)
    for name, codes_max, m, n, k in (("uint4b", 16, 1, 200, 384), ("uint4b", 16, 5, 72, 512),
                                      ("uint4b", 16, 12, 72, 512), ("uint8", 256, 3, 72, 512),
                                      ("uint4b", 16, 70, 130, 256), ("uint3b", 8, 1, 200, 384),
                                      ("uint6b", 64, 16, 72, 512), ("uint2b", 4, 3, 200, 512)):
        if types and name not in types:
            continue
        codes = torch.randint(0, codes_max, (k, n), **cuda).float()
        packed = pack_weight(codes, name, 128)
        scales = torch.rand(k // 128, n, dtype=torch.float16, **cuda) / codes_max / 2
        a = torch.randn(m, k, dtype=torch.float16, **cuda)
        expected = dequantized_product(a, codes, scales, 128)
        check(f"quantized_matmul {name} g128 {m}x{n}x{k}", quantized_matmul(a, packed, scales), expected, 5e-2)
        if m <= 8 and k // 128 % 2 == 0:  # K split in two, both reductions, each launched twice
            for reduce in ("serial", "kernel"):
                config = Config(prefetch=2, split_k=2, split_reduce=reduce)
                for launch in range(2):
                    check(f"quantized_matmul {name} g128 {m}x{n}x{k} {reduce} split-K launch {launch}",
                          quantized_matmul(a, packed, scales, config=config), expected, 5e-2)
        if name == "uint4b" and m <= 16 and k // 128 % 2 == 0:
            # the weight ring split in two (the copies past a split masked), alone and with staged activations
            ring = Config(units_per_warp=1, block_m=8 if m <= 8 else 16, weight_ring=3, split_k=2,
                          stage_activations=m > 8, stages=3)
            check(f"quantized_matmul {name} g128 {m}x{n}x{k} weight ring, split-K",
                  quantized_matmul(a, packed, scales, config=ring), expected, 5e-2)
        if m <= 16 and torch.cuda.get_device_capability() == (9, 0):
            # the sm_90a decode rows: weights through a TMA ring of 3 stages released by the warps, register
            # queues in fixed slots of the unrolled k-loop; K of 8 or 16 steps split in two (each stage reused);
            # at group 64 the 3-bit ring's stages (1536 bytes) are not multiples of 1024 (unswizzled)
            from tilus_tvm import dtypes
            from tilus_tvm.instructions.cast_rules import interleavable
            from tilus_tvm.schedules.quantized_configs import (HOPPER_CONFIGS, IN_BLOCK_SPLIT, ZERO_POINT_BIASED,
                                                               ZERO_POINT_SPLITS, ZERO_POINT_SUMS)
            tiles = []
            for row in dict.fromkeys(row[2] for row in HOPPER_CONFIGS):  # (rows that share a tile: once)
                config = replace(row, split_k=2)
                tiles.append((f"decode TMA ring released, fixed slots ({config.units_per_warp} unit(s) a warp, "
                              f"{config.block_m} rows{', staged' if config.stage_activations else ''})", config))
            # the tiles with K split over two groups of warps (4 stages of 2 steps; the 9-16-row tile's activations
            # staged one tile a group)
            # (the tile with biased codes for 1-, 2- and 4-bit integers, which are stored interleaved)
            for tile, split in itertools.product(dict.fromkeys(row[3] for row in IN_BLOCK_SPLIT), (1, 2)):
                if tile.biased_codes and not interleavable(dtypes.as_dtype(name)):
                    continue
                config = replace(tile, split_k=split)
                tiles.append((f"decode TMA ring, K over two groups of warps, split in {split}"
                              f"{', staged' if config.stage_activations else ''}"
                              f"{', biased codes' if config.biased_codes else ''}", config))
            long_a = torch.randn(m, 1024, dtype=torch.float16, **cuda)
            long_codes = torch.randint(0, codes_max, (1024, n), **cuda).float()
            for group in (128, 64):
                long_scales = torch.rand(1024 // group, n, dtype=torch.float16, **cuda) / codes_max / 2
                long_packed = pack_weight(long_codes, name, group)
                reference = dequantized_product(long_a, long_codes, long_scales, group)
                for label, config in tiles:
                    check(f"quantized_matmul {name} g{group} {m}x{n}x1024 {label}",
                          quantized_matmul(long_a, long_packed, long_scales, config=config), reference, 5e-2)
                # with zero points, the tiles that take them off by the activation sums (a dot of ones): biased
                # codes for the interleaved weights, the codes converted exactly for the others
                zeros = torch.randint(0, codes_max, (1024 // group, n), **cuda).half()
                reference = dequantized_product(long_a, long_codes, long_scales, group, zeros)
                if interleavable(dtypes.as_dtype(name)):
                    zero_tiles = [(replace(tile, split_k=splits, biased_codes=True), "biased codes")
                                  for tile, splits, _, _ in ZERO_POINT_BIASED]
                else:
                    zero_tiles = [(replace(tile, split_k=splits[0], zero_point_sums=True), "activation sums")
                                  for tile, splits, _, _ in ZERO_POINT_SUMS
                                  if tile.units_per_warp % long_packed.format.units == 0]
                if dtypes.as_dtype(name).nbits == 8:  # (ZERO_POINT_SPLITS: every type's change, on these codes)
                    zero_tiles += [(replace(tile, **change), f"K split further, a ring of {tile.weight_stages} "
                                    f"-> {change.get('weight_stages', tile.weight_stages)} stages")
                                   for tile, _, _, changes in ZERO_POINT_SPLITS for change in changes.values()]
                for config, how in zero_tiles:
                    check(f"quantized_matmul {name} g{group} {m}x{n}x1024 zero points, {how}, "
                          f"{config.k_groups} group(s) of warps, {config.block_m} rows a block, "
                          f"{'TMA ring' if config.weight_stages else 'weights to registers'}, split in "
                          f"{config.split_k}",
                          quantized_matmul(long_a, long_packed, long_scales, zeros, config=config), reference, 5e-2)
        if m > 64 and torch.cuda.get_device_capability() == (9, 0):
            # the wgmma path with its activation stages released by barriers (no block barrier a k-step), K of
            # 8 steps through 3 stages: each stage reused, its barriers through both parities; the tile of one
            # warpgroup of 128 channels and 128 rows (fp8 weights where the wide tiles leave SMs idle), and that of
            # three warpgroups of 64 channels (192: the 130 channels of one block, most of its lanes masked); the
            # 64-row tile with two k-steps of weights in flight, moved up by copies or in fixed slots (a grid short of
            # the SMs takes them for some types)
            from tilus_tvm.schedules.quantized_configs import WGMMA_CONFIGS, WGMMA_MEDIUM, WGMMA_THREE_GROUPS

            released = Config(warps=8, units_per_warp=2, block_m=128, stage_activations=True, stages=3,
                              scale_weights=True, warpgroup_mma=True, release_barriers=True)
            long_a = torch.randn(m, 1024, dtype=torch.float16, **cuda)
            long_codes = torch.randint(0, codes_max, (1024, n), **cuda).float()
            long_scales = torch.rand(8, n, dtype=torch.float16, **cuda) / codes_max / 2
            long_packed = pack_weight(long_codes, name, 128)
            reference = dequantized_product(long_a, long_codes, long_scales, 128)
            for label, config in (("stages released by barriers", released), ("one warpgroup, 128 rows", WGMMA_MEDIUM),
                                  ("three warpgroups, 192 channels", WGMMA_THREE_GROUPS),
                                  ("64-row tile, two steps in flight", replace(WGMMA_CONFIGS[0][1], prefetch=2)),
                                  ("64-row tile, two steps in fixed slots",
                                   replace(WGMMA_CONFIGS[0][1], prefetch=2, fixed_slots=True))):
                check(f"quantized_matmul {name} g128 {m}x{n}x1024 wgmma, {label}",
                      quantized_matmul(long_a, long_packed, long_scales, config=config), reference, 5e-2)
            if name == "uint4b":  # scales of 64 and more: the fused scales' other branch (the separate multiply)
                large = (long_scales.float() * 64 + 64).half()
                small_a = (long_a.float() / 256).half()
                check(f"quantized_matmul {name} g128 {m}x{n}x1024 wgmma, scales of 64 and more",
                      quantized_matmul(small_a, long_packed, large, config=released),
                      dequantized_product(small_a, long_codes, large, 128), 5e-2)

if __name__ == "__main__":
    if sys.argv[1:2] == ["quantized"]:
        quantized_kernels(dict(device="cuda"), sys.argv[2:] or None)
        torch.cuda.synchronize()
        print("all kernels ran")
    else:
        main(quantized=sys.argv[1:] != ["others"])
