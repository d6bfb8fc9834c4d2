"""A check for kernels launched with programmatic dependent launch (``attrs.dependent_launch``): that each call
reads what the call before it wrote, eager and replayed from a CUDA graph."""
from __future__ import annotations

from typing import Any, Callable


def check_dependent_chain(call: Callable[[Any, Any, bool], Any], x0: Any, n: int, calls: int = 4) -> None:
    """Run ``call(x, out, dependent)`` (``out`` [m, n] computed from ``x`` [m, k], both of ``x0``'s dtype) ``calls``
    times, each call after the first taking the first m * k elements of a buffer that starts with the last output
    (zeros after it, where n < k) as its ``x``: without dependent launches (the reference, which must be finite and
    not all zero), then with them launched one by one, then with them replayed from a CUDA graph, the outputs set to
    NaN before each. Raises AssertionError unless all three give the same bits: a call that read its ``x`` before the
    call before it had written it would differ."""
    import torch

    m, k = x0.shape
    buffers = [torch.zeros(m * max(n, k), dtype=x0.dtype, device=x0.device) for _ in range(calls)]
    outs = [buffer[:m * n].view(m, n) for buffer in buffers]

    def chain(dependent: bool):
        x = x0
        for buffer, out in zip(buffers, outs):
            call(x, out, dependent)
            x = buffer[:m * k].view(m, k)
        return x

    def poison():
        for out in outs:
            out.fill_(float("nan"))

    reference = chain(False).clone()
    if not (torch.isfinite(reference).all() and reference.abs().max() > 0):
        raise AssertionError("check_dependent_chain: the reference chain overflowed or vanished; scale its calls")
    poison()
    if not torch.equal(chain(True), reference):
        raise AssertionError("check_dependent_chain: dependent launches, one by one, gave other bits than the "
                             "same calls without")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        result = chain(True)
    poison()
    graph.replay()
    torch.cuda.synchronize()
    if not torch.equal(result, reference):
        raise AssertionError("check_dependent_chain: dependent launches replayed from a CUDA graph gave other bits "
                             "than the same calls without")
