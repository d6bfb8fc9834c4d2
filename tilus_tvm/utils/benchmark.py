"""Timing GPU work with CUDA events."""
from __future__ import annotations

import statistics
from typing import Callable


def benchmark_func(fn: Callable[[], object], warmup: int = 5, repeat: int = 20) -> float:
    """Median latency of ``fn()`` in milliseconds, each call timed with CUDA events on the current stream.

    ``warmup`` untimed calls come first (they include compilation and cache warm-up).
    """
    import torch

    if repeat < 1:
        raise ValueError(f"benchmark_func: repeat must be at least 1, got {repeat}")
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(repeat)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(repeat)]
    for start, end in zip(starts, ends):
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))
