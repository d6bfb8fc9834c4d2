"""Statements and functions of the tile IR.

Scalars are TVM ``PrimExpr``s throughout: the tile IR adds tiles and instructions on top of TVM's
scalar language, so scalar arithmetic written in a kernel is already in its final form.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator, Optional

from tilus_tvm.dtypes import DataType, PointerType
from tilus_tvm.ir.inst import Instruction


@dataclass(eq=False)
class Stmt:
    pass


@dataclass(eq=False)
class SeqStmt(Stmt):
    stmts: list[Stmt] = field(default_factory=list)


@dataclass(eq=False)
class InstStmt(Stmt):
    inst: Instruction


@dataclass(eq=False)
class ForStmt(Stmt):
    var: Any  # tvm.tirx.Var
    start: Any
    stop: Any
    step: Any
    body: SeqStmt
    unroll: bool = False


@dataclass(eq=False)
class IfStmt(Stmt):
    cond: Any
    then_body: SeqStmt
    else_body: Optional[SeqStmt] = None


@dataclass(eq=False)
class WhileStmt(Stmt):
    """``while cond: body``; ``cond`` is re-evaluated before every iteration (it reads mutable scalars)."""

    cond: Any
    body: SeqStmt


@dataclass(eq=False)
class BreakStmt(Stmt):
    """Leave the innermost enclosing ``ForStmt`` or ``WhileStmt``."""


@dataclass(eq=False)
class ContinueStmt(Stmt):
    """Go to the next iteration of the innermost enclosing ``ForStmt`` or ``WhileStmt``."""


@dataclass(eq=False)
class BindScalar(Stmt):
    """An immutable scalar ``var = value`` (``offset: int32 = ...`` that is never reassigned)."""

    var: Any  # tvm.tirx.Var
    value: Any


@dataclass(eq=False)
class DeclareScalar(Stmt):
    """A mutable scalar: a one-element local buffer; reads are ``buffer[0]``."""

    buffer: Any  # tvm.tirx.Buffer
    value: Any = None


@dataclass(eq=False)
class AssignScalar(Stmt):
    buffer: Any
    value: Any


@dataclass(eq=False)
class Param:
    """A kernel parameter. ``kind``: "scalar" (run time), "pointer" (a tensor), "const" (compile time)."""

    name: str
    kind: str
    dtype: Optional[DataType] = None  # element type for pointers, value type for scalars
    var: Any = None  # tvm.tirx.Var for scalars
    buffer: Any = None  # tvm.tirx.Buffer for pointers: flat, or shaped by the kernel ABI pass
    shaped: bool = False  # the buffer has the shape of the pointer's global views (see passes/kernel_abi.py)
    reads: bool = False  # the kernel loads through this pointer
    writes: bool = False  # the kernel stores through this pointer
    value: Any = None  # the constant for "const"
    workspace: bool = False  # a pointer the runtime allocates (self.global_tensor), not a Script parameter
    wide: bool = False  # reached only through sub-views (64-bit bases): may exceed 2**31 elements (kernel_abi.py)

    @property
    def annotation(self) -> Any:
        return PointerType(self.dtype) if self.kind == "pointer" else self.dtype


@dataclass(eq=False)
class Function:
    name: str
    params: list[Param]
    blocks: tuple[Any, ...]  # grid extents (x, y, z), ints or PrimExprs of scalar params
    warps: int
    body: SeqStmt
    block_vars: tuple[Any, ...] = ()  # IterVars of blockIdx.x/y/z used by the body
    shared_bytes: int = 0  # size of the dynamic shared-memory pool, set by planning
    aligned_pointers: frozenset = frozenset()  # names of pointer params known 16-byte aligned at launch
    arch: str = "sm_80"  # the target: selects each instruction's implementation (tilus_tvm/instructions)
    min_blocks_per_sm: Optional[int] = None  # occupancy the register allocation must leave room for
    dependent_launch: bool = False  # launched with programmatic dependent launch (attrs.dependent_launch)

    def aligned(self, param: Param) -> bool:
        """Whether vector accesses may assume ``param``'s data pointer is 16-byte aligned (workspaces
        are: the runtime passes whole torch allocations)."""
        return param.workspace or param.name in self.aligned_pointers

    @property
    def num_threads(self) -> int:
        return self.warps * 32

    def analyzer(self):
        """A TVM arithmetic analyzer that knows the kernel's immutable scalars (``offset: int32 = ...``),
        so divisibility and bounds of expressions over them can be proven."""
        cached = getattr(self, "_analyzer", None)
        if cached is None:
            from tvm import sym

            cached = sym.Analyzer()
            for stmt in walk(self.body):
                if isinstance(stmt, BindScalar):
                    cached.bind(stmt.var, stmt.value)
            self._analyzer = cached
        return cached

    def __str__(self) -> str:
        from tilus_tvm.ir.printer import print_function  # the printer imports this module

        return print_function(self)


def walk(stmt: Stmt) -> Iterator[Stmt]:
    """Every statement under ``stmt`` in program order (pre-order)."""
    yield stmt
    if isinstance(stmt, SeqStmt):
        for s in stmt.stmts:
            yield from walk(s)
    elif isinstance(stmt, (ForStmt, WhileStmt)):
        yield from walk(stmt.body)
    elif isinstance(stmt, IfStmt):
        yield from walk(stmt.then_body)
        if stmt.else_body is not None:
            yield from walk(stmt.else_body)


def jumps_out(body: SeqStmt) -> bool:
    """Whether ``body`` (a loop's) holds a ``break`` or ``continue`` of that loop, not of a loop inside it."""
    for stmt in body.stmts:
        if isinstance(stmt, (BreakStmt, ContinueStmt)):
            return True
        if isinstance(stmt, SeqStmt) and jumps_out(stmt):
            return True
        if isinstance(stmt, IfStmt) and (jumps_out(stmt.then_body)
                                         or (stmt.else_body is not None and jumps_out(stmt.else_body))):
            return True
    return False


def instructions(stmt: Stmt) -> Iterator[Instruction]:
    """Every instruction under ``stmt`` in program order."""
    for s in walk(stmt):
        if isinstance(s, InstStmt):
            yield s.inst
