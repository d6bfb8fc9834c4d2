"""Layouts the compiler chooses: coalesced layouts for memory tiles and operand layouts for ``dot``.

Both layout inference (which assigns them) and the checks before code generation (which compare
against them) use these functions, so a layout is derived in exactly one place.
"""
from __future__ import annotations

import math
from typing import Sequence

from tilus_tvm.errors import LayoutError
from tilus_tvm.ir.inst import DotConfig
from tilus_tvm.layout.atoms import MmaAtom, get_mma_atom
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


def _warp_grid(m_tiles: int, n_tiles: int, units: int) -> tuple[int, int, int]:
    """Split ``units`` (warps or threads) into a (rows, cols) grid over an m_tiles x n_tiles tile grid.

    Uses as many units as divide the grid; the rest replicate. Among grids of that size, prefer the
    one whose per-unit tile is closest to square (fewest operand elements per unit).
    """
    best = None
    for used in sorted((d for d in range(1, units + 1) if units % d == 0), reverse=True):
        for rows in range(1, used + 1):
            if used % rows:
                continue
            cols = used // rows
            if m_tiles % rows or n_tiles % cols:
                continue
            cost = m_tiles // rows + n_tiles // cols
            if best is None or cost < best[0]:
                best = (cost, rows, cols)
        if best is not None:
            return best[1], best[2], units // used
    return 1, 1, units


def choose_dot_config(m: int, n: int, k: int, a_dtype: str, c_dtype: str, warps: int) -> DotConfig:
    """Tensor cores when an mma atom tiles [m, n, k], else CUDA cores."""
    for atom_k in (32, 16, 8):
        try:
            atom = get_mma_atom(a_dtype, a_dtype, c_dtype, k=atom_k)
        except LayoutError:
            continue
        if m % atom.m == 0 and n % atom.n == 0 and k % atom.k == 0:
            m_tiles, n_tiles = m // atom.m, n // atom.n
            warps_m, warps_n, replicas = _warp_grid(m_tiles, n_tiles, warps)
            return DotConfig("mma", atom, warps_m, warps_n, replicas,
                             m_tiles // warps_m, n_tiles // warps_n, k // atom.k)
    threads_m, threads_n, replicas = _warp_grid(m, n, warps * 32)
    return DotConfig("simt", None, threads_m, threads_n, replicas, m // threads_m, n // threads_n, k)


def _grid(rows: int, cols: int, row_spatial: bool, col_spatial: bool) -> RegisterLayout:
    """A grid of ``rows x cols`` units (unit id = row * cols + col) over a [rows or 1, cols or 1] tile:
    spatial along the dimensions marked so, replicated along the others (the units of a replicated
    dimension hold the same operand)."""
    shape, mode_shape, entries = [], [], []
    for size, is_spatial in ((rows, row_spatial), (cols, col_spatial)):
        if is_spatial:
            shape.append(size)
            entries.append(len(mode_shape))
            mode_shape.append(size)
        else:
            shape.append(1)
            entries.append(-size)
    return register_layout(shape, mode_shape, entries, [])


def dot_layouts(config: DotConfig) -> tuple[RegisterLayout, RegisterLayout, RegisterLayout]:
    """The layouts of A, B and C (= D) for ``config``.

    mma:  C = spatial(warps_m, warps_n) . local(repeat_m, repeat_n) . atom.c_layout
          A = (warps_m, replicated over warps_n) . local(repeat_m, repeat_k) . atom.a_layout
          B = (replicated over warps_m, warps_n) . local(repeat_k, repeat_n) . atom.b_layout
    simt: the same with single threads in place of warps and single elements in place of atoms.
    Groups of ``replicas`` units (outermost) compute identical results.
    """
    c = config
    rep = replication(2, c.replicas)
    a_grid = _grid(c.warps_m, c.warps_n, True, False)
    b_grid = _grid(c.warps_m, c.warps_n, False, True)
    c_grid = spatial(c.warps_m, c.warps_n)
    a_layout = compose(compose(rep, a_grid), local(c.repeat_m, c.repeat_k))
    b_layout = compose(compose(rep, b_grid), local(c.repeat_k, c.repeat_n))
    c_layout = compose(compose(rep, c_grid), local(c.repeat_m, c.repeat_n))
    if c.kind == "mma":
        atom: MmaAtom = c.atom
        return (compose(a_layout, atom.a_layout), compose(b_layout, atom.b_layout),
                compose(c_layout, atom.c_layout))
    return a_layout, b_layout, c_layout
