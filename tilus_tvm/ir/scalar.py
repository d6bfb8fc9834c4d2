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
