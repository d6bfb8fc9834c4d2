"""Which :class:`~tilus_tvm.schedules.quantized_matmul.QuantizedMatmul` configuration a batch gets.

:class:`Config` holds the kernel's keyword arguments after ``zero_points``; :func:`choose_config` picks one for
``m`` rows of a weight format on a GPU of a given number of SMs: below ``WGMMA_MIN_ROWS`` rows (or off sm_90a)
the first row of ``HOPPER_CONFIGS`` (sm_90a only) then ``CONFIGS`` that serves the batch and the weights' width,
with K split until the grid fills the SMs and, where ``IN_BLOCK_SPLIT`` says, split inside the block instead; from
``WGMMA_MIN_ROWS`` rows on sm_90a the ``wgmma`` tiles (``WGMMA_CONFIGS``, ``WGMMA_SMALL``, ``WGMMA_THREE_GROUPS``,
``WGMMA_MEDIUM``), chosen by how their grids cover the SMs. Every row was measured on an H100 (and some on an
H200) with ``scripts/bench_quantized.py``; the comments beside the tables give the figures that chose them and the
variants that lost.

>>> from tilus_tvm import dtypes
>>> from tilus_tvm.schedules.quantized_weight import WeightFormat
>>> config = choose_config(1, WeightFormat(dtypes.uint4b, 8192, 28672, 128), 132, wgmma=True)
>>> config.k_groups, config.weight_stages, config.stage_activations
(2, 3, True)
"""
from __future__ import annotations

import ast
import functools
from dataclasses import dataclass, fields, replace
from typing import Optional

from tilus_tvm.schedules.quantized_weight import WeightFormat

__all__ = ["Config", "choose_config", "fit_units"]


@dataclass(frozen=True)
class Config:
    """A :class:`~tilus_tvm.schedules.quantized_matmul.QuantizedMatmul` configuration (its keyword arguments after
    ``zero_points``). ``text``: its fields as the text of a dict literal (inverse: :meth:`from_text`)."""

    warps: int = 4
    units_per_warp: int = 2
    block_m: int = 8
    stage_activations: bool = False
    stages: int = 2
    scale_weights: bool = False
    split_k: int = 1
    prefetch: int = 1
    split_reduce: str = "serial"
    min_blocks: int = 0
    warpgroup_mma: bool = False
    weight_stages: int = 0
    tma_activations: Optional[bool] = None
    weight_ring: int = 0
    release_barriers: bool = False
    fixed_slots: bool = False
    k_groups: int = 1
    fused_scales: Optional[bool] = None
    biased_codes: bool = False
    zero_point_sums: bool = False

    def __post_init__(self):
        # the fields as the text of a dict literal, made once: torch.compile passes it to quantized_matmul's custom
        # operator as a constant, where formatting the fields while tracing could meet symbolic ints (dynamic=True)
        text = ", ".join(f"{field.name!r}: {getattr(self, field.name)!r}" for field in fields(self))
        object.__setattr__(self, "text", "{" + text + "}")

    @classmethod
    def from_text(cls, text: str) -> "Config":
        """The configuration whose ``text`` is ``text``."""
        return cls(**ast.literal_eval(text))


# (the largest batch served, the weight widths in bits served or None for all, the configuration, the blocks
# an SM should get before K is split no further, the most K splits the row takes or None): the first match
# whose split stays within its limit wins. Measured on the H100 at 8192x28672, group 128 unless said
# (scripts/bench_quantized.py; A/B in one process):
# - up to 8 rows, 3- to 6-bit weights: one unit a warp with the weights through a per-thread cp.async ring
#   (weight_ring=4; no barrier), K split until the grid fills the ~7 blocks an SM holds at that size: u4
#   51.6 -> 50.3 us, u3 63.2 -> 62.4, u6 74.3 -> 71.7, fp6 e3m2 82.8 -> 81.1, int4 and fp4 within 1% (49.9 ->
#   50.2, 63.6 -> 64.2); the ring did not help 2-bit (35.5 -> 38.7) or 8-bit weights (86.4 -> 87.3, fp8 85.5
#   -> 88.3 at best), and with two units a warp it lost 0.4-1.5 us for every width (so formats whose lanes
#   pair units take the rows below). Only where that takes at most two splits: 1x11008x4096 (64 blocks of 2
#   units before) u4 36.8 -> 30.5, u6 45.7 -> 35.9; with 4 or 8 splits it lost (1x4096x11008 u4 20.4 -> 22.4,
#   1x4096x12288 21.4 -> 24.6, 1x8192x10240 29.1 -> 41.0, 1x28672x8192 even);
# - up to 8 rows, activations straight to registers, except for 6- to 8-bit weights, whose registers hold
#   twice the codes: there cp.async-staged activations (ldmatrix) took int8/uint8/fp8 e4m3 from 111-114 us
#   to 95-97 us and uint6 from 101 to 82 us, while u2/u3/fp4 ran 5-25% slower staged and u4 the same;
# - 9 to 16 rows, staged activations for every width: u4 113 -> 63 us, u2 93 -> 60, u3 91 -> 70, fp4 97 -> 73,
#   8-bit 133 -> 96-100; with two k-steps of weights in flight for 4-bit weights (u4 63 against 73 with one),
#   one for the others (8-bit 96-100 against 110-113 with two); 7-bit (bit-placed) weights in blocks of 8 warps
#   where that takes at most two splits: 4 warps split in two took 101.0 us (the 448 blocks, 3 an SM, are 1.13
#   waves), 8 warps 82.5-82.9; at 16x4096x11008 (four splits) 8 warps lost 3% (26.4 -> 27.1-27.5), so that
#   shape keeps the row below. 2- and 3-bit weights stage their activations two k-steps deep, not three (H100,
#   two runs each, 16 rows: u2 46.9-48.0 -> 44.4-44.5 us, u3 50.0-50.4 -> 47.1-48.3; 12 rows: u2 46.4-46.6 ->
#   43.9-44.0, u3 47.9-49.2 -> 46.2-46.4); int5, uint6 and uint8 measured the same either way, u4 0.3 us slower
#   (fp4, in u4's row, 1.8 us faster).
# On sm_90a (HOPPER_CONFIGS, tried first, where the grid fills the SMs before K is split; see below), weights of 3 to 8
# bits up to 8 rows stream through a TMA ring of 3 k-steps (weight_stages=3) whose stages each warp releases on a
# barrier (release_barriers; no block-wide barrier a step), with the scales (and activations) in fixed register
# slots (fixed_slots). H100, 1x8192x28672, against the rows below in the same runs (two each): u4 49.8-50.8 ->
# 47.6-48.5 us, int4 50.1-50.9 -> 47.6-47.7, fp4 e2m1 50.3-50.5 -> 48.0-48.3, uint6 69.6-70.4 -> 68.9-69.6, fp6
# e3m2 69.6-70.8 -> 68.7-69.3 (two units a warp); uint7 78.8-80.4 -> 77.2-77.3, uint8 85.3-87.1 -> 85.2, fp8 e4m3
# 85.7-86.8 -> 84.8-85.0 (one unit a warp, staged activations); int5 (58.8-59.0 with a ring of 3 synchronised by
# the block) 59.4-59.5. Released by every thread's own arrival (32 a warp, one after another on the barrier's
# word) the same rings took u4 63.4 us. u2 and u3 lost with that ring of two units a warp (35.2 -> 38.6, 44.2 ->
# 46.2), and at 1x11008x4096 (64 blocks unsplit) a 5-bit ring synchronised by the block lost 10% (32.3 -> 36.0).
# 3-bit weights take the ring with one unit a warp (the 896 blocks of K split in two), activations in registers:
# H100, against the per-thread ring row in the same runs (two each), u3 1x8192x28672 43.8-44.4 -> 40.4-40.5 us,
# 4 rows 56.8-56.9 -> 47.8-47.9, 8 rows 85.9-86.1 -> 78.0-78.4 (1x4096x11008, 1x4096x12288, 1x8192x10240 and
# 1x28672x8192 keep their rows: too few blocks unsplit, or more than two splits). u2 lost with it (35.5 -> 37.6).
# The 4-6-bit row also serves grids smaller than the SMs, with K split in up to 4 (80-96 blocks of 128 channels;
# a grid that needs 8 splits keeps the register row): H100, A/B, two runs each, 1x4096x11008 u4 15.4 -> 15.0-15.1
# us, int5 17.5 -> 16.9-17.0, uint6 20.7-20.8 -> 18.5, fp4 16.6-16.7 -> 15.3-15.5; 1x8192x10240 u4 23.1-23.3 ->
# 22.0-22.1, int5 26.9 -> 25.6-25.8, uint6 32.7-32.8 -> 29.0-29.2, 4 rows u4 24.0-24.1 -> 22.6; 1x4096x12288 u4
# 16.6-16.8 -> 16.2-16.4; 8x4096x11008 u4 the same (17.3-17.4), uint6 21.3 -> 20.4. So does the 9-16-row row
# for 4- to 6-bit weights (in one process, two runs each, every column checked): 16x4096x11008 u4 18.0-18.1 ->
# 17.3-17.5 us, int5 19.5-19.6 -> 18.9, uint6 22.4 -> 20.9, fp4 18.4-18.5 -> 17.2-17.4; 16x8192x10240 u4 26.7 ->
# 24.3-24.5, uint6 34.1-34.3 -> 30.7; 16x4096x12288 u4 19.0-19.1 -> 18.1-18.2; 12x4096x11008 u4 17.7-17.8 -> 16.6.
# Not 7-bit weights (uint7 22.5-22.6 -> 22.8-23.1 at 16x4096x11008, 35.1 -> 34.5-34.6 at 16x8192x10240).
# From 9 to 16 rows, 4- to 7-bit weights take the released ring too, with the activations staged by cp.async two
# k-steps deep (a block barrier a step for them): H100, two runs each, 16 rows: u4 53.5-53.6 -> 50.6-50.8 us,
# int4 53.1-53.2 -> 50.7-50.8, fp4 e2m1 53.5-54.0 -> 50.8-50.9, int5 63.3-63.5 -> 61.4, uint6 73.3-73.5 -> 71.9-72.1,
# fp6 e2m3 74.4-74.9 -> 72.7-72.8, fp6 e3m2 72.8-72.9 -> 72.5-72.6, uint7 84.6-84.8 -> 84.2-84.4 (12 rows alike);
# three activation stages gave 51.3-51.6 (int4, fp4) and 62.5-62.7 (int5). 8-bit weights lost with it (uint8 87.2
# -> 103.9, fp8 89.9 -> 102.0), and 2- and 3-bit weights (u2 44.6 -> 45.6-47.0, u3 47.3 -> 49.6-49.9).
# Both 9-16-row rows ask for 4 blocks an SM (min_blocks=4, at most 128 registers a thread): a k-step of 128 inputs
# spanning groups of 32 or 64 holds each group's scales and partial sums, and ptxas took up to 139 registers, 3
# blocks an SM, 1.13 waves of the 448 blocks. H100, 16x8192x28672, two runs each: u4 g32 70.9-71.6 -> 57.7-58.3
# us, u4 g64 66.6-67.2 -> 51.8-52.2, u3 g32 84.9-85.3 -> 60.9-62.5, u3 g64 55.3 -> 53.3-53.5; group 128 (u2 to
# u7) and 12 rows measured the same.
_REGISTER_DECODE = Config(block_m=8, prefetch=2)  # (the decode row of 2-bit weights and of GPUs without TMA)
# (the 9-16-row row of 2- and 3-bit weights; see IN_BLOCK_SPLIT for sm_90a)
_NARROW_SIXTEEN_ROWS = Config(block_m=16, prefetch=1, stage_activations=True, stages=2, min_blocks=4)
CONFIGS = ((8, (3, 4, 5, 6), Config(units_per_warp=1, block_m=8, prefetch=2, weight_ring=4), 6, 2),
           (8, (6, 7, 8), Config(block_m=8, prefetch=2, stage_activations=True, stages=3), 2, None),
           (8, None, _REGISTER_DECODE, 2, None),
           (16, (4,), Config(block_m=16, prefetch=2, stage_activations=True, stages=3), 2, None),
           (16, (7,), Config(warps=8, block_m=16, prefetch=1, stage_activations=True, stages=3), 1, 2),
           (16, (2, 3), _NARROW_SIXTEEN_ROWS, 2, None),
           (16, None, Config(block_m=16, prefetch=1, stage_activations=True, stages=3), 2, None),
           (48, None, Config(block_m=32, stage_activations=True, stages=3, scale_weights=True), 2, None),
           (None, None, Config(block_m=64, stage_activations=True, stages=3, scale_weights=True), 2, None))
# Up to 8 rows, where the rows above leave a grid short of the SMs that needs more splits than they allow (N of
# 4096-8192; 3-, 7- and 8-bit weights also at N of 10240-12288): one unit a warp, staged activations and the released
# TMA ring of weights (the 7-8-bit row's tile), K split until there are 4 blocks an SM (3 for 6-8-bit weights: 8
# splits of 28672 lost to 4 for them, 1x28672x8192 uint7 75.4 us at 4 against 96.1 at 8, uint8 87.0 against 98.4,
# while u4 took 48.1 at 8 against 50.9 at 4). H100, A/B in one process, two runs each, every output column checked, 1
# and 8 rows alike unless said: 1x28672x8192 int5 76.3-76.8 -> 58.6-58.7 us (8 rows 82.8-84.1 -> 58.8-59.2), fp4 e2m1
# 50.7-51.0 -> 48.3-48.4, u4 48.4-48.6 -> 48.0 (8 rows 50.9-51.2 -> 48.7-49.0), u3 42.6-42.9 -> 42.6 (8 rows 48.7-48.8
# -> 42.7-42.9); at 4 splits (a second call, one run) uint7 77.0-77.2 -> 75.4, uint8 87.4-87.5 -> 87.0, fp8 e4m3 88.0
# -> 85.5, uint6 67.4 -> 66.6, fp6 e2m3 70.3-70.4 -> 67.0 (8 rows, in one process: uint7 78.1 -> 75.9, uint8 90.4 ->
# 87.4, fp8 90.6 -> 87.2); 1x11008x4096 u4 17.5-17.6 -> 15.9 (8 rows 21.6-21.7 -> 16.1), u3 17.2 -> 15.4, int5
# 19.3-19.4 -> 17.6-17.7, uint6 20.6 -> 19.0-19.1, uint7 22.5-22.6 -> 21.0-21.1, uint8 23.7-23.8 -> 22.4-22.5, fp8
# 23.9-24.0 -> 22.6, fp6 e2m3 21.6-21.7 -> 19.4, fp4 17.9 -> 15.8; 1x8192x10240 u3 22.4-22.5 -> 20.5-20.6 (8 rows
# 26.2-26.5 -> 20.6), uint7 33.5-33.6 -> 31.7, uint8 35.9-36.0 -> 34.7-34.9, fp8 36.3 -> 34.6-34.8; 1x4096x11008 u3
# 14.9-15.1 -> 14.7-15.0 (8 rows 17.2-17.4 -> 15.1-15.2), uint7 21.5 -> 21.0-21.2, uint8 22.6-22.7 -> 22.6, fp8
# 22.8-23.0 -> 22.4.
_SHORT_GRID_RING = Config(units_per_warp=1, block_m=8, prefetch=2, stage_activations=True, stages=3, weight_stages=3,
                          release_barriers=True, fixed_slots=True)
# the 9-16-row ring tile (its two rows differ in the splits they allow)
_SIXTEEN_ROW_RING = Config(block_m=16, prefetch=1, stage_activations=True, stages=2, weight_stages=3,
                           release_barriers=True, fixed_slots=True, min_blocks=4)
# the 4-6-bit decode row's tile (see IN_BLOCK_SPLIT)
_HOPPER_DECODE_RING = Config(units_per_warp=2, block_m=8, prefetch=2, weight_stages=3, release_barriers=True,
                             fixed_slots=True)
_THREE_BIT_RING = Config(units_per_warp=1, block_m=8, prefetch=2, weight_stages=3, release_barriers=True,
                         fixed_slots=True)
HOPPER_CONFIGS = ((8, (4, 5, 6), _HOPPER_DECODE_RING, 2, 4),
                  (8, (7, 8), _SHORT_GRID_RING, 6, 2),
                  (8, (3,), _THREE_BIT_RING, 6, 2),
                  (8, (3, 4, 5), _SHORT_GRID_RING, 4, 8),
                  (8, (6, 7, 8), _SHORT_GRID_RING, 3, 8),
                  (16, (4, 5, 6), _SIXTEEN_ROW_RING, 2, 4),
                  (16, (7,), _SIXTEEN_ROW_RING, 2, 2))
# K split in two inside the block instead of over the grid (k_groups=2: two groups of 4 warps, each taking every
# other k-step of a stage of the ring, added through shared memory at the end; the grid's 224 blocks of 8 warps
# at 1x8192x28672 in place of 448 of 4, and no split's sum to read back through global memory after the weights
# have streamed), where the 4-6-bit decode row and, for 4-bit weights, the 9-16-row ring row would split K in two.
# The decode row's activations in registers at first: H100, A/B in one process, two or three runs each, every
# output checked: 1x8192x28672 u4 47.8-48.1 -> 46.2-46.3 us, int4 47.5-47.7 -> 46.2-46.8, fp4 e2m1 48.0 -> 46.6-46.7,
# uint6 69.2-69.6 -> 67.8-68.5, int5 59.5-60.4 -> 59.1-59.4; 4 rows u4 48.4-48.8 -> 46.8-46.9, fp4 50.1-50.3 ->
# 48.0-48.2; 8 rows int5 63.0-63.4 -> 61.4, uint6 72.7-73.6 -> 69.6-70.7, but u4 53.4-54.9 -> 53.7-54.1 and fp4
# 53.6-54.0 -> 55.2-55.3. Then with its activations staged by cp.async (a [block_m, kt] tile a group a stage, two
# stages, one k-step of weights ahead; two blocks of 8 warps asked an SM, min_blocks=2: 80 registers a thread at u4
# group 128 against 96), against that row, same method, three runs: 8 rows u4 53.8-55.1 -> 46.6-46.7, fp4 54.6-55.0
# -> 47.3, int5 61.4-61.7 -> 59.6-59.8, uint6 70.0-70.2 -> 69.0-69.1 (uint7 79.4-79.7 -> 79.3-79.8, uint8 85.7-85.9 ->
# 86.7-87.0: their rows stay); 5 rows u4 50.1-50.3 -> 46.1-46.5, fp4 49.9-50.1 -> 46.8-47.1, int5 59.7-60.1 ->
# 59.1-59.6, uint6 69.2-69.4 -> 68.7-69.0; 4 rows u4 47.0-47.2 -> 46.1-46.4, fp4 48.0-48.1 -> 47.0-47.2, uint6 69.7-69.8
# -> 68.9-69.0, int5 the same; 1 and 2 rows the same for the four types (u4 46.2-46.8 -> 46.2-47.0, uint6 69.0-69.3 ->
# 68.5-69.0). With prefetch=2 the same; without min_blocks, or three stages, 0.3-1 us slower. The 16-row tile (block_m
# 16) at 8 rows: u4 48.3-48.6.
# The 9-16-row ring tile takes it for 4-bit weights in groups of 64 inputs or more, with two blocks of 8 warps an SM
# asked (min_blocks=2: at 4, 64 registers a thread, they spill: u4 63-64 us). H100, A/B in one process, two calls of
# three runs, every output checked: 16x8192x28672 u4 50.0-50.5 -> 49.3-50.1 and 49.7-50.4 -> 48.9-49.2 us, fp4 e2m1
# 50.6-51.1 -> 49.8-50.3 and 50.3-50.4 -> 49.9-50.2, int4 50.1-50.2 -> 50.1-50.7; 12 rows u4 48.9-49.5 -> 48.5-49.1,
# fp4 49.0-49.8 -> 48.4-49.5; 9 rows u4 48.3-48.5 -> 48.5-48.8; group 64 u4 51.8-51.9 -> 50.0-50.3, fp4 51.9-52.2 ->
# 49.8-50.2.
# Not taken: the same split in four groups (16 warps) where the decode row splits K in 4 (1x4096x11008, 1x4096x12288,
# 1x8192x10240: within 3% either way, u4 15.0-15.1 -> 14.9-15.1, int5 at 1x8192x10240 25.8-25.9 -> 26.6); both
# splits at once (k_groups=2 and split_k=2: u4 49.7-50.1); four groups unsplit at 1x8192x28672 (u4 48.0-48.3); one
# unit a warp in two groups (u4 57.6-57.7, uint6 66.6-67.0); 3-bit weights' one-unit row in two groups (u3 40.4-41.0
# -> 46.5-50.3); at 9-16 rows groups of 32 (four a k-step: the 128 registers spill 40 bytes; u4 57.9-58.3 ->
# 59.1-59.6, fp4 61.5-62.0 -> 61.5-62.4), 5-7-bit weights (16 rows int5 61.2-62.0 -> 63.1-63.4, uint6 71.9-72.1 ->
# 72.5-72.8, uint7 82.7-84.4 -> 83.6-85.3), three blocks an SM (u4 61.0-62.0), groups of 2 warps (u4 50.6-52.5), and
# where the row splits K in 4 (16x4096x11008 u4 17.3 -> 20.2-20.4 in two groups and a split in two, 18.6 in four
# groups).
# The same staged tile in two groups took the 2- and 3-bit decode rows' place where they split K in two (the register
# row, and 3-bit weights' one-unit ring), same method, three runs: 1x8192x28672 u3 40.7-41.5 -> 39.0-39.2 us, u2
# 35.3-35.5 -> 34.5-34.7; 4 rows u3 48.9-49.2 -> 39.2-39.4, u2 37.0-37.7 -> 34.6-34.8; 8 rows u3 77.5-77.8 -> 39.1-39.6,
# u2 50.8-52.4 -> 35.8-35.9 (one unit a warp in the groups: u3 41.6-43.3, u2 36.8-39.6). In groups of 32 and 64
# (a later session, same method): 1x8192x28672 u3 g64 49.2-49.8 -> 40.2-40.6, g32 51.2-51.7 -> 44.6-45.0, u2 g64
# 39.4-39.9 -> 35.4-35.7, g32 43.6-44.6 -> 41.0-41.1; 8 rows u3 g64 87.2-87.5 -> 40.1-40.7, g32 82.4-82.9 ->
# 44.8-45.6, u2 g64 52.7-52.9 -> 35.7-35.9, g32 56.3-56.7 -> 41.2-41.4 (124-128 registers a thread at group 32, no
# spills). 2-bit weights take a ring of 4 k-steps (weight_stages=4): 1x8192x28672 u2 34.4-34.8 -> 33.2-34.6 us (5
# and 6 stages 35.6-36.1), 8 rows 34.8-35.0 -> 33.7, g32 41.2-41.4 -> 39.5-39.6, g64 35.9-36.0 -> 34.6-35.9; the
# others lost with 4 (u4 47.3-47.4 -> 47.7-47.8, int5 58.6-58.8 -> 60.5-61.0, uint6 68.3-68.6 -> 70.4-70.9, fp4
# 46.9-47.0 -> 47.7; u3 39.2-39.9 -> 38.7-39.6 at 1 row but 8 rows and groups of 32-64 even or slower). At 16 rows
# the 2- and 3-bit weights keep their row: the 9-16-row ring tile in two groups took u2 43.5-45.1 -> 44.1-45.9, u3
# 48.0-49.4 the same (prefetch=2 alike).
# The 9-16-row ring tile in two groups takes two warps of 4 units a group (the block's 128 channels as before, 4 warps
# instead of 8) where a k-step is one scale group: QuantizedMatmul's tuning (tune=True) chose it at 16x8192x28672.
# H100, A/B in one process, three runs each, every output checked: 16x8192x28672 u4 50.0-51.7 -> 46.1-47.8 us, int4
# 50.3-54.5 -> 46.4-48.8, fp4 e2m1 50.1-52.4 -> 46.1-46.8; 12 rows u4 49.1-49.4 -> 45.9-46.0. Not taken there: the rows
# without groups of warps (16 rows int5 59.1-59.6 -> 61.6-62.0, uint6 70.0-70.3 -> 71.4-71.6, 16x4096x11008 u4 split
# in 4 17.0 -> 18.8, 16x28672x8192 u4 split in 8 52.8-53.2 -> 61.3-61.7); the 4-bit decode row in groups was even (1
# row u4 44.9-45.2 against 44.8-45.2, 8 rows 45.3-45.6 against 45.1-45.4), and so were groups of 64 inputs at 16 rows
# (u4 48.9-50.9 against 48.8-50.1, fp4 49.9-50.2 against 49.3-51.4). 9 rows took it: u4 47.8-49.0 -> 45.9-46.4. So
# does the 3-bit decode row in groups where a k-step is one scale group (same method, outputs checked): 1x8192x28672
# u3 37.7-38.8 -> 37.2-37.3, 8 rows 38.7-39.1 -> 37.6. The 2-bit one was mixed (1 row u2 33.0-33.3 -> 32.5-32.9, 8
# rows 33.6-33.8 -> 33.1-34.2), not taken. At 9-16 rows, 2- and 3-bit weights take the tile too, in place of their
# register row split in two over the grid, where a k-step is one scale group (H100, A/B in one process, three runs,
# outputs checked): 16x8192x28672 u3 50.7 -> 44.6-45.6 us, int3 50.7-51.5 -> 45.5-46.1, u2 47.2-47.3 -> 41.3-42.5;
# 12 rows u3 49.0-50.6 -> 44.3-44.5, u2 45.4-45.5 -> 41.0-41.4. Alike or within 1 us of it: a ring of 4 stages (u3
# 45.6-46.2, u2 41.0-42.4), the decode row's groups with 16 rows (u3 45.7-46.2, u2 41.4-42.6); groups of 4 warps of 2
# units lost (u3 49.6-50.2, u2 45.1-46.8).
_STAGED_DECODE_GROUPS = replace(_HOPPER_DECODE_RING, stage_activations=True, stages=2, prefetch=1, min_blocks=2,
                                k_groups=2)
_STAGED_TWO_BIT_GROUPS = replace(_STAGED_DECODE_GROUPS, weight_stages=4)
# 2-bit codes in that tile, where a k-step is one scale group and no zero points, convert with their place's
# magic number left in (biased_codes: one lop3 a pair, no fma; each group's dot takes off the dot of those biases
# with the same activations, one more mma a k16 step that ptxas shares between a warp's units). H100, A/B in one
# process, three runs each, outputs checked (against the exact conversion: within 7e-4 of the largest output):
# 1x8192x28672 u2 33.0-33.4 -> 31.6-32.6 us and 33.0-33.2 -> 31.5-32.8, int2 34.0-34.2 -> 31.8-32.0; 4 rows u2
# 33.2-33.3 -> 31.7-31.8; 8 rows u2 33.4-34.8 -> 32.3-32.4, int2 34.3-35.6 -> 32.2-33.9. Not taken: groups of 64
# and 32 (u2 34.1-34.3 -> 37.1-37.6, 38.9-39.1 -> 40.9-41.0), the 9-16-row tile (16 rows u2 41.1-42.8 -> 42.9-45.1,
# int2 41.7-43.1 -> 43.4-44.9, u4 46.4-46.9 -> 48.2-48.6), the register row that splits K in 4 (1x4096x11008 u2
# 13.4-13.7 -> 14.0-14.2), u4's decode row (44.8-45.0 -> 44.9-45.2), and the bias's dot ahead of each group's, as
# the initial sums of its mma (u2 35.2-35.9, int2 35.6-36.5: one chain twice as long).
_BIASED_TWO_BIT_GROUPS = replace(_STAGED_TWO_BIT_GROUPS, biased_codes=True)
# With zero points, biased codes take the zero point's part as a term of its own, each channel's zero point times the
# group's sums of the activations (a dot of ones), in place of a subtraction from every weight pair: the 2- and 4-bit
# decode rows in groups of warps, in groups of 64 inputs or more, and the 4-bit ring row split K in 4 (the 7B and 70B
# shapes), in groups of a k-step, take them. H100, A/B in one process, three runs each, outputs checked (zero points
# of the code range): 1x8192x28672 u2 41.7-42.1 -> 39.1-39.5 us, int2 41.6-41.7 -> 39.6-39.7, u4 48.2-48.3 ->
# 47.6-47.8, int4 47.9-48.2 -> 47.5-47.6; 4 rows u2 42.1-42.5 -> 39.3-40.3, u4 48.4-48.7 -> 47.7-48.0, int4 48.3-48.5
# -> 47.6-47.7; 8 rows u2 42.5-42.7 -> 40.2-41.2, int2 41.9-43.2 -> 40.9-41.1, u4 48.6-48.8 -> 47.9-48.0, int4
# 48.0-48.6 -> 47.7-47.9; groups of 64, u2 45.6-45.8 -> 43.0-43.3 (8 rows 46.4-46.7 -> 45.1-45.2), u4 53.2-53.9 ->
# 51.3-51.6 (8 rows 54.0-54.1 -> 51.8-52.0); 1x4096x11008 u4 16.2 -> 15.7-15.9, int4 16.2-16.4 -> 15.8-15.9;
# 1x4096x12288 u4 16.6-16.8 -> 16.1-16.4, int4 16.8-17.0 -> 16.5; 1x8192x10240 u4 24.5-24.9 -> 23.6-23.8, int4 24.8 ->
# 23.4-23.6. Not taken: groups of 32 (u2 60.7-61.4 -> 64.3-64.4, u4 66.8-67.5 -> 69.4-69.5), the 9-16-row tile (16
# rows u2 45.2-46.5 -> 50.4-50.7, int2 48.9-50.3 -> 50.4-50.6, u4 51.9-52.2 -> 53.6-53.8, int4 52.4-52.8 -> 53.6-55.1)
# and the 2-bit register row split in 4 (1x4096x11008 u2 15.0-15.2 -> 15.3-15.4, int2 15.1-15.3 -> 15.3-15.4).
# (the tile, with its K split in how many, the most rows by the weights' width in bits, the most scale groups a k-step)
ZERO_POINT_BIASED = ((_STAGED_TWO_BIT_GROUPS, 1, {2: 8}, 2),
                     (_STAGED_DECODE_GROUPS, 1, {4: 8}, 2),
                     (_HOPPER_DECODE_RING, 4, {4: 8}, 1))
_SIXTEEN_ROW_GROUPS = replace(_SIXTEEN_ROW_RING, k_groups=2, min_blocks=2)
_SIXTEEN_ROW_SMALL_GROUPS = replace(_SIXTEEN_ROW_GROUPS, warps=2, units_per_warp=4)
_THREE_BIT_GROUPS = replace(_STAGED_DECODE_GROUPS, warps=2, units_per_warp=4)
# (the tile split in two over the grid, the most rows that take the split inside the block by the weights' width in
# bits, the most scale groups a k-step, the tile taken instead): the first that matches (a tile with biased_codes
# only for weights in groups without zero points; with them, ZERO_POINT_BIASED)
IN_BLOCK_SPLIT = ((_HOPPER_DECODE_RING, {4: 8, 5: 8, 6: 8}, None, _STAGED_DECODE_GROUPS),
                  (_THREE_BIT_RING, {3: 8}, 1, _THREE_BIT_GROUPS),
                  (_THREE_BIT_RING, {3: 8}, None, _STAGED_DECODE_GROUPS),
                  (_REGISTER_DECODE, {2: 8}, 1, _BIASED_TWO_BIT_GROUPS),
                  (_REGISTER_DECODE, {2: 8}, None, _STAGED_TWO_BIT_GROUPS),
                  (_SIXTEEN_ROW_RING, {4: 16}, 1, _SIXTEEN_ROW_SMALL_GROUPS),
                  (_NARROW_SIXTEEN_ROWS, {2: 16, 3: 16}, 1, _SIXTEEN_ROW_SMALL_GROUPS),
                  (_SIXTEEN_ROW_RING, {4: 16}, 2, _SIXTEEN_ROW_GROUPS))
# Codes converted exactly take the zero point's term the same way (zero_point_sums: each channel's zero point times
# the group's activation sums, no subtraction from every converted pair; the zero points' registers as well, up to 87
# a thread fewer) on these rows, groups of a k-step. H100, A/B in one process, three runs each, outputs checked:
# 1x8192x28672 u3 45.6-45.8 -> 40.8-41.1 us, int3 45.6-46.0 -> 40.9-42.0, 4 rows int3 45.7-47.1 -> 41.8-42.1, 8 rows
# u3 46.4-46.8 -> 41.0-41.4; 16 rows int5 74.9-75.7 -> 66.8-67.5, u5 74.4-75.2 -> 66.0-66.5, uint6 76.0-76.3 ->
# 75.2-75.4, uint8 106.5-106.6 -> 88.1-88.7, int8 92.2-92.7 -> 88.7-89.0; 12 rows int5 73.7-74.1 -> 64.2-65.3, uint6
# 74.3-74.4 -> 73.4-73.7, uint8 105.1-105.9 -> 88.0-88.1, int8 92.3-92.9 -> 88.3-88.6. Not taken (slower or even): the
# 4-6-bit decode rows in groups (int5 57.3-57.6 -> 57.3-57.9, uint6 67.5-68.0 -> 68.8-69.4), 8-bit weights' decode row
# (uint8 92.4-94.0 -> 104.4-105.8), the 9-16-row tile in groups (16 rows u3 51.8-52.1 -> 53.6-54.0, u4 52.4-52.7 ->
# 53.1-53.5, u2 45.9-46.3 -> 49.4-50.0, int2 48.8-50.7 -> 51.0-51.1, int3 51.3-51.7 -> 53.3-53.4), the 3- and 4-bit
# rows split in 4 or 8 (1x4096x11008 u3 16.2-16.4 -> 16.2-16.7, 1x28672x8192 u3 52.8-53.1 -> 52.8-52.9, u4 56.0-56.8 ->
# 57.5-58.0), and the 2-bit register row split in 4 or 8 (u2 faster, int2 not: 1x4096x11008 u2 15.0-15.2 -> 14.6,
# int2 15.1-15.2 -> 15.1-15.2; 1x28672x8192 u2 41.4-41.6 -> 40.5-40.8, int2 41.6-41.9 -> 43.2-43.5).
# (the tile, the K splits it takes it with, the most rows by the weights' width in bits, the most scale groups a k-step)
ZERO_POINT_SUMS = ((_THREE_BIT_GROUPS, (1,), {3: 8}, 1),
                   (_SIXTEEN_ROW_RING, (2,), {5: 16, 6: 16}, 1),
                   (Config(block_m=16, prefetch=1, stage_activations=True, stages=3), (2,), {8: 16}, 1))
# With zero points, 8-bit integer weights on the 7-8-bit row of the ring where it splits K in 2 (N of 28672) take 4
# splits, and int8 a ring of 4 k-steps besides. H100, A/B in one process, three runs each, outputs checked:
# 1x8192x28672 int8 105.0-105.7 -> 87.7-88.5 us (4 splits alone 91.6-92.7), uint8 92.5-93.3 -> 86.0-86.3 (with the
# ring of 4 too 87.6-88.0); 4 rows int8 106.7-107.1 -> 89.1-89.3; 8 rows int8 107.1-107.3 -> 89.7-90.2 (4 splits alone
# 93.6-93.8), uint8 93.7 -> 88.4-88.7; bfloat16 activations, 1 row, int8 107.9-108.1 -> 90.9-91.0, uint8 105.0-105.3
# -> 88.4-88.8.
# Without zero points 4 splits lose (uint8 and int8 83.6-83.9 -> 85.1-85.3), and so do 7-bit weights with them
# (uint7 76.9-77.3 -> 85.6-86.2). Not taken either: twice the splits of the rows that split K in 4 (1x28672x8192
# int8 84.7-85.0 -> 96.5-96.8, uint8 84.8-85.1 -> 86.3-86.6; 1x8192x10240 int8 35.6-36.0 -> 36.3-37.1, uint8
# 35.6-35.8 -> 36.4-36.6; 1x4096x11008 int8 23.0-23.3 -> 23.8-24.0, uint8 25.6-25.8 -> 23.4-23.8) and int8's ring of
# 4 on them (1x28672x8192 84.7-85.0 -> 85.9-86.1, 1x4096x11008 23.0-23.3 -> 26.2-26.3).
# (the tile, its K split in the table, the most rows, the changes by weight type)
ZERO_POINT_SPLITS = ((_SHORT_GRID_RING, 2, 8, {"uint8": dict(split_k=4), "int8": dict(split_k=4, weight_stages=4)}),)


# With wgmma (an sm_90a GPU), from 49 rows: converted weights as the register A operand of wgmma, staged
# activations as its shared B operand, two warpgroups a block. H200, u4 g128, 8192 x 28672, A/B in one
# process against the mma.sync rows above: 64 rows 138.8 -> 94.0 us, 128 rows 241.6 -> 130.9, 256 rows
# 436.6 -> 254.4, 512 rows 807.1 -> 496.6 (torch.matmul on float16 weights: 117.2, 125.5, 181.2, 309.0).
# From 65 rows the activation stages are released by barriers (release_barriers), so that one warpgroup
# converts while the other's wgmma run; H100, A/B in one process: 128 rows 135.3 -> 120.5 us, 256 rows 254.8
# -> 217.7 (fp8 272.4 -> 229.8), 256 x 4096 x 11008 69.3 -> 56.3; 64 rows (one 64-channel unit a warp)
# 83.3 -> 86.4, not taken.
WGMMA_CONFIGS = ((64, Config(warps=8, units_per_warp=1, block_m=64, stage_activations=True, stages=3,
                             scale_weights=True, warpgroup_mma=True)),
                 (None, Config(warps=8, units_per_warp=2, block_m=128, stage_activations=True, stages=3,
                               scale_weights=True, warpgroup_mma=True, release_barriers=True)))
WGMMA_MIN_ROWS = 49
# ... and when those tiles leave more than half the SMs without a block (a 7B model's 11008 channels at
# 128 rows: 43 blocks), one warpgroup of 128 channels and 64 rows (128 x 4096 x 11008: 69.2 -> 50.8 us)
WGMMA_SMALL = Config(warps=4, units_per_warp=2, block_m=64, stage_activations=True, stages=4, scale_weights=True,
                     warpgroup_mma=True)
# ... and from 65 rows, where the 256-channel tiles leave some SMs without a block (at least half have one):
# - those small tiles again, where their grid is at most two blocks an SM (one wave: two fit an SM), which a batch
#   whose last 128-row tile would be half padding gives (192 x 4096 x 11008: 86 blocks of 128 rows, 258 of 64). H100,
#   A/B in one process, best of three: 192 x 4096 x 11008 u4 55.8 -> 39.6 us, fp8 e4m3 67.6 -> 47.5; 192 x 8192 x
#   10240 u4 101.4 -> 76.0. Where they would take more than a wave, they lost: 320 x 4096 x 11008 u4 60.8 -> 77.1,
#   192 x 8192 x 28672 fp8 225.5 -> 241.7, 160 x 8192 x 28672 fp8 224.2 -> 241.0;
#   (a second run: 160 x 4096 x 11008 u4 56.0 -> 39.7, u3 55.2 -> 39.3; 192 x 4096 x 11008 u2 56.5 -> 40.6, int5b
#   56.0 -> 44.3; 192 x 8192 x 10240 fp8 e4m3 117.7 -> 85.1; 160 x 8192 x 10240 uint7b 111.9 -> 89.2);
# - else, for fp8 weights (converted by cvt), one warpgroup of 128 channels and 128 rows (twice the blocks, two an
#   SM): fp8 e4m3 128 x 8192 x 28672 140.2 -> 123.5 us, 256 x 4096 x 11008 67.8 -> 57.6, 256 x 5120 x 13824 85.7 ->
#   74.8, 384 x 4096 x 11008 68.9 -> 64.8, 320 x 4096 x 11008 70.0 -> 64.9 (a second run: 96 x 8192 x 28672 133.3 ->
#   120.5, 224 x 4096 x 11008 67.9 -> 57.4, 384 x 28672 x 8192 348.4 -> 348.0; fp8 e5m2 256 x 4096 x 11008
#   67.7 -> 57.3, 128 x 8192 x 28672 138.7 -> 121.9). The other types keep the
#   256-channel tile: uint8 lost (96 x 8192 x 28672 127.9 -> 137.7, 256 x 8192 x 10240 110.3 -> 127.9, 512 x 28672
#   x 8192 374.6 -> 430.1), u4 gained 0-3% (256 x 4096 x 11008 56.1 -> 55.2), int5b/uint6b/fp6 e3m2/fp4 e2m1 within
#   1.5%, uint7b 128 x 8192 x 28672 137.0 -> 130.9 but 256 x 4096 x 11008 61.3 -> 61.7, u3 and u2 lost 5-14% (u3
#   256 x 4096 x 11008 56.6 -> 65.4).
# ... and from 65 rows, ahead of those two, three warpgroups of 64 channels (192 channels and 128 rows, one block an SM
# like the 256-channel tile) where they cover the channels in fewer waves times channels a block: 1.5 times the blocks,
# each of 3/4 of the work (11008 channels at 256 rows: 86 blocks of 256 channels, one wave with 46 SMs idle, or 116
# of 192, one wave). H100, in one process, best of three, every output column checked: 256 x 4096 x 11008 u4 57.9 ->
# 48.0 us, u3 57.9 -> 48.9, uint8 61.5 -> 51.6, fp8 e4m3 (the medium tile) 58.9 -> 51.4, fp6 e3m2 62.5 -> 52.0
# (torch.matmul on float16 weights 42.7); 512 x 4096 x 11008 (172 blocks or 232, two waves either way) u4 112.5 ->
# 92.2, u3 113.6 -> 90.0, uint8 118.8 -> 94.6, fp8 114.7 -> 95.4, fp6 120.3 -> 97.4 (torch 81.3). Where they take more
# waves they lost: 256 x 8192 x 28672 (224 blocks, two waves, or 300, three) u4 218.2 -> 246.5, fp8 233.3 -> 249.3.
# Their 150 registers a thread leave no room for a second block (min_blocks=1 keeps them under 65536 / 384): split
# in 2 (232 blocks) 256 x 4096 x 11008 took 80.0 us; 256 x 11008 x 4096 in 3 (132 blocks) measured as the 64-row
# tiles in 2 (u4 65.6 against 65.9). Formats whose lanes pair units would make them 384 channels: not for those.
# A second run, the same way (two A/B rounds; u4, uint8, fp8 e4m3; torch in brackets): 256 x 8192 x 10240 (the
# 256-channel tile in 3 splits) u4 122.3 -> 83.3 us, uint8 132.9 -> 90.4-93.1, fp8 106.1 -> 90.8 (75.8); 200 x 4096 x
# 11008 u4 56.8 -> 45.7 (37.7); 320 x 28672 x 8192 u4 336.9 -> 265.2, uint8 359.4 -> 276.7, fp8 341.6 -> 279.5 (233.2);
# 384 x 4096 x 14336 u4 110.6 -> 88.8 (82.6); 768 x 11008 x 4096 u4 139.1 -> 115.4, uint8 146.5 -> 116.6 (115.7); 512 x
# 8192 x 10240 u4 205.8 -> 163.6 (133.0); 448 x 13824 x 5120 u4 164.8 -> 132.0 (107.6); 640 x 8192 x 28672 (560 blocks
# or 750: 5 waves against 6) u4 519.4 -> 477.7-495.4, uint8 551.8 -> 514.6, fp8 528.2 -> 484.9-503.5 (436.0).
# Their waves times channels are weighed by THREE_GROUPS_COST: one wave of theirs took 0.79-0.83 of the 256-channel
# tile's, not 0.75, and with several waves they gained 3-6% where they cover 0.94 of the 256-channel tiles' waves
# times channels (512 x 8192 x 28672 u4 421.6 -> 401.6-407.3, fp8 433.9 -> 411.9; 1024 x 5120 x 13824 u4 272.3 ->
# 264.1, uint8 283.3 -> 268.6) but were even or mixed at 0.96-1.0 (2048 x 5120 x 13824 u4 477.4-480.9 against
# 463.6-517.3; 1024 x 4096 x 11008 u4 172.4-173.3 against 173.2-176.0).
THREE_GROUPS_COST = 1.05
WGMMA_THREE_GROUPS = Config(warps=12, units_per_warp=1, block_m=128, stage_activations=True, stages=3,
                            scale_weights=True, warpgroup_mma=True, release_barriers=True, min_blocks=1)
WGMMA_MEDIUM_TYPES = ("float8_e4m3", "float8_e5m2")
WGMMA_MEDIUM = Config(warps=4, units_per_warp=2, block_m=128, stage_activations=True, stages=3, scale_weights=True,
                      warpgroup_mma=True)
# Where the tile chosen leaves SMs without a block, K is split: as many splits as keep the grid within one wave of two
# blocks an SM (two fit), each split keeping at least WGMMA_SPLIT_MIN_STEPS k-steps (uneven splits, added up by the last
# split to arrive), but not so many that some SMs take two blocks while many take one (a grid between the SMs and 7/4
# of them: fewer splits then, down to one block an SM at most). H100, in one process, best of three, every output
# column checked: 64 x 8192 x 10240 (80 blocks, split in 3) u4 51.2 -> 40.6 us, int4 60.7 -> 40.7, u3 61.3 -> 41.0,
# uint7 64.8 -> 46.5, uint8 60.9 -> 48.6, fp8 e4m3 60.5 -> 50.4 (torch.matmul on float16 weights 61.7-62.4; in 2
# splits 52.3-60.8, in 4 (two waves) 56.1-63.2); 56 x 8192 x 10240 u4 51.2 -> 38.3, u3 61.3 -> 38.3, uint8 61.8 ->
# 45.3, fp8 60.3 -> 46.2; 64 x 28672 x 8192 (64 blocks, split in 4) u4 180.7 -> 85.0, u3 181.6 -> 82.2, uint8 271.4
# -> 107.9, fp8 234.1 -> 113.0 (torch 161.5; in 3: 93.9-112.4, in 2: 108.0-138.1); 64 x 11008 x 4096 (32 blocks, split
# in 4) u4 34.2 (the best tile and split of the sweep: 33.3). Where K is 32 k-steps (64 x 4096 x 11008, 86 blocks)
# splits did not pay: in 3 u4 28.4 -> 29.2, int4 34.7 -> 29.4, uint8 34.0 -> 37.6, fp8 33.6 -> 37.0; in 2 every type
# slower (u4 33.2); 2 splits at 64 x 8192 x 10240 (160 blocks) were mixed (u4 51.2 -> 52.6, uint8 60.9 -> 56.1), hence
# no grids of 1 to 7/4 blocks an SM. Beyond 64 rows (WGMMA_SMALL's 64-row tiles; torch 41.2, 50.2 and 170.1 us):
# 128 x 11008 x 4096 (64 blocks, split in 4) u4 72.8 -> 43.2, u3 74.0 -> 44.9, uint8 108.1 -> 44.8, fp8 92.9 -> 48.7;
# 256 x 11008 x 4096 (128 blocks, split in 2) u4 73.6 -> 64.5, u3 74.4 -> 65.2, uint8 110.5 -> 67.6, fp8 93.6 -> 71.0
# (the fastest of WGMMA_SMALL unsplit and both tiles in 2-4 splits, but for fp8: WGMMA_MEDIUM in 2, 68.3, and u3: in
# 3, 64.8); 128 x 28672 x 8192 in 2: u4 187.1 -> 147.4, uint8 276.6 -> 156.2, fp8 237.3 -> 163.4, u3 185.2 -> 145.3,
# where WGMMA_MEDIUM (128 rows, half the blocks, each weight converted once for the batch) split in 4 was faster
# still: u4 129.5, uint8 142.0, fp8 136.9, u3 130.5 -- so from 65 rows the medium tile is split instead where its
# splits make as large a grid and keep at least WGMMA_MEDIUM_SPLIT_MIN_STEPS k-steps (at 256 x 11008 x 4096 in 4, 21
# k-steps, it lost: u4 76.9, uint8 71.7). A second run, u4 and uint8, the rule's choice the fastest of those splits
# each time: 96 x 28672 x 8192 medium in 4 119.3 and 130.8 us (torch 165.8), 128 x 14336 x 4096 small in 4 49.0 and
# 55.6 (torch 53.3), 128 x 8192 x 8192 small in 2 53.0 and 56.9 (torch 50.1). A grid that fills the SMs stays
# unsplit: 192 x 28672 x 8192 (192 blocks) u4 230.4 us, in 2 196.7, but fp8 273.5 -> 286.7 (torch 174.3; not taken);
# 64 x 5120 x 13824 (108 blocks) u4 34.9, the sweep's best.
WGMMA_SPLIT_MIN_STEPS = 20
WGMMA_MEDIUM_SPLIT_MIN_STEPS = 40
# The wgmma rows' splits are added up by SplitKSum (split_reduce="kernel"), not by the last split to arrive: with tiles
# of 64-128 rows the serial sum (one block reading every split's partial sums of its tile) made the tail. H100, in one
# process, best of three, every output column checked, u4 / uint8 / fp8 e4m3, serial -> SplitKSum: 64 x 8192 x 10240
# (in 3) 40.3 -> 34.0 us, 48.1 -> 41.3, 50.1 -> 40.9; 64 x 11008 x 4096 (in 4) 34.5 -> 28.3, 36.2 -> 30.3, 36.5 -> 30.9;
# 64 x 28672 x 8192 (in 4) 84.4 -> 79.7, 111.0 -> 111.0, 115.2 -> 105.5; 128 x 28672 x 8192 (medium in 4) 130.5 ->
# 118.9, 141.7 -> 139.9, 134.6 -> 120.0; 256 x 11008 x 4096 (64-row tiles in 2) 63.8 -> 58.9, 67.0 -> 70.8, 70.7 ->
# 62.4.
# (It costs a second launch: 5-10 us of host time outside a CUDA graph, hidden behind kernels of this size when the
# launches run ahead of the GPU.)
# From 65 rows, where even the 64-row tiles leave SMs idle (a grid short of the SMs: K would be split), three
# warpgroups of 64 channels (WGMMA_THREE_GROUPS, one block an SM) are split instead, as often as keeps one block an SM,
# each split keeping at least THREE_GROUPS_SPLIT_MIN_STEPS k-steps, where that fills 3/4 of the SMs; for fp8 weights
# with float16 activations the medium tile's split (above) first. Same runs, against the tiles those shapes took before
# (split, by SplitKSum):
# 128 x 11008 x 4096 (in 6: 22 blocks, 14 k-steps) 35.9 -> 31.7, 36.9 -> 33.5, 36.7 -> 33.1 (torch 41.7; in 4: 36.2,
# 40.0, 40.0); 128 x 14336 x 4096 (in 6) 43.0 -> 37.3, 52.7 -> 40.6, 46.9 -> 39.9 (torch 52.5); 128 x 8192 x 8192 (in
# 3) 47.1 -> 39.3, 57.8 -> 44.1, 52.7 -> 43.3 (torch 50.0); 256 x 11008 x 4096 (in 3) 58.9 -> 46.6, 70.8 -> 51.0, 62.4
# -> 51.7 (torch 48.2); 128 x 28672 x 8192 (in 3) u4 118.9 -> 109.9, uint8 139.9 -> 132.1, but fp8 120.0 -> 126.7
# (torch 171.4), hence the medium tile first for fp8 with float16 activations. With bfloat16 activations (a later
# session; fp8 then takes eight integer instructions a pair, not one cvt) the three warpgroups won there instead (H100,
# in one process, two runs each, every output column checked, medium in 4 -> three in 3): 128 x 28672 x 8192 e4m3
# 184.0-184.5 -> 131.9-134.8 us, e5m2 181.8-182.6 -> 133.4-134.4; 96 x 28672 x 8192 e4m3 178.5-181.1 -> 129.1-129.2,
# e5m2 178.5-181.5 -> 126.1-128.1 (torch.matmul on bfloat16 weights 172.4 and 170.9); float16 in the same session
# kept the medium tile (e4m3 120.7-121.3 against 125.2-130.9 at 128 rows, 117.8-118.6 against 118.9-120.6 at 96), so
# fp8 with bfloat16 activations takes the three warpgroups' split. Split where a second block would need an SM of its
# own, they lost: 256 x 4096 x 11008 in 2, u4 45.6 -> 58.6.
THREE_GROUPS_SPLIT_MIN_STEPS = 12
# Where the 64-row tile (WGMMA_CONFIGS' first) leaves SMs without a block and K stays unsplit (49-64 rows of a 7B
# model's projections: 86-108 blocks, one an SM), each block's weight loads wait in the open: one k-step of them in
# flight, moved up by copies that wait for the load. So these types keep two k-steps of weights in flight
# (prefetch=2), 2- and 7-bit weights in fixed register slots (fixed_slots), as measured faster. H100, in one process,
# two or three runs each (about the middle of their range), every output column checked, table -> prefetch=2 / with
# fixed slots (torch.matmul on float16 weights in brackets): 64 x 4096 x 11008 int4 35.0 -> 29.8 / 32.5 us, u3 34.2 ->
# 30.9 / 31.2, fp4 e2m1 35.2 -> 31.0 / 33.8, uint8 34.0 -> 32.8 / 32.8, fp8 e4m3 33.7 -> 32.8 / 33.2, u2 33.5 -> 31.9
# / 29.3, uint7 35.8 -> 35.8 / 34.6 (34.9-35.6); 64 x 5120 x 13824 int4 41.8 -> 36.2 / 40.0, u3 41.6 -> 37.4 / 37.7,
# fp4 42.2 -> 37.5 / 41.4, uint8 43.1 -> 42.3 / 42.0, fp8 42.8 -> 42.1 / 42.3, u2 40.3 -> 38.6 / 35.2, uint7 44.7 ->
# 44.1 / 42.5 (52.2-52.8); 64 x 4096 x 12288 and 56 x 4096 x 11008 alike (int4 34.8 -> 29.7, 34.1 -> 29.4; uint7 with
# fixed slots 35.8 -> 34.6-35.1, 35.6 -> 33.8). The other types lost with either: u4 29.0 -> 29.3-29.6 / 32.3 at 64 x
# 4096 x 11008, int5 33.0 -> 35.9 / 33.3, uint6 31.7 -> 34.1 / 34.0, fp6 e3m2 32.7 -> 36.4 / 34.0, fp6 e2m3 33.3 ->
# 33.9 / 34.8. A grid that fills the SMs lost with them (64 x 8192 x 28672 u4 78.2 -> 82.1 / 92.3), and so did the
# tiles from 65 rows (256 x 8192 x 28672 u4 218.6 -> 226.9 / 223.5, uint8 230.8 -> 296.4 / 293.0 with fixed slots
# alone; 256 x 4096 x 11008 u4 even, uint8 50.7 -> 52.0).
# With zero points, uint8 weights (float16 activations) spill on the 256-channel tile: 255 registers a thread and 52
# bytes of local memory (ptxas -v at sm_90a; every other integer type of 1-8 bits and int8 with zero points fits,
# so does uint8 without them). So those take WGMMA_MEDIUM where the 256-channel tile's grid is short of the SMs (two
# of its blocks fit an SM), WGMMA_THREE_GROUPS where it is not. H100, the tiles in turn in one process, two rounds,
# best (every output column checked; 256-channel / three warpgroups / medium): 96 x 8192 x 28672 152.4 / 172.8 /
# 139.3 us, 128 x 8192 x 28672 155.2 / 177.5 / 143.5, 256 x 4096 x 14336 76.9 / 90.5 / 71.5, 256 x 5120 x 13824 93.2 /
# 113.1 / 87.5 (short grids); 192 x 8192 x 28672 271.7 / 252.4 / 256.0, 256 x 8192 x 28672 281.7 / 263.1 / 267.0, 320
# x 8192 x 28672 399.4 / 339.1 / 375.8, 1024 x 8192 x 28672 948.8 / 858.5 / 910.8; 512 x 28672 x 8192 (split in 2)
# 505.0 / 451.4 in 2 / 455.1. The other types lost on both (u4, u3, u6, u7 with zero points at 128 and 256 rows, 3-47%;
# int8 with zero points 9%). With bfloat16 activations uint8 spills 16 bytes there, and the medium tile measured 2-4%
# faster at 128 and 256 rows (three warpgroups 2.5% slower at 256): not taken, too few shapes measured.
# fp8 weights with bfloat16 activations (eight integer instructions a pair into bfloat16, 24 bytes spilled on the
# 256-channel tile) are the other way round from float16's: the 256-channel tile where its grid is short of the SMs,
# three warpgroups where it is not. Same method, e4m3 / e5m2, table -> rule: 96 x 8192 x 28672 178.2 / 177.9 -> 167.0
# / 167.2 us, 128 x 8192 x 28672 180.4 / 181.0 -> 169.8 / 168.5, 256 x 4096 x 14336 93.1 / 92.9 -> 87.1 / 87.2, 256 x
# 5120 x 13824 113.7 / 112.1 -> 105.3 / 107.5; 192 x 8192 x 28672 318.9 / 319.0 -> 302.7 / 301.7, 256 rows 324.0 /
# 324.6 -> 312.1 / 313.2, 320 rows 469.3 / 468.9 -> 410.2 / 411.9 (the medium tile slower on both grids).
WGMMA_ZERO_POINT_SPILLS = ("uint8",)
WGMMA_SHORT_GRID_QUEUES = {"int4b": (2, False), "uint3b": (2, False), "float4_e2m1": (2, False), "uint8": (2, False),
                           "float8_e4m3": (2, False), "uint2b": (2, True), "uint7b": (2, True)}


@functools.lru_cache(maxsize=4096)  # a pure choice, made again at every launch otherwise (5-20 us of host time)
def choose_config(m: int, fmt: WeightFormat, multiprocessors: int = 132, wgmma: bool = False,
                  zero_points: bool = False, dtype: str = "float16") -> Config:
    """The configuration :func:`quantized_matmul` uses for ``m`` rows on a GPU with ``multiprocessors`` SMs
    (``wgmma``: an sm_90a GPU, which from ``WGMMA_MIN_ROWS`` rows takes the ``WGMMA_CONFIGS`` tiles, or where their
    grid leaves SMs without a block ``WGMMA_SMALL`` / ``WGMMA_THREE_GROUPS`` / ``WGMMA_MEDIUM`` (see there), and
    ``WGMMA_THREE_GROUPS`` too where it takes fewer waves times channels, or instead of the 256-channel tile for the
    weights, ``zero_points`` and ``dtype`` activations of ``_instead_of_the_wide_tile``, or split
    (``THREE_GROUPS_SPLIT_MIN_STEPS``) where the 64-row tiles too leave SMs idle, the splits of these rows added up
    by SplitKSum; the 64-row tile on a grid short of the SMs, K unsplit, keeps two k-steps of weights in flight for
    the types of ``WGMMA_SHORT_GRID_QUEUES``; below that, its rows of ``HOPPER_CONFIGS`` come first, where their
    grid fills the SMs unsplit or, for the rows that may split K in 4 or 8, where their splits give it two blocks an
    SM; the decode rows of 2-6-bit weights (and at 9-16 rows the ring row of 4-bit weights and the row of 2-3-bit
    ones in groups of 128) split K in two inside their blocks instead of over the grid, ``IN_BLOCK_SPLIT``, and
    with ``zero_points`` the rows of ``ZERO_POINT_BIASED`` and ``ZERO_POINT_SUMS`` take the zero point's term from the
    activation sums and those of ``ZERO_POINT_SPLITS`` split K further): the table's for the batch; K is split
    (``split_k``, doubling) while the grid has fewer blocks per SM than the table's row asks (two, or six for the
    ring row's small blocks) and every split keeps at least 8 k-steps, evenly or not (with wgmma, see
    ``WGMMA_SPLIT_MIN_STEPS``); a row that would need more splits than it allows (the ring row: two) leaves the batch
    to the next. Uneven splits
    (a 7B model's K of 11008 is 86 k-steps of 128, split in 8) took 1x11008x4096 on the H100 from 29.4 to 19.0 us
    for u4 (uint8 42.3 -> 27.1, u2 31.4 -> 17.2), 16 rows 34.7 -> 21.0, 32 rows 43.6 -> 35.2, where only two splits
    divided K before. A grid still short of the row's blocks per SM at the most splits K allows (a row without a
    split limit) takes blocks of half the units a warp, twice as many: 1x11008x4096's 32 blocks of 128 channels
    split in 8 became 64 of 64 split in 8, on the H100 (two runs, A/B) u4 18.8-19.0 -> 17.3 us, u2 16.8-17.0 ->
    16.0-16.1, u3 17.8-18.0 -> 16.7-16.9, int5 20.5-20.7 -> 19.1, uint8 27.2-27.6 -> 25.4-25.6, fp6 e3m2 21.7-21.9
    -> 21.0-21.1; 32 rows u4 35.2-35.3 -> 30.1-30.3; 16 rows alike (20.8-21.0)."""
    if wgmma and m >= WGMMA_MIN_ROWS:
        config = next(c for limit, c in WGMMA_CONFIGS if limit is None or m <= limit)
        config, small = fit_units(config, fmt), fit_units(WGMMA_SMALL, fmt)
        blocks, small_blocks = _grid_blocks(m, fmt, config), _grid_blocks(m, fmt, small)
        short = config.block_m > 64 and blocks < multiprocessors  # (from 65 rows: SMs left without a block)
        if short and small_blocks < multiprocessors:  # even the 64-row tiles: K is split
            if _medium_first(fmt, dtype):  # (bfloat16: see THREE_GROUPS_SPLIT_MIN_STEPS)
                medium = _medium_split(m, fmt, multiprocessors, small_blocks,
                                       _wgmma_splits(small_blocks, fmt, multiprocessors))
                if medium is not None:
                    return medium
            three = _three_groups_split(m, fmt, multiprocessors)
            if three is not None:
                return three
        if blocks < multiprocessors // 2 or (short and small_blocks <= 2 * multiprocessors):
            config = small
        elif _fewer_waves(m, fmt, config, multiprocessors):
            return WGMMA_THREE_GROUPS
        elif config.block_m > 64 and (instead := _instead_of_the_wide_tile(fmt, short, zero_points, dtype)):
            return instead
        blocks = _grid_blocks(m, fmt, config)
        if blocks < multiprocessors:  # K split into one wave of two blocks an SM (see WGMMA_SPLIT_MIN_STEPS)
            splits = _wgmma_splits(blocks, fmt, multiprocessors)
            medium = _medium_split(m, fmt, multiprocessors, blocks, splits)
            if medium is not None:
                return medium
            config = replace(config, split_k=splits, split_reduce="kernel" if splits > 1 else config.split_reduce)
            queues = WGMMA_SHORT_GRID_QUEUES.get(fmt.dtype.name)
            if splits == 1 and queues and m <= WGMMA_CONFIGS[0][0] and config.warps == WGMMA_CONFIGS[0][1].warps:
                config = replace(config, prefetch=queues[0], fixed_slots=queues[1])  # (the 64-row tile, unsplit)
        return config
    hopper = HOPPER_CONFIGS if wgmma else ()
    for row, (limit, widths, config, per_sm, max_split) in enumerate(hopper + CONFIGS):
        if not ((limit is None or m <= limit) and (widths is None or fmt.dtype.nbits in widths)
                and config.units_per_warp % fmt.units == 0):
            continue
        blocks = _grid_blocks(m, fmt, config)
        if row < len(hopper) and m <= max((r[0] for r in hopper if r[0] < limit), default=0):
            # (a Hopper row serves the batches above the smaller Hopper rows' only: the 9-16-row rows were not
            # measured below)
            continue
        wanted = per_sm * multiprocessors
        splits = _splits(blocks, wanted, fmt.steps)
        if row < len(hopper) and blocks < multiprocessors and (max_split < 4 or blocks * splits < 2 * multiprocessors):
            # (a Hopper row serves grids that fill the SMs unsplit; the rows that may split K in 4 or 8 also smaller
            # ones that their splits give two blocks an SM, as measured)
            continue
        if blocks * splits < wanted and config.units_per_warp >= 2 * fmt.units and max_split is None:
            # still short of the row's blocks per SM at the most splits K allows (a 7B model's down projection,
            # 4096 channels): blocks of half the channels, twice as many (see the docstring)
            config = replace(config, units_per_warp=config.units_per_warp // 2)
            blocks *= 2
            splits = _splits(blocks, wanted, fmt.steps)
        if max_split is None or splits <= max_split:
            config = _split_in_block(m, fmt, replace(config, split_k=splits), wgmma, zero_points)
            return _zero_point_term(m, fmt, _zero_point_split(m, fmt, config)) if zero_points else config
    raise AssertionError("the last row of CONFIGS serves every batch")


def _instead_of_the_wide_tile(fmt: WeightFormat, short: bool, zero_points: bool, dtype: str) -> Optional[Config]:
    """The tile taken instead of the 256-channel one, on a grid of it ``short`` of the SMs or not: ``WGMMA_MEDIUM``
    on short grids for fp8 weights (``WGMMA_MEDIUM_TYPES``) with float16 activations, ``WGMMA_THREE_GROUPS`` on full
    ones for them with bfloat16 activations, and either for the weights of ``WGMMA_ZERO_POINT_SPILLS`` with zero points
    and float16 activations; else None."""
    name = fmt.dtype.name
    spills = zero_points and dtype == "float16" and name in WGMMA_ZERO_POINT_SPILLS
    if short:
        return fit_units(WGMMA_MEDIUM, fmt) if spills or _medium_first(fmt, dtype) else None
    if (spills or (name in WGMMA_MEDIUM_TYPES and dtype == "bfloat16")) \
            and WGMMA_THREE_GROUPS.units_per_warp % fmt.units == 0:
        return WGMMA_THREE_GROUPS
    return None


def _medium_first(fmt: WeightFormat, dtype: str) -> bool:
    """Whether the weights take ``WGMMA_MEDIUM`` first on grids short of the SMs, unsplit or split: fp8
    (``WGMMA_MEDIUM_TYPES``) with float16 activations."""
    return fmt.dtype.name in WGMMA_MEDIUM_TYPES and dtype == "float16"


def _split_in_block(m: int, fmt: WeightFormat, config: Config, tma: bool, zero_points: bool = False) -> Config:
    """``config`` with its K split in two moved into the block (``k_groups=2``, see ``IN_BLOCK_SPLIT``) where that
    measured faster: the tiles listed there, up to their rows for the weights' width and their scale groups a k-step,
    an even number of k-steps, on a GPU with TMA (``tma``: sm_90a) for its ring of weights; the tiles with
    ``biased_codes`` for weights in groups without zero points only."""
    if not tma or config.split_k != 2 or fmt.steps % 2:
        return config
    for tile, rows, groups, split_tile in IN_BLOCK_SPLIT:
        if split_tile.biased_codes and (zero_points or fmt.per_channel):
            continue
        if replace(config, split_k=1) == tile and m <= rows.get(fmt.dtype.nbits, 0) \
                and (groups is None or fmt.groups_per_step <= groups):
            return split_tile
    return config


def _zero_point_term(m: int, fmt: WeightFormat, config: Config) -> Config:
    """``config`` for weights with zero points, with the zero point's term taken as its product with the activation
    sums where that measured faster: ``biased_codes`` for interleaved integer codes (1, 2 or 4 bits) on the rows of
    ``ZERO_POINT_BIASED``, ``zero_point_sums`` for integer codes on the rows of ``ZERO_POINT_SUMS``, each up to the
    rows listed for the width and the scale groups a k-step."""
    if fmt.per_channel or not fmt.dtype.is_integer:
        return config

    def listed(tile, splits, rows, groups):
        return replace(config, split_k=1) == tile and config.split_k in splits \
            and m <= rows.get(fmt.dtype.nbits, 0) and fmt.groups_per_step <= groups

    if fmt.interleaved and any(listed(tile, (splits,), rows, groups)
                               for tile, splits, rows, groups in ZERO_POINT_BIASED):
        return replace(config, biased_codes=True)
    if any(listed(*row) for row in ZERO_POINT_SUMS):
        return replace(config, zero_point_sums=True)
    return config


def _zero_point_split(m: int, fmt: WeightFormat, config: Config) -> Config:
    """``config`` for weights with zero points, with the K split (and ring) of ``ZERO_POINT_SPLITS`` where its tile,
    split, rows and weight type match and every split keeps at least 8 k-steps."""
    for tile, splits, rows, changes in ZERO_POINT_SPLITS:
        change = changes.get(fmt.dtype.name)
        if change and not fmt.per_channel and replace(config, split_k=1) == tile and config.split_k == splits \
                and m <= rows and fmt.steps // change.get("split_k", splits) >= 8:
            return replace(config, **change)
    return config


def _medium_split(m: int, fmt: WeightFormat, multiprocessors: int, blocks: int, splits: int) -> Optional[Config]:
    """``WGMMA_MEDIUM`` split in two or more, where its splits make a grid as large as ``blocks`` tiles of another
    split in ``splits`` and keep at least ``WGMMA_MEDIUM_SPLIT_MIN_STEPS`` k-steps, and its rows are not half
    padding; else None."""
    if m <= WGMMA_MEDIUM.block_m // 2:
        return None
    medium = fit_units(WGMMA_MEDIUM, fmt)
    medium_blocks = _grid_blocks(m, fmt, medium)
    medium_splits = _wgmma_splits(medium_blocks, fmt, multiprocessors)
    if (medium_splits > 1 and medium_blocks * medium_splits >= blocks * splits
            and fmt.steps // medium_splits >= WGMMA_MEDIUM_SPLIT_MIN_STEPS):
        return replace(medium, split_k=medium_splits, split_reduce="kernel")
    return None


def _three_groups_split(m: int, fmt: WeightFormat, multiprocessors: int) -> Optional[Config]:
    """``WGMMA_THREE_GROUPS`` with K split as often as keeps one block an SM, each split keeping at least
    ``THREE_GROUPS_SPLIT_MIN_STEPS`` k-steps, where that fills 3/4 of the SMs and the tile fits ``fmt``; else None."""
    three = WGMMA_THREE_GROUPS
    if three.units_per_warp % fmt.units:
        return None
    blocks = _grid_blocks(m, fmt, three)
    splits = max(min(multiprocessors // blocks, fmt.steps // THREE_GROUPS_SPLIT_MIN_STEPS), 1)
    if splits < 2 or 4 * blocks * splits < 3 * multiprocessors:
        return None
    return replace(three, split_k=splits, split_reduce="kernel")


def _wgmma_splits(blocks: int, fmt: WeightFormat, multiprocessors: int) -> int:
    """K's splits for a wgmma grid of ``blocks`` short of the SMs (see ``WGMMA_SPLIT_MIN_STEPS``)."""
    splits = max(min(2 * multiprocessors // blocks, fmt.steps // WGMMA_SPLIT_MIN_STEPS), 1)
    while splits > 1 and multiprocessors < blocks * splits < 7 * multiprocessors // 4:
        splits -= 1
    return splits


def _fewer_waves(m: int, fmt: WeightFormat, config: Config, multiprocessors: int) -> bool:
    """Whether ``WGMMA_THREE_GROUPS`` covers ``m`` rows in fewer waves times channels a block than ``config``'s tile,
    by ``THREE_GROUPS_COST``, both tiles of the same rows and one block an SM, and it fits ``fmt`` as it is (its units
    a warp a multiple of ``fmt.units``)."""
    other = WGMMA_THREE_GROUPS
    if other.block_m != config.block_m or other.units_per_warp % fmt.units:
        return False
    def cost(tile: Config) -> int:  # noqa: E306 - waves of the grid x channels a block
        return -(-_grid_blocks(m, fmt, tile) // multiprocessors) * tile.warps * tile.units_per_warp
    return cost(other) * THREE_GROUPS_COST < cost(config)


def fit_units(config: Config, fmt: WeightFormat) -> Config:
    """``config`` with its units a warp rounded down to a multiple of ``fmt.units`` (formats whose lanes pair units
    take them in pairs), and at least one such multiple."""
    return replace(config, units_per_warp=max(config.units_per_warp, fmt.units) // fmt.units * fmt.units)


def _grid_blocks(m: int, fmt: WeightFormat, config: Config) -> int:
    """The blocks of ``config``'s tile over ``m`` rows and ``fmt.n`` channels (before K is split)."""
    return -(-m // config.block_m) * -(-fmt.n // (config.warps * config.units_per_warp * 16))


def _splits(blocks: int, wanted: int, steps: int) -> int:
    """K's splits (doubling) for a grid of ``blocks`` to reach ``wanted`` blocks, while every split keeps at least
    8 of the ``steps`` k-steps (evenly or not)."""
    splits = 1
    while blocks * splits < wanted and steps // (2 * splits) >= 8:
        splits *= 2
    return splits
