"""The tile-IR verifier: invariants every pass must keep, checked between passes.

:func:`verify` walks a function in program order and raises :class:`VerificationError` at the first
instruction that breaks one of them, naming the pass that ran last and quoting the instruction as
the printer prints it:

- **definition before use**: a register or shared tensor an instruction reads (any field but
  ``output``) was defined earlier by an instruction still in scope. A tensor defined in a loop body
  or a branch is not visible after it; loop-carried values are written with ``Assign`` into a
  tensor defined before the loop, which is visible.
- **layouts fit**: a register tensor's layout (when set) has the tensor's shape and spreads over
  at most ``func.num_threads`` threads; with ``require_layouts`` (after layout inference) every
  register tensor has one.
- **equal dtypes** where an instruction needs them (:data:`DTYPE_RULES`, keyed by instruction type).
- **shared memory lifetime**: no use of a shared tensor after its ``FreeShared`` in program order
  (a free inside one branch counts after the ``if``), and no second free.

Scalars are not checked: they are TVM expressions, which TVM checks when the TIR is built.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterator, NoReturn, Optional, Union

from tilus_tvm import dtypes
from tilus_tvm.dtypes import DataType
from tilus_tvm.errors import VerificationError
from tilus_tvm.ir import inst as ir
from tilus_tvm.ir.printer import IRPrinter, print_instruction, snake_case
from tilus_tvm.ir.stmt import ForStmt, Function, IfStmt, InstStmt, SeqStmt, Stmt, WhileStmt
from tilus_tvm.ir.tensor import GlobalTensor, RegisterTensor, SharedTensor, Tensor

# A dtype rule: (field, other) pairs; ``other`` is another field (the two tensors' dtypes must be
# equal) or a DataType (the field's dtype must be it). Pairs with a scalar side are skipped.
DtypeRule = Callable[[ir.Instruction], list[tuple[str, Union[str, DataType]]]]


def _binary_rule(inst: ir.Binary) -> list[tuple[str, Union[str, DataType]]]:
    if inst.op in ir.COMPARISON_OPS:
        return [("lhs", "rhs"), ("output", dtypes.boolean)]
    return [("lhs", "rhs"), ("output", "lhs"), ("output", "rhs")]


# Which operands must agree in dtype, by instruction type (a subclass inherits its base's rule).
DTYPE_RULES: dict[type, DtypeRule] = {
    ir.Binary: _binary_rule,
    ir.Where: lambda inst: [("cond", dtypes.boolean), ("x", "y"), ("output", "x"), ("output", "y")],
    ir.Dot: lambda inst: [("a", "b"), ("output", "c")],
    ir.Assign: lambda inst: [("src", "dst")],
    ir.ConvertLayout: lambda inst: [("output", "x")],
    ir.LoadGlobal: lambda inst: [("output", "src")],
    ir.LoadShared: lambda inst: [("output", "src")],
    ir.StoreGlobal: lambda inst: [("src", "dst")],  # the frontend casts before storing; emitters do not
    ir.StoreShared: lambda inst: [("src", "dst")],
}


def _scope_name(tensor: Any) -> str:
    return "shared" if isinstance(tensor, SharedTensor) else "register"


def _tensors_in(value: Any) -> Iterator[Tensor]:
    """Register and shared tensors in a field value (tuples, lists and dicts searched)."""
    if isinstance(value, (RegisterTensor, SharedTensor)):
        yield value
    elif isinstance(value, (tuple, list)):
        for v in value:
            yield from _tensors_in(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors_in(v)


def tensors_read(inst: ir.Instruction) -> list[Tensor]:
    """Register and shared tensors ``inst`` refers to in any field but ``output``, each once."""
    found: list[Tensor] = []
    for f in dataclasses.fields(inst):
        if f.name == "output":
            continue
        for t in _tensors_in(getattr(inst, f.name)):
            if not any(t is seen for seen in found):
                found.append(t)
    return found


@dataclasses.dataclass
class _State:
    visible: set  # tensors defined so far and still in scope
    freed: dict  # shared tensor -> the FreeShared that freed it

    def copy(self) -> "_State":
        return _State(set(self.visible), dict(self.freed))


class Verifier:
    def __init__(self, func: Function, pass_name: str, require_layouts: bool):
        self.func = func
        self.pass_name = pass_name
        self.require_layouts = require_layouts
        self.ever_defined: set = set()
        self.layouts_checked: set = set()
        self._printer: Optional[IRPrinter] = None

    def run(self) -> None:
        self.stmt(self.func.body, _State(set(), {}))

    # ---- errors ------------------------------------------------------------------------------
    @property
    def printer(self) -> IRPrinter:
        """A printer that has printed the whole function, so names and lines match a dump."""
        if self._printer is None:
            self._printer = IRPrinter()
            try:
                self._printer.function(self.func)
            except Exception:  # noqa: BLE001 - a broken program must still get its error message
                self._printer = IRPrinter()
        return self._printer

    def fail(self, inst: ir.Instruction, reason: Callable[[IRPrinter], str]) -> NoReturn:
        printer = self.printer
        line = printer.line_of(inst) or print_instruction(inst)
        raise VerificationError(f"after pass '{self.pass_name}': {reason(printer)}\n"
                                f"  in kernel {self.func.name}: {line}")

    # ---- statements --------------------------------------------------------------------------
    def stmt(self, stmt: Stmt, state: _State) -> None:
        if isinstance(stmt, SeqStmt):
            for s in stmt.stmts:
                self.stmt(s, state)
        elif isinstance(stmt, InstStmt):
            self.instruction(stmt.inst, state)
        elif isinstance(stmt, (ForStmt, WhileStmt)):
            body = state.copy()
            self.stmt(stmt.body, body)
            state.freed = body.freed  # what the body defined goes out of scope; what it freed stays freed
        elif isinstance(stmt, IfStmt):
            then_state, else_state = state.copy(), state.copy()
            self.stmt(stmt.then_body, then_state)
            if stmt.else_body is not None:
                self.stmt(stmt.else_body, else_state)
            state.freed = {**else_state.freed, **then_state.freed}
        # scalar statements (BindScalar, DeclareScalar, AssignScalar) and break/continue hold no tensors

    # ---- instructions ------------------------------------------------------------------------
    def instruction(self, inst: ir.Instruction, state: _State) -> None:
        read = tensors_read(inst)
        for tensor in read:
            self.check_defined(inst, tensor, state)
        out = inst.defined
        for tensor in read + ([out] if out is not None else []):
            if isinstance(tensor, RegisterTensor):
                self.check_layout(inst, tensor)
        self.check_dtypes(inst)
        if out is not None:
            state.visible.add(out)
            state.freed.pop(out, None)
            self.ever_defined.add(out)
        if isinstance(inst, ir.FreeShared):
            state.freed[inst.tensor] = inst

    def check_defined(self, inst: ir.Instruction, tensor: Tensor, state: _State) -> None:
        if isinstance(tensor, SharedTensor):
            tensor = tensor.root  # a view (smem[stage]) is defined and freed with the tensor it views
        scope = _scope_name(tensor)
        if tensor not in state.visible:
            if tensor in self.ever_defined:
                self.fail(inst, lambda p: f"{scope} tensor {p.name(tensor)} is used outside the loop or branch "
                                          f"that defines it")
            self.fail(inst, lambda p: f"{scope} tensor {p.name(tensor)} is used before it is defined")
        first_free = state.freed.get(tensor)
        if first_free is not None:
            if isinstance(inst, ir.FreeShared):
                self.fail(inst, lambda p: f"shared tensor {p.name(tensor)} is freed twice; it was freed "
                                          f"before by `{p.line_of(first_free)}`")
            self.fail(inst, lambda p: f"shared tensor {p.name(tensor)} is used after it was freed by "
                                      f"`{p.line_of(first_free)}`")

    def check_layout(self, inst: ir.Instruction, tensor: RegisterTensor) -> None:
        if tensor in self.layouts_checked:
            return
        self.layouts_checked.add(tensor)
        layout = tensor.layout
        if layout is None:
            if self.require_layouts:
                self.fail(inst, lambda p: f"register tensor {p.name(tensor)} has no layout (every register "
                                          f"tensor needs one once layout inference has run)")
            return
        if tuple(layout.shape) != tuple(tensor.shape):
            self.fail(inst, lambda p: f"register tensor {p.name(tensor)} of shape {list(tensor.shape)} has a "
                                      f"layout of shape {list(layout.shape)}")
        if layout.num_threads > self.func.num_threads:
            warps = f"{self.func.warps} warp" + ("s" if self.func.warps != 1 else "")
            self.fail(inst, lambda p: f"the layout of register tensor {p.name(tensor)} spreads over "
                                      f"{layout.num_threads} threads but the block has {self.func.num_threads} "
                                      f"({warps})")

    def check_dtypes(self, inst: ir.Instruction) -> None:
        rule = next((DTYPE_RULES[cls] for cls in type(inst).__mro__ if cls in DTYPE_RULES), None)
        if rule is None:
            return
        for name, other in rule(inst):
            value = getattr(inst, name)
            if not isinstance(value, (Tensor, GlobalTensor)):
                continue
            if isinstance(other, DataType):
                if value.dtype != other:
                    self.fail(inst, lambda p: f"{snake_case(type(inst).__name__)}: {name} {p.name(value)} is "
                                              f"{value.dtype.name}, expected {other.name}")
                continue
            other_value = getattr(inst, other)
            if isinstance(other_value, (Tensor, GlobalTensor)) and value.dtype != other_value.dtype:
                self.fail(inst, lambda p: f"{snake_case(type(inst).__name__)}: {name} {p.name(value)} is "
                                          f"{value.dtype.name} but {other} {p.name(other_value)} is "
                                          f"{other_value.dtype.name}; they must have the same dtype")


def verify(func: Function, pass_name: str, require_layouts: bool = False) -> None:
    """Check ``func``'s invariants (see the module docstring) after the pass named ``pass_name``.

    ``require_layouts``: every register tensor must have a layout (true once layout inference ran).
    Raises :class:`~tilus_tvm.errors.VerificationError` naming the pass and quoting the instruction.
    """
    Verifier(func, pass_name, require_layouts).run()
