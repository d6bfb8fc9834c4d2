"""Strided global views, made safe for TVM's ``tirx`` pipeline.

A global view with explicit strides (``self.global_view(p, shape=[n, m], strides=[1, n])``: a
transposed output, a row pitch wider than the view) is a ``DeclBuffer`` with ``strides``. TVM
0.27's ``LowerTIRx`` pass, the first of the ``tirx`` pipeline that kernels with shared-memory
pointers need, ignores a declared buffer's strides: it flattens ``B[i, j]`` of a ``(4, n)``
buffer with strides ``(1, 4)`` to ``i * n + j`` instead of ``i + 4 * j``. TVM's own
``FlattenBuffer`` gets it right, so a function with such a view is flattened by it first
(``tests/backend/test_strided.py`` shows both); ``LowerTIRx`` then sees only flat buffers.
"""
from __future__ import annotations

from typing import Any, Sequence

import tvm
from tvm import sym, tirx


def compact(shape: Sequence[Any], strides: Sequence[Any]) -> bool:
    """Whether ``strides`` are the row-major strides of ``shape`` (provably)."""
    analyzer, expected = sym.Analyzer(), 1
    for dim, stride in reversed(list(zip(shape, strides))):
        if not analyzer.can_prove_equal(stride, expected):
            return False
        expected = expected * dim
    return True


def flatten_strided_views(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``func`` with every buffer flattened by TVM's ``FlattenBuffer`` (module docstring)."""
    name = func.attrs["global_symbol"] if func.attrs is not None and "global_symbol" in func.attrs else "main"
    mod = tirx.transform.FlattenBuffer()(tvm.IRModule({name: func}))
    return mod[name]
