"""quantized_matmul beside torch.matmul on float16 weights, per weight type, at LLM decode and prefill shapes.

    python scripts/bench_quantized.py                 # the table (a few minutes on an H100)
    python scripts/bench_quantized.py --quick         # 1x8192x28672 and 16x8192x28672 only
    python scripts/bench_quantized.py --shapes 64x8192x28672 --types uint4b   # chosen shapes and types
    python scripts/bench_quantized.py --configs       # sweep configurations at 1x and 128x8192x28672 (u4 g128)
    python scripts/bench_quantized.py --configs 128   # ... at 128x8192x28672 only
    python scripts/bench_quantized.py --configs 1 --types uint8,float4_e2m1   # ... for these types
    python scripts/bench_quantized.py --quick --types uint4b --tuned   # a row of quantized_matmul(tune=True) too
    python scripts/bench_quantized.py --quick --split-reduce kernel    # split-K summed by a second kernel
    python scripts/bench_quantized.py --quick --group 32               # scales (and tinygemm's) a group of 32
    python scripts/bench_quantized.py --zero-points --types uint4b,uint3b  # integer weights with zero points too
    python scripts/bench_quantized.py --bfloat16 --types uint8,float8_e5m2  # bfloat16 activations (torch's too)
    python scripts/bench_quantized.py --alternate 4 --shapes 256x8192x28672 --types uint4b,float8_e4m3
                                                      # torch and ours timed in turn, four rounds each
    python scripts/bench_quantized.py --sequence 16   # also per call of 16 calls in a row on 16 weight copies

One table: for every shape (M x K x N) the time of ``torch.matmul`` with float16 (bfloat16) weights, then per
weight type (group 128 scales unless ``--group``, float16 activations unless ``--bfloat16``, small floats packed
for the activations' type): our time, the *bandwidth floor* (bytes the kernel must read and write -- packed
weights, scales, activations, output -- divided by the device-to-device copy bandwidth measured in this run), our
share of it (floor / ours: 100% = at copy speed), and the speed-up over torch.matmul. The last column is a published
W4A16 kernel where the GPU host's Python has one: PyTorch's own ``torch.ops.aten._weight_int4pack_mm`` (tinygemm,
CUDA, bfloat16 activations, the same group),
on the u4 rows; the packages with Triton W4A16 kernels that were looked for (gemlite, torchao, vllm, auto_gptq) are
reported as found or not. Every kernel is checked against a dequantise-then-matmul reference on the first
columns before it is timed; timings are medians of CUDA-event times of the call captured in a CUDA graph and
replayed (host launch time not counted), L2 flushed before each replay (``benchmark_func``: a buffer
twice the L2 zeroed, then a second one read, so the zeroing's dirty lines are written back before the
timed call, not during it).

A call timed alone carries a fixed cost on the GPU: the same timing gives 4 us for a one-element fill. With
``--sequence N`` the table adds, for torch.matmul, tinygemm and ours, the time per call of N calls in a row, each on
its own copy of the weights (as a model's layers follow one another), captured in one CUDA graph and timed as one:
every copy is read once a replay, from a flushed L2, and the fixed cost is paid once for the N calls. Beside ours
it gives a device-to-device copy of as many bytes (half read, half written), timed alone and in a row the same way:
what a kernel that only moves those bytes takes, fixed costs and all.

Goals (issue 12): u4 g128 at 1x8192x28672 <= 46 us on an H100 (>= 85% of copy bandwidth); every width
2-8 bits >= 80% of its floor; batch 64-256 at least torch.matmul's speed.
"""
import argparse
from dataclasses import replace
import importlib
import math
import pathlib
import sys
import time

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from tilus_tvm import dtypes, lowp  # noqa: E402
from tilus_tvm.utils import benchmark_func, check_dependent_chain  # noqa: E402
from tilus_tvm.schedules.quantized_configs import (WGMMA_CONFIGS, WGMMA_MEDIUM, WGMMA_SMALL,  # noqa: E402
                                                   WGMMA_THREE_GROUPS, Config, choose_config, fit_units)
from tilus_tvm.schedules.quantized_matmul import pack_weight, quantized_matmul, tuned_config  # noqa: E402
from tilus_tvm.schedules.quantized_weight import DEFAULT_K_TILE, QuantizedWeight  # noqa: E402

TYPES = ["uint4b", "int4b", "uint2b", "uint3b", "int5b", "uint6b", "uint7b", "uint8", "float8_e4m3", "float6_e3m2",
         "float6_e2m3", "float4_e2m1"]  # every width from 2 to 8 bits
GROUP = 128
DECODE = [(1, 8192, 28672), (8, 8192, 28672), (16, 8192, 28672),
          (1, 4096, 12288), (1, 4096, 11008), (1, 11008, 4096),  # 7B: fused qkv, gate/up, down
          (1, 8192, 10240), (1, 28672, 8192)]  # 70B: fused qkv, down
PREFILL = [(64, 8192, 28672), (128, 8192, 28672), (256, 8192, 28672), (64, 4096, 11008), (256, 4096, 11008),
           (64, 8192, 10240), (64, 28672, 8192), (128, 28672, 8192),  # 70B: fused qkv, down (grids short of the SMs:
           (256, 11008, 4096)]  # K split); 7B: down
QUICK = [(1, 8192, 28672), (16, 8192, 28672)]
ROUNDS = 3  # medians of 30 calls each; the best is reported
WARM_SECONDS = 0.2  # the call replays this long before it is timed
SPLIT_REDUCE = None  # --split-reduce: how the table's split-K partial sums are added up (None: as it says)
WEIGHT_STAGES = 0  # --weight-stages: the decode rows' TMA ring of weights (0: none)
NO_TMA_ACTIVATIONS = False  # --no-tma-activations: the wgmma rows' activations by cp.async
K_TILE = None  # --k-tile: pack_weight's k_tile (None: its default, tiles of 2; 0: granule-major storage)
ZERO_POINTS = False  # --zero-points: integer weights have a zero point a group (as AWQ's), floats none
ACTIVATIONS = torch.float16  # --bfloat16: activations, scales, zero points and torch.matmul's weights in bfloat16
SEQUENCE = 0  # --sequence: also time calls in a row, each on its own copy of the weights (0: not)
# the table's wgmma rows (from 49 rows) exist on an sm_90a GPU only: quantized_matmul() picks them there
HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


def timed(fn, repeat: int = 30, warmup: int = 3) -> float:
    """Median microseconds of fn() on the GPU, L2 flushed before each call. fn is captured in a CUDA
    graph (as serving stacks run decode steps) and the graph is replayed, queued ahead of the GPU
    (``benchmark_func``): the host's time to launch the kernels is not counted, and neither is a
    second kernel's launch from the host. Timing direct calls, each waited for, counted the host's
    launch time whenever it outlasted the flush: 63 to 110 us for one u4 kernel, by host and run.
    Before timing, the graph replays for WARM_SECONDS: after the seconds of compiling and checking the
    GPU sat idle, and the first ~10 ms of calls ran 10-15% slower than later ones (uint8 at 1x8192x28672:
    108-110 us, then 95 us). The figure is the best of ROUNDS medians."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            fn()
    except Exception as exc:  # noqa: BLE001 - report it and time the direct calls instead
        print(f"# CUDA graph capture failed ({type(exc).__name__}: {str(exc)[:100]}); timing direct calls")
        return min(benchmark_func(fn, warmup=0, repeat=repeat) for _ in range(ROUNDS)) * 1e3
    deadline = time.perf_counter() + WARM_SECONDS  # busy GPU clocks up: see the docstring
    while time.perf_counter() < deadline:
        for _ in range(10):
            graph.replay()
        torch.cuda.synchronize()
    return min(benchmark_func(graph.replay, warmup=1, repeat=repeat) for _ in range(ROUNDS)) * 1e3


def timed_in_turn(calls) -> float:
    """Median microseconds per call of ``calls`` run one after another, timed as one (``timed``): each call reads
    weights of its own, which the L2 flush before each replay leaves cold, while the fixed cost of a timed launch
    is paid once for all of them."""
    return timed(lambda: [call() for call in calls]) / len(calls)


def torch_row() -> str:
    """The reference's row label: torch.matmul on weights of the activations' type."""
    return f"{dtypes.as_dtype(ACTIVATIONS).name} torch"


def copy_bandwidth() -> float:
    """Bytes per microsecond of torch.clone of 1 GiB (read + write)."""
    x = torch.empty(1 << 29, dtype=torch.float16, device="cuda")
    y = torch.empty_like(x)
    # direct calls: one 2 GiB copy hides its launch, and in a CUDA graph the copy measured 20% slower
    return 2 * x.numel() * 2 / (benchmark_func(lambda: y.copy_(x), warmup=2, repeat=10) * 1e3)


class Weights:
    """Random codes of a type (finite values only), packed, with group scales (and with ZERO_POINTS, for integer
    types, zero points: integers of the code range, as asymmetric quantization gives); the values kept for checks."""

    def __init__(self, name: str, k: int, n: int):
        dtype = dtypes.as_dtype(name)
        finite = torch.tensor([v for v in lowp.all_values(dtype) if math.isfinite(v)], dtype=torch.float32,
                              device="cuda")
        self.values = finite[torch.randint(0, len(finite), (k, n), device="cuda")]
        # (small floats placed for the activations' type)
        self.packed = pack_weight(self.values, dtype, GROUP, activations=ACTIVATIONS, k_tile=K_TILE)
        self.scales = ((torch.rand(k // GROUP, n, device="cuda") + 0.5) / math.sqrt(k)).to(ACTIVATIONS)
        self.zeros = None
        if ZERO_POINTS and dtype.is_integer:
            low, high = int(finite.min().item()), int(finite.max().item())
            self.zeros = torch.randint(low, high + 1, (k // GROUP, n), device="cuda").to(ACTIVATIONS)
        self.nbytes = self.packed.storage.numel() * 4 + self.scales.numel() * 2 * (1 if self.zeros is None else 2)

    def check(self, a, out, columns: int = 512):
        values = self.values[:, :columns]
        if self.zeros is not None:
            values = values - self.zeros[:, :columns].float().repeat_interleave(GROUP, dim=0)
        w = values * self.scales[:, :columns].float().repeat_interleave(GROUP, dim=0)
        reference = a.float() @ w
        error = (out[:, :columns].float() - reference).abs().max().item()
        scale = reference.abs().max().item()
        if not error <= 2e-2 * scale + 1e-3:
            raise AssertionError(f"wrong result: max error {error:.3g} for outputs up to {scale:.3g}")


def tinygemm(m: int, k: int, n: int):
    """A timed call of torch's W4A16 tinygemm kernel (bfloat16, group GROUP), or None where it is missing."""
    try:
        a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
        codes = torch.randint(0, 16, (n, k), dtype=torch.int32, device="cuda")
        try:  # torch >= 2.5: uint8 [n, k / 2], two codes a byte
            packed_codes = (codes[:, ::2] << 4 | codes[:, 1::2]).to(torch.uint8)
            packed = torch.ops.aten._convert_weight_to_int4pack(packed_codes, 8)
        except Exception:  # noqa: BLE001 - older torch: int32 [n, k]
            packed = torch.ops.aten._convert_weight_to_int4pack(codes, 8)
        scales_and_zeros = torch.rand(k // GROUP, n, 2, dtype=torch.bfloat16, device="cuda")
        call = lambda: torch.ops.aten._weight_int4pack_mm(a, packed, GROUP, scales_and_zeros)  # noqa: E731
        call()
        return call
    except Exception as exc:  # noqa: BLE001 - the column is optional
        print(f"# torch._weight_int4pack_mm unavailable: {type(exc).__name__}: {str(exc)[:120]}")
        return None


def triton_packages() -> str:
    found = []
    for name in ("gemlite", "torchao", "vllm", "auto_gptq"):
        try:
            importlib.import_module(name)
            found.append(name)
        except Exception:  # noqa: BLE001
            continue
    return ", ".join(found) if found else "none"


def config_text(config: Config) -> str:
    return (f"{config.warps}w {config.units_per_warp}u bm{config.block_m} s{config.split_k} p{config.prefetch}"
            + (" staged" if config.stage_activations else "")
            + (f" tma{config.weight_stages}" if config.weight_stages else "")
            + (f" ring{config.weight_ring}" if config.weight_ring else "")
            + (" cp.async-x" if config.warpgroup_mma and config.tma_activations is False else "")
            + (" released" if config.release_barriers else "")
            + (" fixed" if config.fixed_slots else "")
            + (f" K/{config.k_groups} a warp group" if config.k_groups > 1 else "")
            + (" biased" if config.biased_codes else "") + (" zero sums" if config.zero_point_sums else "")
            + (" +SplitKSum" if config.split_k > 1 and config.split_reduce == "kernel" else ""))


def parse_shapes(text: str) -> list:
    """"1x8192x28672,16x4096x11008" -> [(1, 8192, 28672), (16, 4096, 11008)]."""
    return [tuple(int(v) for v in shape.split("x")) for shape in text.split(",")]


def table_config(m: int, fmt) -> Config:
    """The configuration quantized_matmul picks for m rows of this weight format on this GPU, its split-K partial
    sums added as --split-reduce says."""
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    config = choose_config(m, fmt, sms, wgmma=HOPPER, zero_points=ZERO_POINTS and fmt.dtype.is_integer,
                           dtype=dtypes.as_dtype(ACTIVATIONS).name)
    return replace(config, split_reduce=SPLIT_REDUCE) if SPLIT_REDUCE else config


def run_ours(w: Weights, m: int, config=None, tune: bool = False):
    """(microseconds, microseconds a call in a row of SEQUENCE or None, bytes moved, config, microseconds a call in a
    row with dependent launches or None) of quantized_matmul for a batch of m rows, checked first. ``tune``: the
    configuration quantized_matmul(tune=True) launches (the table's with the tile tuned for it, at the first call of
    its key: ``tuned_config``). In a row on Hopper, the same calls are also timed with ``dependent_launch=True``,
    after a run of them whose every output fed the next call's activations was checked."""
    a = torch.randn(m, w.packed.k, device="cuda").to(ACTIVATIONS)
    out = torch.empty(m, w.packed.n, dtype=ACTIVATIONS, device="cuda")
    chosen = config or table_config(m, w.packed.format)
    if config is None and WEIGHT_STAGES and not chosen.warpgroup_mma:
        chosen = replace(chosen, weight_stages=WEIGHT_STAGES, weight_ring=0)
    if config is None and NO_TMA_ACTIVATIONS and chosen.warpgroup_mma:
        chosen = replace(chosen, tma_activations=False, release_barriers=False)
    if tune:  # the tile tuning chose around the table's configuration (tuned at the first call of its key)
        chosen = tuned_config(chosen, dtypes.as_dtype(ACTIVATIONS), m, a, w.packed, w.scales, w.zeros is not None,
                              out)

    def launch(packed, scales, zeros, dependent=False):
        return quantized_matmul(a, packed, scales, zeros, out=out, config=chosen, dependent_launch=dependent)

    call = lambda: launch(w.packed, w.scales, w.zeros)  # noqa: E731
    call()
    w.check(a, out)
    in_turn = in_turn_dependent = None
    if SEQUENCE:  # the checked weight, then copies of it in memory of their own
        sets = [(w.packed, w.scales, w.zeros)] + [
            (QuantizedWeight(w.packed.storage.clone(), w.packed.format), w.scales.clone(),
             None if w.zeros is None else w.zeros.clone()) for _ in range(SEQUENCE - 1)]
        in_turn = timed_in_turn([lambda s=s: launch(*s) for s in sets])
        if HOPPER:
            check_dependent_calls(w, m, chosen)
            in_turn_dependent = timed_in_turn([lambda s=s: launch(*s, dependent=True) for s in sets])
    return timed(call), in_turn, w.nbytes + a.numel() * 2 + out.numel() * 2, chosen, in_turn_dependent


def check_dependent_calls(w: Weights, m: int, config):
    """Calls with dependent_launch=True, each reading the output of the one before as its activations, eager and
    from a CUDA graph, against the same calls without (``tilus_tvm.utils.check_dependent_chain``). The scales are
    divided by the values' RMS and given random signs, so that each call keeps its outputs near unit size."""
    signs = torch.randint(0, 2, w.scales.shape, device="cuda").float() * 2 - 1  # (uncorrelated outputs)
    scales = (w.scales.float() * signs / w.values.float().pow(2).mean().sqrt()).to(ACTIVATIONS).contiguous()
    x0 = torch.randn(m, w.packed.k, device="cuda").to(ACTIVATIONS)
    check_dependent_chain(lambda x, out, dependent: quantized_matmul(x, w.packed, scales, w.zeros, out=out,
                                                                     config=config, dependent_launch=dependent),
                          x0, w.packed.n)


def run_table(shapes, types, bandwidth, tuned: bool = False):
    by_weight: dict = {}
    for m, k, n in shapes:
        by_weight.setdefault((k, n), []).append(m)
    baseline, ours = {}, {}
    for (k, n), batches in by_weight.items():
        for m in batches:
            a = torch.randn(m, k, device="cuda").to(ACTIVATIONS)
            w16 = torch.randn(k, n, device="cuda").to(ACTIVATIONS)
            tiny = tinygemm(m, k, n)
            times = [timed(lambda: torch.matmul(a, w16)), timed(tiny) if tiny else None]
            if SEQUENCE:  # each call on its own copy of the weights
                w16s = [w16] + [w16.clone() for _ in range(SEQUENCE - 1)]
                times.append(timed_in_turn([lambda w=w: torch.matmul(a, w) for w in w16s]))
                times.append(timed_in_turn([tiny] + [tinygemm(m, k, n) for _ in range(SEQUENCE - 1)]) if tiny
                             else None)
                del w16s
            baseline[(m, k, n)] = times
            del w16
        for name in types:
            weights = Weights(name, k, n)  # one weight set at a time: the large ones take GBs to build
            for m in batches:
                for label in (name, f"{name} tuned") if tuned else (name,):
                    try:
                        ours[(m, k, n, label)] = run_ours(weights, m, tune=label != name)
                        if SEQUENCE:
                            ours[(m, k, n, label)] += copy_times(ours[(m, k, n, label)][2])
                    except Exception as exc:  # noqa: BLE001 - a failing row is reported, the table goes on
                        ours[(m, k, n, label)] = exc
                    torch.cuda.empty_cache()  # (the copies of the weights for SEQUENCE)
            del weights
            torch.cuda.empty_cache()
    in_turn = (f"{'in a row':>10}{'of floor':>10}{'vs torch':>10}{'dependent':>11}{'of floor':>10}{'copy alone':>12}"
               f"{'in a row':>10}" if SEQUENCE else "")
    print(f"\n{'shape MxKxN':<18}{'weights':<14}{'MB moved':>9}{'floor us':>10}{'time us':>10}{'of floor':>10}"
          f"{'vs torch':>10}{'vs tinygemm':>13}{in_turn}  config")
    for m, k, n in shapes:
        t_torch, t_tiny, *row = baseline[(m, k, n)]
        seq_torch, seq_tiny = row or (None, None)
        shape = f"{m}x{k}x{n}"
        print(f"{shape:<18}{torch_row():<14}{m * k * 2e-6 + k * n * 2e-6 + m * n * 2e-6:9.1f}{'':>10}"
              f"{t_torch:10.1f}{'':>10}{'1.00x':>10}{'':>{13 if SEQUENCE else 0}}{in_row(seq_torch, None, seq_torch)}")
        if t_tiny is not None:
            print(f"{'':<18}{'u4 tinygemm':<14}{'':>9}{'':>10}{t_tiny:10.1f}{'':>10}{t_torch / t_tiny:9.2f}x"
                  f"{'1.00x':>13}{in_row(seq_tiny, None, seq_torch)}{'':>{22 if SEQUENCE else 0}}"
                  "  torch._weight_int4pack_mm, bf16")
        for name in [label for t in types for label in ((t, f"{t} tuned") if tuned else (t,))]:
            result = ours[(m, k, n, name)]
            if isinstance(result, Exception):
                print(f"{'':<18}{name:<14}  FAILED: {type(result).__name__}: {str(result)[:150]}")
                continue
            t_ours, seq_ours, nbytes, config, seq_dependent, *copy = result
            floor = nbytes / bandwidth
            tiny_text = f"{t_tiny / t_ours:12.2f}x" if (t_tiny and name.startswith("uint4b")) else f"{'-':>13}"
            if ZERO_POINTS and dtypes.as_dtype(name.split()[0]).is_integer:
                name = name.replace(" ", "+z ", 1) if " " in name else name + "+z"  # (zero points)
            copy_text = f"{copy[0]:12.1f}{copy[1]:10.1f}" if copy else ""
            if SEQUENCE:  # (dependent launches in a row: Hopper only)
                copy_text = (f"{seq_dependent:11.1f}{floor / seq_dependent:10.0%}" if seq_dependent
                             else f"{'-':>11}{'':>10}") + copy_text
            print(f"{'':<18}{name:<14}{nbytes / 1e6:9.1f}{floor:10.1f}{t_ours:10.1f}{floor / t_ours:10.0%}"
                  f"{t_torch / t_ours:9.2f}x{tiny_text}{in_row(seq_ours, floor, seq_torch)}{copy_text}"
                  f"  {config_text(config)}")


def copy_times(nbytes: int) -> tuple:
    """Microseconds of a device-to-device copy moving ``nbytes`` (half read, half written): alone, and a call in a
    row of SEQUENCE, each on buffers of its own."""
    pairs = [(torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda"),
              torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda")) for _ in range(SEQUENCE)]
    calls = [lambda src=src, dst=dst: dst.copy_(src) for src, dst in pairs]
    return timed(calls[0]), timed_in_turn(calls)


def in_row(t, floor, t_torch) -> str:
    """The columns of a call in a row of SEQUENCE: its time, its share of the floor and its speed-up over torch."""
    if not SEQUENCE:
        return ""
    if t is None:
        return f"{'':>30}"
    return f"{t:10.1f}{f'{floor / t:.0%}' if floor else '':>10}{t_torch / t:9.2f}x"


def alternate(shapes, types, rounds: int):
    """torch.matmul (f16 weights) and ours for each of types timed in turn, ``rounds`` times, in one process.
    torch.matmul's time at a shape moves from run to run by more than the gaps being measured (at
    256x8192x28672 on an H100: 195 us in one run of the table, 229 us in another), so a ratio of two
    timings taken minutes apart can mislead; here each round times every kernel back to back, and the
    table gives each kernel's range over the rounds and the range of its per-round ratio to torch."""
    print(f"\n{'shape MxKxN':<18}{'kernel':<16}{'min us':>9}{'median us':>11}{'max us':>9}{'vs torch (per round)':>24}"
          "  config")
    for m, k, n in shapes:
        a = torch.randn(m, k, device="cuda").to(ACTIVATIONS)
        w16 = torch.randn(k, n, device="cuda").to(ACTIVATIONS)
        calls = {torch_row(): (lambda: torch.matmul(a, w16), "")}
        kept = []  # the weights and outputs the calls use
        for name in types:
            weights = Weights(name, k, n)
            out = torch.empty(m, n, dtype=ACTIVATIONS, device="cuda")
            config = table_config(m, weights.packed.format)
            call = (lambda w=weights, o=out, c=config: quantized_matmul(a, w.packed, w.scales, w.zeros, out=o,
                                                                        config=c))
            call()
            weights.check(a, out)
            weights.values = None  # the checked values are not needed again
            kept.append((weights, out))
            calls[name] = (call, config_text(config))
        times = {name: [] for name in calls}
        for _ in range(rounds):
            for name, (call, _) in calls.items():
                times[name].append(timed(call))
        shape = f"{m}x{k}x{n}"
        for name, (_, config) in calls.items():
            t = sorted(times[name])
            ratios = sorted(t_torch / t_ours for t_torch, t_ours in zip(times[torch_row()], times[name]))
            ratio_text = "" if name == torch_row() else f"{ratios[0]:.2f}x - {ratios[-1]:.2f}x"
            print(f"{shape:<18}{name:<16}{t[0]:9.1f}{t[len(t) // 2]:11.1f}{t[-1]:9.1f}{ratio_text:>24}  {config}")
            shape = ""
        del a, w16, calls, kept
        torch.cuda.empty_cache()


def sweep(bandwidth, m: int = 1, k: int = 8192, n: int = 28672, weight_type: str = "uint4b"):
    """Configurations at m x k x n (group GROUP), fastest first. For decode batches: 1 to 8 warps of 1 to 4
    units each (a block of 16 to 512 channels: finer blocks spread a grid that is less than a wave more
    evenly over the SMs) and K split 1, 2 or 4, on the table's load path; then at the table's tile and
    split, each load path: activations to registers, or staged in shared memory with two or one k-steps
    of weights in flight; the weights through a per-thread cp.async ring (weight_ring 3 or 4, 4 warps of
    1 or 2 units, K split in two) or, on Hopper, a TMA ring. For larger batches: mma.sync tiles of 4 or 8 warps,
    1 or 2 units, 32 to 128 rows; and where the table takes wgmma (sm_90a, from WGMMA_MIN_ROWS rows), its tiles
    (WGMMA_CONFIGS, WGMMA_SMALL, WGMMA_MEDIUM, WGMMA_THREE_GROUPS) with K unsplit or split in 2, 3, 4 or 6
    (SplitKSum)."""
    w = Weights(weight_type, k, n)
    results = []
    table = table_config(m, w.packed.format)
    candidates = [replace(table, warps=warps, units_per_warp=units, split_k=split)
                  for warps in (1, 2, 4, 8) for units in (1, 2, 4) for split in (1, 2, 4)
                  if units % w.packed.format.units == 0]
    paths = [replace(table, stage_activations=False, stages=2, prefetch=2, weight_ring=0),
             replace(table, stage_activations=True, stages=3, prefetch=2, weight_ring=0),
             replace(table, stage_activations=True, stages=3, prefetch=1, weight_ring=0)]
    # weights through a per-thread cp.async ring (1 or 2 units a warp, K split in two)
    paths += [replace(table, warps=4, units_per_warp=units, split_k=2, weight_ring=ring, stage_activations=False,
                      stages=2) for units in (1, 2) for ring in (3, 4) if units % w.packed.format.units == 0]
    if torch.cuda.get_device_capability()[0] >= 9:  # weights through a TMA ring in shared memory
        paths += [replace(table, weight_ring=0, weight_stages=stages) for stages in (3, 4, 6, 8)]
        paths += [replace(table, warps=warps, units_per_warp=units, weight_ring=0, weight_stages=4)
                  for warps, units in ((4, 4), (8, 2), (8, 4)) if units % w.packed.format.units == 0]
    candidates += [path for path in paths if path not in candidates]
    if m > 16:
        candidates = [Config(warps=warps, units_per_warp=units, block_m=block_m, stage_activations=True, stages=3,
                             scale_weights=True) for warps in (4, 8) for units in (1, 2) for block_m in (32, 64, 128)
                      if units % w.packed.format.units == 0]
        if table.warpgroup_mma:
            fmt = w.packed.format
            tiles = [table] + [tile for _, tile in WGMMA_CONFIGS] + [WGMMA_SMALL, WGMMA_MEDIUM, WGMMA_THREE_GROUPS]
            wgmma = [replace(fit_units(tile, fmt), split_k=split, split_reduce=SPLIT_REDUCE or "kernel")
                     for tile in tiles for split in (1, 2, 3, 4, 6) if split <= fmt.steps]
            candidates = list(dict.fromkeys(wgmma)) + candidates
    for config in candidates:
        try:
            t_ours, _, nbytes, _, _ = run_ours(w, m, config)
            results.append((t_ours, nbytes, config))
        except Exception as exc:  # noqa: BLE001 - report and go on
            print(f"# {config}: {type(exc).__name__}: {str(exc)[:160]}")
    print(f"\n{m}x{k}x{n} {weight_type} g{GROUP} (the table's choice: {config_text(table)})")
    for t_ours, nbytes, config in sorted(results, key=lambda r: r[0]):
        print(f"{t_ours:8.1f} us {nbytes / bandwidth / t_ours:6.0%} of floor  {config_text(config)}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="the two 8192x28672 decode shapes only")
    parser.add_argument("--configs", nargs="?", const="1,128", default=None,
                        help="sweep configurations at Mx8192x28672 (or the K x N of each of --shapes) for these "
                             "comma-separated M (default 1,128), for each of --types (default there: uint4b)")
    parser.add_argument("--shapes", default=None, help="comma-separated MxKxN (default: the decode and prefill "
                                                       "shapes, or the two of --quick)")
    parser.add_argument("--types", default=None, help=f"comma-separated weight types (default: {','.join(TYPES)})")
    parser.add_argument("--tuned", action="store_true",
                        help="a row of quantized_matmul(tune=True) under each of ours (tunes up to 117 "
                             "configurations a shape and type: pick few --types)")
    parser.add_argument("--weight-stages", type=int, default=0,
                        help="decode rows (the mma.sync table) load their weights through a TMA ring of this many "
                             "stages (Hopper; 0: straight to registers, the table's way)")
    parser.add_argument("--no-tma-activations", action="store_true",
                        help="the wgmma rows stage their activations with cp.async instead of TMA")
    parser.add_argument("--zero-points", action="store_true",
                        help="integer weights with a zero point a group too (their bytes counted in the floor); "
                             "float weights take none")
    parser.add_argument("--bfloat16", action="store_true",
                        help="bfloat16 activations (and scales, zero points, outputs), beside torch.matmul on bfloat16 "
                             "weights (default: float16)")
    parser.add_argument("--group", type=int, choices=[32, 64, 128], default=128,
                        help="the weights' group size (their scales' and tinygemm's)")
    parser.add_argument("--k-tile", type=int, choices=[0, 2, 4, 8], default=None,
                        help="pack the weights with their k-steps in tiles of this many, or 0 for granule-major "
                             "storage (pack_weight's k_tile; default: pack_weight's, tiles of 2)")
    parser.add_argument("--split-reduce", choices=["kernel", "serial"], default=None,
                        help="split-K partial sums added by a second kernel (SplitKSum) or in the kernel, by the "
                             "last split to arrive (default: as the table says: serial for decode, kernel for wgmma)")
    parser.add_argument("--sequence", type=int, default=0, metavar="N",
                        help="also time each kernel per call of N calls in a row, each on its own copy of the "
                             "weights, captured in one CUDA graph (the fixed cost of a timed call paid once)")
    parser.add_argument("--alternate", type=int, default=0, metavar="ROUNDS",
                        help="time torch.matmul and ours in turn, ROUNDS times each, at --shapes (default: the "
                             "prefill shapes) for --types (default: uint4b,float8_e4m3), instead of the table")
    args = parser.parse_args()
    global SPLIT_REDUCE, WEIGHT_STAGES, NO_TMA_ACTIVATIONS, GROUP, ZERO_POINTS, ACTIVATIONS, K_TILE, SEQUENCE
    if args.sequence < 0:
        parser.error(f"--sequence must be a count of calls, got {args.sequence}")
    SEQUENCE = args.sequence
    SPLIT_REDUCE = args.split_reduce
    K_TILE = args.k_tile
    if args.bfloat16:
        ACTIVATIONS = torch.bfloat16
    ZERO_POINTS = args.zero_points
    GROUP = args.group
    WEIGHT_STAGES = args.weight_stages
    NO_TMA_ACTIVATIONS = args.no_tma_activations
    torch.manual_seed(0)
    props = torch.cuda.get_device_properties(0)
    bandwidth = copy_bandwidth()
    print(f"# {props.name}, {props.multi_processor_count} SMs, torch {torch.__version__}; copy bandwidth "
          f"{bandwidth / 1e6:.2f} TB/s; weights in groups of {GROUP}"
          f"{', granule-major storage' if K_TILE == 0 else f', k-steps in tiles of {K_TILE or DEFAULT_K_TILE}'}"
          f"{' with zero points (integer types)' if ZERO_POINTS else ''}; "
          f"{dtypes.as_dtype(ACTIVATIONS).name} activations; "
          f"Triton W4A16 packages importable: "
          f"{triton_packages()}")
    print("# goals: u4 g128 1x8192x28672 <= 46 us; every width 2-8 bits >= 80% of its floor; batch 64-256 >= "
          f"torch.matmul {dtypes.as_dtype(ACTIVATIONS).name} (vs torch >= 1.00x; the issue's goals are for float16)")
    if SEQUENCE:
        print(f"# in a row: microseconds a call of {SEQUENCE} calls one after another, each on its own copy of the "
              "weights, timed as one (the L2 flushed before them)")
    if args.alternate:
        alternate(parse_shapes(args.shapes) if args.shapes else PREFILL,
                  (args.types or "uint4b,float8_e4m3").split(","), args.alternate)
        return
    if args.configs:
        weights = [shape[1:] for shape in parse_shapes(args.shapes)] if args.shapes else [(8192, 28672)]
        for weight_type in (args.types or "uint4b").split(","):
            for k, n in weights:
                for m in args.configs.split(","):
                    sweep(bandwidth, m=int(m), k=k, n=n, weight_type=weight_type)
        return
    shapes = parse_shapes(args.shapes) if args.shapes else QUICK if args.quick else DECODE + PREFILL
    run_table(shapes, (args.types or ",".join(TYPES)).split(","), bandwidth,
              args.tuned)


if __name__ == "__main__":
    main()
