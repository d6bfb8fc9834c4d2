"""Scalar expressions are TVM expressions; TVM 0.27 spells their type ``expr.ty.dtype``."""
from __future__ import annotations

import sys
from typing import Any


def is_expr(value: Any) -> bool:
    """A TVM scalar expression (a buffer is a TVM expression too, but not a scalar one).

    Nothing is a TVM expression before TVM is imported, so this never imports it."""
    tvm = sys.modules.get("tvm")
    if tvm is None:
        return False
    return isinstance(value, tvm.ir.expr.Expr) and isinstance(value.ty, tvm.ir.PrimType)


def expr_dtype(value: Any) -> str:
    """The dtype name of a scalar expression, e.g. ``"int32"``."""
    return str(value.ty.dtype)


# Names a kernel variable must not take in the generated CUDA: keywords and the types and built-ins
# the CUDA source uses (a loop variable called `half` would shadow the type `half`).
RESERVED_C_NAMES = frozenset("""
    auto bool break case char const continue default do double else enum extern float for goto if inline int
    long register return short signed sizeof static struct switch typedef union unsigned void volatile while
    class namespace template typename this new delete operator private public protected virtual friend
    half half2 nv_bfloat16 nv_bfloat162 uint uchar ushort int8_t int16_t int32_t int64_t uint8_t uint16_t
    uint32_t uint64_t dim3 threadIdx blockIdx blockDim gridDim warpSize min max abs exp sqrt printf
    """.split())


def c_identifier(name: str) -> str:
    """``name`` made safe to appear as a variable in the generated CUDA source."""
    return name + "_" if name in RESERVED_C_NAMES else name


def expr_to_python(expr: Any, names: dict[str, str]) -> str:
    """Python source computing an integer PrimExpr of scalar parameters (for the launch grid)."""
    from tvm import tirx

    from tilus_tvm.errors import CompileError

    if isinstance(expr, (int,)):
        return str(expr)
    if isinstance(expr, tirx.IntImm):
        return str(expr.value)
    if isinstance(expr, tirx.Var):
        if expr.name not in names:
            raise CompileError(f"the grid size depends on {expr.name}, which is not a scalar parameter")
        return names[expr.name]
    if isinstance(expr, tirx.Cast):
        return f"int({expr_to_python(expr.value, names)})"
    binary = {tirx.Add: "({} + {})", tirx.Sub: "({} - {})", tirx.Mul: "({} * {})", tirx.FloorDiv: "({} // {})",
              tirx.FloorMod: "({} % {})", tirx.Min: "min({}, {})", tirx.Max: "max({}, {})"}
    for node_type, template in binary.items():
        if isinstance(expr, node_type):
            return template.format(expr_to_python(expr.a, names), expr_to_python(expr.b, names))
    if isinstance(expr, tirx.Select):
        return (f"({expr_to_python(expr.true_value, names)} if {expr_to_python(expr.condition, names)} "
                f"else {expr_to_python(expr.false_value, names)})")
    compare = {tirx.LT: "<", tirx.LE: "<=", tirx.GT: ">", tirx.GE: ">=", tirx.EQ: "==", tirx.NE: "!="}
    for node_type, symbol in compare.items():
        if isinstance(expr, node_type):
            return f"({expr_to_python(expr.a, names)} {symbol} {expr_to_python(expr.b, names)})"
    raise CompileError(f"cannot compute the grid size {expr} on the host")
