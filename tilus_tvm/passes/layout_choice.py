"""Layouts the compiler chooses for any instruction: coalesced layouts for memory tiles, broadcast
layouts for elementwise operands, replication. Instruction-specific layouts (``dot``'s fragments)
live with their instruction under ``tilus_tvm/instructions/``.
"""
from __future__ import annotations

import math
from typing import Sequence

from tilus_tvm.layout.register import RegisterLayout, compose, local, register_layout, spatial
from tilus_tvm.layout.register_ops import reduce

MAX_VECTOR_BITS = 128


def replication(rank: int, replicas: int) -> RegisterLayout:
    """A layout of shape [1] * rank held by ``replicas`` threads (identity for ``compose`` when 1)."""
    return register_layout([1] * rank, [], [-replicas] if replicas > 1 else [], [])


def default_layout(shape: Sequence[int], dtype_bits: int, num_threads: int) -> RegisterLayout:
    """A coalesced, vectorised layout for a tile loaded from or stored to memory.

    Each thread holds vectors of up to 16 bytes along the last dimension; consecutive threads hold
    consecutive vectors (innermost dimensions first); what the threads do not cover becomes
    per-thread repetition (outer local modes); threads beyond the tile's vectors hold replicas.
    """
    shape = list(shape)
    size = math.prod(shape)
    vector = 1
    limit = max(1, MAX_VECTOR_BITS // dtype_bits)
    while (vector * 2 <= limit and shape[-1] % (vector * 2) == 0
           and size // (vector * 2) >= min(num_threads, size)):
        vector *= 2
    grid = shape[:-1] + [shape[-1] // vector]
    threads_left = num_threads
    spatial_sizes = [1] * len(grid)
    for d in reversed(range(len(grid))):
        take = math.gcd(grid[d], threads_left)
        spatial_sizes[d] = take
        threads_left //= take
    local_sizes = [g // s for g, s in zip(grid, spatial_sizes)]
    layout = compose(local(*local_sizes), spatial(*spatial_sizes))
    layout = compose(layout, local(*([1] * (len(shape) - 1) + [vector])))
    return compose(replication(len(shape), threads_left), layout) if threads_left > 1 else layout


def broadcast_layout(out_layout: RegisterLayout, operand_shape: Sequence[int]) -> RegisterLayout:
    """The layout an operand of ``operand_shape`` must have to be combined elementwise with a tile of
    ``out_layout`` (its size-1 dimensions are reduced away, their threads become replicas)."""
    dims = [d for d, (o, s) in enumerate(zip(operand_shape, out_layout.shape)) if o == 1 and s != 1]
    return reduce(out_layout, dims, keepdims=True) if dims else out_layout
