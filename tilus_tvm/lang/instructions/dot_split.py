"""``self.dot_split``: a tensor-core product whose split over warps the kernel chooses."""
from __future__ import annotations

from typing import Optional, Sequence

from tilus_tvm.errors import ScriptError
from tilus_tvm.ir import inst as ir
from tilus_tvm.ir.tensor import RegisterTensor
from tilus_tvm.lang.instructions.memory import InstructionBase

# (operand dtype, accumulator dtype) -> the (m, n, k) of the smallest mma.sync atom
_ATOMS = {("float16", "float32"): (16, 8, 16), ("float16", "float16"): (16, 8, 16),
          ("bfloat16", "float32"): (16, 8, 16), ("int8", "int32"): (16, 8, 32)}


class DotSplitInstructions(InstructionBase):
    """``dot_split``."""

    def dot_split(self, a: RegisterTensor, b: RegisterTensor, c: RegisterTensor, /, *,
                  warp_grid: Sequence[int], out: Optional[RegisterTensor] = None) -> RegisterTensor:
        """Matrix product ``out = a @ b + c`` on ``mma.sync``, the C tile split over the block's warps
        as ``warp_grid = (warps_m, warps_n)`` says (``dot`` picks its own split).

        ``a`` [m, k] and ``b`` [k, n] float16/bfloat16 (float32 or, for float16, float16 ``c``) or
        int8 (int32 ``c``); m a multiple of 16 * warps_m, n of 8 * warps_n, k of the atom's k (16; 32
        for int8). ``warps_m * warps_n`` must divide the block's warps (the rest compute replicas).
        ``out`` may be ``c`` (accumulate in place). With ``warp_grid=(warps, 1)`` each warp owns whole
        rows of C: a row reduction of the result is a warp shuffle, and the result (cast to a's
        dtype) is already in the A-operand layout of a following ``dot_split`` with the same grid.

        Batched: ``a`` [batch, m, k], ``b`` [batch, k, n], ``c`` [batch, m, n] compute ``batch``
        independent products, product ``i`` on the ``i``-th group of ``warps_m * warps_n`` warps (the
        batch is the outermost digit of the warp index; ``batch * warps_m * warps_n`` must divide the
        block's warps). Each thread runs the same ``mma`` as for one product, so a batch over warps
        costs nothing in the loop: it splits a reduction over warp groups (say K in halves), whose
        partial results ``self.sum(c, dim=0)`` then adds across the warps once.

        >>> s = self.dot_split(q, k_t, zeros, warp_grid=(4, 1))   # doctest: +SKIP
        """
        builder = self._builder("dot_split")
        a, b, c = builder.dot_operands("dot_split", a, b, c, batched=True)
        (m, k), n = a.shape[-2:], b.shape[-1]
        batch = a.shape[0] if len(a.shape) == 3 else 0
        atom = _ATOMS.get((a.dtype.name, c.dtype.name))
        if atom is None:
            raise ScriptError(f"dot_split: {a.dtype.name} operands with a {c.dtype.name} accumulator have no "
                              f"mma.sync atom; supported: {sorted(_ATOMS)}")
        grid = tuple(warp_grid) if isinstance(warp_grid, (list, tuple)) else ()
        if len(grid) != 2 or any(isinstance(w, bool) or not isinstance(w, int) or w < 1 for w in grid):
            raise ScriptError(f"dot_split: warp_grid must be two positive ints (warps_m, warps_n), got {warp_grid!r}")
        warps = builder.num_threads // 32
        if warps % (max(batch, 1) * grid[0] * grid[1]):
            groups = f"a batch of {batch} x " if batch else ""
            raise ScriptError(f"dot_split: {groups}warp_grid {list(grid)} does not divide the block's {warps} warps")
        for name, size, unit in (("m", m, atom[0] * grid[0]), ("n", n, atom[1] * grid[1]), ("k", k, atom[2])):
            if size % unit:
                raise ScriptError(f"dot_split: {name}={size} must be a multiple of {unit} (the mma.sync atom "
                                  f"times the warps along {name}) for warp_grid {list(grid)}")
        out = builder.dot_output("dot_split", c, out)
        import tilus_tvm.instructions.dot_split  # noqa: F401 - registers the instruction (imports TVM)

        builder.emit(ir.DotSplit(out, a, b, c, warp_grid=grid))
        return out
