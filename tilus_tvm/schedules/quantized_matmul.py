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
with a ring of 4 k-steps, and so does the 9-16-row ring row for 4-bit weights (16 rows u4 50.0-50.5 -> 49.3-50.1;
see ``IN_BLOCK_SPLIT``).

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
so split_k need not divide them). By default (``split_reduce="serial"``) the kernel adds their
float32 partial sums itself, in split order: every split stores its partial sums in a workspace of the
kernel's own and arrives at its tile's counter (``arrive_last``: a fence and an atomic add), and the last
split to arrive adds all of them, split 0 first, and writes the tile. No split waits for another (a chain
of semaphores, ``MatmulSplitK``'s way, made each wait for the one before: on the H100, u4 at 1x4096x11008
took 20.5-20.9 us that way and takes 16.3-16.4, at 1x28672x8192 with 8 splits 62.3-62.5 against 50.2).
With ``split_reduce="kernel"`` each split writes them to a workspace the caller passes and
:class:`SplitKSum`, a second kernel, adds them up. For decode tiles (8-16 rows) the serial sum is as fast and saves
the second launch (5-10 us of host time outside a CUDA graph); the ``wgmma`` rows' tiles of 64-128 rows take
SplitKSum, which spreads the sum over the GPU where the serial sum left one block a tile reading every split's
partial sums (their table: ``choose_config``).

``QuantizedMatmul`` carries an ``opt_in`` ``@autotune`` space of 56 configurations (the block's
channels as warps x units, and its batch rows with the matching load path), which holds every
configuration of the hand table. ``quantized_matmul(..., tune=True)`` launches the tuned one; K's
split is not tuned: it is the hand table's for the batch (:func:`choose_config`), fixed for the
tuning, so every candidate is timed with the same split. Tuned kernels add the splits up with
:class:`SplitKSum`: MetaSchedule times kernels in destination-passing form, which cannot hold the
counters of the serial reduction.
"""
from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass, replace
from typing import Any, Optional

import tilus_tvm as tilus
from tilus_tvm import bfloat16, float16, float32, int32, uint64, void
from tilus_tvm.dtypes import as_dtype
from tilus_tvm.errors import LaunchError, ScriptError
from tilus_tvm.instructions.cast import times_fusable
from tilus_tvm.layout.register import compose, local
from tilus_tvm.layout.register_ops import interleave_local, reduce
from tilus_tvm.layout.shared import shared_row_major
from tilus_tvm.schedules.quantized_weight import (QuantizedWeight, WeightFormat, check_weight, check_weight_dtype,
                                                  dequantize, pack_weight, quantize_weight)
from tilus_tvm.tune.library import tuned_kernel, use_tuned

__all__ = ["QuantizedMatmul", "SplitKSum", "Config", "quantized_matmul", "pack_weight", "quantize_weight", "dequantize",
           "QuantizedWeight", "kernel_layouts", "choose_config"]


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
TUNED_CHANNELS = [(2, 2), (4, 2), (8, 2), (2, 4), (4, 4), (8, 4), (4, 1)]
# (block_m, prefetch, stage_activations, stages, scale_weights, weight_ring): batch rows with the load path
# that suits them -- registers with two k-steps of weights in flight, or the per-thread ring, for decode
# batches, cp.async-staged activations and scaled weights for larger ones (the hand table's rows, and 32
# rows unstaged)
TUNED_ROWS = [(8, 2, False, 2, False, 0), (8, 2, False, 2, False, 4), (8, 2, True, 3, False, 0),
              (16, 2, True, 3, False, 0), (16, 1, True, 3, False, 0), (32, 2, False, 2, False, 0),
              (32, 1, True, 3, True, 0), (64, 1, True, 3, True, 0)]


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
    tiles of more than ``FUSED_SCALES_MIN_ROWS`` rows.
    """

    def __init__(self, fmt: WeightFormat, dtype: Any = float16, zero_points: bool = False, warps: int = 4,
                 units_per_warp: int = 2, block_m: int = 8, stage_activations: bool = False, stages: int = 2,
                 scale_weights: bool = False, split_k: int = 1, prefetch: int = 1, split_reduce: str = "serial",
                 min_blocks: int = 0, warpgroup_mma: bool = False, weight_stages: int = 0,
                 tma_activations: Optional[bool] = None, weight_ring: int = 0, release_barriers: bool = False,
                 fixed_slots: bool = False, k_groups: int = 1, fused_scales: Optional[bool] = None):
        super().__init__()
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
        steps = fmt.k // fmt.kt
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
            if steps % split_k or steps // split_k % k_groups:
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
        if self.min_blocks:
            self.attrs.min_blocks_per_sm = self.min_blocks
        m0: int32 = self.blockIdx.x * bm
        n0: int32 = self.blockIdx.y * bn
        granule0: int32 = self.blockIdx.y * (bn // (16 * fmt.units))
        first: int32 = self.split_step(0)  # this block's split: k-steps [first, end)
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
            gs_steps = self.global_view(s_ptr, dtype=dtype, shape=[fmt.k // kt, fmt.n, per_step],
                                        strides=[by_step, 1, fmt.n])
            gz_steps = self.global_view(z_ptr, dtype=dtype, shape=[fmt.k // kt, fmt.n, per_step],
                                        strides=[by_step, 1, fmt.n])
        else:
            gs_steps, gz_steps = gs, gz
        acc = self.register_tensor(dtype=float32, shape=lead + [bn, bm], layout=c_layout, init=0.0)
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
            for j in range(ring - 1):  # (with staged activations, one group a step holds both)
                self.copy_async(src=gw, dst=sring[j], offsets=[granule0, first + j, 0, 0, 0], dims=[0, 2, 3, 4],
                                layout=words)
                if self.stage_activations:
                    self.stage_activation_tile(ga, sx, j, m0, first + j, chunk)
                self.copy_async_commit_group()
        elif self.stage_activations:
            if tma_x:  # the whole activation (the tensor map is encoded before the launch), one barrier a stage
                ga_tma = self.global_view(a_ptr, dtype=dtype, shape=[m_size, fmt.k])
                xbars = self.shared_tensor(dtype=uint64, shape=[self.stages])
                self.mbarrier_init(xbars, arrivals=kt // chunk)
                if release:  # every thread releases a stage it has read
                    xfree = self.shared_tensor(dtype=uint64, shape=[self.stages])
                    self.mbarrier_init(xfree, arrivals=warps)
            for s in range(self.stages - 1):
                if tma_x:
                    if s < steps:
                        self.stage_activation_tile(ga_tma, sx, s, m0, first + s, chunk, xbars[s])
                else:
                    self.stage_activation_tile(ga, sx, s, m0, first + s * kg, chunk)
                    self.copy_async_commit_group()
        # the weights of the next `prefetch` steps are in flight while a step computes: in registers, or with
        # weight_stages, in a ring of shared memory that TMA fills (one barrier a stage)
        wst = self.weight_stages
        if wst:
            granules, chunks, vector = words.shape[0], words.shape[-3], words.shape[-1]
            # the storage with each chunk's lanes and words as one row: TMA's innermost box of 16-byte multiples
            gw_tma = self.global_view(w_ptr, dtype=int32, shape=[shape[0], shape[1], shape[2], 32 * vector])
            # row-major, unswizzled: a warp reads each row of a stage whole, so no swizzle is needed against bank
            # conflicts, and TMA's unswizzled stages start on 128-byte boundaries where its 128-byte swizzle's need
            # 1024 (the k-steps of int5b at group 32, u3 and u7 at group 64 are not multiples of 1024 bytes)
            stage = [granules] + lead + [chunks, 32 * vector]  # (kg k-steps of a granule in a row, as stored)
            box_dims = [0, 1, 2, 3] if kg > 1 else [0, 2, 3]  # (the storage's dimensions a stage keeps)
            sw = self.shared_tensor(dtype=int32, shape=[wst] + stage, layout=shared_row_major(wst, *stage))
            wbars = self.shared_tensor(dtype=uint64, shape=[wst])
            self.mbarrier_init(wbars, arrivals=1)
            if self.release_barriers:  # every warp releases a weight stage it has read
                wfree = self.shared_tensor(dtype=uint64, shape=[wst])
                self.mbarrier_init(wfree, arrivals=warps * kg)
            for j in range(wst - 1):
                if j < steps:
                    self.tma_load(src=gw_tma, dst=sw[j], offsets=[granule0, first + j * kg, 0, 0],
                                  dims=box_dims, barrier=wbars[j])
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
            wslots.append(self.load_step_words(gw, granule0, first + j, words))
        for j in list(range(xq)):
            xslots.append(self.load_step_activations(ga, m0, first + j * kg, x_layout))
        for j in list(range(sq)):
            sslots.append(self.load_step_groups(gs_steps, n0, first + j * kg, bn, group_layout))
        for j in list(range(zq)):
            zslots.append(self.load_step_groups(gz_steps, n0, first + j * kg, bn, group_layout))
        for round_ in range((steps + unroll - 1) // unroll):
            for u in list(range(unroll)):
                i = round_ * unroll + u
                if i < steps:  # (always, where unroll divides steps: the condition folds away)
                    step = first + i * kg
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
                                          offsets=[granule0, step + (wst - 1) * kg, 0, 0],
                                          dims=box_dims,
                                          barrier=wbars[(i + wst - 1) % wst], after=after)
                        w_now = self.load_shared(self.reshape_shared(sw[i % wst], list(words.shape)), layout=words)
                        if self.release_barriers:
                            self.mbarrier_arrive(wfree[i % wst], per_warp=True)  # the warp has its words
                    elif ring:  # step i + ring - 1's words into the slot this thread read a step ago
                        self.copy_async(src=gw, dst=sring[(i + ring - 1) % ring],
                                        offsets=[granule0, step + ring - 1, 0, 0, 0], dims=[0, 2, 3, 4], layout=words)
                        if not self.stage_activations:  # (else they join the activations' group below)
                            self.copy_async_commit_group()
                            self.copy_async_wait_group(ring - 1)  # this thread's copies of step i have landed
                            w_now = self.load_shared(sring[i % ring], layout=words)
                    else:
                        if not fixed:  # (else the slot is refilled once its codes are converted)
                            w_new = self.load_step_words(gw, granule0, step + wq, words)
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
                            self.stage_activation_tile(ga_tma, sx, slot, m0, first + stage_ahead, chunk, xbars[slot],
                                                       after)
                        self.mbarrier_wait(xbars[i % self.stages], i // self.stages % 2)
                    elif self.stage_activations:
                        stage_ahead = i + self.stages - 1
                        self.stage_activation_tile(ga, sx, stage_ahead % self.stages, m0, first + stage_ahead * kg,
                                                   chunk)
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
                            x_new = self.load_step_activations(ga, m0, step + kg, x_layout)
                        x = self.view(xslots[u % xq], layout=b_layout)
                    if grouped and not fixed:
                        s_new = self.load_step_groups(gs_steps, n0, step + kg, bn, group_layout)
                        z_new = self.load_step_groups(gz_steps, n0, step + kg, bn, group_layout) if self.zero_points \
                            else None
                    codes = self.view(w_now, dtype=fmt.dtype, layout=codes_layout)
                    scales = sslots[u % sq] if grouped else None
                    weighted = grouped and (self.warpgroup_mma or self.scale_weights)  # scales multiply weights
                    # the formats of times_fusable on the wgmma tiles from 65 rows take their group's
                    # scale into the conversion's paired fma (cast's times; without zero points, where the thread's
                    # scales allow: see FUSED_SCALES_MIN_ROWS), where a k-step is one group
                    times = scales if self.scales_in_cast else None
                    minus = zslots[u % zq] if self.zero_points and self.scales_in_cast else None
                    weights = self.cast(codes, dtype, layout=a_layout, placement=fmt.placement, scale=1.0 / self.fold,
                                        minus=minus, times=times)
                    if wq and fixed:  # the slot's codes are converted: it takes step i + prefetch's words
                        self.assign(wslots[u % wq], self.load_step_words(gw, granule0, step + wq, words))
                    if self.zero_points and minus is None:
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
                                acc = acc + partial * self.folded(scales.to(float32))
                            else:
                                cut = (slice(None),) * len(lead)  # (every k-step of the groups of warps)
                                partial = self.dot_split(weights[cut + (slice(None), slice(g * size, (g + 1) * size))],
                                                         x[cut + (slice(g * size, (g + 1) * size), slice(None))], zero,
                                                         warp_grid=[warps, 1])
                                acc = acc + partial * self.folded(scales[cut + (slice(None), slice(g, g + 1))]
                                                                  .to(float32))
                    if release:
                        self.mbarrier_arrive(xfree[i % self.stages], per_warp=True)  # the warp's wgmma read the stage
                    elif self.stage_activations:
                        self.sync()  # every warp has read this stage before a later step refills it
                    elif fixed:  # the slot's activations are used: it takes step i + 2's
                        self.assign(xslots[u % xq], self.load_step_activations(ga, m0, step + xq * kg, x_layout))
                    if grouped and fixed:  # the slot's scales (and zero points) are used: it takes step i + 2's
                        self.assign(sslots[u % sq], self.load_step_groups(gs_steps, n0, step + sq * kg, bn,
                                                                          group_layout))
                        if self.zero_points:
                            self.assign(zslots[u % zq], self.load_step_groups(gz_steps, n0, step + sq * kg, bn,
                                                                              group_layout))
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
        return self.load_global(gw, offsets=[granule0, step, 0, 0, 0], shape=list(words.shape), dims=[0, 2, 3, 4],
                                layout=words)

    def split_step(self, offset: int):
        """The first k-step of split ``blockIdx.z + offset``: ``z * S // split_k`` of the S k-steps (a split takes
        S / split_k of them, or where split_k does not divide S, the floor or the ceiling of that)."""
        all_steps = self.fmt.k // self.fmt.kt
        if all_steps % self.split_k == 0:
            return (self.blockIdx.z + offset) * (all_steps // self.split_k)
        return (self.blockIdx.z + offset) * all_steps // self.split_k

    def split_steps(self, first, end):
        """The k-steps of this block's split: a constant where split_k divides them, else ``end - first``."""
        all_steps = self.fmt.k // self.fmt.kt
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
@dataclass(frozen=True)
class Config:
    """A :class:`QuantizedMatmul` configuration (its keyword arguments after ``zero_points``)."""

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
CONFIGS = ((8, (3, 4, 5, 6), Config(units_per_warp=1, block_m=8, prefetch=2, weight_ring=4), 6, 2),
           (8, (6, 7, 8), Config(block_m=8, prefetch=2, stage_activations=True, stages=3), 2, None),
           (8, None, _REGISTER_DECODE, 2, None),
           (16, (4,), Config(block_m=16, prefetch=2, stage_activations=True, stages=3), 2, None),
           (16, (7,), Config(warps=8, block_m=16, prefetch=1, stage_activations=True, stages=3), 1, 2),
           (16, (2, 3), Config(block_m=16, prefetch=1, stage_activations=True, stages=2, min_blocks=4), 2, None),
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
_STAGED_DECODE_GROUPS = replace(_HOPPER_DECODE_RING, stage_activations=True, stages=2, prefetch=1, min_blocks=2,
                                k_groups=2)
_STAGED_TWO_BIT_GROUPS = replace(_STAGED_DECODE_GROUPS, weight_stages=4)
# (the tile split in two over the grid, the most rows that take the split inside the block by the weights' width in
# bits, the most scale groups a k-step, the tile taken instead)
IN_BLOCK_SPLIT = ((_HOPPER_DECODE_RING, {4: 8, 5: 8, 6: 8}, None, _STAGED_DECODE_GROUPS),
                  (_THREE_BIT_RING, {3: 8}, None, _STAGED_DECODE_GROUPS),
                  (_REGISTER_DECODE, {2: 8}, None, _STAGED_TWO_BIT_GROUPS),
                  (_SIXTEEN_ROW_RING, {4: 16}, 2, replace(_SIXTEEN_ROW_RING, k_groups=2, min_blocks=2)))
_KERNELS: dict = {}


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
    SM; the decode rows of 2-6-bit weights (and the 9-16-row ring row for 4-bit weights) split K in two inside their
    blocks instead of over the grid, ``IN_BLOCK_SPLIT``): the table's for the batch; K is split (``split_k``,
    doubling) while the grid has fewer blocks per SM than the table's row asks (two, or six for the ring row's small
    blocks) and every split keeps at least 8 k-steps, evenly or not (with wgmma, see ``WGMMA_SPLIT_MIN_STEPS``); a
    row that would need more splits than it allows (the ring row: two) leaves the batch to the next. Uneven splits
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
        splits = _splits(blocks, wanted, fmt.k // fmt.kt)
        if row < len(hopper) and blocks < multiprocessors and (max_split < 4 or blocks * splits < 2 * multiprocessors):
            # (a Hopper row serves grids that fill the SMs unsplit; the rows that may split K in 4 or 8 also smaller
            # ones that their splits give two blocks an SM, as measured)
            continue
        if blocks * splits < wanted and config.units_per_warp >= 2 * fmt.units and max_split is None:
            # still short of the row's blocks per SM at the most splits K allows (a 7B model's down projection,
            # 4096 channels): blocks of half the channels, twice as many (see the docstring)
            config = replace(config, units_per_warp=config.units_per_warp // 2)
            blocks *= 2
            splits = _splits(blocks, wanted, fmt.k // fmt.kt)
        if max_split is None or splits <= max_split:
            return _split_in_block(m, fmt, replace(config, split_k=splits), wgmma)
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


def _split_in_block(m: int, fmt: WeightFormat, config: Config, tma: bool) -> Config:
    """``config`` with its K split in two moved into the block (``k_groups=2``, see ``IN_BLOCK_SPLIT``) where that
    measured faster: the tiles listed there, up to their rows for the weights' width and their scale groups a k-step,
    an even number of k-steps, on a GPU with TMA (``tma``: sm_90a) for its ring of weights."""
    if not tma or config.split_k != 2 or fmt.k // fmt.kt % 2:
        return config
    for tile, rows, groups, split_tile in IN_BLOCK_SPLIT:
        if replace(config, split_k=1) == tile and m <= rows.get(fmt.dtype.nbits, 0) \
                and (groups is None or fmt.groups_per_step <= groups):
            return split_tile
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
            and fmt.k // fmt.kt // medium_splits >= WGMMA_MEDIUM_SPLIT_MIN_STEPS):
        return replace(medium, split_k=medium_splits, split_reduce="kernel")
    return None


def _three_groups_split(m: int, fmt: WeightFormat, multiprocessors: int) -> Optional[Config]:
    """``WGMMA_THREE_GROUPS`` with K split as often as keeps one block an SM, each split keeping at least
    ``THREE_GROUPS_SPLIT_MIN_STEPS`` k-steps, where that fills 3/4 of the SMs and the tile fits ``fmt``; else None."""
    three = WGMMA_THREE_GROUPS
    if three.units_per_warp % fmt.units:
        return None
    blocks = _grid_blocks(m, fmt, three)
    splits = max(min(multiprocessors // blocks, fmt.k // fmt.kt // THREE_GROUPS_SPLIT_MIN_STEPS), 1)
    if splits < 2 or 4 * blocks * splits < 3 * multiprocessors:
        return None
    return replace(three, split_k=splits, split_reduce="kernel")


def _wgmma_splits(blocks: int, fmt: WeightFormat, multiprocessors: int) -> int:
    """K's splits for a wgmma grid of ``blocks`` short of the SMs (see ``WGMMA_SPLIT_MIN_STEPS``)."""
    splits = max(min(2 * multiprocessors // blocks, fmt.k // fmt.kt // WGMMA_SPLIT_MIN_STEPS), 1)
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


def kernel_for(fmt: WeightFormat, dtype: Any, zero_points: bool, config: Config) -> QuantizedMatmul:
    key = (fmt, as_dtype(dtype).name, bool(zero_points), config)
    if key not in _KERNELS:
        _KERNELS[key] = QuantizedMatmul(fmt, dtype, zero_points, **asdict(config))
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


def quantized_matmul(a: Any, packed_weight: QuantizedWeight, scales: Any, zeros: Any = None, out: Any = None, *,
                     dtype: Any = None, group_size: Optional[int] = None, config: Optional[Config] = None,
                     tune: Optional[bool] = None) -> Any:
    """``a @ w`` for a CUDA float16/bfloat16 ``a`` [..., K] and a weight packed by :func:`pack_weight`.

    ``w[k, n] = (value(q[k, n]) - zeros[k // g, n]) * scales[k // g, n]``; ``scales`` (and ``zeros``)
    are [K / g, N] tensors of a's dtype. ``dtype`` / ``group_size``, when given, are checked against
    what the weight was packed for. Small floats (fp4, fp6, ...) convert in fewest instructions when
    packed for a's dtype (``pack_weight(..., activations=)``); either packing gives the same result.
    ``out`` ([..., N], a's dtype, contiguous) receives the result.
    ``config`` (a :class:`Config`) overrides the kernel configuration :func:`choose_config` picks.
    ``tune=True`` (``None``: ``tilus_tvm.tune.configure(library=...)``) takes the block's tile from the
    tuning database instead (the first call of a key -- the weight format, dtypes, the GPU, M rounded
    up to a power of two -- tunes ``QuantizedMatmul``'s space), K's split still from the table.
    Every argument is checked before anything is launched.

    >>> qw, s, _ = quantize_weight(w, "uint4b", group_size=128)      # doctest: +SKIP
    >>> y = quantized_matmul(x, qw.to("cuda"), s.cuda())              # doctest: +SKIP
    """
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
    devices = {t.device for t in (a, packed_weight.storage, scales, zeros) if t is not None}
    if len(devices) != 1:
        raise LaunchError(f"quantized_matmul: a, the weight, scales and zeros must be on one device, got "
                          f"{sorted(str(d) for d in devices)}")
    if config is not None and not isinstance(config, Config):
        raise LaunchError(f"quantized_matmul: config must be a tilus_tvm.schedules.quantized_matmul.Config, got "
                          f"{config!r}")
    tuned = use_tuned(tune, "quantized_matmul")
    if tuned and config is not None:
        raise LaunchError("quantized_matmul: give config or tune=True, not both (config fixes what tuning chooses)")
    rows = a.reshape(-1, fmt.k)
    if not rows.is_contiguous():
        rows = rows.contiguous()
    m = rows.shape[0]
    shape = (*a.shape[:-1], fmt.n)
    if out is None:
        out = torch.empty(shape, dtype=a.dtype, device=a.device)
    elif tuple(out.shape) != shape or out.dtype != a.dtype or not out.is_contiguous():
        raise LaunchError(f"quantized_matmul: out must be a contiguous {a.dtype} tensor of shape {list(shape)}, "
                          f"got {out.dtype} {list(out.shape)}")
    half = bfloat16 if a.dtype == torch.bfloat16 else float16  # (the activations' type, checked above)
    if config is None:
        sms = _multiprocessors(a.device.index if a.device.index is not None else 0) if a.is_cuda else 132
        config = choose_config(m, fmt, sms, wgmma=a.is_cuda and torch.cuda.get_device_capability(a.device) == (9, 0),
                               zero_points=zeros is not None, dtype=half.name)
    if tuned:
        # MetaSchedule times kernels in destination-passing form, which cannot hold the semaphores of the
        # serial reduction (a persistent workspace): tuned kernels leave the split-K sum to SplitKSum
        config = replace(config, split_reduce="kernel")
        kernel = tuned_kernel(QuantizedMatmul, fmt=fmt, dtype=half,
                              zero_points=zeros is not None, split_k=config.split_k, split_reduce=config.split_reduce)
    else:
        kernel = kernel_for(fmt, a.dtype, zeros is not None, config)  # checks the configuration
    if not m:
        return out
    splits = config.split_k if config.split_reduce == "kernel" else 1  # partial sums that SplitKSum adds up
    workspace = torch.empty((splits, m, fmt.n) if splits > 1 else (1,), dtype=torch.float32, device=a.device)
    kernel(m, rows, packed_weight.storage, scales.contiguous(), (zeros if zeros is not None else scales).contiguous(),
           out, workspace)
    if splits > 1:  # in the shapes SplitKSum's entry check expects: a refused argument costs a slow relaunch
        _split_sum(splits, a.dtype)(m * fmt.n, workspace.view(splits, m * fmt.n), out.view(-1))
    return out
