"""``Dot``: ``out = a @ b + c`` on tensor cores (``mma.sync`` atoms tiled over warps) or CUDA cores.

Configure: :func:`choose_dot_config` picks an mma atom that tiles [m, n, k] (else CUDA cores) and
splits the C tile over the block's warps. Layout rule: the config fixes the layouts of a, b, c
and the output (:func:`dot_layouts`), so tiles loaded for a dot are loaded straight into fragment
layout; layout inference converts operands that arrive in another layout. No scratch memory.

Emitter: every register slot is known at compile time:

    mma:  A slot (mi * repeat_k + ki) * a_atom + e,  B slot (ki * repeat_n + ni) * b_atom + e,
          C slot (mi * repeat_n + ni) * c_atom + e
    simt: A slot i * k + kk,  B slot kk * repeat_n + j,  C slot i * repeat_n + j
"""
from __future__ import annotations

from typing import Optional

from tvm import tirx
from tvm.script.ir_builder import tirx as Tb

from tilus_tvm import intrin
from tilus_tvm.backend.context import CodegenContext
from tilus_tvm.errors import LayoutError
from tilus_tvm.instructions.elementwise import set_layout
from tilus_tvm.instructions.registry import register
from tilus_tvm.ir import inst as ir
from tilus_tvm.ir.inst import DotConfig
from tilus_tvm.layout.atoms import MmaAtom, get_mma_atom
from tilus_tvm.layout.register import RegisterLayout, compose, local, register_layout, spatial
from tilus_tvm.layout.register_ops import unsqueeze
from tilus_tvm.passes.layout_choice import replication


def _warp_grid(m_tiles: int, n_tiles: int, units: int, tile_m: int = 1, tile_n: int = 1) -> tuple[int, int, int]:
    """Split ``units`` (warps or threads) into a (rows, cols) grid over an m_tiles x n_tiles tile grid
    of ``tile_m x tile_n`` tiles.

    Uses as many units as divide the grid; the rest replicate. Among grids of that size, prefer the
    one whose per-unit tile is closest to square: fewest operand elements per unit (its rows of a
    plus its columns of b, which is also what it loads from shared memory per k step).
    """
    best = None
    for used in sorted((d for d in range(1, units + 1) if units % d == 0), reverse=True):
        for rows in range(1, used + 1):
            if used % rows:
                continue
            cols = used // rows
            if m_tiles % rows or n_tiles % cols:
                continue
            cost = m_tiles // rows * tile_m + n_tiles // cols * tile_n
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
            warps_m, warps_n, replicas = _warp_grid(m_tiles, n_tiles, warps, atom.m, atom.n)
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
    Groups of ``replicas`` units (outermost) compute identical results. A batched config (``batch`` > 0)
    gives 3-D layouts, ``spatial(batch, 1, 1)`` over those: product ``i`` on the ``i``-th group of units.
    """
    c = config
    a_grid = _grid(c.warps_m, c.warps_n, True, False)
    b_grid = _grid(c.warps_m, c.warps_n, False, True)
    c_grid = spatial(c.warps_m, c.warps_n)
    a_layout = compose(a_grid, local(c.repeat_m, c.repeat_k))
    b_layout = compose(b_grid, local(c.repeat_k, c.repeat_n))
    c_layout = compose(c_grid, local(c.repeat_m, c.repeat_n))
    if c.kind == "mma":
        atom: MmaAtom = c.atom
        a_layout, b_layout, c_layout = (compose(a_layout, atom.a_layout), compose(b_layout, atom.b_layout),
                                        compose(c_layout, atom.c_layout))
    layouts = (a_layout, b_layout, c_layout)
    if c.batch:
        layouts = tuple(compose(spatial(c.batch, 1, 1), unsqueeze(layout, 0)) for layout in layouts)
    rep = replication(3 if c.batch else 2, c.replicas)
    return tuple(compose(rep, layout) for layout in layouts)


def pinned_dot_config(m: int, n: int, k: int, a_dtype: str, c_dtype: str, warps: int,
                      pinned: tuple) -> Optional[DotConfig]:
    """The mma config (one atom, every warp used) whose layouts of ``(a, b, c, output)`` agree with
    the most layouts the author pinned (``pinned``: a layout or None for each), so that operands
    loaded in a layout from ``self.cuda.resolve_dot_config`` (or pinned by ``annotate_layout``) need
    no conversion; None when no config matches any of them."""
    best, best_matches = None, 0
    for atom_k in (32, 16, 8):
        try:
            atom = get_mma_atom(a_dtype, a_dtype, c_dtype, k=atom_k)
        except LayoutError:
            continue
        if m % atom.m or n % atom.n or k % atom.k:
            continue
        m_tiles, n_tiles = m // atom.m, n // atom.n
        for warps_m in (d for d in range(1, warps + 1) if warps % d == 0):
            warps_n = warps // warps_m
            if m_tiles % warps_m or n_tiles % warps_n:
                continue
            config = DotConfig("mma", atom, warps_m, warps_n, 1, m_tiles // warps_m, n_tiles // warps_n, k // atom.k)
            a, b, c = dot_layouts(config)
            matches = sum(layout == want for layout, want in zip(pinned, (a, b, c, c)) if layout is not None)
            if matches > best_matches:
                best, best_matches = config, matches
    return best


def configure_dot(inst: ir.Dot, func) -> None:
    (m, k), n = inst.a.shape, inst.b.shape[1]
    pinned = (inst.a.layout, inst.b.layout, inst.c.layout, inst.output.layout)
    config = None
    if any(layout is not None for layout in pinned):
        config = pinned_dot_config(m, n, k, inst.a.dtype.name, inst.c.dtype.name, func.warps, pinned)
    inst.config = config or choose_dot_config(m, n, k, inst.a.dtype.name, inst.c.dtype.name, func.warps)
    a, b, c = dot_layouts(inst.config)
    for tensor, layout in ((inst.a, a), (inst.b, b), (inst.c, c), (inst.output, c)):
        set_layout(tensor, layout)


def required_dot(inst: ir.Dot) -> list:
    a, b, c = dot_layouts(inst.config)
    return [(inst.a, a), (inst.b, b), (inst.c, c)]


def emit_dot(ctx: CodegenContext, inst: ir.Dot) -> None:
    config = inst.config
    acc = ctx.reg(inst.output)
    if inst.output is not inst.c:
        c = ctx.reg(inst.c)
        with Tb.unroll(0, inst.output.layout.local_size) as i:
            Tb.buffer_store(acc, c[i], [i])
    a, b = ctx.reg(inst.a), ctx.reg(inst.b)
    if config.kind == "mma":
        _emit_mma(config, a, b, acc)
    else:
        _emit_simt(config, a, b, acc, inst.output.dtype.name)


def _emit_mma(config: ir.DotConfig, a, b, acc) -> None:
    atom = config.atom
    a_size, b_size, c_size = atom.a_layout.local_size, atom.b_layout.local_size, atom.c_layout.local_size
    for ki in range(config.repeat_k):
        for mi in range(config.repeat_m):
            # serpentine over n: consecutive mma share an a fragment within a row and a b fragment
            # at the turn, so the operand-reuse caches of the tensor-core pipe stay warm
            columns = range(config.repeat_n) if mi % 2 == 0 else reversed(range(config.repeat_n))
            for ni in columns:
                Tb.evaluate(intrin.emit_mma(atom, a, (mi * config.repeat_k + ki) * a_size,
                                            b, (ki * config.repeat_n + ni) * b_size,
                                            acc, (mi * config.repeat_n + ni) * c_size))


def _emit_simt(config: ir.DotConfig, a, b, acc, acc_dtype: str) -> None:
    rm, rn, k = config.repeat_m, config.repeat_n, config.repeat_k
    with Tb.serial(0, k) as kk:
        with Tb.unroll(0, rm) as i:
            with Tb.unroll(0, rn) as j:
                product = tirx.Cast(acc_dtype, a[i * k + kk]) * tirx.Cast(acc_dtype, b[kk * rn + j])
                Tb.buffer_store(acc, acc[i * rn + j] + product, [i * rn + j])


register(ir.Dot, emit=emit_dot, configure=configure_dot, required=required_dot,
         produced=lambda inst: dot_layouts(inst.config)[2])
