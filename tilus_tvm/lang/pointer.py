"""The value a pointer parameter has inside a kernel: a handle that :meth:`Script.global_view` takes."""
from __future__ import annotations

from dataclasses import dataclass

from tilus_tvm.errors import ScriptError
from tilus_tvm.ir.stmt import Param


@dataclass(frozen=True, eq=False)
class PointerValue:
    param: Param

    def __bool__(self):
        raise ScriptError(f"pointer {self.param.name} has no truth value")

    def __repr__(self) -> str:
        return f"{self.param.name}: ~{self.param.dtype.name}"
