"""The statement builder: the one place that creates instructions, after checking their operands.

The frontend drives it while it walks a kernel; Python operators on register tensors reach it
through :func:`current_builder`. Every check raises :class:`ScriptError` naming the instruction,
the operands (name, dtype, shape) and what was expected.
"""
from __future__ import annotations

import contextlib
import numbers
from typing import Any, Callable, Iterator, Optional, Sequence

from tilus_tvm import dtypes
from tilus_tvm.dtypes import DataType
from tilus_tvm.errors import ScriptError
from tilus_tvm.ir import inst as ir
from tilus_tvm.ir.scalar import is_expr
from tilus_tvm.ir.stmt import ForStmt, IfStmt, InstStmt, SeqStmt, Stmt
from tilus_tvm.ir.tensor import GlobalTensor, RegisterTensor, SharedTensor

_ACTIVE: list["Builder"] = []


def current_builder() -> Optional["Builder"]:
    return _ACTIVE[-1] if _ACTIVE else None


def is_scalar(value: Any) -> bool:
    """A Python number or a TVM scalar expression."""
    if isinstance(value, (bool, numbers.Number)):
        return True
    return is_expr(value)


def _describe(value: Any) -> str:
    if isinstance(value, (RegisterTensor, SharedTensor, GlobalTensor)):
        return value.describe()
    return repr(value)


def broadcast_shape(op: str, a: Sequence[int], b: Sequence[int]) -> tuple[int, ...]:
    if len(a) != len(b):
        raise ScriptError(f"{op}: operands of shapes {list(a)} and {list(b)} have different ranks; "
                          f"broadcasting needs equal ranks (use a [n, 1] shaped tensor)")
    out = []
    for x, y in zip(a, b):
        if x != y and 1 not in (x, y):
            raise ScriptError(f"{op}: shapes {list(a)} and {list(b)} cannot be broadcast together")
        out.append(max(x, y))
    return tuple(out)


class Builder:
    """``warps`` returns the block's warp count once the kernel has set ``self.attrs.warps``."""

    def __init__(self, warps: Callable[[], Optional[int]]):
        self._warps = warps
        self._stack: list[SeqStmt] = [SeqStmt()]
        self._counter = 0

    @property
    def num_threads(self) -> int:
        warps = self._warps()
        if warps is None:
            raise ScriptError("set self.attrs.warps before creating tensors with a layout")
        return warps * 32

    # --- structure ------------------------------------------------------------------------------
    @contextlib.contextmanager
    def activate(self) -> Iterator["Builder"]:
        _ACTIVE.append(self)
        try:
            yield self
        finally:
            _ACTIVE.pop()

    @property
    def body(self) -> SeqStmt:
        return self._stack[0]

    def append(self, stmt: Stmt) -> None:
        self._stack[-1].stmts.append(stmt)

    def emit(self, instruction: ir.Instruction) -> ir.Instruction:
        self.append(InstStmt(instruction))
        return instruction

    @contextlib.contextmanager
    def nested(self) -> Iterator[SeqStmt]:
        body = SeqStmt()
        self._stack.append(body)
        try:
            yield body
        finally:
            self._stack.pop()

    def for_range(self, var, start, stop, step, body: SeqStmt, unroll: bool = False) -> None:
        self.append(ForStmt(var, start, stop, step, body, unroll))

    def if_then(self, cond, then_body: SeqStmt, else_body: Optional[SeqStmt]) -> None:
        self.append(IfStmt(cond, then_body, else_body))

    def fresh_name(self, prefix: str) -> str:
        self._counter += 1
        return f"{prefix}{self._counter}"

    def new_register(self, dtype: DataType, shape: Sequence[int], layout=None, prefix: str = "r") -> RegisterTensor:
        return RegisterTensor(dtype, tuple(int(s) for s in shape), layout=layout, name=self.fresh_name(prefix))

    # --- memory ---------------------------------------------------------------------------------
    def allocate_register(self, dtype: DataType, shape: Sequence[int], layout, init) -> RegisterTensor:
        tensor = self.new_register(dtype, shape, layout)
        self.emit(ir.AllocateRegister(tensor, init))
        return tensor

    def allocate_shared(self, dtype: DataType, shape: Sequence[int], layout) -> SharedTensor:
        tensor = SharedTensor(dtype, tuple(shape), layout=layout, name=self.fresh_name("s"))
        self.emit(ir.AllocateShared(tensor))
        return tensor

    def free_shared(self, tensor: SharedTensor) -> None:
        if not isinstance(tensor, SharedTensor):
            raise ScriptError(f"free_shared: expected a shared tensor, got {_describe(tensor)}")
        self.emit(ir.FreeShared(tensor))

    def global_view(self, tensor: GlobalTensor) -> GlobalTensor:
        self.emit(ir.GlobalView(tensor))
        return tensor

    def load_global(self, src: GlobalTensor, offsets, shape, dims, layout) -> RegisterTensor:
        out = self.new_register(src.dtype, shape, layout)
        self.emit(ir.LoadGlobal(out, src, tuple(offsets), tuple(dims)))
        return out

    def store_global(self, dst: GlobalTensor, src: RegisterTensor, offsets, dims) -> None:
        self.emit(ir.StoreGlobal(dst, src, tuple(offsets), tuple(dims)))

    def load_shared(self, src: SharedTensor, offsets, shape, dims, layout) -> RegisterTensor:
        out = self.new_register(src.dtype, shape, layout)
        self.emit(ir.LoadShared(out, src, tuple(offsets), tuple(dims)))
        return out

    def store_shared(self, dst: SharedTensor, src: RegisterTensor, offsets, dims) -> None:
        self.emit(ir.StoreShared(dst, src, tuple(offsets), tuple(dims)))

    # --- computation ----------------------------------------------------------------------------
    def _require_register(self, op: str, value: Any, what: str) -> RegisterTensor:
        if not isinstance(value, RegisterTensor):
            raise ScriptError(f"{op}: {what} must be a register tensor, got {_describe(value)}")
        return value

    def unary(self, x: RegisterTensor, op: str) -> RegisterTensor:
        self._require_register(op, x, "the operand")
        if op == "not" and x.dtype is not dtypes.boolean:
            raise ScriptError(f"not: operand {x.describe()} must be bool")
        if op not in ("neg", "abs", "not") and not x.dtype.is_float:
            raise ScriptError(f"{op}: operand {x.describe()} must have a floating-point dtype")
        out = self.new_register(x.dtype, x.shape)
        self.emit(ir.Unary(out, x, op))
        return out

    def binary(self, lhs: Any, rhs: Any, op: str) -> RegisterTensor:
        tensors = [v for v in (lhs, rhs) if isinstance(v, RegisterTensor)]
        if not tensors:
            raise ScriptError(f"{op}: at least one operand must be a register tensor, got {lhs!r} and {rhs!r}")
        for v in (lhs, rhs):
            if not isinstance(v, RegisterTensor) and not is_scalar(v):
                raise ScriptError(f"{op}: operand {_describe(v)} is neither a register tensor nor a scalar")
        if len(tensors) == 2 and lhs.dtype != rhs.dtype:
            raise ScriptError(f"{op}: dtype mismatch between {lhs.describe()} and {rhs.describe()}; "
                              f"cast one side with self.cast(x, dtype)")
        dtype = tensors[0].dtype
        shape = tensors[0].shape if len(tensors) == 1 else broadcast_shape(op, lhs.shape, rhs.shape)
        if op in ("and", "or") and dtype is not dtypes.boolean:
            raise ScriptError(f"{op}: operands must be bool tensors, got {_describe(tensors[0])}")
        if op == "div" and not dtype.is_float:
            raise ScriptError(f"div: `/` needs floating-point tensors, got {_describe(tensors[0])}; use // for "
                              f"integer division")
        if op in ("floordiv", "mod") and not dtype.is_integer:
            raise ScriptError(f"{op}: operands must be integer tensors, got {_describe(tensors[0])}")
        out_dtype = dtypes.boolean if op in ir.COMPARISON_OPS else dtype
        out = self.new_register(out_dtype, shape)
        self.emit(ir.Binary(out, lhs, rhs, op))
        return out

    def where(self, cond: Any, x: Any, y: Any) -> RegisterTensor:
        self._require_register("where", cond, "cond")
        if cond.dtype is not dtypes.boolean:
            raise ScriptError(f"where: cond {cond.describe()} must be a bool tensor")
        values = [v for v in (x, y) if isinstance(v, RegisterTensor)]
        for v in (x, y):
            if not isinstance(v, RegisterTensor) and not is_scalar(v):
                raise ScriptError(f"where: operand {_describe(v)} is neither a register tensor nor a scalar")
        if not values:
            raise ScriptError("where: at least one of x, y must be a register tensor")
        if len(values) == 2 and x.dtype != y.dtype:
            raise ScriptError(f"where: dtype mismatch between {x.describe()} and {y.describe()}")
        shape = cond.shape
        for v in values:
            shape = broadcast_shape("where", shape, v.shape)
        out = self.new_register(values[0].dtype, shape)
        self.emit(ir.Where(out, cond, x, y))
        return out

    def cast(self, x: RegisterTensor, dtype: DataType) -> RegisterTensor:
        self._require_register("cast", x, "x")
        dtype = dtypes.as_dtype(dtype)
        out = self.new_register(dtype, x.shape)
        self.emit(ir.Cast(out, x))
        return out

    def reduce(self, x: RegisterTensor, dim: int, op: str, keepdim: bool) -> RegisterTensor:
        self._require_register(op, x, "x")
        if not isinstance(dim, int) or not -len(x.shape) <= dim < len(x.shape):
            raise ScriptError(f"{op}: dim {dim!r} is out of range for {x.describe()}")
        dim %= len(x.shape)
        if op != "sum" and x.dtype is dtypes.boolean:
            raise ScriptError(f"{op}: cannot reduce bool tensor {x.describe()}")
        shape = list(x.shape)
        if keepdim:
            shape[dim] = 1
        else:
            del shape[dim]
        out = self.new_register(x.dtype, shape)
        self.emit(ir.Reduce(out, x, dim, op, keepdim))
        return out

    def dot(self, a: RegisterTensor, b: RegisterTensor, c: RegisterTensor, out: Optional[RegisterTensor]):
        for what, t in (("a", a), ("b", b), ("c", c)):
            self._require_register("dot", t, what)
            if len(t.shape) != 2:
                raise ScriptError(f"dot: {what} must be a 2-D register tensor, got {t.describe()}")
        (m, k), (k2, n) = a.shape, b.shape
        if k != k2 or tuple(c.shape) != (m, n):
            raise ScriptError(f"dot: incompatible shapes a {list(a.shape)}, b {list(b.shape)}, c {list(c.shape)}: "
                              f"expected a [m, k], b [k, n], c [m, n]")
        if a.dtype != b.dtype:
            raise ScriptError(f"dot: a and b must have the same dtype, got {a.describe()} and {b.describe()}")
        allowed = {"float16": ("float32", "float16"), "bfloat16": ("float32",), "int8": ("int32",),
                   "float32": ("float32",)}
        if a.dtype.name not in allowed:
            raise ScriptError(f"dot: operand dtype {a.dtype.name} is not supported; use float16, bfloat16, "
                              f"int8 or float32")
        if c.dtype.name not in allowed[a.dtype.name]:
            raise ScriptError(f"dot: accumulator {c.describe()} must be one of {allowed[a.dtype.name]} for "
                              f"{a.dtype.name} operands")
        if out is None:
            out = self.new_register(c.dtype, c.shape)
        elif not isinstance(out, RegisterTensor) or out.shape != c.shape or out.dtype != c.dtype:
            raise ScriptError(f"dot: out {_describe(out)} must be a register tensor like c {c.describe()}")
        self.emit(ir.Dot(out, a, b, c))
        return out

    def assign(self, dst: RegisterTensor, src: RegisterTensor) -> None:
        if not isinstance(src, RegisterTensor) or src.shape != dst.shape:
            raise ScriptError(f"cannot assign {_describe(src)} to {dst.describe()}: a register tensor variable "
                              f"keeps its shape when it is reassigned inside a loop or branch")
        if src.dtype != dst.dtype:
            src = self.cast(src, dst.dtype)
        self.emit(ir.Assign(dst, src))

    def sync(self) -> None:
        self.emit(ir.Sync())

    def printf(self, fmt: str, args: Sequence[Any]) -> None:
        if not isinstance(fmt, str):
            raise ScriptError(f"printf: the format must be a str, got {fmt!r}")
        for a in args:
            if not is_scalar(a) and not isinstance(a, str):
                raise ScriptError(f"printf: argument {_describe(a)} is not a scalar")
        self.emit(ir.Printf(fmt, tuple(args)))
