"""The frontend: reads the Python AST of a kernel's ``__call__`` and drives the IR builder.

The body is *interpreted*, not executed: expressions are evaluated to Python values, TVM scalar
expressions or register tensors; statements become tile-IR statements. What depends only on
compile-time values (hyper-parameters, ``int`` parameters) is computed right away, so
``if self.block_m > 32:`` picks a branch while ``if m_size > 32:`` becomes a run-time branch.

Binding rules:
- ``x = value`` binds a name. Inside a run-time loop or branch, re-assigning a name defined outside
  it writes into it: a register tensor is overwritten (``acc = acc + a``); a scalar must have been
  declared with a type (``s: int32 = 0``).
- ``x: int32 = value`` declares a scalar variable of that type.
- ``for i in range(...)`` / ``self.range(...)`` is a loop; ``for v in [..]`` over a Python list is
  unrolled while translating.
- ``while cond:`` is a run-time loop; ``cond`` is evaluated again before every iteration, so it reads
  variables declared with a type (``i: int32 = 0``) that the body updates.
- ``break`` and ``continue`` leave, or go on with, the innermost loop: in a run-time loop they
  become TIR ``break``/``continue`` (under a run-time condition or not); in a loop unrolled while
  translating they take effect at compile time, so their condition must be compile-time too.
"""
from __future__ import annotations

import ast
import builtins
import inspect
import operator
import re
import textwrap
from typing import Any, Callable

from tvm import tirx
from tvm_ffi.core import ObjectConvertible

from tilus_tvm.dtypes import DataType
from tilus_tvm.errors import ScriptError
from tilus_tvm.ir.builder import Builder
from tilus_tvm.ir.scalar import c_identifier, expr_dtype, is_expr
from tilus_tvm.ir.stmt import AssignScalar, BindScalar, DeclareScalar
from tilus_tvm.ir.tensor import RegisterTensor
from tilus_tvm.ir.values import is_tensor_like
from tilus_tvm.lang.loops import ControlFlow, Jump, Loop, LoopStatements


class _Return(ControlFlow):
    """Raised by a ``return`` statement to stop translating the body."""


class MutableScalar:
    """A scalar variable declared with a type; its storage is a one-element local buffer."""

    def __init__(self, name: str, dtype: DataType):
        self.name = name
        self.dtype = dtype
        self.buffer = tirx.decl_buffer((1,), dtype.name, c_identifier(name), scope="local")

    @property
    def value(self):
        return tirx.BufferLoad(self.buffer, [0])


_is_expr = is_expr


def _to_dtype(value: Any, dtype: DataType):
    """``value`` (Python number or PrimExpr) as an expression of ``dtype``."""
    if isinstance(value, (bool, int, float)):
        return tirx.const(value, dtype.name)
    if _is_expr(value):
        return value if expr_dtype(value) == dtype.name else tirx.Cast(dtype.name, value)
    raise ScriptError(f"cannot use {value!r} as a {dtype.name} scalar")


def _logical(op: str, values: list) -> Any:
    result = values[0]
    for v in values[1:]:
        result = tirx.And(result, v) if op == "and" else tirx.Or(result, v)
    return result


def _compare(op: type, lhs: Any, rhs: Any) -> Any:
    if _is_expr(lhs) or _is_expr(rhs):
        if op is ast.Eq:
            return tirx.EQ(lhs, rhs) if not is_tensor_like(lhs) else lhs == rhs
        if op is ast.NotEq:
            return tirx.NE(lhs, rhs) if not is_tensor_like(lhs) else lhs != rhs
    table = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
             ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Is: operator.is_, ast.IsNot: operator.is_not,
             ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b}
    return table[op](lhs, rhs)


def _scalar_min_max(python_fn: Callable, tvm_fn: Callable) -> Callable:
    def fn(*args):
        values = list(args[0]) if len(args) == 1 else list(args)
        if any(_is_expr(v) for v in values):
            result = values[0]
            for v in values[1:]:
                result = tvm_fn(result, v)
            return result
        return python_fn(*args)

    return fn


def _scalar_abs(value: Any) -> Any:
    return tirx.abs(value) if _is_expr(value) else builtins.abs(value)


# Builtins that must also accept scalar expressions inside kernels.
BUILTIN_OVERRIDES = {
    "min": _scalar_min_max(builtins.min, tirx.min),
    "max": _scalar_min_max(builtins.max, tirx.max),
    "abs": _scalar_abs,
}

BINARY_OPERATORS = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
    ast.BitAnd: operator.and_, ast.BitOr: operator.or_, ast.BitXor: operator.xor,
    ast.LShift: operator.lshift, ast.RShift: operator.rshift,
}


class Transpiler(LoopStatements):
    """Translate one kernel body. ``bindings`` maps parameter names to their in-kernel values."""

    def __init__(self, script: Any, fn: Callable, bindings: dict[str, Any], builder: Builder):
        self.script = script
        self.fn = fn
        self.builder = builder
        self.globals = dict(fn.__globals__)
        closure = inspect.getclosurevars(fn)
        self.globals.update(closure.nonlocals)
        self.scopes: list[dict[str, Any]] = [dict(bindings)]
        self.filename = inspect.getsourcefile(fn) or "<kernel>"
        lines, self.first_line = inspect.getsourcelines(fn)
        self.source_lines = lines
        tree = ast.parse(textwrap.dedent("".join(lines)))
        self.func_def = tree.body[0]
        if not isinstance(self.func_def, ast.FunctionDef):
            raise ScriptError(f"{self.filename}: the kernel must be a method defined with def")
        self.reassigned = _names_assigned_more_than_once(self.func_def)
        self.loops: list[Loop] = []  # the loops around the statement being translated, innermost last
        self.runtime_branches = 0  # run-time if-branches around it

    # --- entry ----------------------------------------------------------------------------------
    def run(self) -> None:
        self.scopes[0]["self"] = self.script
        try:
            self.visit_body(self.func_def.body)
        except _Return:
            pass

    # --- errors ---------------------------------------------------------------------------------
    def located(self, node: ast.AST, exc: Exception) -> ScriptError:
        if getattr(exc, "_tilus_located", False):
            return exc
        lineno = self.first_line + getattr(node, "lineno", 1) - 1
        line = self.source_lines[getattr(node, "lineno", 1) - 1].strip() if self.source_lines else ""
        message = str(exc) if isinstance(exc, ScriptError) else f"{type(exc).__name__}: {exc}"
        err = ScriptError(f"{message}\n  at {self.filename}:{lineno}: {line}")
        err._tilus_located = True
        return err

    # --- names ----------------------------------------------------------------------------------
    def lookup(self, name: str) -> Any:
        for scope in reversed(self.scopes):
            if name in scope:
                value = scope[name]
                return value.value if isinstance(value, MutableScalar) else value
        if name in self.globals:
            return self.globals[name]
        if name in BUILTIN_OVERRIDES:
            return BUILTIN_OVERRIDES[name]
        if hasattr(builtins, name):
            return getattr(builtins, name)
        raise ScriptError(f"name {name!r} is not defined (a name defined inside a run-time loop or branch is "
                          f"not visible after it)")

    def find(self, name: str) -> tuple[int, Any]:
        for depth in range(len(self.scopes) - 1, -1, -1):
            if name in self.scopes[depth]:
                return depth, self.scopes[depth][name]
        return -1, None

    def bind(self, name: str, value: Any) -> None:
        value = self.builder.materialize(value)
        depth, existing = self.find(name)
        if isinstance(existing, MutableScalar):
            if isinstance(value, RegisterTensor):
                raise ScriptError(f"cannot assign a tensor to scalar variable {name!r} ({existing.dtype.name})")
            self.builder.append(AssignScalar(existing.buffer, _to_dtype(value, existing.dtype)))
            return
        if 0 <= depth < len(self.scopes) - 1:
            if isinstance(existing, RegisterTensor):
                self.builder.assign(existing, value)
                return
            raise ScriptError(f"{name!r} is assigned inside a run-time loop or branch but defined outside it; "
                              f"declare it as a variable with a type, e.g. `{name}: int32 = ...`, before the "
                              f"loop")
        if isinstance(value, RegisterTensor) and re.fullmatch(r"r\d+", value.name):
            value.name = name  # name an anonymous tensor after the variable (readable TIR and CUDA)
        self.scopes[-1][name] = value

    def bind_target(self, target: ast.AST, value: Any) -> None:
        if isinstance(target, ast.Name):
            self.bind(target.id, value)
        elif isinstance(target, (ast.Tuple, ast.List)):
            items = list(value) if not isinstance(value, RegisterTensor) else None
            if items is None or len(items) != len(target.elts):
                raise ScriptError(f"cannot unpack {value!r} into {len(target.elts)} names")
            for t, v in zip(target.elts, items):
                self.bind_target(t, v)
        elif isinstance(target, ast.Attribute):
            owner = self.eval(target.value)
            if owner is self.script:
                raise ScriptError(f"cannot set self.{target.attr} inside the kernel; hyper-parameters are set in "
                                  f"__init__ and launch settings in self.attrs")
            setattr(owner, target.attr, value)
        elif isinstance(target, ast.Subscript):  # x[i, 2:4] = value: a register tensor's sub-tile
            from tilus_tvm.ir.tensor_ops import slice_assign

            slice_assign(self.builder, self.eval(target.value), self.eval(target.slice), value)
        else:
            raise ScriptError(f"unsupported assignment target {ast.dump(target)}")

    # --- statements -----------------------------------------------------------------------------
    def visit_body(self, body: list[ast.stmt]) -> None:
        for stmt in body:
            handler = self.STATEMENTS.get(type(stmt))
            if handler is None:
                raise self.located(stmt, ScriptError(f"{type(stmt).__name__} statements are not supported in kernels"))
            try:
                handler(self, stmt)
            except ControlFlow:
                raise
            except Exception as exc:  # noqa: BLE001 - every error gets the kernel line attached
                raise self.located(stmt, exc) from exc

    def visit_expr_stmt(self, node: ast.Expr) -> None:
        self.eval(node.value)  # an unused tensor value computes nothing: it is never materialized

    def visit_assign(self, node: ast.Assign) -> None:
        value = self.eval(node.value)
        for target in node.targets:
            self.bind_target(target, value)

    def visit_aug_assign(self, node: ast.AugAssign) -> None:
        op = BINARY_OPERATORS.get(type(node.op))
        if op is None:
            raise ScriptError(f"operator {type(node.op).__name__} is not supported")
        if isinstance(node.target, ast.Subscript):  # x[i] += v
            value = self.apply_binary(op, self.eval(node.target), self.eval(node.value), node.op)
            self.bind_target(node.target, value)
            return
        if not isinstance(node.target, ast.Name):
            raise ScriptError("augmented assignment needs a plain name or a subscript on the left")
        value = self.apply_binary(op, self.lookup(node.target.id), self.eval(node.value), node.op)
        self.bind(node.target.id, value)

    def visit_ann_assign(self, node: ast.AnnAssign) -> None:
        if not isinstance(node.target, ast.Name):
            raise ScriptError("annotated assignment needs a plain name on the left")
        name = node.target.id
        annotation = self.eval(node.annotation)
        value = self.eval(node.value) if node.value is not None else None
        if isinstance(annotation, DataType):
            if is_tensor_like(value):
                raise ScriptError(f"{name}: {annotation.name} declares a scalar, got tensor {value.describe()}")
            if name in self.reassigned or value is None:
                var = MutableScalar(name, annotation)
                self.builder.append(DeclareScalar(var.buffer, None if value is None else _to_dtype(value, annotation)))
                self.scopes[-1][name] = var
            else:
                var = tirx.Var(c_identifier(name), annotation.name)
                self.builder.append(BindScalar(var, _to_dtype(value, annotation)))
                self.scopes[-1][name] = var
        elif annotation in (int, float, bool):
            if _is_expr(value) or is_tensor_like(value):
                raise ScriptError(f"{name}: {annotation.__name__} is a compile-time annotation but the value "
                                  f"{value!r} is only known at run time; use a scalar type such as int32")
            self.bind(name, value)
        else:
            self.bind(name, value)

    def visit_if(self, node: ast.If) -> None:
        cond = self.eval(node.test)
        if is_tensor_like(cond):
            raise ScriptError("an if condition must be a scalar; a tensor has no truth value")
        if _is_expr(cond):
            self.runtime_branches += 1
            try:
                with self.builder.nested() as then_body:
                    self.scoped(node.body)
                else_body = None
                if node.orelse:
                    with self.builder.nested() as else_body:
                        self.scoped(node.orelse)
            finally:
                self.runtime_branches -= 1
            self.builder.if_then(cond, then_body, else_body)
        elif cond:
            self.visit_body(node.body)
        else:
            self.visit_body(node.orelse)

    def scoped(self, body: list[ast.stmt]) -> None:
        """Translate the body of a run-time branch, in a scope of its own."""
        self.scopes.append({})
        try:
            self.visit_body(body)
        except Jump:
            pass
        finally:
            self.scopes.pop()

    def visit_pass(self, node: ast.Pass) -> None:
        pass

    def visit_return(self, node: ast.Return) -> None:
        if node.value is not None:
            raise ScriptError("a kernel cannot return a value; store results with store_global")
        if len(self.scopes) > 1:
            raise ScriptError("return inside a run-time loop or branch is not supported")
        raise _Return()

    def visit_assert(self, node: ast.Assert) -> None:
        cond = self.eval(node.test)
        if _is_expr(cond) or is_tensor_like(cond):
            raise ScriptError("assert needs a compile-time condition")
        if not cond:
            msg = self.eval(node.msg) if node.msg is not None else ast.unparse(node.test)
            raise ScriptError(f"assertion failed: {msg}")

    def visit_raise(self, node: ast.Raise) -> None:
        exc = self.eval(node.exc) if node.exc is not None else ScriptError("raise")
        raise ScriptError(str(exc))

    STATEMENTS: dict[type, Callable] = {
        ast.Expr: visit_expr_stmt, ast.Assign: visit_assign, ast.AugAssign: visit_aug_assign,
        ast.AnnAssign: visit_ann_assign, ast.For: LoopStatements.visit_for, ast.If: visit_if, ast.Pass: visit_pass,
        ast.Return: visit_return, ast.Assert: visit_assert, ast.Raise: visit_raise,
        ast.While: LoopStatements.visit_while, ast.Break: LoopStatements.visit_break,
        ast.Continue: LoopStatements.visit_continue,
    }

    # --- expressions ----------------------------------------------------------------------------
    def eval(self, node: ast.expr) -> Any:
        handler = self.EXPRESSIONS.get(type(node))
        if handler is None:
            raise ScriptError(f"{type(node).__name__} expressions are not supported in kernels")
        value = handler(self, node)
        if isinstance(value, ObjectConvertible) and hasattr(value, "asobject"):
            # TVM's `expr == x` / `expr != x` made outside the kernel's own code (a helper's return value) are
            # EqualOp / NotEqualOp, whose Python truth is object identity: as an if's condition they would
            # silently be a compile-time True; they are the EQ / NE expressions they stand for
            value = value.asobject()
        return value

    def eval_name(self, node: ast.Name) -> Any:
        return self.lookup(node.id)

    def eval_constant(self, node: ast.Constant) -> Any:
        return node.value

    def eval_attribute(self, node: ast.Attribute) -> Any:
        owner = self.eval(node.value)
        try:
            return getattr(owner, node.attr)
        except AttributeError:
            raise ScriptError(f"{ast.unparse(node.value)} has no attribute {node.attr!r}") from None

    def eval_call(self, node: ast.Call) -> Any:
        func = self.eval(node.func)
        args: list[Any] = []
        for a in node.args:
            if isinstance(a, ast.Starred):
                args.extend(self.eval(a.value))
            else:
                args.append(self.eval(a))
        kwargs: dict[str, Any] = {}
        for kw in node.keywords:
            if kw.arg is None:
                kwargs.update(self.eval(kw.value))
            else:
                kwargs[kw.arg] = self.eval(kw.value)
        if func is builtins.range:
            if all(isinstance(a, int) for a in args) and not kwargs:
                return range(*args)  # a compile-time range (list(range(4)), for unrolling while translating)
            raise ScriptError("range(...) over run-time values can only be used as the iterable of a for loop")
        if func in (int, float, bool) and args and _is_expr(args[0]):
            return tirx.Cast({int: "int32", float: "float32", bool: "bool"}[func], args[0])
        if not callable(func):
            raise ScriptError(f"{ast.unparse(node.func)} is not callable")
        if getattr(func, "__self__", None) is self.script:  # an instruction: its operands become tensors
            args = [self.builder.materialize(a) for a in args]
            kwargs = {k: self.builder.materialize(v) for k, v in kwargs.items()}
        else:  # scalars that are made on use (an element address, ~g[i]) are made for any callee
            args = [self.builder.materialize(a) if hasattr(type(a), "materialize_with") else a for a in args]
            kwargs = {k: self.builder.materialize(v) if hasattr(type(v), "materialize_with") else v
                      for k, v in kwargs.items()}
        return func(*args, **kwargs)

    def apply_binary(self, op: Callable, lhs: Any, rhs: Any, node_op: ast.operator) -> Any:
        if isinstance(node_op, ast.Div) and (_is_expr(lhs) or _is_expr(rhs)):
            int_sides = [v for v in (lhs, rhs) if (_is_expr(v) and "int" in expr_dtype(v)) or isinstance(v, int)]
            if len(int_sides) == 2:
                raise ScriptError("`/` between integers; use `//` for integer division")
        if isinstance(node_op, ast.Pow) and (_is_expr(lhs) or _is_expr(rhs)):
            return tirx.power(lhs, rhs)
        return op(lhs, rhs)

    def eval_binop(self, node: ast.BinOp) -> Any:
        op = BINARY_OPERATORS.get(type(node.op))
        if op is None:
            raise ScriptError(f"operator {type(node.op).__name__} is not supported")
        return self.apply_binary(op, self.eval(node.left), self.eval(node.right), node.op)

    def eval_unaryop(self, node: ast.UnaryOp) -> Any:
        value = self.eval(node.operand)
        if isinstance(node.op, ast.Not):
            if is_tensor_like(value):
                return ~value
            return tirx.Not(value) if _is_expr(value) else not value
        if isinstance(node.op, ast.USub):
            return -value
        if isinstance(node.op, ast.UAdd):
            return +value
        return ~value

    def eval_compare(self, node: ast.Compare) -> Any:
        left = self.eval(node.left)
        results = []
        for op, comparator in zip(node.ops, node.comparators):
            right = self.eval(comparator)
            results.append(_compare(type(op), left, right))
            left = right
        if len(results) == 1:
            return results[0]
        if any(_is_expr(r) for r in results):
            return _logical("and", results)
        return all(results)

    def eval_boolop(self, node: ast.BoolOp) -> Any:
        is_and = isinstance(node.op, ast.And)
        values = []
        for operand in node.values:
            value = self.eval(operand)
            if is_tensor_like(value):
                raise ScriptError("and/or on tensors: use & and | (or self.logical_and / logical_or)")
            if not _is_expr(value):
                if is_and and not value:
                    return value if not values else _logical("and", values + [tirx.const(False, "bool")])
                if not is_and and value:
                    return value if not values else _logical("or", values + [tirx.const(True, "bool")])
                continue
            values.append(value)
        if not values:
            return value
        return _logical("and" if is_and else "or", values)

    def eval_ifexp(self, node: ast.IfExp) -> Any:
        cond = self.eval(node.test)
        if _is_expr(cond):
            return tirx.if_then_else(cond, self.eval(node.body), self.eval(node.orelse))
        return self.eval(node.body) if cond else self.eval(node.orelse)

    def eval_subscript(self, node: ast.Subscript) -> Any:
        value = self.eval(node.value)
        index = self.eval(node.slice)
        return value[index]  # a register tensor's sub-tile is a tensor value (tilus_tvm.ir.tensor_ops)

    def eval_slice(self, node: ast.Slice) -> slice:
        part = lambda n: None if n is None else self.eval(n)  # noqa: E731
        return slice(part(node.lower), part(node.upper), part(node.step))

    def eval_tuple(self, node: ast.Tuple) -> tuple:
        return tuple(self.eval(e) for e in node.elts)

    def eval_list(self, node: ast.List) -> list:
        return [self.eval(e) for e in node.elts]

    def eval_dict(self, node: ast.Dict) -> dict:
        return {self.eval(k): self.eval(v) for k, v in zip(node.keys, node.values)}

    def eval_joined_str(self, node: ast.JoinedStr) -> str:
        parts = []
        for v in node.values:
            if isinstance(v, ast.Constant):
                parts.append(str(v.value))
            else:
                value = self.eval(v.value)
                if _is_expr(value) or is_tensor_like(value):
                    raise ScriptError("f-strings can only format compile-time values; use printf arguments")
                spec = self.eval(v.format_spec) if v.format_spec is not None else ""
                parts.append(format(value, spec))
        return "".join(parts)

    def eval_lambda(self, node: ast.Lambda) -> Callable:
        names = [a.arg for a in node.args.args]

        def function(*args):
            if len(args) != len(names):
                raise ScriptError(f"lambda takes {len(names)} arguments, got {len(args)}")
            self.scopes.append(dict(zip(names, args)))
            try:
                return self.eval(node.body)
            finally:
                self.scopes.pop()

        function.__signature__ = inspect.Signature(  # so its parameters' names show (printer, register_tensor)
            [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD) for name in names])
        return function

    EXPRESSIONS: dict[type, Callable] = {
        ast.Name: eval_name, ast.Constant: eval_constant, ast.Attribute: eval_attribute, ast.Call: eval_call,
        ast.BinOp: eval_binop, ast.UnaryOp: eval_unaryop, ast.Compare: eval_compare, ast.BoolOp: eval_boolop,
        ast.IfExp: eval_ifexp, ast.Subscript: eval_subscript, ast.Slice: eval_slice, ast.Tuple: eval_tuple,
        ast.List: eval_list, ast.Dict: eval_dict, ast.JoinedStr: eval_joined_str, ast.Lambda: eval_lambda,
    }


def _names_assigned_more_than_once(func: ast.FunctionDef) -> set[str]:
    counts: dict[str, int] = {}
    for node in ast.walk(func):
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            targets = [node.target]
            if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
                counts[node.target.id] = counts.get(node.target.id, 0) + 1
        for t in targets:
            for n in ast.walk(t):
                if isinstance(n, ast.Name):
                    counts[n.id] = counts.get(n.id, 0) + 1
        if isinstance(node, (ast.For,)):
            for n in ast.walk(node.target):
                if isinstance(n, ast.Name):
                    counts[n.id] = counts.get(n.id, 0) + 1
    return {name for name, count in counts.items() if count > 1}
