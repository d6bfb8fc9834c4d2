"""``DotSplit``: ``out = a @ b + c`` on ``mma.sync`` atoms with the warp split given by the author.

Configure: the atom is the largest-k ``mma.sync`` atom for the dtypes that tiles [m, n, k] with
``warp_grid = (warps_m, warps_n)`` warps (the block's other warps replicate the result); every
warp computes a ``m / warps_m x n / warps_n`` part of C. A batched dot ([batch, m, k] @ [batch, k, n])
takes one such grid a product, the batch over the outermost warps. Layout rule and emitter are ``Dot``'s
(:func:`tilus_tvm.instructions.dot.dot_layouts`, :func:`~tilus_tvm.instructions.dot.emit_dot`):
only the choice of split differs. No scratch memory.
"""
from __future__ import annotations

from tilus_tvm.errors import CompileError, LayoutError
from tilus_tvm.instructions.dot import dot_layouts, emit_dot, required_dot
from tilus_tvm.instructions.elementwise import set_layout
from tilus_tvm.instructions.registry import register
from tilus_tvm.ir import inst as ir
from tilus_tvm.ir.inst import DotConfig
from tilus_tvm.layout.atoms import get_mma_atom


def split_config(m: int, n: int, k: int, a_dtype: str, c_dtype: str, warp_grid: tuple[int, int],
                 warps: int, batch: int = 0) -> DotConfig:
    """The mma configuration of a [m, k] @ [k, n] product split ``warp_grid`` over ``warps`` warps (``batch``:
    0, or the products of a batched dot, one a group of ``warps // batch`` warps)."""
    warps_m, warps_n = warp_grid
    if warps % (max(batch, 1) * warps_m * warps_n):
        groups = f"a batch of {batch} x " if batch else ""
        raise CompileError(f"dot_split: {groups}warp_grid {list(warp_grid)} does not divide the block's {warps} warps")
    group = warps // max(batch, 1)
    for atom_k in (32, 16, 8):
        try:
            atom = get_mma_atom(a_dtype, a_dtype, c_dtype, k=atom_k)
        except LayoutError:
            continue
        if m % (atom.m * warps_m) == 0 and n % (atom.n * warps_n) == 0 and k % atom.k == 0:
            return DotConfig("mma", atom, warps_m, warps_n, group // (warps_m * warps_n),
                             m // atom.m // warps_m, n // atom.n // warps_n, k // atom.k, batch)
    raise CompileError(f"dot_split: no mma.sync atom for {a_dtype} x {a_dtype} -> {c_dtype} tiles [m={m}, n={n}, "
                       f"k={k}] split {list(warp_grid)} over warps")


def configure_split(inst: ir.DotSplit, func) -> None:
    (m, k), n = inst.a.shape[-2:], inst.b.shape[-1]
    batch = inst.a.shape[0] if len(inst.a.shape) == 3 else 0
    inst.config = split_config(m, n, k, inst.a.dtype.name, inst.c.dtype.name, inst.warp_grid, func.warps, batch)
    a, b, c = dot_layouts(inst.config)
    for tensor, layout in ((inst.a, a), (inst.b, b), (inst.c, c), (inst.output, c)):
        set_layout(tensor, layout)


register(ir.DotSplit, emit=emit_dot, configure=configure_split, required=required_dot,
         produced=lambda inst: dot_layouts(inst.config)[2])
