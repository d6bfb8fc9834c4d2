"""Loops of the kernel language: ``for`` (run-time ``range``/``self.range`` loops, and loops over
compile-time iterables unrolled while translating), ``while``, ``break`` and ``continue``.

A run-time loop becomes a tile-IR ``ForStmt``/``WhileStmt``; ``break``/``continue`` in it become
``BreakStmt``/``ContinueStmt`` (TIR ``break``/``continue``), under run-time conditions or not. In a
loop unrolled while translating, ``break``/``continue`` act at compile time: they stop the Python
iteration (or the current item), so they must not sit under a run-time condition.

After a run-time ``break``/``continue`` the rest of the enclosing run-time branch or loop body can
never run: translation skips it (:class:`Jump` carries control to the end of that body).
"""
from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass
from typing import Any

from tvm import tirx

from tilus_tvm.errors import ScriptError
from tilus_tvm.ir.scalar import c_identifier, expr_dtype, is_expr
from tilus_tvm.ir.values import is_tensor_like
from tilus_tvm.lang.script import LoopRange

class ControlFlow(Exception):
    """Stops translating statements; not an error (visit_body lets it through)."""


class Jump(ControlFlow):
    """Raised after a run-time ``break``/``continue`` was emitted: the statements after it, up to the end
    of the enclosing run-time branch or loop body, can never run and are not translated."""


class UnrolledJump(ControlFlow):
    """``break``/``continue`` of a loop unrolled while translating (``kind`` says which)."""

    def __init__(self, kind: str):
        super().__init__(kind)
        self.kind = kind


@dataclass
class Loop:
    """A loop being translated: ``unrolled`` when it is unrolled while translating; ``branches`` is how many
    run-time branches were open when it started (a compile-time ``break`` must not sit in a newer one)."""

    unrolled: bool
    branches: int


class LoopStatements:
    """The loop statements of :class:`~tilus_tvm.lang.frontend.Transpiler` (which supplies ``builder``,
    ``scopes``, ``loops``, ``runtime_branches``, ``eval``, ``lookup``, ``bind_target`` and ``visit_body``)."""

    def visit_for(self, node: ast.For) -> None:
        if node.orelse:
            raise ScriptError("for ... else is not supported")
        loop = self.loop_iterable(node.iter)
        if not isinstance(loop, LoopRange):
            if is_expr(loop) or is_tensor_like(loop):
                raise ScriptError(f"cannot iterate over {loop!r}; use range(...)")
            for item in loop:  # compile-time iteration: unrolled while translating
                self.bind_target(node.target, item)
                self.loops.append(Loop(True, self.runtime_branches))
                try:
                    self.visit_body(node.body)
                except UnrolledJump as jump:
                    if jump.kind == "break":
                        break
                finally:
                    self.loops.pop()
            return
        if not isinstance(node.target, ast.Name):
            raise ScriptError("a range loop needs a single loop variable")
        bounds = [loop.start, loop.stop, loop.step]
        for b in bounds:
            if not (isinstance(b, int) and not isinstance(b, bool)) and not (is_expr(b) and "int" in expr_dtype(b)):
                raise ScriptError(f"range bounds must be integers, got {b!r}")
        if isinstance(loop.step, int) and loop.step <= 0:
            raise ScriptError(f"range step must be positive, got {loop.step}")
        dtype = next((expr_dtype(b) for b in bounds if is_expr(b)), "int32")
        var = tirx.Var(c_identifier(node.target.id), dtype)
        with self.builder.nested() as body:
            self.loop_body(node.body, {node.target.id: var})
        self.builder.for_range(var, *bounds, body=body, unroll=loop.unroll)

    def loop_body(self, body: list[ast.stmt], scope: dict[str, Any]) -> None:
        """Translate the body of a run-time loop, in a scope of its own."""
        self.scopes.append(scope)
        self.loops.append(Loop(False, self.runtime_branches))
        try:
            self.visit_body(body)
        except Jump:
            pass
        finally:
            self.loops.pop()
            self.scopes.pop()

    def visit_while(self, node: ast.While) -> None:
        if node.orelse:
            raise ScriptError("while ... else is not supported")
        with self.builder.nested() as head:  # statements the condition needs (load_scalar), run every iteration
            cond = self.eval(node.test)
        if is_tensor_like(cond):
            raise ScriptError("a while condition must be a scalar; a tensor has no truth value")
        if not is_expr(cond):
            if not cond:  # compile-time false: the body never runs
                for stmt in head.stmts:
                    self.builder.append(stmt)
                return
            cond = tirx.const(True, "bool")
        elif expr_dtype(cond) != "bool":
            cond = tirx.NE(cond, tirx.const(0, expr_dtype(cond)))
        with self.builder.nested() as body:
            if head.stmts:
                for stmt in head.stmts:
                    self.builder.append(stmt)
                with self.builder.nested() as leave:
                    self.builder.break_loop()
                self.builder.if_then(tirx.Not(cond), leave, None)
            self.loop_body(node.body, {})
        self.builder.while_loop(tirx.const(True, "bool") if head.stmts else cond, body)

    def visit_break(self, node: ast.Break) -> None:
        self.jump("break")

    def visit_continue(self, node: ast.Continue) -> None:
        self.jump("continue")

    def jump(self, kind: str) -> None:
        if not self.loops:
            raise ScriptError(f"'{kind}' outside a loop")
        loop = self.loops[-1]
        if loop.unrolled:
            if self.runtime_branches > loop.branches:
                raise ScriptError(f"'{kind}' under a run-time condition in a loop that is unrolled while compiling "
                                  f"(a for loop over a Python list, tuple or other iterable); loop with range(...) "
                                  f"or self.range(...) to make it a run-time loop, or make the condition "
                                  f"compile-time")
            raise UnrolledJump(kind)
        if kind == "break":
            self.builder.break_loop()
        else:
            self.builder.continue_loop()
        raise Jump()

    def loop_iterable(self, node: ast.expr) -> Any:
        """A LoopRange for ``range(...)``/``self.range(...)``, else the compile-time iterable."""
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range" \
                and self.lookup("range") is builtins.range:
            args = [self.eval(a) for a in node.args]
            if node.keywords or not 1 <= len(args) <= 3:
                raise ScriptError("range takes 1 to 3 positional arguments")
            if len(args) == 1:
                args = [0, args[0]]
            if len(args) == 2:
                args.append(1)
            return LoopRange(*args, unroll=False)
        return self.eval(node)
