"""Scalar expressions are TVM expressions; TVM 0.27 spells their type ``expr.ty.dtype``."""
from __future__ import annotations

from typing import Any

import tvm
from tvm.ir import PrimType


def is_expr(value: Any) -> bool:
    """A TVM scalar expression (a buffer is a TVM expression too, but not a scalar one)."""
    return isinstance(value, tvm.ir.expr.Expr) and isinstance(value.ty, PrimType)


def expr_dtype(value: Any) -> str:
    """The dtype name of a scalar expression, e.g. ``"int32"``."""
    return str(value.ty.dtype)
