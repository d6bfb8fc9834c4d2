"""Checks and debugging output of ``tilus_tvm.Script``: ``static_assert`` and ``print_tensor``
(``printf`` is with the computation instructions)."""
from __future__ import annotations

from typing import Any, Optional

from tilus_tvm.errors import ScriptError
from tilus_tvm.ir.scalar import is_expr
from tilus_tvm.ir.values import is_tensor_like
from tilus_tvm.lang.instructions.memory import InstructionBase


class DebugInstructions(InstructionBase):
    """``static_assert`` and ``print_tensor``."""

    @staticmethod
    def static_assert(cond: Any, msg: str = "") -> None:
        """Check ``cond`` while the kernel is compiled; a false condition stops the compilation.

        ``cond`` must be known at compile time: a Python value computed from hyper-parameters and
        ``int``/``bool`` parameters, or a TVM constant. A condition on run-time values
        (``int32`` parameters, ``self.blockIdx``) cannot be checked then and is an error itself.
        The error is a :class:`~tilus_tvm.errors.ScriptError` carrying ``msg`` and the kernel's
        source line.

        Example::

            self.static_assert(self.block_k % 16 == 0, "block_k must be a multiple of 16 for mma")
        """
        if is_tensor_like(cond):
            raise ScriptError(f"static_assert: the condition is a tensor ({getattr(cond, 'name', cond)!r}); it "
                              f"must be a compile-time bool")
        if is_expr(cond):
            from tvm import tirx

            if not isinstance(cond, tirx.IntImm):
                raise ScriptError(f"static_assert: the condition {cond} is only known at run time; static_assert "
                                  f"checks compile-time values (hyper-parameters, int/bool parameters)")
            cond = bool(cond.value)
        if not isinstance(msg, str):
            raise ScriptError(f"static_assert: msg must be a str, got {msg!r}")
        if not cond:
            raise ScriptError(f"static_assert failed: {msg}" if msg else "static_assert failed")

    def print_tensor(self, msg: str, tensor: Any, fmt: Optional[str] = None) -> None:
        """Print ``tensor`` (a register or shared tile) from the GPU as a table of its rows and columns.

        Thread 0 of each block that runs the call prints a header line (``msg``, dtype, shape, scope
        and block index) and then the table; every thread of the block must reach the call (it
        synchronises the block). A tensor of more than 2 dimensions prints one table per index of
        its leading dimensions. Use ``if self.blockIdx.x == 0:`` around it to print one block (the
        tables of blocks printing at the same time interleave). A register tile is gathered through
        scratch shared memory of its size; a shared tile is read in place.

        ``fmt`` is the C conversion of one element; by default ``%8.3f`` for floats (float16 and
        bfloat16 are printed through float32), ``%6d``/``%6u`` for integers, ``%8lld`` for 64-bit
        integers and ``%1d`` for bool. Its width sets the width of the table's cells.

        Example::

            x = self.load_global(g, offsets=[0, 0], shape=[4, 8])
            self.print_tensor("x =", x, fmt="%6.2f")
        """
        self._builder("print_tensor").print_tensor(msg, tensor, fmt)
