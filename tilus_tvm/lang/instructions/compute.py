"""Computation instructions of ``tilus_tvm.Script``: elementwise math, reductions, dot, printf."""
from __future__ import annotations

from typing import Any, Optional

from tilus_tvm import dtypes
from tilus_tvm.dtypes import DataType
from tilus_tvm.errors import ScriptError
from tilus_tvm.ir.tensor import RegisterTensor
from tilus_tvm.ir.values import binary_value, cast_value, unary_value, where_value
from tilus_tvm.lang.instructions.memory import InstructionBase


def _unary(op: str):
    def method(self, x: RegisterTensor) -> RegisterTensor:
        self._builder(op)
        return unary_value(x, op)

    method.__name__ = op
    method.__doc__ = (f"Elementwise ``{op}`` of a floating-point register tensor; same shape, dtype and layout."
                      if op != "abs" else "Elementwise absolute value; same shape, dtype and layout.")
    return method


def _binary(op: str, doc: str):
    def method(self, lhs: Any, rhs: Any) -> RegisterTensor:
        self._builder(op)
        return binary_value(lhs, rhs, op)

    method.__name__ = op
    method.__doc__ = doc + (" Operands broadcast against each other (equal ranks, size-1 dimensions stretch);"
                            " either may be a scalar, which takes the tensor's dtype.")
    return method


class ComputeInstructions(InstructionBase):
    """Elementwise math, casts, reductions, dot and printf."""

    exp = _unary("exp")
    exp2 = _unary("exp2")
    log = _unary("log")
    log2 = _unary("log2")
    sqrt = _unary("sqrt")
    rsqrt = _unary("rsqrt")
    sin = _unary("sin")
    cos = _unary("cos")
    tanh = _unary("tanh")
    sigmoid = _unary("sigmoid")
    floor = _unary("floor")
    ceil = _unary("ceil")
    round = _unary("round")
    erf = _unary("erf")
    abs = _unary("abs")

    add = _binary("add", "``lhs + rhs`` elementwise.")
    sub = _binary("sub", "``lhs - rhs`` elementwise.")
    mul = _binary("mul", "``lhs * rhs`` elementwise.")
    div = _binary("div", "``lhs / rhs`` elementwise.")
    maximum = _binary("max", "Elementwise maximum.")
    minimum = _binary("min", "Elementwise minimum.")
    pow = _binary("pow", "``lhs ** rhs`` elementwise (floating point).")
    equal = _binary("eq", "``lhs == rhs`` elementwise, a bool tensor.")
    not_equal = _binary("ne", "``lhs != rhs`` elementwise, a bool tensor.")
    less_than = _binary("lt", "``lhs < rhs`` elementwise, a bool tensor.")
    less_equal = _binary("le", "``lhs <= rhs`` elementwise, a bool tensor.")
    greater_than = _binary("gt", "``lhs > rhs`` elementwise, a bool tensor.")
    greater_equal = _binary("ge", "``lhs >= rhs`` elementwise, a bool tensor.")
    logical_and = _binary("and", "Elementwise and of bool tensors.")
    logical_or = _binary("or", "Elementwise or of bool tensors.")

    def neg(self, x: RegisterTensor) -> RegisterTensor:
        """``-x`` elementwise."""
        self._builder("neg")
        return unary_value(x, "neg")

    def where(self, cond: RegisterTensor, x: Any, y: Any) -> RegisterTensor:
        """``x`` where ``cond`` holds, else ``y`` (elementwise, with broadcasting; x or y may be scalars)."""
        self._builder("where")
        return where_value(cond, x, y)

    def cast(self, x: RegisterTensor, dtype: DataType) -> RegisterTensor:
        """Convert every element of ``x`` to ``dtype`` (same shape and layout)."""
        self._builder("cast")
        return cast_value(x, dtype)

    def sum(self, x: RegisterTensor, dim: int, keepdim: bool = False) -> RegisterTensor:
        """Sum over dimension ``dim`` (removed, or kept as size 1 with ``keepdim``). The threads that
        share a reduced row combine their partial sums with warp shuffles or shared memory; the result
        is held by all of them (a replicated layout)."""
        return self._builder("sum").reduce(x, dim, "sum", keepdim)

    def max(self, x: RegisterTensor, dim: int, keepdim: bool = False) -> RegisterTensor:
        """Maximum over dimension ``dim`` (see :meth:`sum`)."""
        return self._builder("max").reduce(x, dim, "max", keepdim)

    def min(self, x: RegisterTensor, dim: int, keepdim: bool = False) -> RegisterTensor:
        """Minimum over dimension ``dim`` (see :meth:`sum`)."""
        return self._builder("min").reduce(x, dim, "min", keepdim)

    def dot(self, a: RegisterTensor, b: RegisterTensor, c: Optional[RegisterTensor] = None, /, *,
            acc_dtype: Optional[DataType] = None, out: Optional[RegisterTensor] = None) -> RegisterTensor:
        """Matrix product ``out = a @ b + c``.

        ``a`` is [m, k], ``b`` [k, n], ``c`` and ``out`` [m, n]. float16/bfloat16 operands with a float32
        accumulator (float16 too for float16) and int8 operands with int32 run on tensor cores
        (``mma.sync`` m16n8k16 / m16n8k32) when m, n, k are multiples of the atom, tiled over the
        block's warps; float32 operands (and other shapes) run on CUDA cores. Without ``c`` a zero
        accumulator of ``acc_dtype`` is used. ``out`` may be ``c`` itself (accumulate in place).
        Rejects mismatched shapes, a/b of different dtypes and unsupported dtype combinations.
        """
        builder = self._builder("dot")
        if c is None:
            if acc_dtype is None:
                raise ScriptError("dot: give an accumulator c or acc_dtype")
            a, b = builder.materialize(a), builder.materialize(b)
            if not isinstance(a, RegisterTensor) or not isinstance(b, RegisterTensor):
                raise ScriptError(f"dot: a and b must be register tensors, got {a!r} and {b!r}")
            c = builder.allocate_register(dtypes.as_dtype(acc_dtype), (a.shape[0], b.shape[-1]), None, 0)
        elif acc_dtype is not None and dtypes.as_dtype(acc_dtype) != c.dtype:
            raise ScriptError(f"dot: acc_dtype {acc_dtype} differs from c's dtype {c.dtype.name}")
        return builder.dot(a, b, c, out)

    def printf(self, fmt: str, *args: Any) -> None:
        """C ``printf`` from the kernel, printed once per block (by its thread 0).

        ``args`` are scalars (ints, floats, scalar expressions) and compile-time strings, one per
        conversion of ``fmt``; each must suit its conversion: integers (and bool) for ``%d %i %u %x
        %o %c``, floats for ``%f %e %g %a``, strings for ``%s``. 64-bit integers need ``%lld``; 32-bit
        ones are widened for ``%lld``; float16/bfloat16 are printed through float32. A mismatch
        or a wrong count is a :class:`~tilus_tvm.errors.ScriptError`.

        Example::

            self.printf("block %d: m_size=%d scale=%.3f\\n", self.blockIdx.x, m_size, scale)
        """
        self._builder("printf").printf(fmt, args)
