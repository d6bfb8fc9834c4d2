"""``self.load_scalar``: a run-time scalar read from global memory (a length, an index)."""
from __future__ import annotations

from typing import Any, Sequence

from tilus_tvm.errors import ScriptError
from tilus_tvm.ir import inst as ir
from tilus_tvm.ir.tensor import GlobalTensor
from tilus_tvm.lang.instructions.memory import InstructionBase, check_offsets


class ScalarMemoryInstructions(InstructionBase):
    """``load_scalar``."""

    def load_scalar(self, src: GlobalTensor, indices: Sequence[Any]) -> Any:
        """The element ``src[indices...]`` of a global tensor as a run-time scalar of ``src``'s dtype,
        read by every thread; usable wherever a scalar parameter is (loop bounds, offsets, branch
        conditions, tensor arithmetic). ``indices`` has one int or integer scalar per dimension of
        ``src``; it must lie inside ``src`` (the read is not masked).

        >>> seq_len = self.load_scalar(g_seq_lens, [batch])   # doctest: +SKIP
        >>> for j in range(self.utils.ceil_div(seq_len, 64)): ...   # doctest: +SKIP
        """
        from tvm import tirx

        from tilus_tvm.ir.scalar import c_identifier
        from tilus_tvm.ir.stmt import DeclareScalar

        builder = self._builder("load_scalar")
        if not isinstance(src, GlobalTensor):
            raise ScriptError(f"load_scalar: src must be a global tensor (self.global_view), got {src!r}")
        indices = check_offsets("load_scalar", list(indices) if isinstance(indices, (list, tuple)) else indices,
                                len(src.shape), src.describe())
        import tilus_tvm.instructions.scalar_memory  # noqa: F401 - registers the instruction (imports TVM)

        buffer = tirx.decl_buffer((1,), src.dtype.name, c_identifier(builder.fresh_name(f"{src.name}_at")),
                                  scope="local")
        builder.append(DeclareScalar(buffer, None))
        builder.emit(ir.LoadGlobalScalar(buffer, src, tuple(indices)))
        return tirx.BufferLoad(buffer, [0])
