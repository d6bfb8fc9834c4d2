"""The tile-IR printer: a function as readable, deterministic text.

Each tensor is declared once, where it is defined, with its scope, dtype, shape and layout; later
lines name it (``%x``). An instruction prints as its class name in snake_case with every field
but ``output``, so a new instruction class prints without any change here::

    kernel add_one(n: int32, x_ptr: ~float32, y_ptr: ~float32):
        attrs.blocks = [(n + 127) // 128]
        attrs.warps = 4
        attrs.arch = 'sm_80'
        attrs.shared_bytes = 0
        %gx: global float32[n] strides=[1] pointer=x_ptr = global_view()
        %x: register float32[128] = load_global(src=%gx, offsets=(blockIdx.x * 128,), dims=(0,))
        for i in range(0, 4, 1) unroll:
            ...

Scalars are TVM expressions and print with TVM's ``str()``. Two distinct tensors with the same
name get ``.1``, ``.2`` suffixes in order of appearance, so every ``%name`` means one tensor.
"""
from __future__ import annotations

import dataclasses
import inspect
import re
import sys
from typing import Any, Callable, Optional

from tilus_tvm.dtypes import DataType, PointerType
from tilus_tvm.ir.inst import Instruction
from tilus_tvm.ir.stmt import (AssignScalar, BindScalar, BreakStmt, ContinueStmt, DeclareScalar, ForStmt, Function,
                               IfStmt, InstStmt, Param, SeqStmt, Stmt, WhileStmt)
from tilus_tvm.ir.tensor import GlobalTensor, RegisterTensor, SharedTensor, Tensor
from tilus_tvm.layout.atoms import MmaAtom

INDENT = "    "


def snake_case(name: str) -> str:
    """``LoadGlobal`` -> ``load_global``, ``MMASync`` -> ``mma_sync``."""
    name = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    return re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).lower()


def _tvm():
    # TVM objects exist only once TVM is imported; the printer never imports it itself
    return sys.modules.get("tvm")


class IRPrinter:
    """Prints one function; remembers each instruction's line (the verifier quotes them)."""

    def __init__(self):
        self._names: dict[Any, str] = {}  # tensor -> printed name (tensors hash by identity)
        self._taken: set[str] = set()
        self._declared: set[Any] = set()
        self._lines: dict[Instruction, str] = {}

    # ---- names -------------------------------------------------------------------------------
    def name(self, tensor: Any) -> str:
        """``%name`` of ``tensor``, unique within this printer."""
        if tensor not in self._names:
            base = tensor.name
            name, suffix = base, 0
            while name in self._taken:
                suffix += 1
                name = f"{base}.{suffix}"
            self._taken.add(name)
            self._names[tensor] = name
        return "%" + self._names[tensor]

    def declaration(self, tensor: Any) -> str:
        """``%acc: register float32[64, 128] layout=...``: scope, dtype, shape and layout."""
        if isinstance(tensor, RegisterTensor):
            text = f"{self.name(tensor)}: register {tensor.dtype.name}{self.value(list(tensor.shape))}"
        elif isinstance(tensor, SharedTensor):
            text = f"{self.name(tensor)}: shared {tensor.dtype.name}{self.value(list(tensor.shape))}"
        elif isinstance(tensor, GlobalTensor):
            return (f"{self.name(tensor)}: global {tensor.dtype.name}{self.value(list(tensor.shape))} "
                    f"strides={self.value(list(tensor.strides))} pointer={self.value(tensor.pointer)}")
        else:
            return f"{self.name(tensor)}: {self.value(tensor)}"
        if tensor.layout is not None:
            text += f" layout={tensor.layout}"
        return text

    # ---- values ------------------------------------------------------------------------------
    def value(self, value: Any) -> str:
        """An operand or attribute as text: tensors by name, scalars with TVM's ``str()``."""
        for cls in type(value).__mro__:
            formatter = VALUE_FORMATS.get(cls)
            if formatter is not None:
                return formatter(self, value)
        tvm = _tvm()
        if tvm is not None and isinstance(value, tvm.runtime.Object):
            if isinstance(value, tvm.tirx.Buffer):
                return value.name
            return str(value)
        if type(value).__module__.startswith("tilus_tvm.layout"):
            return str(value)  # layouts and swizzles print compactly themselves
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            args = ", ".join(f"{f.name}={self.value(getattr(value, f.name))}" for f in dataclasses.fields(value))
            return f"{type(value).__name__}({args})"
        if callable(value):
            return self.function_value(value)
        return re.sub(r" at 0x[0-9a-fA-F]+", "", repr(value))  # no addresses: the text is deterministic

    def function_value(self, fn: Callable) -> str:
        """A function of indices (``init=lambda i, j: ...``) applied to index variables named after
        its parameters, so the text shows the expression it builds."""
        fallback = f"<function {getattr(fn, '__qualname__', type(fn).__name__)}>"
        tvm = _tvm()
        try:
            params = list(inspect.signature(fn).parameters.values())
        except (TypeError, ValueError):
            return fallback
        if tvm is None or any(p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params):
            return fallback
        try:
            variables = [tvm.tirx.Var(p.name, "int32") for p in params]
            body = fn(*variables)
        except Exception:  # noqa: BLE001 - printing must not fail on a function it cannot apply
            return fallback
        return f"lambda {', '.join(p.name for p in params)}: {self.value(body)}"

    # ---- instructions ------------------------------------------------------------------------
    def instruction(self, inst: Instruction) -> str:
        """``%out: <declaration> = name(field=value, ...)``; the output is declared the first time."""
        args = ", ".join(f"{f.name}={self.value(getattr(inst, f.name))}"
                         for f in dataclasses.fields(inst) if f.name != "output")
        text = f"{snake_case(type(inst).__name__)}({args})"
        out = inst.defined
        if isinstance(out, (Tensor, GlobalTensor)):
            if out in self._declared:
                text = f"{self.name(out)} = {text}"
            else:
                self._declared.add(out)
                text = f"{self.declaration(out)} = {text}"
        self._lines[inst] = text
        return text

    def line_of(self, inst: Instruction) -> Optional[str]:
        """The line ``inst`` got when the function was printed (None if it was not printed)."""
        return self._lines.get(inst)

    # ---- statements --------------------------------------------------------------------------
    def stmt(self, stmt: Stmt, indent: int) -> list[str]:
        for cls in type(stmt).__mro__:
            printer = STMT_FORMATS.get(cls)
            if printer is not None:
                return printer(self, stmt, indent)
        args = ", ".join(f"{f.name}={self.value(getattr(stmt, f.name))}" for f in dataclasses.fields(stmt))
        return [INDENT * indent + f"{snake_case(type(stmt).__name__)}({args})"]

    def block(self, body: Optional[SeqStmt], indent: int) -> list[str]:
        lines = self.stmt(body, indent) if body is not None else []
        return lines or [INDENT * indent + "pass"]

    # ---- functions ---------------------------------------------------------------------------
    def param(self, param: Param) -> str:
        if param.kind == "const":
            return f"{param.name}: const = {self.value(param.value)}"
        if param.kind == "pointer":
            return f"{param.name}: ~{self.value(param.dtype)}"
        return f"{param.name}: {self.value(param.dtype)}"

    def function(self, func: Function) -> str:
        params = ", ".join(self.param(p) for p in func.params)
        blocks = func.blocks if isinstance(func.blocks, (tuple, list)) else (func.blocks,)
        lines = [f"kernel {func.name}({params}):",
                 f"{INDENT}attrs.blocks = {self.value(list(blocks))}",
                 f"{INDENT}attrs.warps = {self.value(func.warps)}",
                 f"{INDENT}attrs.arch = {self.value(func.arch)}",
                 f"{INDENT}attrs.shared_bytes = {self.value(func.shared_bytes)}"]
        if func.aligned_pointers:
            lines.append(f"{INDENT}attrs.aligned_pointers = {sorted(func.aligned_pointers)}")
        lines += self.block(func.body, 1)
        return "\n".join(lines) + "\n"


def _sequence(printer: IRPrinter, value: Any) -> str:
    items = [printer.value(v) for v in value]
    if isinstance(value, list):
        return f"[{', '.join(items)}]"
    return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"


# How values print, keyed by type (the most derived registered class of a value wins).
VALUE_FORMATS: dict[type, Callable[[IRPrinter, Any], str]] = {
    bool: lambda p, v: repr(v),
    int: lambda p, v: repr(v),
    float: lambda p, v: repr(v),
    str: lambda p, v: repr(v),
    type(None): lambda p, v: "None",
    tuple: _sequence,
    list: _sequence,
    dict: lambda p, v: "{" + ", ".join(f"{p.value(k)}: {p.value(x)}" for k, x in v.items()) + "}",
    RegisterTensor: lambda p, v: p.name(v),
    SharedTensor: lambda p, v: p.name(v),
    GlobalTensor: lambda p, v: p.name(v),
    Param: lambda p, v: v.name,
    DataType: lambda p, v: v.name,
    PointerType: lambda p, v: f"~{v.dtype.name}",
    MmaAtom: lambda p, v: f"MmaAtom({v.name}, a={v.a_dtype}, b={v.b_dtype}, c={v.c_dtype})",
}


def _seq(p: IRPrinter, stmt: SeqStmt, indent: int) -> list[str]:
    return [line for s in stmt.stmts for line in p.stmt(s, indent)]


def _for(p: IRPrinter, stmt: ForStmt, indent: int) -> list[str]:
    unroll = " unroll" if stmt.unroll else ""
    head = (f"for {p.value(stmt.var)} in range({p.value(stmt.start)}, {p.value(stmt.stop)}, "
            f"{p.value(stmt.step)}){unroll}:")
    return [INDENT * indent + head] + p.block(stmt.body, indent + 1)


def _while(p: IRPrinter, stmt: WhileStmt, indent: int) -> list[str]:
    return [INDENT * indent + f"while {p.value(stmt.cond)}:"] + p.block(stmt.body, indent + 1)


def _if(p: IRPrinter, stmt: IfStmt, indent: int) -> list[str]:
    lines = [INDENT * indent + f"if {p.value(stmt.cond)}:"] + p.block(stmt.then_body, indent + 1)
    if stmt.else_body is not None:
        lines += [INDENT * indent + "else:"] + p.block(stmt.else_body, indent + 1)
    return lines


def _scalar_dtype(value: Any) -> str:
    ty = getattr(value, "ty", None)
    return str(ty.dtype) if ty is not None and hasattr(ty, "dtype") else str(getattr(value, "dtype", "?"))


def _bind(p: IRPrinter, stmt: BindScalar, indent: int) -> list[str]:
    return [INDENT * indent + f"let {p.value(stmt.var)}: {_scalar_dtype(stmt.var)} = {p.value(stmt.value)}"]


def _declare(p: IRPrinter, stmt: DeclareScalar, indent: int) -> list[str]:
    text = f"var {p.value(stmt.buffer)}: {stmt.buffer.dtype}"
    if stmt.value is not None:
        text += f" = {p.value(stmt.value)}"
    return [INDENT * indent + text]


def _assign(p: IRPrinter, stmt: AssignScalar, indent: int) -> list[str]:
    return [INDENT * indent + f"{p.value(stmt.buffer)} = {p.value(stmt.value)}"]


# How statements print, keyed by type; an unknown statement prints its fields like an instruction.
STMT_FORMATS: dict[type, Callable[[IRPrinter, Any, int], list[str]]] = {
    SeqStmt: _seq,
    InstStmt: lambda p, stmt, indent: [INDENT * indent + p.instruction(stmt.inst)],
    ForStmt: _for,
    IfStmt: _if,
    WhileStmt: _while,
    BreakStmt: lambda p, stmt, indent: [INDENT * indent + "break"],
    ContinueStmt: lambda p, stmt, indent: [INDENT * indent + "continue"],
    BindScalar: _bind,
    DeclareScalar: _declare,
    AssignScalar: _assign,
}


def print_function(func: Function) -> str:
    """``func`` as text: header (name, parameters, grid, warps), then the body, one line per
    instruction, loops and branches indented. ``str(func)`` is the same text."""
    return IRPrinter().function(func)


def print_instruction(inst: Instruction) -> str:
    """One instruction on its own (its output declared, tensors named as they are)."""
    return IRPrinter().instruction(inst)
