"""Timing GPU work with CUDA events (Tilus's ``benchmark_func``)."""
from __future__ import annotations

import statistics
from typing import Any, Callable, Union

from tilus_tvm.errors import ScriptError

L2_FLUSH_FLOOR_BYTES = 128 * 1024 * 1024
# GPU clock cycles to stall the stream for, per timed call, before the timed calls: the launches then
# queue up behind the stall, so each start event is reached only once its call is already enqueued
# and the events time the GPU work, not the host's launch latency.
QUEUE_AHEAD_CYCLES = 200_000


def _l2_flush_bytes(torch: Any) -> int:
    """Twice the current GPU's L2 cache (at least 128 MiB): writing that many bytes evicts it."""
    try:
        l2_bytes = int(torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size)
    except (AttributeError, RuntimeError):
        l2_bytes = 0
    return max(2 * l2_bytes, L2_FLUSH_FLOOR_BYTES)


def l2_flush(torch: Any) -> Callable[[], None]:
    """A function that leaves the current GPU's L2 holding nothing of the work before it, queued on the current
    stream: a buffer twice the L2 zeroed (which evicts what the L2 held), then a second one of that size read, so
    that the zeroing's dirty lines are written back then and not during the work timed next. Without the read,
    on the H100 (50 MB of L2), a kernel that only reads 117 MB took 52.9 us instead of 42.8."""
    flush_bytes = _l2_flush_bytes(torch)
    slab = torch.empty(flush_bytes, dtype=torch.int8, device="cuda")
    clean = torch.zeros(flush_bytes // 4, dtype=torch.float32, device="cuda")

    def flush() -> None:
        slab.zero_()
        clean.sum()

    return flush


def _count(value: Any, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ScriptError(f"benchmark_func: {name} must be an int >= {minimum}, got {value!r}")
    return value


def benchmark_func(run_func: Callable[[], Any], warmup: int = 5, repeat: int = 20, clear_l2_cache: bool = True,
                   median: bool = True) -> Union[float, list[float]]:
    """Latency of ``run_func()`` on the GPU in milliseconds: the median of ``repeat`` timed calls
    (``median=False``: the list of them), after ``warmup`` untimed calls (which absorb compilation
    and cache warm-up).

    Each call is timed with a pair of CUDA events on the current stream. With ``clear_l2_cache``
    (the default, as in Tilus) the L2 is flushed before each call, outside the timed region
    (:func:`l2_flush`: a buffer twice the L2 zeroed, then another read), so every call starts from a
    cold L2 -- the honest setting for memory-bound kernels. Needs a CUDA GPU and torch.

    >>> ms = benchmark_func(lambda: kernel(n, x, y), warmup=10, repeat=50)  # doctest: +SKIP
    """
    import torch

    if not callable(run_func):
        raise ScriptError(f"benchmark_func: run_func must be callable, got {run_func!r}")
    warmup, repeat = _count(warmup, "warmup", 0), _count(repeat, "repeat", 1)
    if not torch.cuda.is_available():
        raise ScriptError("benchmark_func: times GPU work with CUDA events and needs a CUDA GPU; none is visible")
    flush = l2_flush(torch) if clear_l2_cache else None
    for _ in range(warmup):
        run_func()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(repeat)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(repeat)]
    if hasattr(torch.cuda, "_sleep"):
        torch.cuda._sleep(QUEUE_AHEAD_CYCLES * repeat)
    for start, end in zip(starts, ends):
        if flush is not None:
            flush()  # (l2_flush: outside the timed region)
        start.record()
        run_func()
        end.record()
    torch.cuda.synchronize()
    times = [s.elapsed_time(e) for s, e in zip(starts, ends)]
    return statistics.median(times) if median else times


def launch_overhead_us(run_func: Callable[[], Any], count: int = 20000, rounds: int = 3, warmup: int = 200) -> float:
    """Host microseconds per call of ``run_func`` when called back to back ``count`` times (the best
    of ``rounds``, each ending with a device synchronisation): for tiny kernels, the launch cost.

    >>> us = launch_overhead_us(lambda: kernel(n, x, y))   # doctest: +SKIP
    """
    import time

    import torch

    if not callable(run_func):
        raise ScriptError(f"launch_overhead_us: run_func must be callable, got {run_func!r}")
    count, rounds = _count(count, "count", 1), _count(rounds, "rounds", 1)
    for _ in range(_count(warmup, "warmup", 0)):
        run_func()
    torch.cuda.synchronize()
    best = None
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(count):
            run_func()
        torch.cuda.synchronize()
        seconds = (time.perf_counter() - start) / count
        best = seconds if best is None else min(best, seconds)
    return best * 1e6
