"""A check for kernels launched with programmatic dependent launch (``attrs.dependent_launch``): that each call
reads what the call before it wrote, eager and replayed from a CUDA graph."""
from __future__ import annotations

from typing import Any, Callable, Sequence


def check_dependent_chain(call: Callable[[Any, Any, bool], Any], outs: Sequence[Any], x0: Any) -> None:
    """Run ``call(x, out, dependent)`` (``out`` [m, n] computed from ``x`` [m, k]) once per output of ``outs``, each
    call after the first taking the first m * k elements of the last output as its ``x``: without dependent
    launches (the reference, which must be finite and not all zero), then with them launched one by one, then with
    them replayed from a CUDA graph, the outputs set to NaN before each. Raises AssertionError unless all three
    give the same bits: a call that read its ``x`` before the call before it had written it would differ."""
    import torch

    m, k = x0.shape

    def chain(dependent: bool):
        x = x0
        for out in outs:
            call(x, out, dependent)
            x = out.view(-1)[:m * k].view(m, k)
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
