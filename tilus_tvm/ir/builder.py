"""The statement builder: the one place that creates instructions, after checking their operands.

The frontend owns one builder per kernel translation and drives it while it walks the kernel;
``Script`` instruction methods reach it through the script's own translation state (never a
module global). Python operators on register tensors build
:class:`~tilus_tvm.ir.values.TensorValue`s, which :meth:`Builder.materialize` turns into
instructions. Every check raises :class:`ScriptError` naming the instruction, the operands (name,
dtype, shape) and what was expected.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator, Optional, Sequence

from tilus_tvm import dtypes
from tilus_tvm.dtypes import DataType
from tilus_tvm.errors import ScriptError
from tilus_tvm.ir import inst as ir
from tilus_tvm.ir.printf import check_element_format, element_format, printf_arguments
from tilus_tvm.ir.stmt import BreakStmt, ContinueStmt, ForStmt, IfStmt, InstStmt, SeqStmt, Stmt, WhileStmt
from tilus_tvm.ir.tensor import GlobalTensor, RegisterTensor, SharedTensor
from tilus_tvm.ir.values import TensorValue, cast_value, describe, is_scalar

_describe = describe


class Builder:
    """``warps`` returns the block's warp count once the kernel has set ``self.attrs.warps``."""

    def __init__(self, warps: Callable[[], Optional[int]]):
        self._warps = warps
        self._stack: list[SeqStmt] = [SeqStmt()]
        self._counter = 0
        # pointer var -> (tensor, indices) of the element it addresses (``t.item_ptr(...)`` once bound),
        # so instructions that act on one element (semaphores) can name the tensor they touch
        self.element_pointers: dict = {}

    @property
    def num_threads(self) -> int:
        warps = self._warps()
        if warps is None:
            raise ScriptError("set self.attrs.warps before creating tensors with a layout")
        return warps * 32

    # --- structure ------------------------------------------------------------------------------
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

    def while_loop(self, cond, body: SeqStmt) -> None:
        self.append(WhileStmt(cond, body))

    def break_loop(self) -> None:
        self.append(BreakStmt())

    def continue_loop(self) -> None:
        self.append(ContinueStmt())

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
        if tensor.base is not None:
            raise ScriptError(f"free_shared: {tensor.describe()} is a view; free {tensor.root.describe()}")
        self.emit(ir.FreeShared(tensor))

    def global_view(self, tensor: GlobalTensor) -> GlobalTensor:
        self.emit(ir.GlobalView(tensor))
        return tensor

    def global_subview(self, parent: GlobalTensor, indices: Sequence[Any]) -> GlobalTensor:
        """``parent[indices...]`` over the remaining dimensions (the checks are the caller's)."""
        rank = len(indices)
        view = GlobalTensor(parent.dtype, tuple(parent.shape[rank:]), tuple(parent.strides[rank:]), parent.pointer,
                            name=self.fresh_name("g"), compact=parent.compact, parent=parent, leading=tuple(indices))
        self.emit(ir.GlobalSubview(view, parent, tuple(indices)))
        return view

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

    def materialize(self, value: Any, out: Optional[RegisterTensor] = None) -> Any:
        """A register tensor holding ``value``: a TensorValue's tree becomes one instruction per node
        (operands first), the last one writing into ``out`` when given; a value with its own way of
        being made (``materialize_with``: an element address) makes itself; register tensors and
        anything else are returned as they are."""
        if hasattr(type(value), "materialize_with"):
            return value.materialize_with(self)
        if not isinstance(value, TensorValue):
            if out is not None and isinstance(value, RegisterTensor):
                self.assign(self.destination(value.describe(), value.dtype, value.shape, out), value)
                return out
            return value
        operands = [self.materialize(v) for v in value.operands]
        out = self.destination(value.op, value.dtype, value.shape, out)
        if hasattr(value, "instruction"):
            self.emit(value.instruction(out, operands))
        elif value.op == "cast":
            self.emit(ir.Cast(out, operands[0]))
        elif value.op == "where":
            self.emit(ir.Where(out, *operands))
        elif len(operands) == 1:
            self.emit(ir.Unary(out, operands[0], value.op))
        else:
            self.emit(ir.Binary(out, operands[0], operands[1], value.op))
        return out

    def destination(self, op: str, dtype: DataType, shape: Sequence[int], out: Optional[RegisterTensor]
                    ) -> RegisterTensor:
        """The tensor an instruction writes: ``out`` (checked to have the result's dtype and shape) or a
        new one."""
        if out is None:
            return self.new_register(dtype, shape)
        if not isinstance(out, RegisterTensor) or out.dtype != dtype or tuple(out.shape) != tuple(shape):
            raise ScriptError(f"{op}: out {_describe(out)} must be a register tensor of dtype {dtype.name} and "
                              f"shape {list(shape)}, the result's")
        return out

    def cast(self, x: Any, dtype: DataType) -> RegisterTensor:
        return self.materialize(cast_value(x, dtype))

    def reduce(self, x: Any, dim: int, op: str, keepdim: bool, out: Optional[RegisterTensor] = None
               ) -> RegisterTensor:
        x = self.materialize(x)
        self._require_register(op, x, "x")
        if not isinstance(dim, int) or not -len(x.shape) <= dim < len(x.shape):
            raise ScriptError(f"{op}: dim {dim!r} is out of range for {x.describe()}")
        dim %= len(x.shape)
        if op != "sum" and x.dtype is dtypes.boolean:
            raise ScriptError(f"{op}: cannot reduce bool tensor {x.describe()}")
        from tilus_tvm.ir.values import _reject_packed

        _reject_packed(op, x)
        shape = list(x.shape)
        if keepdim:
            shape[dim] = 1
        else:
            del shape[dim]
        out = self.destination(op, x.dtype, shape, out)
        self.emit(ir.Reduce(out, x, dim, op, keepdim))
        return out

    def dot_operands(self, op: str, a: Any, b: Any, c: Any, batched: bool = False) -> tuple[RegisterTensor, ...]:
        """``a`` [m, k], ``b`` [k, n] and ``c`` [m, n] as register tensors of a matrix product, checked:
        2-D (``batched``: 3-D too, ``a`` [batch, m, k], ``b`` [batch, k, n], ``c`` [batch, m, n]), shapes that
        agree, a and b of one dtype (``op`` names the instruction in errors)."""
        a, b, c = self.materialize(a), self.materialize(b), self.materialize(c)
        ranks = (2, 3) if batched else (2,)
        for what, t in (("a", a), ("b", b), ("c", c)):
            self._require_register(op, t, what)
            if len(t.shape) not in ranks or len(t.shape) != len(a.shape):
                raise ScriptError(f"{op}: {what} must be a {' or '.join(f'{r}-D' for r in ranks)} register tensor "
                                  f"like a {list(a.shape)}, got {t.describe()}")
        lead = tuple(a.shape[:-2])
        (m, k), (k2, n) = a.shape[-2:], b.shape[-2:]
        if k != k2 or tuple(c.shape) != lead + (m, n) or tuple(b.shape[:-2]) != lead:
            batch = "batch, " if lead else ""
            raise ScriptError(f"{op}: incompatible shapes a {list(a.shape)}, b {list(b.shape)}, c {list(c.shape)}: "
                              f"expected a [{batch}m, k], b [{batch}k, n], c [{batch}m, n]")
        if a.dtype != b.dtype:
            raise ScriptError(f"{op}: a and b must have the same dtype, got {a.describe()} and {b.describe()}")
        return a, b, c

    def dot(self, a: Any, b: Any, c: Any, out: Optional[RegisterTensor]):
        a, b, c = self.dot_operands("dot", a, b, c)
        allowed = {"float16": ("float32", "float16"), "bfloat16": ("float32",), "int8": ("int32",),
                   "float32": ("float32",)}
        if a.dtype.name not in allowed:
            raise ScriptError(f"dot: operand dtype {a.dtype.name} is not supported; use float16, bfloat16, "
                              f"int8 or float32")
        if c.dtype.name not in allowed[a.dtype.name]:
            raise ScriptError(f"dot: accumulator {c.describe()} must be one of {allowed[a.dtype.name]} for "
                              f"{a.dtype.name} operands")
        out = self.dot_output("dot", c, out)
        self.emit(ir.Dot(out, a, b, c))
        return out

    def dot_output(self, op: str, c: RegisterTensor, out: Optional[RegisterTensor]) -> RegisterTensor:
        """The result tensor of a matrix product: ``out`` when given (it must be like ``c``), else a new one."""
        if out is None:
            return self.new_register(c.dtype, c.shape)
        if not isinstance(out, RegisterTensor) or out.shape != c.shape or out.dtype != c.dtype:
            raise ScriptError(f"{op}: out {_describe(out)} must be a register tensor like c {c.describe()}")
        return out

    def assign(self, dst: RegisterTensor, src: Any) -> None:
        src = self.materialize(src)
        if not isinstance(src, RegisterTensor) or src.shape != dst.shape:
            raise ScriptError(f"cannot assign {_describe(src)} to {dst.describe()}: a register tensor variable "
                              f"keeps its shape when it is reassigned inside a loop or branch")
        if src.dtype != dst.dtype:
            src = self.cast(src, dst.dtype)
        self.emit(ir.Assign(dst, src))

    def sync(self) -> None:
        self.emit(ir.Sync())

    def printf(self, fmt: str, args: Sequence[Any]) -> None:
        for a in args:
            if not is_scalar(a) and not isinstance(a, str):
                raise ScriptError(f"printf: argument {_describe(a)} is not a scalar")
        self.emit(ir.Printf(*printf_arguments(fmt, args)))

    def print_tensor(self, msg: Any, tensor: Any, fmt: Optional[str]) -> None:
        tensor = self.materialize(tensor)
        if not isinstance(msg, str):
            raise ScriptError(f"print_tensor: msg must be a str, got {msg!r}")
        if isinstance(tensor, GlobalTensor):
            raise ScriptError(f"print_tensor: {tensor.describe()} is a global tensor; load the tile to print into "
                              f"registers first (load_global)")
        if not isinstance(tensor, (RegisterTensor, SharedTensor)):
            raise ScriptError(f"print_tensor: tensor must be a register or shared tensor, got {_describe(tensor)}")
        if tensor.dtype.nbits % 8 or tensor.dtype.nbits > 64:
            raise ScriptError(f"print_tensor: cannot print {tensor.describe()}: elements of {tensor.dtype.nbits} "
                              f"bits; cast the tile to a type of 8 to 64 bits first")
        fmt = element_format(tensor.dtype) if fmt is None else check_element_format("print_tensor", fmt, tensor.dtype)
        self.emit(ir.PrintTensor(msg, tensor, fmt))
