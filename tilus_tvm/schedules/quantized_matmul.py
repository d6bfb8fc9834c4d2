"""``QuantizedMatmul``: ``out = a @ w`` with float16/bfloat16 activations and low-precision weights.

``a`` [M, K] (float16 or bfloat16), ``w`` [K, N] of any integer type of 1 to 8 bits or float of at
most 8 bits (:func:`~tilus_tvm.schedules.quantized_weight.check_weight_dtype`), packed by
:func:`pack_weight`, with per-group scales ``s`` [K / g, N] and optional zero points ``z`` (a's
dtype; g = 32, 64, 128 or K): ``out[m, n] = sum_k a[m, k] * (value(q[k, n]) - z[k // g, n]) * s[k // g, n]``.

The kernel computes ``out^T = w^T @ a^T`` on ``mma.sync.m16n8k16``, so the weights are the A operand
(16 output channels per mma) and the batch is the n of the mma (8 per mma: a batch of 1 to 8 wastes
at most 7/8 of a tensor-core op that is not the limit, the weight stream is). A block owns
``block_n = warps * units_per_warp * 16`` output channels and ``block_m`` batch rows; warp ``w``
owns ``units_per_warp`` units of 16 channels. Each k-step of ``kt`` inputs (one or more whole groups,
:func:`~tilus_tvm.schedules.quantized_weight.step_k`):

1. every thread loads its bytes of the packed weight tile straight into registers -- whole vectors
   of up to 16 bytes, a warp's load instruction reading 512 contiguous bytes -- one step ahead of
   the step it computes, so the loads of step ``i + 1`` are in flight during step ``i``;
2. ``self.view`` reinterprets the words as the codes of the mma A fragments (pack_weight put each
   lane's codes in fragment order, each word's interleaved for integers of 1, 2 or 4 bits, each block
   of words bit-placed for integers of 3, 5, 6, 7 bits and small floats) and ``self.cast`` converts them
   in registers into the A layout (one ``lop3`` and one paired fma per two interleaved codes; a ``lop3``
   a piece and one paired fma or multiply per two placed codes, :mod:`tilus_tvm.bit_placement`;
   ``prmt`` / magic-number fma for 8-bit integers, ``cvt`` for fp8 on sm_89+,
   :mod:`tilus_tvm.instructions.cast`); zero points are subtracted there. Placed floats into float16
   skip their multiply by ``2**(15 - bias)`` where the scales multiply in float32 after the dot, which
   then take that power of two (:func:`placed_fold`);
3. the activations of the step ([block_m, kt], 4-byte loads in fragment layout, viewed transposed)
   meet them in ``dot_split`` (float32 accumulation). With groups, each group's product over its
   columns of the step starts from zero and is added to the accumulator times the group's scales (one
   multiply per output, not per weight); per channel, the scales multiply once at the end.

With ``scale_weights=True`` the scales multiply the weights instead (one multiply per weight, in
the activations' type, but no second accumulator: the choice for large batches, whose accumulator
fills many registers).

``stage_activations=True`` copies the activation tile into shared memory with ``cp.async``
(``stages`` deep) and reads fragments with ``ldmatrix``, since all warps of the block share it; the
weights still go straight to registers (each is used by one warp only). The table uses it from 9 rows
on, and from 1 row on for 6- to 8-bit weights: it frees the registers that the activations of every
step, loaded one step ahead, take on the other path.

``weight_ring=N`` streams the weights instead through a ring of N k-steps in shared memory that each thread
fills for itself: ``copy_async(layout=words)`` copies exactly the words the thread reads back with
``load_shared(layout=words)``, so after its own ``cp.async.wait_group`` it needs no barrier, and the N - 1
steps in flight take shared memory instead of registers. With fewer registers a block, one unit a warp fits
about 7 blocks an SM; the table uses it for 3- to 6-bit weights up to 8 rows (H100, 1x8192x28672: u4 51.6 ->
50.3 us, u6 74.3 -> 71.7; see ``CONFIGS``). With staged activations (``stages`` equal to N) a step's weights
and activations travel in one cp.async group.

``weight_stages=N`` (Hopper) streams the weights instead through a ring of N k-steps in shared memory that
one thread fills with TMA (``tma_load``; the storage viewed as [granules, steps, chunks, 32 x words], one
barrier a stage); each warp then reads its 16-byte vectors from shared memory. A stage is refilled once the
block has met at a barrier after reading it, or with ``release_barriers``, once every warp has arrived on the
stage's release barrier (``mbarrier_arrive(per_warp=True)``: one arrival a warp), which only the refilling
thread waits for. The table takes the released ring on sm_90a for 3- to 8-bit weights up to 8 rows, and 4- to 7-bit
weights at 9-16 rows, where the grid fills the SMs (H100, 1x8192x28672: u4 50.0 -> 47.6 us, u3 44.0 -> 40.4; 16 rows
u4 53.5 -> 50.7, see ``HOPPER_CONFIGS``).

``k_groups=G`` (with the TMA ring; activations in registers, or staged by cp.async, a stage then holding one
[block_m, kt] tile a group, read by ldmatrix through a permuted view) splits the block's K over G groups of
``warps`` warps: a stage of the ring holds G k-steps (one TMA box), group g converts and multiplies the g-th,
every per-step tile gains a leading dimension of G over the outermost warp digit (a batched ``dot_split``), and
after the k-loop ``self.sum(acc, dim=0)`` adds the groups' partial sums through shared memory. The grid then needs
no K split to keep as many warps streaming, and no split's partial sums go out to global memory and back after the
weights have streamed: on sm_90a the decode rows of 2- to 6-bit weights take it where they would split K in two,
activations staged (H100, 1x8192x28672: u4 47.8 -> 46.2 us, uint6 69.2 -> 67.8, u3 40.7-41.5 -> 39.0-39.2; 8 rows
u4 53.8-55.1 -> 46.6-46.7, u3 77.5-77.8 -> 39.1-39.6; u3 in groups of 64 87.2-87.5 -> 40.1-40.7), 2-bit weights
with a ring of 4 k-steps, and so does the 9-16-row ring row for 4-bit weights (16 rows u4 50.0-50.5 -> 49.3-50.1),
whose tile of two groups of two warps of 4 units (46.1-47.8) 2- and 3-bit weights take too at 9-16 rows, where a
k-step is one scale group (16 rows u3 50.7 -> 44.6-45.6, u2 47.2 -> 41.3-42.5; see ``IN_BLOCK_SPLIT``).

Weights packed in tiles of k-steps (``pack_weight(..., k_tile=T)``, T = 2 by default; storage [tiles, granules, T,
...]) are viewed granule first, [granules, tiles, T, ...], and every load path reads k-step ``s`` at tile ``s // T``,
place ``s % T`` (:meth:`QuantizedMatmul.word_offsets`; the TMA ring's stages, one box of kg k-steps of one tile, by
:meth:`QuantizedMatmul.stage_offsets`): a decode grid then reads one narrow front of the weight (H100, 1x8192x28672:
u4 46.1-46.5 -> 44.3-44.7 us; :mod:`~tilus_tvm.schedules.quantized_weight`), and K's splits take the tiles in turn
(:attr:`QuantizedMatmul.strided_splits`).

A step's scales (and zero points) are loaded ahead, like its activations: waiting for them in the step that
used them cost fp4 weights 23% and u2 10% at 1x8192x28672. By default a queue keeps the current step's
registers, loads the next step's at the start of a step and moves up by copies at its end; each copy waits for
its load, which on the ring row put 44% of the stall samples (Nsight Compute, u4 at 1x8192x28672) on the copy
of the next step's scales. With ``fixed_slots`` every queue keeps its steps in slots of fixed registers, each
refilled with the step ``depth`` ahead once its step has used it, in a k-loop unrolled by a multiple of the
depths (:meth:`QuantizedMatmul.queue_depths`). The unrolled loop takes more registers (the ring row: 52 -> 76,
49.8 -> 57.2 us), so the table uses it only with the TMA ring, whose threads hold no weights in flight.

The grid is (M / block_m, N / block_n): the batch tiles of one weight tile run next to each other,
so a weight tile read by several batch tiles comes from L2 after the first. With few blocks (decode),
``split_k`` blocks share K (grid z; split z takes k-steps [z * S // split_k, (z + 1) * S // split_k) of the S,
so split_k need not divide them; on weights stored in tiles of k-steps, tiles z, z + split_k, ... instead, so that
the grid reads one front: :attr:`QuantizedMatmul.strided_splits`). By default (``split_reduce="serial"``) the kernel
adds their float32 partial sums itself, in split order: every split stores its partial sums in a workspace of the
kernel's own and arrives at its tile's counter (``arrive_last``: a fence and an atomic add), and the last
split to arrive adds all of them, split 0 first, and writes the tile. No split waits for another (a chain
of semaphores, ``MatmulSplitK``'s way, made each wait for the one before: on the H100, u4 at 1x4096x11008
took 20.5-20.9 us that way and takes 16.3-16.4, at 1x28672x8192 with 8 splits 62.3-62.5 against 50.2).
With ``split_reduce="kernel"`` each split writes them to a workspace the caller passes and
:class:`SplitKSum`, a second kernel, adds them up. For decode tiles (8-16 rows) the serial sum is as fast and saves
the second launch (5-10 us of host time outside a CUDA graph); the ``wgmma`` rows' tiles of 64-128 rows take
SplitKSum, which spreads the sum over the GPU where the serial sum left one block a tile reading every split's
partial sums (their table: ``choose_config``).

``QuantizedMatmul`` carries an ``opt_in`` ``@autotune`` space of 117 configurations: the block's channels as
warps x units (``TUNED_CHANNELS``) times its batch rows with their load path (``TUNED_ROWS``), which hold the tile
of every configuration of the hand table. ``quantized_matmul(..., tune=True)`` tunes them around the hand table's
configuration for the call (:func:`tuned_config`): its weights' path (the TMA ring, its barriers, fixed slots, the
groups of warps, ``wgmma``; ``TABLE_PATH``) and K's split stay the table's, so every candidate is timed with them and
the table's own tile is among the candidates. MetaSchedule times kernels in destination-passing form, which cannot
hold the counters of the serial reduction, so the candidates write their partial sums for :class:`SplitKSum`; the
choice is launched with the table's reduction.

The hand table -- :class:`Config`, the rows named above (``CONFIGS``, ``HOPPER_CONFIGS``, ``IN_BLOCK_SPLIT``, the
``WGMMA_*`` tiles) with the measurements that chose them, and :func:`choose_config` -- is
:mod:`tilus_tvm.schedules.quantized_configs`.
"""
from __future__ import annotations

import functools
import math
from dataclasses import asdict, replace
from typing import Any, Optional

import tilus_tvm as tilus
from tilus_tvm import bfloat16, float16, float32, int32, uint64, void
from tilus_tvm.dtypes import as_dtype
from tilus_tvm.errors import LaunchError, ScriptError
from tilus_tvm.instructions.cast import times_fusable
from tilus_tvm.layout.register import compose, local
from tilus_tvm.layout.register_ops import interleave_local, reduce
from tilus_tvm.layout.shared import shared_row_major
from tilus_tvm.schedules.quantized_configs import Config, choose_config
from tilus_tvm.schedules.quantized_weight import (QuantizedWeight, WeightFormat, check_weight, check_weight_dtype,
                                                  dequantize, pack_weight, quantize_weight)
from tilus_tvm.tune.library import tuned_kernel, use_tuned

__all__ = ["QuantizedMatmul", "SplitKSum", "Config", "quantized_matmul", "pack_weight", "quantize_weight", "dequantize",
           "QuantizedWeight", "kernel_layouts", "choose_config", "tuned_config"]


def kernel_layouts(fmt: WeightFormat, warps: int, units_per_warp: int, block_m: int, dtype: Any, k_groups: int = 1):
    """(words, a, x, b, c): the layouts of one k-step: the packed weight words a thread loads
    ([granules, chunks, 32, words per vector]), the weight codes as mma A operand ([block_n, kt]), the
    activations as loaded ([block_m, kt]) and as mma B operand ([kt, block_m]), and the accumulator.
    With ``k_groups`` > 1, of ``k_groups`` k-steps, one a group of ``warps`` warps (the outermost digit of
    the warp index): words [granules, k_groups, chunks, 32, words per vector], the others with a leading
    dimension of ``k_groups`` (a batched ``dot_split``)."""
    from tilus_tvm.instructions.dot import dot_layouts
    from tilus_tvm.instructions.dot_split import split_config
    from tilus_tvm.layout.register import register_layout
    from tilus_tvm.layout.register_ops import permute

    block_n = warps * units_per_warp * 16
    batch = k_groups if k_groups > 1 else 0
    config = split_config(block_n, block_m, fmt.kt, as_dtype(dtype).name, "float32", (warps, 1), warps * k_groups,
                          batch)
    a, b, c = dot_layouts(config)
    granules = units_per_warp // fmt.units
    vector = fmt.vector_bytes // 4
    if batch:
        words = register_layout([warps * granules, k_groups, fmt.chunks, 32, vector],
                                [warps, granules, k_groups, fmt.chunks, 32, vector], [2, 0, 4], [1, 3, 5])
        return words, a, permute(b, [0, 2, 1]), b, c
    words = register_layout([warps * granules, fmt.chunks, 32, vector],
                            [warps, granules, fmt.chunks, 32, vector], [0, 3], [1, 2, 4])
    return words, a, permute(b, [1, 0]), b, c


def placed_fold(fmt: WeightFormat, dtype: Any, zero_points: bool, weights_scaled: bool) -> float:
    """The power of two the kernel leaves out of its weights and puts into its float32 scales: ``2**(15 -
    bias)`` for floats stored by a bit placement converting into float16 (their placed pattern is the value
    times ``2**(bias - 15)``: one multiply a pair fewer), where nothing else sees the weights' values -- no zero
    points, and scales multiplied in float32 after the dot rather than into the weights. Else 1. (bfloat16
    keeps its multiply: the placed pattern of a small code would be a bfloat16 subnormal.)"""
    from tilus_tvm.instructions.cast_rules import rebias_factor

    if fmt.placement is None or not fmt.dtype.is_float or as_dtype(dtype) != float16 or zero_points:
        return 1.0
    if weights_scaled and not fmt.per_channel:
        return 1.0
    return rebias_factor(fmt.dtype, "float16")


# how the split_k partial sums of a tile meet: "kernel", a second kernel (SplitKSum) adds them up from a
# workspace the caller passes; "serial", the kernel's own blocks add them in split order through a workspace
# of its own: the last split of a tile to arrive at its counter (arrive_last) adds them all, so there is no
# second launch
SPLIT_REDUCTIONS = ("kernel", "serial")
# The wgmma tiles of more than this many rows take an unsigned integer code's group scale into the paired fma that
# converts it (``cast(..., times=scales)``: ``h * s - M * s`` for a code under the magic number M of its place, one
# instruction a pair instead of two, in each thread whose scales keep ``M * s`` finite, |s| < 64 in float16), and a
# bit-placed float's into the multiply that restores its exponent (``bits * (s * 2**(15 - bias))``). The tiles from 65
# rows are bound by the GPU's 700 W power limit, where every instruction a weight costs time. H100, A/B in alternating
# processes, two runs each, every output checked: u4 256x8192x28672 218.0-219.9 -> 203.4-208.8 us, 256x4096x11008
# 46.1-46.2 -> 42.9-43.4, 128x8192x28672 114.3-114.5 -> 109.4-109.6; u2 256x4096x11008 even (44.1-45.2 -> 44.0-45.8).
# Later, the placed types and uint8 (a later session; two runs each, base then change): at 256x8192x28672 u3
# 218.7-227.6 -> 208.7-211.7, u6 230.9-232.0 -> 218.0-222.9, u7 239.2-241.6 -> 223.8-228.0, uint8 229.8-231.1 ->
# 220.0-221.6, fp6 e3m2 236.3-240.1 -> 222.8-225.2, fp6 e2m3 236.3-238.0 -> 224.4-224.9, fp4 222.2-228.5 ->
# 211.9-212.5; at 128x8192x28672 u7 136.7-137.2 -> 120.5-123.0, uint8 130.5-130.9 -> 119.8-121.4, fp6 e3m2 129.5-133.5
# -> 118.7-119.2, fp4 119.3-120.3 -> 110.7-112.1; at 256x11008x4096 1-8% faster (uint8 even); at 256x4096x11008 1-7%
# faster but uint8 2-3% slower (51.0-51.4 -> 52.2-52.8; 54.1 in the full table after), so uint8 on that tile of three
# warpgroups of 64 channels (one unit a warp) keeps its multiply. The 64-row tile lost with it (u4 64x4096x11008 28.6
# -> 32.2-32.5: 93 -> 114 registers), and so did the decode rows (scales into the weights and the fma instead of a
# float32 partial sum a group: u4 1x8192x28672 46.2-46.9 -> 48.8-48.9 us, 16 rows 49.5-49.9 -> 85.7-85.9, u2 33.2-34.4
# -> 40.2-40.4, u3 39.0-39.5 -> 43.4-44.5, uint8 84.9-85.0 -> 96.1-96.2, fp6 e3m2 at 16 rows 71.9-72.7 -> 94.0-94.6),
# and zero points taken into the fma (``minus``) at decode (u4 1x8192x28672 48.6-49.0 -> 50.2-50.8 us, 16 rows
# 58.5-59.0 -> 71.4-71.5 with spills, int4 49.3-49.4 -> 50.8): the decode rows keep their subtraction (at 256 rows it
# measured no clear gain alone, 49.2-49.3 -> 47.1-49.2 us). Where no fma can take the scale (signed codes, fp8, zero
# points), the wgmma tiles give it to the cast all the same (``scales_in_cast``), which multiplies two slots an fma
# (and takes an interleaved code's zero point into its fma): H100, base then change, two runs each, int4
# 256x8192x28672 221.9-224.0 -> 217.8-221.5 us, fp8 e4m3 231.8-232.1 -> 228.5-229.0, int5 even; at 256x4096x11008 int5
# 48.9-50.3 -> 47.4-49.2, fp8 50.9-53.2 -> 48.7-51.8; 64x4096x11008 even; zero points at 256x4096x11008 u3 48.5-49.7
# -> 46.3-46.7, u4 even, at 256x8192x28672 u3 239.0-240.5 -> 232.3-233.8, u4 229.7-233.3 -> 223.6-228.9.
FUSED_SCALES_MIN_ROWS = 64

# (warps, units_per_warp): 64 to 512 channels a block (units of 16; 2 or 4 a warp, a multiple of every
# format's units). 8 x 4 is there for 8-bit weights: at 1x8192x28672 on the H100 it took uint8 from
# 122 us (the table's 4 x 2) to 100 us (split_k 2 both; timed with each call waited for, host time included).
# 4 x 1 is the ring row's (formats whose lanes pair units refuse it: the tuner skips it for them).
# 8 x 1 and 12 x 1 are the wgmma tiles' of one unit a warp (two and three warpgroups of 64 channels).
TUNED_CHANNELS = [(2, 2), (4, 2), (8, 2), (2, 4), (4, 4), (8, 4), (4, 1), (8, 1), (12, 1)]
# (block_m, prefetch, stage_activations, stages, scale_weights, weight_ring): batch rows with the load path
# that suits them -- registers with two k-steps of weights in flight, or the per-thread ring, for decode
# batches, cp.async-staged activations (two or three stages, one or two k-steps of weights ahead) from 1 row,
# scaled weights for larger ones up to the wgmma tiles' 128 rows (the hand table's rows, and 32 rows unstaged)
TUNED_ROWS = [(8, 2, False, 2, False, 0), (8, 2, False, 2, False, 4), (8, 2, True, 3, False, 0),
              (8, 1, True, 2, False, 0), (16, 2, True, 3, False, 0), (16, 1, True, 3, False, 0),
              (16, 1, True, 2, False, 0), (32, 2, False, 2, False, 0), (32, 1, True, 3, True, 0),
              (64, 1, True, 3, True, 0), (64, 1, True, 4, True, 0), (64, 2, True, 3, True, 0),
              (128, 1, True, 3, True, 0)]
# The hand table's choices that tuning keeps (tuned_config): how the weights and activations travel
TABLE_PATH = ("weight_stages", "release_barriers", "fixed_slots", "k_groups", "warpgroup_mma", "tma_activations",
              "min_blocks", "fused_scales", "biased_codes", "zero_point_sums")


@tilus.autotune("warps, units_per_warp", TUNED_CHANNELS, bucket={"m_size": "pow2"}, opt_in=True)
@tilus.autotune("block_m, prefetch, stage_activations, stages, scale_weights, weight_ring", TUNED_ROWS)
class QuantizedMatmul(tilus.Script):
    """``out = a @ w`` for one packed weight format (see the module docstring).

    ``fmt``: the :class:`WeightFormat` of the weights (``QuantizedWeight.format``); ``dtype``: the
    activations' (float16 or bfloat16); ``zero_points``: whether ``z`` is given; ``warps``,
    ``units_per_warp`` (16 channels each; a multiple of ``fmt.units``), ``block_m`` (a multiple of 8):
    the block's tile; ``stage_activations``/``stages``: the shared-memory path for the activations;
    ``scale_weights``: scales applied to the weights rather than to each group's product; ``split_k``:
    K split over that many blocks (grid z; 1 to the number of k-steps, evenly or not), adding their partial
    sums up themselves, split after split, leaving ``ws_ptr`` alone (``split_reduce="serial"``), or each
    writing float32 partial sums to ``ws_ptr`` [split_k, M, N] for :class:`SplitKSum` (``split_reduce="kernel"``);
    ``prefetch``: k-steps of weights in flight ahead of the one computed (1 to 4); ``weight_stages``: 0, or
    the depth of a ring of k-steps of weights that TMA fills in shared memory (Hopper; ``prefetch`` is
    then unused: ``weight_stages - 1`` steps are in flight); ``weight_ring``: 0, or the depth of a ring of
    k-steps of weights in shared memory that each thread fills for itself with ``cp.async`` (no barrier;
    ``prefetch`` is then unused); ``release_barriers`` (stages that TMA fills: ``warpgroup_mma``'s activations,
    ``weight_stages``' weights): each stage is released by a barrier that every warp arrives on once it has
    read the stage, and only the thread that refills the stage waits for it, instead of a block-wide barrier
    every k-step, so the warps drift apart (with ``warpgroup_mma``, one warpgroup converts its weights while the
    other's ``wgmma`` run); ``fixed_slots``: register queues in fixed slots
    of a k-loop unrolled by their depths (module docstring); ``min_blocks``: blocks
    that must fit on an SM (``__launch_bounds__``; ptxas keeps registers below ``65536 / (min_blocks * 32 *
    warps)``, spilling if it must; 0 lets it choose); ``k_groups``: the block's K split over that many groups of
    ``warps`` warps (``warps * k_groups`` warps a block), group ``g`` taking k-steps ``g, g + k_groups, ...``
    of the block's, their partial sums added across the groups once, through shared memory, at the end (the
    TMA ring of weights, ``weight_stages``, whose stages then hold ``k_groups`` k-steps, as do the activations'
    stages with ``stage_activations``); ``fused_scales``: unsigned integer codes (1, 2 or 4 bits interleaved, 3, 5, 6
    or 7 bits by their bit placement, ``uint8``), bit-placed floats and 8-bit floats into bfloat16, without zero
    points, whose scales multiply the weights, take their group's scale into the paired fma or multiply that
    converts them (``cast(..., times=)``), in every thread whose scales allow it; None: on the ``warpgroup_mma``
    tiles of more than ``FUSED_SCALES_MIN_ROWS`` rows; ``biased_codes``: 1-, 2- and 4-bit integer codes in groups,
    on the mma.sync tiles that scale each group's product, convert with their place's magic number left in
    (``cast(..., biased=True)``: one ``lop3`` a pair, no fma), and each group's dot takes off the dot of those
    biases (``cast_bias``) with the same activations; with zero points, also each channel's zero point times the
    group's sums of the activations (a dot of ones), in place of a subtraction from every weight;
    ``zero_point_sums``: that zero-point term for codes converted exactly (any weight type with zero points, on those
    mma.sync tiles); ``dependent_launch`` (Hopper): launched with programmatic dependent launch
    (``attrs.dependent_launch``), so that a call may start while the kernel before it on the stream ends: it issues
    the first k-steps' weights, scales and zero points, and waits for the work before it only then, before it
    reads the activations or touches ``out`` and its workspaces; it lets the next call start once its k-loop is
    done where its weights come through the TMA ring (``weight_stages``), else as each of its blocks exits. The
    weights, scales and zero points must therefore not be written by the work queued just before the call.
    """

    def __init__(self, fmt: WeightFormat, dtype: Any = float16, zero_points: bool = False, warps: int = 4,
                 units_per_warp: int = 2, block_m: int = 8, stage_activations: bool = False, stages: int = 2,
                 scale_weights: bool = False, split_k: int = 1, prefetch: int = 1, split_reduce: str = "serial",
                 min_blocks: int = 0, warpgroup_mma: bool = False, weight_stages: int = 0,
                 tma_activations: Optional[bool] = None, weight_ring: int = 0, release_barriers: bool = False,
                 fixed_slots: bool = False, k_groups: int = 1, fused_scales: Optional[bool] = None,
                 biased_codes: bool = False, zero_point_sums: bool = False, dependent_launch: bool = False):
        super().__init__()
        if not isinstance(dependent_launch, bool):
            raise ScriptError(f"QuantizedMatmul: dependent_launch must be a bool, got {dependent_launch!r}")
        self.dependent_launch = dependent_launch
        dtype = as_dtype(dtype)
        if dtype not in (float16, bfloat16):
            raise ScriptError(f"QuantizedMatmul: dtype (the activations') must be float16 or bfloat16, got {dtype.name}")
        check_weight_dtype(fmt.dtype)
        if units_per_warp < 1 or units_per_warp % fmt.units:
            raise ScriptError(f"QuantizedMatmul: units_per_warp={units_per_warp} must be a positive multiple of "
                              f"{fmt.units} for {fmt.describe()} (a lane's codes of {fmt.units} unit(s) fill whole "
                              f"32-bit words)")
        if block_m < 8 or block_m % 8:
            raise ScriptError(f"QuantizedMatmul: block_m={block_m} must be a positive multiple of 8 (the mma's n)")
        accumulators = units_per_warp * 16 * block_m // 32  # float32 a thread: a warp's channels x rows, 32 lanes
        if accumulators > 255:
            # (on the H100, 4 warps of 2 units at 256 rows, 256 a thread, took 934 us at 256 x 4096 x 11008
            # against 55 us for 128 rows: every k-step through local memory)
            raise ScriptError(f"QuantizedMatmul: units_per_warp={units_per_warp} and block_m={block_m} give each "
                              f"thread {accumulators} float32 accumulators, more than the 255 registers a thread "
                              f"has: take fewer units a warp or rows a block")
        if not 1 <= warps <= 16:
            raise ScriptError(f"QuantizedMatmul: warps={warps} must be in [1, 16]")
        if stage_activations and stages < 2:
            raise ScriptError(f"QuantizedMatmul: stages={stages} must be at least 2")
        steps = fmt.steps
        if not 1 <= split_k <= steps:
            raise ScriptError(f"QuantizedMatmul: split_k={split_k} must be between 1 and the {steps} k-steps of "
                              f"{fmt.kt} inputs of {fmt.describe()}")
        if prefetch not in (1, 2, 3, 4):
            raise ScriptError(f"QuantizedMatmul: prefetch={prefetch} must be 1 to 4 (k-steps of weights in flight)")
        if split_reduce not in SPLIT_REDUCTIONS:
            raise ScriptError(f"QuantizedMatmul: split_reduce={split_reduce!r} must be one of "
                              f"{', '.join(map(repr, SPLIT_REDUCTIONS))}")
        self.fmt, self.dtype, self.zero_points = fmt, dtype, bool(zero_points)
        self.warps, self.units_per_warp, self.block_m = warps, units_per_warp, block_m
        self.stage_activations, self.stages, self.scale_weights = bool(stage_activations), stages, bool(scale_weights)
        if not 0 <= min_blocks <= 32:
            raise ScriptError(f"QuantizedMatmul: min_blocks={min_blocks} must be in [0, 32] (0: no bound)")
        self.split_k, self.prefetch, self.split_reduce, self.min_blocks = split_k, prefetch, split_reduce, min_blocks
        self.warpgroup_mma = bool(warpgroup_mma)
        self.weight_stages = _ring_depth("weight_stages", weight_stages, "a TMA ring in shared memory, sm_90")
        self.weight_ring = _ring_depth("weight_ring", weight_ring, "a ring of k-steps in shared memory that each "
                                                                   "thread fills for itself with cp.async")
        if weight_ring and weight_stages:
            raise ScriptError(f"QuantizedMatmul: weight_ring={weight_ring} and weight_stages={weight_stages} are two "
                              f"rings for the same weights: give one")
        if weight_ring and warpgroup_mma:
            raise ScriptError("QuantizedMatmul: weight_ring is for mma.sync decode; warpgroup_mma takes its weights "
                              "straight to registers or through weight_stages")
        if weight_ring and stage_activations and stages != weight_ring:
            raise ScriptError(f"QuantizedMatmul: with stage_activations, weight_ring={weight_ring} must equal "
                              f"stages={stages}: a k-step's weights and activations travel in one cp.async group")
        if not (tma_activations is None or isinstance(tma_activations, bool)) or \
                (tma_activations and not self.warpgroup_mma):
            raise ScriptError(f"QuantizedMatmul: tma_activations={tma_activations!r} must be None (with warpgroup_mma, "
                              f"when the activations are 16-byte aligned), True (warpgroup_mma only) or False")
        self.tma_activations = tma_activations
        if release_barriers and not self.weight_stages and (not self.warpgroup_mma or tma_activations is False):
            raise ScriptError("QuantizedMatmul: release_barriers is for stages that TMA fills: the weights' "
                              "(weight_stages) or the activations' (warpgroup_mma, tma_activations None or True)")
        self.release_barriers = bool(release_barriers)
        if not isinstance(fixed_slots, bool):
            raise ScriptError(f"QuantizedMatmul: fixed_slots={fixed_slots!r} must be True or False")
        self.fixed_slots = fixed_slots
        if isinstance(k_groups, bool) or not isinstance(k_groups, int) or k_groups not in (1, 2, 4) \
                or warps * k_groups > 16:
            raise ScriptError(f"QuantizedMatmul: k_groups={k_groups!r} must be 1, 2 or 4, with warps * k_groups "
                              f"(here {warps} warps a group) at most 16")
        if k_groups > 1:
            if not self.weight_stages or self.warpgroup_mma:
                raise ScriptError(f"QuantizedMatmul: k_groups={k_groups} needs the TMA ring of weights (weight_stages) "
                                  f"and mma.sync (no warpgroup_mma)")
            if fmt.k_tile % k_groups:
                raise ScriptError(f"QuantizedMatmul: k_groups={k_groups} takes a stage of {k_groups} k-steps from one "
                                  f"tile of the weight's storage, which holds {fmt.k_tile} ({fmt.describe()}): pack "
                                  f"it with a k_tile that k_groups divides, or take fewer groups")
            if not fmt.k_tile and (steps % split_k or steps // split_k % k_groups):  # (tiles: whole tiles a split)
                raise ScriptError(f"QuantizedMatmul: k_groups={k_groups} needs every split's k-steps to be a multiple "
                                  f"of k_groups: {steps} k-steps of {fmt.kt} inputs split in {split_k}")
        self.k_groups = k_groups
        self.fold = placed_fold(fmt, dtype, self.zero_points, self.warpgroup_mma or self.scale_weights)
        if fused_scales is not None and not isinstance(fused_scales, bool):
            raise ScriptError(f"QuantizedMatmul: fused_scales={fused_scales!r} must be None, True or False")
        # (times_fusable's interleaved integers are the formats stored interleaved, its placed codes the placed ones)
        fusable = (self.warpgroup_mma or self.scale_weights) and times_fusable(fmt.dtype, dtype, fmt.placement) and \
            not self.zero_points and fmt.groups_per_step == 1 and not fmt.per_channel
        if fused_scales and not fusable:
            raise ScriptError(f"QuantizedMatmul: fused_scales=True takes unsigned integer codes (1, 2 or 4 bits "
                              f"interleaved, 3, 5, 6 or 7 bits placed, uint8), bit-placed floats or 8-bit floats "
                              f"into bfloat16, "
                              f"without zero points, in groups of a k-step or more (not per channel), with the "
                              f"scales applied to the weights (warpgroup_mma or scale_weights); got "
                              f"{fmt.describe()}{' with zero points' if self.zero_points else ''} into {dtype.name}")
        # (uint8 on the tiles of one unit a warp -- three warpgroups of 64 channels -- measured slower fused: see
        # FUSED_SCALES_MIN_ROWS)
        self.fused_scales = fusable and (fused_scales if fused_scales is not None
                                         else self.warpgroup_mma and block_m > FUSED_SCALES_MIN_ROWS and
                                         not (fmt.dtype.name == "uint8" and units_per_warp < 2))
        # where the scales multiply the weights and a k-step is one group, the cast takes the scale (and zero point):
        # into its fma (fused_scales), or where none can, two slots an instruction after the conversion; a
        # fusable format with fused_scales False multiplies apart, element by element (the fused form's reference)
        self.scales_in_cast = (self.warpgroup_mma or self.scale_weights) and fmt.groups_per_step == 1 and \
            not fmt.per_channel and (self.fused_scales or not fusable)
        # (biased_codes and zero_point_sums change each group's dot: the mma.sync tiles that scale its product)
        group_dots = not (self.warpgroup_mma or self.scale_weights or fmt.per_channel)
        tiles = (f"on the mma.sync tiles whose scales multiply each group's product (not warpgroup_mma or "
                 f"scale_weights); got {fmt.describe()}{'' if self.zero_points else ' without zero points'}"
                 f"{' and warpgroup_mma' if self.warpgroup_mma else ''}"
                 f"{' and scale_weights' if self.scale_weights else ''}")
        for name, value in (("biased_codes", biased_codes), ("zero_point_sums", zero_point_sums)):
            if not isinstance(value, bool):
                raise ScriptError(f"QuantizedMatmul: {name}={value!r} must be True or False")
        if biased_codes and not (fmt.interleaved and group_dots):
            raise ScriptError(f"QuantizedMatmul: biased_codes=True takes 1-, 2- or 4-bit integer codes (stored "
                              f"interleaved) in groups, {tiles}")
        self.biased_codes = biased_codes
        if zero_point_sums and not (self.zero_points and group_dots):
            raise ScriptError(f"QuantizedMatmul: zero_point_sums=True takes weights with zero points in groups, "
                              f"{tiles}")
        # each channel's zero point comes off as its product with the group's activation sums (biased codes with
        # zero points always; exactly converted codes with zero_point_sums)
        self.zero_point_sums = self.zero_points and (biased_codes or zero_point_sums)
        if self.warpgroup_mma:
            if warps % 4 or not stage_activations or not (scale_weights or fmt.per_channel):
                raise ScriptError(f"QuantizedMatmul: warpgroup_mma needs whole warpgroups (warps={warps}), staged activations "
                                  f"(stage_activations=True) and scales applied to the weights (scale_weights=True) "
                                  f"or per-channel scales")
            if block_m > 256 or fmt.kt % 16:
                raise ScriptError(f"QuantizedMatmul: warpgroup_mma takes block_m up to 256 (got {block_m}) and k-steps of a "
                                  f"multiple of 16 inputs (got {fmt.kt})")

    def __call__(self, m_size: int32, a_ptr: ~void, w_ptr: ~int32, s_ptr: ~void, z_ptr: ~void, out_ptr: ~void,
                 ws_ptr: ~float32):
        fmt, dtype, warps, splits, kg = self.fmt, self.dtype, self.warps, self.split_k, self.k_groups
        bm, kt = self.block_m, fmt.kt
        bn = warps * self.units_per_warp * 16
        self.attrs.blocks = [self.utils.ceil_div(m_size, bm), self.utils.ceil_div(fmt.n, bn), splits]
        self.attrs.warps = warps * kg
        self.attrs.dependent_launch = self.dependent_launch  # (what goes before the wait reads only the weights)
        if self.min_blocks:
            self.attrs.min_blocks_per_sm = self.min_blocks
        m0: int32 = self.blockIdx.x * bm
        n0: int32 = self.blockIdx.y * bn
        granule0: int32 = self.blockIdx.y * (bn // (16 * fmt.units))
        first: int32 = self.split_step(0)  # this block's split: k-steps [first, end) (strided: k_step)
        end: int32 = self.split_step(1)
        # the k-loop's steps: with k_groups, steps of kg k-steps, one a group of warps (tiles [kg, ...])
        steps = self.split_steps(first, end) // kg
        lead = [kg] if kg > 1 else []
        words, a_layout, x_layout, b_layout, c_layout = kernel_layouts(fmt, warps, self.units_per_warp, bm, dtype, kg)
        # the words' codes in pack_weight's order: interleaved formats hold a word's A-fragment pairs at the
        # same places of its two 16-bit halves, and the cast into a_layout takes a pair by one mask
        codes_layout = interleave_local(a_layout, 32 // fmt.dtype.nbits) if fmt.interleaved else a_layout
        # views that end with the split: the loads ahead of its last step are masked, not wasted
        shape = list(fmt.storage_shape)
        # the view ends with the split, but steps through the whole weight: the storage's strides
        if fmt.k_tile:  # granule first, [granules, tiles, T, ...] (step s: tile s // T, place s % T)
            tile = fmt.k_tile
            gw = self.global_view(w_ptr, dtype=int32, shape=[shape[1], (end + tile - 1) // tile] + shape[2:],
                                  strides=fmt.view_strides)
        else:
            gw = self.global_view(w_ptr, dtype=int32, shape=[shape[0], end] + shape[2:], strides=fmt.storage_strides)
        ga = self.global_view(a_ptr, dtype=dtype, shape=[m_size, end * kt], strides=[fmt.k, 1])
        gs = self.global_view(s_ptr, dtype=dtype, shape=[fmt.n, fmt.groups], strides=[1, fmt.n])  # s^T
        gz = self.global_view(z_ptr, dtype=dtype, shape=[fmt.n, fmt.groups], strides=[1, fmt.n])
        per_step = fmt.groups_per_step
        if kg > 1:  # the loop's loads of kg k-steps: views [k-step, ...] (a, s^T and z^T by k-step)
            if not self.stage_activations:  # (staged, each group's tile is copied from [M, K] on its own)
                ga = self.global_view(a_ptr, dtype=dtype, shape=[end, m_size, kt], strides=[kt, fmt.k, 1])
            # (per channel, every k-step has the one row of scales and zero points: a step stride of 0)
            by_step = 0 if fmt.per_channel else per_step * fmt.n
            gs_steps = self.global_view(s_ptr, dtype=dtype, shape=[fmt.steps, fmt.n, per_step],
                                        strides=[by_step, 1, fmt.n])
            gz_steps = self.global_view(z_ptr, dtype=dtype, shape=[fmt.steps, fmt.n, per_step],
                                        strides=[by_step, 1, fmt.n])
        else:
            gs_steps, gz_steps = gs, gz
        acc = self.register_tensor(dtype=float32, shape=lead + [bn, bm], layout=c_layout, init=0.0)
        # biased_codes: the weights convert with the magic number of each code's place left in (one lop3 a pair,
        # no fma), and each group's dot takes off the dot of those constants with the same activations
        bias = self.cast_bias(fmt.dtype, dtype, a_layout) if self.biased_codes else None
        # and with zero points, each channel's zero point times the group's sums of the activations, a dot of ones:
        # sum((b + c - b - z) * a) = (b + c) @ a - b @ a - z * (1 @ a) (zero_point_sums: sum((c - z) * a) =
        # c @ a - z * (1 @ a), for codes converted exactly)
        ones = self.register_tensor(dtype=dtype, shape=list(a_layout.shape), layout=a_layout, init=1.0) \
            if self.zero_point_sums else None
        sx = None
        # wgmma reads the activations from shared memory in K-major rows of at most 128 bytes: a step's tile
        # is stored as kt / chunk tiles of chunk columns
        chunk = min(kt, 64) if self.warpgroup_mma else kt
        tma_x = self.tma_activations
        if tma_x is None:  # TMA loads the activations for wgmma when they are 16-byte aligned
            tma_x = self.warpgroup_mma and self.aligned(a_ptr)
        release = tma_x and self.release_barriers  # (with cp.async activations: the block barrier a step)
        ring = self.weight_ring
        if self.stage_activations:
            # (with k_groups, a stage holds the kg k-steps' tiles, one a group of warps)
            sx = self.shared_tensor(dtype=dtype, shape=[self.stages, kg if kg > 1 else kt // chunk, bm, chunk])
        if ring:  # each thread's own words of a k-step, in the order of `words`: its loads read them back
            sring = self.shared_tensor(dtype=int32, shape=[ring] + list(words.shape))
            if self.dependent_launch:  # (the ring's groups of copies hold the words and activation tiles alike)
                self.grid_dependency_wait()
            for j in range(ring - 1):  # (with staged activations, one group a step holds both)
                offsets, dims = self.word_offsets(granule0, self.k_step(first, j))
                self.copy_async(src=gw, dst=sring[j], offsets=offsets, dims=dims, layout=words)
                if self.stage_activations:
                    self.stage_activation_tile(ga, sx, j, m0, self.k_step(first, j), chunk)
                self.copy_async_commit_group()
        elif self.stage_activations:
            if tma_x:  # the whole activation (the tensor map is encoded before the launch), one barrier a stage
                ga_tma = self.global_view(a_ptr, dtype=dtype, shape=[m_size, fmt.k])
                xbars = self.shared_tensor(dtype=uint64, shape=[self.stages])
                self.mbarrier_init(xbars, arrivals=kt // chunk)
                if release:  # every thread releases a stage it has read
                    xfree = self.shared_tensor(dtype=uint64, shape=[self.stages])
                    self.mbarrier_init(xfree, arrivals=warps)
        # the weights of the next `prefetch` steps are in flight while a step computes: in registers, or with
        # weight_stages, in a ring of shared memory that TMA fills (one barrier a stage)
        wst = self.weight_stages
        if wst:
            granules, chunks, vector = words.shape[0], words.shape[-3], words.shape[-1]
            # the storage with each chunk's lanes and words as one row: TMA's innermost box of 16-byte multiples
            gw_tma = self.global_view(w_ptr, dtype=int32, shape=shape[:-2] + [32 * vector])
            # row-major, unswizzled: a warp reads each row of a stage whole, so no swizzle is needed against bank
            # conflicts, and TMA's unswizzled stages start on 128-byte boundaries where its 128-byte swizzle's need
            # 1024 (the k-steps of int5b at group 32, u3 and u7 at group 64 are not multiples of 1024 bytes)
            stage = [granules] + lead + [chunks, 32 * vector]  # (kg k-steps of a granule in a row, as stored)
            box_dims = [0, 1, 2, 3] if kg > 1 else [0, 2, 3]  # (the storage's dimensions a stage keeps)
            if fmt.k_tile:  # [tiles, granules, T, chunks, 32 x words]: a stage's kg k-steps lie in one tile
                box_dims = [1, 2, 3, 4] if kg > 1 else [1, 3, 4]
            sw = self.shared_tensor(dtype=int32, shape=[wst] + stage, layout=shared_row_major(wst, *stage))
            wbars = self.shared_tensor(dtype=uint64, shape=[wst])
            self.mbarrier_init(wbars, arrivals=1)
            if self.release_barriers:  # every warp releases a weight stage it has read
                wfree = self.shared_tensor(dtype=uint64, shape=[wst])
                self.mbarrier_init(wfree, arrivals=warps * kg)
            for j in range(wst - 1):
                if j < steps:
                    self.tma_load(src=gw_tma, dst=sw[j], dims=box_dims, barrier=wbars[j],
                                  offsets=self.stage_offsets(granule0, self.k_step(first, j * kg)))
        # Register queues (queue_depths). With fixed_slots, slot `i % depth` of a queue holds step i's registers
        # and is refilled with step i + depth's as soon as step i has used it; the k-loop is unrolled by `unroll`
        # (a multiple of every depth), so that a slot is a fixed set of registers and a load is waited for only
        # where its step uses it. Else the next step's registers are loaded at the start of a step and the queue
        # moves up by copies at its end, and each copy waits for its load: Nsight Compute put 44% of the stall
        # samples of u4 at 1x8192x28672 (the ring row) on the copy of the next step's scales. But the unrolled
        # loop takes more registers (that row: 52 -> 76, fewer blocks an SM, 49.8 -> 57.2 us), so the table
        # turns fixed slots on only where they measured faster (see CONFIGS).
        grouped, fixed = not fmt.per_channel, self.fixed_slots
        # their scales (and zero points) [block_n, per_step]: a thread holds all the groups of its channels, so that a
        # group's column broadcasts over the weights (or the dot) with no exchange between threads
        group_layout = compose(reduce(c_layout, [len(lead) + 1], keepdims=True), local(*[1] * len(lead), 1, per_step)) \
            if per_step > 1 else None
        wq, xq, sq, zq, unroll = self.queue_depths()
        wslots, xslots, sslots, zslots = [], [], [], []
        for j in list(range(wq)):
            wslots.append(self.load_step_words(gw, granule0, self.k_step(first, j), words))
        for j in list(range(sq)):
            sslots.append(self.load_step_groups(gs_steps, n0, self.k_step(first, j * kg), bn, group_layout))
        for j in list(range(zq)):
            zslots.append(self.load_step_groups(gz_steps, n0, self.k_step(first, j * kg), bn, group_layout))
        # the weights, scales and zero points of the first steps are in flight; the activations come after them
        # (with a dependent launch, once the work before this call, which may write them, has ended)
        if self.dependent_launch and not ring:
            self.grid_dependency_wait()
        if self.stage_activations and not ring:
            for s in range(self.stages - 1):
                if tma_x:
                    if s < steps:
                        self.stage_activation_tile(ga_tma, sx, s, m0, self.k_step(first, s), chunk, xbars[s])
                else:
                    self.stage_activation_tile(ga, sx, s, m0, self.k_step(first, s * kg), chunk)
                    self.copy_async_commit_group()
        for j in list(range(xq)):
            xslots.append(self.load_step_activations(ga, m0, self.k_step(first, j * kg), x_layout))
        for round_ in range((steps + unroll - 1) // unroll):
            for u in list(range(unroll)):
                i = round_ * unroll + u
                if i < steps:  # (always, where unroll divides steps: the condition folds away)
                    local = i * kg  # (the split's k-step `local`: `step`; d steps ahead: k_step(first, local, d))
                    step = self.k_step(first, local)
                    if wst:
                        self.mbarrier_wait(wbars[i % wst], i // wst % 2)  # step i's weights have landed
                        if not self.release_barriers:
                            self.sync()  # every warp has read step i - 1's stage: it takes step i + wst - 1
                        if i + wst - 1 < steps:
                            # with release_barriers, only the thread that issues the copy waits, for every warp's
                            # release of the stage it read at step i - 1 (that barrier's (i - 1) // wst-th phase;
                            # parity 1 passes at once on a fresh barrier, at step 0)
                            after = (wfree[(i + wst - 1) % wst], ((i + wst - 1) // wst + 1) % 2) \
                                if self.release_barriers else None
                            self.tma_load(src=gw_tma, dst=sw[(i + wst - 1) % wst],
                                          offsets=self.stage_offsets(granule0,
                                                                     self.k_step(first, local, (wst - 1) * kg)),
                                          dims=box_dims,
                                          barrier=wbars[(i + wst - 1) % wst], after=after)
                        w_now = self.load_shared(self.reshape_shared(sw[i % wst], list(words.shape)), layout=words)
                        if self.release_barriers:
                            self.mbarrier_arrive(wfree[i % wst], per_warp=True)  # the warp has its words
                    elif ring:  # step i + ring - 1's words into the slot this thread read a step ago
                        offsets, dims = self.word_offsets(granule0, self.k_step(first, local, ring - 1))
                        self.copy_async(src=gw, dst=sring[(i + ring - 1) % ring], offsets=offsets, dims=dims,
                                        layout=words)
                        if not self.stage_activations:  # (else they join the activations' group below)
                            self.copy_async_commit_group()
                            self.copy_async_wait_group(ring - 1)  # this thread's copies of step i have landed
                            w_now = self.load_shared(sring[i % ring], layout=words)
                    else:
                        if not fixed:  # (else the slot is refilled once its codes are converted)
                            w_new = self.load_step_words(gw, granule0, self.k_step(first, local, wq), words)
                        w_now = wslots[u % wq]
                    if self.stage_activations and tma_x:
                        # step i's activations have landed; step i - 1's stage is free: the sync that ends a step,
                        # or with release_barriers, the thread that issues the copy waits for that stage's release
                        # (its (i - 1) // stages-th phase; parity 1 passes at once on a fresh barrier, for the first
                        # steps)
                        stage_ahead = i + self.stages - 1
                        if stage_ahead < steps:
                            slot = stage_ahead % self.stages
                            after = (xfree[slot], (stage_ahead // self.stages + 1) % 2) if release else None
                            self.stage_activation_tile(ga_tma, sx, slot, m0, self.k_step(first, stage_ahead), chunk,
                                                       xbars[slot], after)
                        self.mbarrier_wait(xbars[i % self.stages], i // self.stages % 2)
                    elif self.stage_activations:
                        stage_ahead = i + self.stages - 1
                        self.stage_activation_tile(ga, sx, stage_ahead % self.stages, m0,
                                                   self.k_step(first, stage_ahead * kg), chunk)
                        self.copy_async_commit_group()
                        self.copy_async_wait_group(self.stages - 1)
                        if self.warpgroup_mma:
                            self.fence_proxy_async()
                        self.sync()
                        if kg > 1:  # [kg, kt, block_m]: group g's k-step
                            x = self.load_shared(sx[i % self.stages].permute([0, 2, 1]), layout=b_layout)
                        elif not self.warpgroup_mma:
                            x = self.load_shared(sx[i % self.stages, 0].transpose(), layout=b_layout)
                        if ring:
                            w_now = self.load_shared(sring[i % ring], layout=words)
                    else:
                        if not fixed:
                            x_new = self.load_step_activations(ga, m0, self.k_step(first, local, kg), x_layout)
                        x = self.view(xslots[u % xq], layout=b_layout)
                    if grouped and not fixed:
                        next_step = self.k_step(first, local, kg)
                        s_new = self.load_step_groups(gs_steps, n0, next_step, bn, group_layout)
                        z_new = self.load_step_groups(gz_steps, n0, next_step, bn, group_layout) if self.zero_points \
                            else None
                    codes = self.view(w_now, dtype=fmt.dtype, layout=codes_layout)
                    scales = sslots[u % sq] if grouped else None
                    weighted = grouped and (self.warpgroup_mma or self.scale_weights)  # scales multiply weights
                    # the formats of times_fusable on the wgmma tiles from 65 rows take their group's
                    # scale into the conversion's paired fma (cast's times; without zero points, where the thread's
                    # scales allow: see FUSED_SCALES_MIN_ROWS), where a k-step is one group
                    times = scales if self.scales_in_cast else None
                    minus = zslots[u % zq] if self.zero_points and self.scales_in_cast else None
                    if self.biased_codes:
                        weights = self.cast(codes, dtype, layout=a_layout, biased=True)
                    else:
                        weights = self.cast(codes, dtype, layout=a_layout, placement=fmt.placement,
                                            scale=1.0 / self.fold, minus=minus, times=times)
                    if wq and fixed:  # the slot's codes are converted: it takes step i + prefetch's words
                        self.assign(wslots[u % wq], self.load_step_words(gw, granule0, self.k_step(first, local, wq),
                                                                         words))
                    if self.zero_points and minus is None and not self.zero_point_sums:
                        weights = self.by_group(weights, zslots[u % zq], "sub")
                    if weighted and times is None:
                        weights = self.by_group(weights, scales, "mul")
                    if self.warpgroup_mma:  # weights in registers (A), activations from shared memory (B)
                        self.wgmma_fence()
                        for h in list(range(kt // chunk)):
                            self.wgmma(weights[:, h * chunk:(h + 1) * chunk], sx[i % self.stages, h].transpose(), acc)
                        self.wgmma_commit_group()
                        # synchronous: keeping one group in flight (steps unrolled by two so that their weights sit
                        # in different registers, activation stages refilled two steps back) measured no faster on
                        # an H200 (u4, 64-512 rows) and gave wrong sums in the configurations where ptxas did not
                        # serialize the wgmma itself; the cause was not found
                        self.wgmma_wait_group(0)
                    elif fmt.per_channel:
                        acc = self.dot_split(weights, x, acc, warp_grid=[warps, 1])
                    elif self.scale_weights:
                        acc = self.dot_split(weights, x, acc, warp_grid=[warps, 1])
                    else:
                        # a dot a group, each scaled in float32
                        size = kt // per_step
                        for g in list(range(per_step)):
                            zero = self.register_tensor(dtype=float32, shape=lead + [bn, bm], layout=c_layout,
                                                        init=0.0)
                            if per_step == 1:
                                partial = self.dot_split(weights, x, zero, warp_grid=[warps, 1])
                                if bias is not None:
                                    partial = partial - self.dot_split(bias, x, zero, warp_grid=[warps, 1])
                                if ones is not None:
                                    partial = partial - zslots[u % zq].to(float32) * \
                                        self.dot_split(ones, x, zero, warp_grid=[warps, 1])
                                acc = acc + partial * self.folded(scales.to(float32))
                            else:
                                cut = (slice(None),) * len(lead)  # (every k-step of the groups of warps)
                                columns = cut + (slice(None), slice(g * size, (g + 1) * size))
                                rows = x[cut + (slice(g * size, (g + 1) * size), slice(None))]
                                partial = self.dot_split(weights[columns], rows, zero, warp_grid=[warps, 1])
                                if bias is not None:
                                    partial = partial - self.dot_split(bias[columns], rows, zero, warp_grid=[warps, 1])
                                if ones is not None:
                                    group_zeros = zslots[u % zq][cut + (slice(None), slice(g, g + 1))]
                                    partial = partial - group_zeros.to(float32) * \
                                        self.dot_split(ones[columns], rows, zero, warp_grid=[warps, 1])
                                acc = acc + partial * self.folded(scales[cut + (slice(None), slice(g, g + 1))]
                                                                  .to(float32))
                    if release:
                        self.mbarrier_arrive(xfree[i % self.stages], per_warp=True)  # the warp's wgmma read the stage
                    elif self.stage_activations:
                        self.sync()  # every warp has read this stage before a later step refills it
                    elif fixed:  # the slot's activations are used: it takes step i + 2's
                        refill = self.k_step(first, local, xq * kg)
                        self.assign(xslots[u % xq], self.load_step_activations(ga, m0, refill, x_layout))
                    if grouped and fixed:  # the slot's scales (and zero points) are used: it takes step i + 2's
                        refill = self.k_step(first, local, sq * kg)
                        self.assign(sslots[u % sq], self.load_step_groups(gs_steps, n0, refill, bn, group_layout))
                        if self.zero_points:
                            self.assign(zslots[u % zq], self.load_step_groups(gz_steps, n0, refill, bn, group_layout))
                    elif not fixed:  # the queues move up a step, by copies
                        moving = []
                        if xq:
                            moving.append((xslots, x_new))
                        if wq:
                            moving.append((wslots, w_new))
                        if grouped:
                            moving.append((sslots, s_new))
                            if self.zero_points:
                                moving.append((zslots, z_new))
                        for queue, new in moving:
                            for later in list(range(1, len(queue))):
                                self.assign(queue[later - 1], queue[later])
                            self.assign(queue[-1], new)
        if self.dependent_launch and wst:
            # the next call may start once every block of this one is past its k-loop, and fill its own TMA ring of
            # weights meanwhile; the other paths let it start only as each block exits (their next call's blocks,
            # placed early, measured slower: see docs/quantized_matmul.md, "Dependent launches")
            self.launch_dependents()
        if kg > 1:  # the groups' partial sums, added across the groups of warps (through shared memory)
            acc = self.sum(acc, dim=0)
            c_layout = reduce(c_layout, [0])
        if fmt.per_channel:
            acc = acc * self.folded(self.load_global(gs, offsets=[n0, 0], shape=[bn, 1]).to(float32))
        if self.stage_activations or ring:
            self.copy_async_wait_all()
        if splits == 1:
            go = self.global_view(out_ptr, dtype=dtype, shape=[fmt.n, m_size], strides=[1, fmt.n])  # out^T
            self.store_global(go, acc.to(dtype), offsets=[n0, m0])
        elif self.split_reduce == "serial":  # the splits of a tile add up here, in split order
            # every split stores its partial sums; the last to arrive adds them all, split 0 first, and writes the
            # tile (no split waits for another, where a chain of semaphores made each wait for the one before)
            partials = self.global_tensor(dtype=float32, shape=[splits, fmt.n, m_size], requires_clean=False)
            counters = self.global_tensor(dtype=int32, shape=[self.utils.ceil_div(fmt.n, bn),
                                                              self.utils.ceil_div(m_size, bm)], requires_clean=True)
            self.store_global(partials, acc, offsets=[self.blockIdx.z, n0, m0], dims=[1, 2])
            if self.arrive_last(counters[self.blockIdx.y, self.blockIdx.x].item_ptr(), splits):
                total = self.load_global(partials, offsets=[0, n0, m0], shape=[bn, bm], dims=[1, 2], layout=c_layout)
                for s in range(1, splits):  # a run-time loop: split_k may be large
                    total = total + self.load_global(partials, offsets=[s, n0, m0], shape=[bn, bm], dims=[1, 2],
                                                     layout=c_layout)
                go = self.global_view(out_ptr, dtype=dtype, shape=[fmt.n, m_size], strides=[1, fmt.n])
                self.store_global(go, total.to(dtype), offsets=[n0, m0])
        else:  # this split's partial sums; SplitKSum adds them up
            gws = self.global_view(ws_ptr, dtype=float32, shape=[splits, fmt.n, m_size],
                                   strides=[m_size * fmt.n, 1, fmt.n])
            self.store_global(gws, acc, offsets=[self.blockIdx.z, n0, m0], dims=[1, 2])

    def by_group(self, weights, values, op: str):
        """``weights - values`` or ``weights * values`` (``op``: "sub", "mul") for the weights of a k-step [block_n,
        kt] and the values of the groups it spans [block_n, kt // group] (each for its group's columns)."""
        per_step = self.fmt.groups_per_step
        if per_step == 1:
            return weights - values if op == "sub" else weights * values
        from tilus_tvm.ir.tensor_ops import slice_assign

        size = self.fmt.kt // per_step
        cut = (slice(None),) * (len(weights.shape) - 2)  # (with k_groups: every k-step of the groups of warps)
        for g in range(per_step):
            columns = cut + (slice(None), slice(g * size, (g + 1) * size))
            part, value = weights[columns], values[cut + (slice(None), slice(g, g + 1))]
            slice_assign(self._builder("by_group"), weights, columns, part - value if op == "sub" else part * value)
        return weights

    def load_step_groups(self, view, n0, step, block_n, layout):
        """The scales (or zero points) of the groups k-step ``step`` spans, for the block's ``block_n`` channels
        from ``n0``: [block_n, groups_per_step] of ``view`` (s^T or z^T), in registers laid out as ``layout``; with
        k_groups, of k-steps ``step`` to ``step + k_groups - 1``: [k_groups, block_n, groups_per_step] of ``view``
        [k-step, N, groups_per_step]."""
        per_step = self.fmt.groups_per_step
        if self.fmt.per_channel:  # one value a channel for all of K (the split's first step need not be 0)
            step = 0
        if self.k_groups > 1:
            return self.load_global(view, offsets=[step, n0, 0], shape=[self.k_groups, block_n, per_step],
                                    layout=layout)
        return self.load_global(view, offsets=[n0, step * per_step], shape=[block_n, per_step], layout=layout)

    def load_step_activations(self, ga, m0, step, layout):
        """The activations of k-step ``step`` (the block's rows from ``m0``) in registers laid out as ``layout``:
        [block_m, kt] of ``ga`` [M, K]; with k_groups, of k-steps ``step`` to ``step + k_groups - 1``: [k_groups,
        block_m, kt] of ``ga`` [k-step, M, kt]."""
        bm, kt = self.block_m, self.fmt.kt
        if self.k_groups > 1:
            return self.load_global(ga, offsets=[step, m0, 0], shape=[self.k_groups, bm, kt], layout=layout)
        return self.load_global(ga, offsets=[m0, step * kt], shape=[bm, kt], layout=layout)

    def load_step_words(self, gw, granule0, step, words):
        """This thread's packed weight words of k-step ``step`` (the block's granules from ``granule0``), in
        registers laid out as ``words`` (:func:`kernel_layouts`)."""
        offsets, dims = self.word_offsets(granule0, step)
        return self.load_global(gw, offsets=offsets, shape=list(words.shape), dims=dims, layout=words)

    def word_offsets(self, granule0, step):
        """(offsets, dims) of k-step ``step``'s words of the block's granules from ``granule0`` in the weight view
        (``[granules, steps, chunks, 32, V / 4]``, or with tiles of k-steps ``[granules, tiles, T, chunks, 32, V /
        4]``)."""
        tile = self.fmt.k_tile
        if tile:
            return [granule0, step // tile, step % tile, 0, 0, 0], [0, 3, 4, 5]
        return [granule0, step, 0, 0, 0], [0, 2, 3, 4]

    def stage_offsets(self, granule0, step):
        """The offsets of the TMA ring's stage from k-step ``step`` in the storage viewed with each chunk's lanes
        and words as one row (``[granules, steps, chunks, 32 x words]``, or ``[tiles, granules, T, chunks, 32 x
        words]``)."""
        tile = self.fmt.k_tile
        if tile:
            return [step // tile, granule0, step % tile, 0, 0]
        return [granule0, step, 0, 0]

    @property
    def strided_splits(self) -> bool:
        """Whether K's splits take tiles of k-steps in turn: on weights stored in tiles of k-steps, split z of
        ``split_k`` takes tiles z, z + split_k, z + 2 split_k, ..., so that the whole grid reads one front of
        split_k adjacent tiles. Splits that each took a contiguous run of tiles read split_k fronts far apart, and
        the wgmma batches that split K lost 12-23% on tiled weights that way (H100, u4, table tiles split in 3 or
        6: 128x11008x4096 30.9 -> 35.4 us, 256x11008x4096 46.6 -> 57.4, 128x28672x8192 109 -> 133; the same bytes
        from DRAM, at a lower throughput)."""
        return bool(self.fmt.k_tile) and self.split_k > 1

    def k_step(self, first, local, ahead: int = 0):
        """The k-step ``local + ahead`` steps into this block's split: ``first + local (+ ahead)``, or with
        :attr:`strided_splits`, place ``l % T`` of tile ``(l // T) * split_k + z`` for ``l = local + ahead``."""
        if not self.strided_splits:
            step = first + local
            return step + ahead if ahead else step
        tile, at = self.fmt.k_tile, local + ahead
        return ((at // tile) * self.split_k + self.blockIdx.z) * tile + at % tile

    def split_step(self, offset: int):
        """The first k-step of split ``blockIdx.z + offset``: ``z * S // split_k`` of the S k-steps (a split takes
        S / split_k of them, or where split_k does not divide S, the floor or the ceiling of that). With
        :attr:`strided_splits`, 0 and S: a split's tiles lie all over K (:meth:`k_step`)."""
        all_steps = self.fmt.steps
        if self.strided_splits:
            return offset * all_steps
        if all_steps % self.split_k == 0:
            return (self.blockIdx.z + offset) * (all_steps // self.split_k)
        return (self.blockIdx.z + offset) * all_steps // self.split_k

    def split_steps(self, first, end):
        """The k-steps of this block's split: a constant where split_k divides them, else ``end - first``; with
        :attr:`strided_splits`, T for each of its tiles (the last tile's padding too: its codes are 0, its
        activations and scales beyond K masked to 0), none for a split beyond the tiles (its partial sums are 0)."""
        all_steps = self.fmt.steps
        if self.strided_splits:
            tiles, splits = self.fmt.tiles, self.split_k
            if tiles % splits == 0:
                return tiles // splits * self.fmt.k_tile
            return (tiles - self.blockIdx.z + splits - 1) // splits * self.fmt.k_tile
        return all_steps // self.split_k if all_steps % self.split_k == 0 else end - first

    def queue_depths(self):
        """(weights, activations, scales, zero points, unroll): the slots of each register queue of the k-loop (0:
        none) and the loop's unrolling. Weights straight to registers keep `prefetch` steps of them. With
        ``fixed_slots``, activations straight to registers and group scales (and zero points) keep two steps
        (per-channel zero points one, loaded once), and the loop is unrolled by the least multiple of every
        depth; else they keep one, the next step's are loaded at the start of a step into registers of their own,
        and the queues move up by copies at its end (no unrolling)."""
        grouped = not self.fmt.per_channel
        wq = self.prefetch if not (self.weight_stages or self.weight_ring) else 0
        if not self.fixed_slots:
            return wq, 0 if self.stage_activations else 1, 1 if grouped else 0, 1 if self.zero_points else 0, 1
        xq = 0 if self.stage_activations else 2
        sq = 2 if grouped else 0
        zq = (2 if grouped else 1) if self.zero_points else 0
        return wq, xq, sq, zq, math.lcm(*(q for q in (wq, xq, sq, zq, 1) if q))

    def folded(self, scales):
        """Float32 ``scales`` times the power of two the weights were left without (:func:`placed_fold`), if any."""
        return scales if self.fold == 1.0 else scales * self.fold

    def stage_activation_tile(self, ga, sx, stage, m0, step, chunk, barrier=None, after=None):
        """The activations of k-step ``step`` (rows from ``m0``) into ``sx[stage]``, ``chunk`` columns a tile:
        by TMA signalling ``barrier`` (once ``after``, a barrier and phase, if given), or (None) by ``cp.async``."""
        kt = self.fmt.kt
        if self.k_groups > 1:  # k-steps step .. step + k_groups - 1, one a tile (chunk is kt)
            for g in list(range(self.k_groups)):
                self.copy_async(src=ga, dst=sx[stage, g], offsets=[m0, (step + g) * kt])
            return
        for h in list(range(kt // chunk)):
            offsets = [m0, step * kt + h * chunk]
            if barrier is None:
                self.copy_async(src=ga, dst=sx[stage, h], offsets=offsets)
            else:
                self.tma_load(src=ga, dst=sx[stage, h], offsets=offsets, barrier=barrier,
                              after=after if h == 0 else None)


def _ring_depth(name: str, depth: Any, ring: str) -> int:
    """``depth``, checked to be 0 (weights straight to registers) or the 2 to 16 k-steps of ``ring``."""
    if isinstance(depth, bool) or not isinstance(depth, int) or not (depth == 0 or 2 <= depth <= 16):
        raise ScriptError(f"QuantizedMatmul: {name}={depth!r} must be 0 (weights straight to registers) or 2 to 16 "
                          f"({ring})")
    return depth


class SplitKSum(tilus.Script):
    """``out[i] = sum_s workspace[s, i]`` (float32 partial sums of ``splits`` splits, cast to ``dtype``)."""

    def __init__(self, splits: int, dtype: Any = float16, block: int = 1024):
        super().__init__()
        self.splits, self.dtype, self.block = splits, as_dtype(dtype), block

    def __call__(self, count: int32, ws_ptr: ~float32, out_ptr: ~void):
        self.attrs.blocks = self.utils.ceil_div(count, self.block)
        self.attrs.warps = 4
        offset: int32 = self.blockIdx.x * self.block
        gws = self.global_view(ws_ptr, dtype=float32, shape=[self.splits, count])
        go = self.global_view(out_ptr, dtype=self.dtype, shape=[count])
        total = self.load_global(gws, offsets=[0, offset], shape=[self.block], dims=[1])
        for s in list(range(1, self.splits)):
            total = total + self.load_global(gws, offsets=[s, offset], shape=[self.block], dims=[1])
        self.store_global(go, total.to(self.dtype), offsets=[offset])


# ---- the torch-like function -----------------------------------------------------------------------------------
_KERNELS: dict = {}


def _partial_sums(splits: int, m: int, n: int, device: Any):
    """The float32 workspace of ``splits`` splits' partial sums [splits, m, n] for SplitKSum (one element where K is
    not split: the kernel's argument is still a tensor)."""
    import torch

    return torch.empty((splits, m, n) if splits > 1 else (1,), dtype=torch.float32, device=device)


def tuned_config(config: Config, half: Any, m: int, rows: Any, weight: QuantizedWeight, scales: Any,
                 zero_points: bool, out: Any) -> Config:
    """``config`` (the hand table's for the call) with the block's tile and batch rows that tuning chose for it:
    QuantizedMatmul's space tuned with the table's ``TABLE_PATH`` and split fixed (at the first call of a key: the
    weight format, the activations' type, zero points, the path, the split, M rounded up to a power of two, the
    GPU; later calls and processes read the choice). The candidates write their split's partial sums for
    SplitKSum (MetaSchedule's destination-passing form cannot hold the serial reduction's counters); the
    returned configuration keeps the table's reduction. ``half``: the activations' type (float16 or bfloat16)."""
    from tilus_tvm.tune import tunable_of

    fmt = weight.format
    kernel = tuned_kernel(QuantizedMatmul, fmt=fmt, dtype=half, zero_points=zero_points, split_k=config.split_k,
                          split_reduce="kernel", **{name: getattr(config, name) for name in TABLE_PATH})
    tunable = tunable_of(kernel)
    workspace = _partial_sums(config.split_k, m, fmt.n, rows.device)
    chosen = tunable.kernel_for((m, rows, weight.storage, scales, scales, out, workspace)).hyper_parameters()
    return replace(config, **{name: chosen[name] for name in tunable.space.names})


def kernel_for(fmt: WeightFormat, dtype: Any, zero_points: bool, config: Config,
               dependent_launch: bool = False) -> QuantizedMatmul:
    key = (fmt, as_dtype(dtype).name, bool(zero_points), config, dependent_launch)
    if key not in _KERNELS:
        _KERNELS[key] = QuantizedMatmul(fmt, dtype, zero_points, **asdict(config), dependent_launch=dependent_launch)
    return _KERNELS[key]


def _split_sum(splits: int, dtype: Any) -> SplitKSum:
    key = ("sum", splits, as_dtype(dtype).name)
    if key not in _KERNELS:
        _KERNELS[key] = SplitKSum(splits, dtype)
    return _KERNELS[key]


@functools.lru_cache(maxsize=None)
def _multiprocessors(device_index: int) -> int:
    import torch

    return torch.cuda.get_device_properties(device_index).multi_processor_count


def check_call(a: Any, packed_weight: QuantizedWeight, scales: Any, zeros: Any = None, out: Any = None, *,
               dtype: Any = None, group_size: Optional[int] = None, config: Optional[Config] = None,
               tune: Optional[bool] = None, dependent_launch: bool = False,
               ask_device: bool = True) -> tuple[WeightFormat, tuple[int, ...], bool]:
    """Every check of :func:`quantized_matmul`'s arguments, made before anything is allocated or launched: the
    weight's format, the output's shape and whether the call tunes. ``ask_device=False`` leaves out the one check
    that asks the GPU (dependent launches need Hopper), for tracing on a machine without one."""
    import torch

    fmt = check_weight(packed_weight, scales, zeros, dtype, group_size)
    if not isinstance(a, torch.Tensor) or a.dim() < 1 or a.shape[-1] != fmt.k:
        raise LaunchError(f"quantized_matmul: a must be a tensor [..., K={fmt.k}] for the weight ({fmt.describe()}), "
                          f"got {type(a).__name__}{list(a.shape) if isinstance(a, torch.Tensor) else ''}")
    if a.dtype not in (torch.float16, torch.bfloat16):
        raise LaunchError(f"quantized_matmul: a must be float16 or bfloat16, got {a.dtype}")
    for name, tensor in (("scales", scales), ("zeros", zeros)):
        if tensor is not None and tensor.dtype != a.dtype:
            raise LaunchError(f"quantized_matmul: {name} must have a's dtype {a.dtype}, got {tensor.dtype}")
    shape = (*a.shape[:-1], fmt.n)
    if out is not None and (not isinstance(out, torch.Tensor) or tuple(out.shape) != shape or out.dtype != a.dtype
                            or not out.is_contiguous()):
        raise LaunchError(f"quantized_matmul: out must be a contiguous {a.dtype} tensor of shape {list(shape)}, "
                          f"got " + (f"{out.dtype} {list(out.shape)}" if isinstance(out, torch.Tensor)
                                     else type(out).__name__))
    devices = {t.device for t in (a, packed_weight.storage, scales, zeros, out) if t is not None}
    if len(devices) != 1:
        raise LaunchError(f"quantized_matmul: a, the weight, scales, zeros and out must be on one device, got "
                          f"{sorted(str(d) for d in devices)}")
    check_config(config)
    if not isinstance(dependent_launch, bool):
        raise LaunchError(f"quantized_matmul: dependent_launch must be a bool, got {dependent_launch!r}")
    if dependent_launch:
        if ask_device and not (a.is_cuda and torch.cuda.get_device_capability(a.device)[0] >= 9):
            raise LaunchError(f"quantized_matmul: dependent_launch=True needs a Hopper GPU (sm_90) or newer, got "
                              f"{torch.cuda.get_device_name(a.device) if a.is_cuda else a.device}")
        for name, tensor in (("scales", scales), ("zeros", zeros)):
            if tensor is not None and not tensor.is_contiguous():
                raise LaunchError(f"quantized_matmul: with dependent_launch=True, {name} must be contiguous (the "
                                  f"kernel reads it before the work queued before the call has ended, and a copy "
                                  f"made here would be that work); got strides {tensor.stride()}")
    tuned = use_tuned(tune, "quantized_matmul")
    if tuned and config is not None:
        raise LaunchError("quantized_matmul: give config or tune=True, not both (config fixes what tuning chooses)")
    return fmt, shape, tuned


def check_config(config: Any) -> None:
    if config is not None and not isinstance(config, Config):
        raise LaunchError(f"quantized_matmul: config must be a tilus_tvm.schedules.quantized_matmul.Config, got "
                          f"{config!r}")


def compiling() -> bool:
    """Whether ``torch.compile`` is tracing the caller (False where torch is too old to say)."""
    import torch

    compiler = getattr(torch, "compiler", None)
    return bool(compiler is not None and hasattr(compiler, "is_compiling") and compiler.is_compiling())


def quantized_matmul(a: Any, packed_weight: QuantizedWeight, scales: Any, zeros: Any = None, out: Any = None, *,
                     dtype: Any = None, group_size: Optional[int] = None, config: Optional[Config] = None,
                     tune: Optional[bool] = None, dependent_launch: bool = False) -> Any:
    """``a @ w`` for a CUDA float16/bfloat16 ``a`` [..., K] and a weight packed by :func:`pack_weight`.

    ``w[k, n] = (value(q[k, n]) - zeros[k // g, n]) * scales[k // g, n]``; ``scales`` (and ``zeros``)
    are [K / g, N] tensors of a's dtype. ``dtype`` / ``group_size``, when given, are checked against
    what the weight was packed for. Small floats (fp4, fp6, ...) convert in fewest instructions when
    packed for a's dtype (``pack_weight(..., activations=)``); either packing gives the same result.
    ``out`` ([..., N], a's dtype, contiguous) receives the result.
    ``config`` (a :class:`Config`) overrides the kernel configuration :func:`choose_config` picks.
    ``tune=True`` (``None``: ``tilus_tvm.tune.configure(library=...)``) takes the block's tile and batch rows
    from the tuning database instead (:func:`tuned_config`: the first call of a key tunes
    ``QuantizedMatmul``'s space), the weights' path and K's split still from the table.
    ``dependent_launch=True`` (Hopper) launches the kernel with programmatic dependent launch: in a run of
    calls (a model's layers, captured in a CUDA graph), each call starts while the one before it ends and
    streams its first weights meanwhile, waiting for it only before it reads ``a``. The weight, ``scales``
    and ``zeros`` must then not be written by the work queued just before the call (a model's weights are
    not), and ``scales`` / ``zeros`` must be contiguous (a copy made here would be such work).
    Every argument is checked before anything is launched.

    >>> qw, s, _ = quantize_weight(w, "uint4b", group_size=128)      # doctest: +SKIP
    >>> y = quantized_matmul(x, qw.to("cuda"), s.cuda())              # doctest: +SKIP
    """
    import torch

    if compiling():  # torch.compile is tracing the call: it goes through the custom operators of quantized_op
        from tilus_tvm.schedules.quantized_op import traced_call

        return traced_call(a, packed_weight, scales, zeros, out, dtype=dtype, group_size=group_size, config=config,
                           tune=tune, dependent_launch=dependent_launch)
    fmt, shape, tuned = check_call(a, packed_weight, scales, zeros, out, dtype=dtype, group_size=group_size,
                                   config=config, tune=tune, dependent_launch=dependent_launch)
    rows = a.reshape(-1, fmt.k)
    if not rows.is_contiguous():
        rows = rows.contiguous()
    m = rows.shape[0]
    if out is None:
        out = torch.empty(shape, dtype=a.dtype, device=a.device)
    half = bfloat16 if a.dtype == torch.bfloat16 else float16  # (the activations' type, checked above)
    scales = scales.contiguous()  # (as the kernel reads them, for tuning and the launch)
    if config is None:
        sms = _multiprocessors(a.device.index if a.device.index is not None else 0) if a.is_cuda else 132
        config = choose_config(m, fmt, sms, wgmma=a.is_cuda and torch.cuda.get_device_capability(a.device) == (9, 0),
                               zero_points=zeros is not None, dtype=half.name)
    if tuned and m:
        config = tuned_config(config, half, m, rows, packed_weight, scales, zeros is not None, out)
    kernel = kernel_for(fmt, a.dtype, zeros is not None, config, dependent_launch)  # checks the configuration
    if not m:
        return out
    splits = config.split_k if config.split_reduce == "kernel" else 1  # partial sums that SplitKSum adds up
    workspace = _partial_sums(splits, m, fmt.n, a.device)
    kernel(m, rows, packed_weight.storage, scales, (zeros if zeros is not None else scales).contiguous(), out,
           workspace)
    if splits > 1:  # in the shapes SplitKSum's entry check expects: a refused argument costs a slow relaunch
        _split_sum(splits, a.dtype)(m * fmt.n, workspace.view(splits, m * fmt.n), out.view(-1))
    return out
