"""The parameters of a kernel, read from the annotations of its ``__call__``.

- ``int32``, ``float32``, ... (a :class:`DataType`): a run-time scalar, passed to every launch;
- ``int``, ``float``, ``bool``: a compile-time constant; each distinct value is its own kernel;
- ``~float16``, ... (a :class:`PointerType`): a tensor; the kernel receives its data pointer.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable

from tilus_tvm.dtypes import DataType, PointerType
from tilus_tvm.errors import ScriptError

CONST_TYPES = (int, float, bool)


@dataclass(frozen=True)
class ParamSpec:
    name: str
    kind: str  # "scalar", "pointer" or "const"
    annotation: Any  # DataType, PointerType, or one of int/float/bool

    @property
    def dtype(self) -> DataType | None:
        if self.kind == "pointer":
            return self.annotation.dtype
        return self.annotation if self.kind == "scalar" else None


def _resolve(annotation: Any, fn: Callable, name: str) -> Any:
    if isinstance(annotation, str):  # `from __future__ import annotations` in the author's module
        try:
            return eval(annotation, dict(fn.__globals__), {})  # noqa: S307 - the author's own annotation
        except Exception as exc:
            raise ScriptError(f"kernel parameter {name!r}: cannot evaluate its annotation {annotation!r} ({exc})")
    return annotation


def kernel_signature(fn: Callable, owner: str) -> list[ParamSpec]:
    """The parameters of ``fn`` (a ``__call__`` taking ``self`` first), checked."""
    params = list(inspect.signature(fn).parameters.values())
    if not params or params[0].name != "self":
        raise ScriptError(f"{owner}.__call__ must take self as its first parameter")
    specs = []
    for p in params[1:]:
        if p.kind not in (p.POSITIONAL_OR_KEYWORD, p.POSITIONAL_ONLY):
            raise ScriptError(f"{owner}.__call__: parameter {p.name!r} must be a plain positional parameter "
                              f"(no *args, **kwargs or keyword-only parameters)")
        if p.annotation is inspect.Parameter.empty:
            raise ScriptError(f"{owner}.__call__: parameter {p.name!r} has no annotation; annotate it with a "
                              f"scalar type (int32, float32, ...) for a run-time value, int/float/bool for a "
                              f"compile-time constant, or ~dtype (e.g. ~float16) for a tensor")
        annotation = _resolve(p.annotation, fn, p.name)
        if isinstance(annotation, PointerType):
            specs.append(ParamSpec(p.name, "pointer", annotation))
        elif isinstance(annotation, DataType):
            specs.append(ParamSpec(p.name, "scalar", annotation))
        elif annotation in CONST_TYPES:
            specs.append(ParamSpec(p.name, "const", annotation))
        else:
            raise ScriptError(f"{owner}.__call__: parameter {p.name!r} has annotation {annotation!r}; expected a "
                              f"scalar type (int32, ...), int/float/bool, or a pointer type (~float16, ...)")
    return specs
