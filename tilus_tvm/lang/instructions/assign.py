"""``self.assign``: overwrite a register tensor that is not a plain name (a list element)."""
from __future__ import annotations

from typing import Any

from tilus_tvm.errors import ScriptError
from tilus_tvm.ir.tensor import RegisterTensor
from tilus_tvm.lang.instructions.memory import InstructionBase


class AssignInstructions(InstructionBase):
    """``assign``."""

    def assign(self, dst: RegisterTensor, src: Any) -> None:
        """Overwrite the register tensor ``dst`` with ``src`` (a tensor or tensor expression of the same
        shape, cast to ``dst``'s dtype). It is what ``dst = src`` does to a name defined before a
        run-time loop, for tensors kept in a Python list (``acc[i]`` cannot be assigned to).

        >>> self.assign(acc[i], acc[i] * alpha)   # doctest: +SKIP
        """
        builder = self._builder("assign")
        if not isinstance(dst, RegisterTensor):
            raise ScriptError(f"assign: dst must be a register tensor, got {dst!r}")
        src = builder.materialize(src)
        if not isinstance(src, RegisterTensor) or tuple(src.shape) != tuple(dst.shape):
            raise ScriptError(f"assign: src {src!r} must be a register tensor of dst's shape {list(dst.shape)}")
        builder.assign(dst, src)
