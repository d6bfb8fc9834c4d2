"""Tensor values: what Python operators on register tensors build.

``a + b`` on register tensors does not emit anything: it returns a :class:`TensorValue`, a small
elementwise expression tree that already knows its dtype and shape (every check runs here, when
the operator is applied, so errors point at the author's line). The frontend turns a value into
instructions (:meth:`tilus_tvm.ir.builder.Builder.materialize`) when it is bound to a name,
passed to an instruction, or stored, through the builder it owns.
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any, Sequence

from tilus_tvm import dtypes
from tilus_tvm.dtypes import DataType
from tilus_tvm.errors import ScriptError
from tilus_tvm.ir.scalar import is_expr

UNARY_OPS = ("neg", "not", "invert", "abs", "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos", "tanh",
             "sigmoid", "floor", "ceil", "round", "erf")
BINARY_OPS = ("add", "sub", "mul", "div", "floordiv", "mod", "max", "min", "pow",
              "lt", "le", "gt", "ge", "eq", "ne", "and", "or", "xor", "shl", "shr")
BITWISE_OPS = ("and", "or", "xor")  # logical on bool tensors, bitwise on integer tensors
COMPARISON_OPS = ("lt", "le", "gt", "ge", "eq", "ne")


def is_scalar(value: Any) -> bool:
    """A Python number or a TVM scalar expression."""
    if isinstance(value, (bool, numbers.Number)):
        return True
    return is_expr(value)


def describe(value: Any) -> str:
    return value.describe() if hasattr(value, "describe") else repr(value)


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


class TensorOperators:
    """Python operators shared by register tensors and tensor values; each returns a TensorValue."""

    dtype: DataType
    shape: tuple[int, ...]

    def __add__(self, other):
        return binary_value(self, other, "add")

    def __radd__(self, other):
        return binary_value(other, self, "add")

    def __sub__(self, other):
        return binary_value(self, other, "sub")

    def __rsub__(self, other):
        return binary_value(other, self, "sub")

    def __mul__(self, other):
        return binary_value(self, other, "mul")

    def __rmul__(self, other):
        return binary_value(other, self, "mul")

    def __truediv__(self, other):
        return binary_value(self, other, "div")

    def __rtruediv__(self, other):
        return binary_value(other, self, "div")

    def __floordiv__(self, other):
        return binary_value(self, other, "floordiv")

    def __mod__(self, other):
        return binary_value(self, other, "mod")

    def __lt__(self, other):
        return binary_value(self, other, "lt")

    def __le__(self, other):
        return binary_value(self, other, "le")

    def __gt__(self, other):
        return binary_value(self, other, "gt")

    def __ge__(self, other):
        return binary_value(self, other, "ge")

    def __and__(self, other):
        return binary_value(self, other, "and")

    def __or__(self, other):
        return binary_value(self, other, "or")

    def __rfloordiv__(self, other):
        return binary_value(other, self, "floordiv")

    def __rmod__(self, other):
        return binary_value(other, self, "mod")

    def __pow__(self, other):
        return binary_value(self, other, "pow")

    def __rpow__(self, other):
        return binary_value(other, self, "pow")

    def __rand__(self, other):
        return binary_value(other, self, "and")

    def __ror__(self, other):
        return binary_value(other, self, "or")

    def __xor__(self, other):
        return binary_value(self, other, "xor")

    def __rxor__(self, other):
        return binary_value(other, self, "xor")

    def __lshift__(self, other):
        return binary_value(self, other, "shl")

    def __rshift__(self, other):
        return binary_value(self, other, "shr")

    def __neg__(self):
        return unary_value(self, "neg")

    def __pos__(self):
        return self

    def __abs__(self):
        return unary_value(self, "abs")

    def __invert__(self):
        """``~x``: not of a bool tensor, bitwise not of an integer tensor."""
        return unary_value(self, "not" if self.dtype is dtypes.boolean else "invert")

    def to(self, dtype: Any) -> "TensorValue":
        """``x.to(dtype)`` is ``self.cast(x, dtype)``."""
        return cast_value(self, dtype)

    # --- views (tilus_tvm.ir.tensor_ops builds them) ----------------------------------------------
    def __getitem__(self, index):
        """``x[0]``, ``x[:, 2:4]``, ``x[i, ...]``: a sub-tile (int indices drop their dimension; slices
        need a compile-time length). Free when the sub-tile lies in a subset of each thread's
        registers, else gathered through shared memory."""
        from tilus_tvm.ir.tensor_ops import slice_value

        return slice_value(self, index)

    def __iter__(self):
        # without this, Python would iterate through __getitem__(0), (1), ... until an IndexError
        raise ScriptError(f"register tensor {describe(self)} cannot be iterated over or unpacked; index it "
                          f"(x[i]) or loop over a range")

    def reshape(self, *shape: Any) -> "TensorValue":
        """``self.reshape(x, shape)``."""
        from tilus_tvm.ir.tensor_ops import reshape_value

        return reshape_value(self, list(shape[0]) if len(shape) == 1 and isinstance(shape[0], (list, tuple))
                             else list(shape))

    def squeeze(self, dim: Any) -> "TensorValue":
        """``self.squeeze(x, dim)``."""
        from tilus_tvm.ir.tensor_ops import squeeze_value

        return squeeze_value(self, dim)

    def unsqueeze(self, dim: Any) -> "TensorValue":
        """``self.unsqueeze(x, dim)``."""
        from tilus_tvm.ir.tensor_ops import unsqueeze_value

        return unsqueeze_value(self, dim)

    def transpose(self) -> "TensorValue":
        """``self.transpose(x)`` of a 2-D tensor."""
        from tilus_tvm.ir.tensor_ops import transpose_value

        return transpose_value(self)

    def permute(self, *dims: Any) -> "TensorValue":
        """``self.permute(x, dims)``."""
        from tilus_tvm.ir.tensor_ops import permute_value

        return permute_value(self, tuple(dims[0]) if len(dims) == 1 and isinstance(dims[0], (list, tuple))
                             else tuple(dims))

    def __bool__(self):
        raise ScriptError(f"tensor {describe(self)} has no truth value; use self.where(...) or compare scalars")


@dataclass(eq=False, repr=False)
class TensorValue(TensorOperators):
    """An elementwise expression over register tensors and scalars, not yet computed.

    ``op`` is a unary or binary op name, ``"cast"`` or ``"where"``; ``operands`` are register
    tensors, other values or scalars.
    """

    op: str
    operands: tuple[Any, ...]
    dtype: DataType
    shape: tuple[int, ...]

    # comparisons build values too (a value is never used as a dict key or compared for identity)
    def __eq__(self, other):
        return binary_value(self, other, "eq")

    def __ne__(self, other):
        return binary_value(self, other, "ne")

    __hash__ = object.__hash__

    def describe(self) -> str:
        return f"<{self.op} value>: {self.dtype.name}{list(self.shape)}"

    def __repr__(self) -> str:
        return f"TensorValue({self.describe()})"


def is_tensor_like(value: Any) -> bool:
    """A register tensor or a tensor value."""
    return isinstance(value, TensorOperators)


def _require_tensor(op: str, value: Any, what: str) -> None:
    if not is_tensor_like(value):
        raise ScriptError(f"{op}: {what} must be a register tensor, got {describe(value)}")


def _reject_packed(op: str, *values: Any) -> None:
    """Arithmetic needs a type TVM computes in: packed low-precision tensors are cast first."""
    from tilus_tvm.lowp import is_packed

    for value in values:
        if is_tensor_like(value) and is_packed(value.dtype):
            raise ScriptError(f"{op}: {describe(value)} holds packed {value.dtype.name} codes, which have no "
                              f"arithmetic; convert first, e.g. self.cast(x, float16) or x.to(float16)")


def unary_value(x: Any, op: str) -> TensorValue:
    _require_tensor(op, x, "the operand")
    _reject_packed(op, x)
    if op == "not" and x.dtype is not dtypes.boolean:
        raise ScriptError(f"not: operand {describe(x)} must be bool")
    if op == "invert" and not x.dtype.is_integer:
        raise ScriptError(f"~: operand {describe(x)} must be an integer (bitwise not) or bool tensor")
    if op in ("neg", "abs") and x.dtype is dtypes.boolean:
        raise ScriptError(f"{op}: operand {describe(x)} is bool; it needs a numeric dtype")
    if op not in ("neg", "abs", "not", "invert") and not x.dtype.is_float:
        raise ScriptError(f"{op}: operand {describe(x)} must have a floating-point dtype")
    return TensorValue(op, (x,), x.dtype, tuple(x.shape))


def binary_value(lhs: Any, rhs: Any, op: str) -> TensorValue:
    tensors = [v for v in (lhs, rhs) if is_tensor_like(v)]
    if not tensors:
        raise ScriptError(f"{op}: at least one operand must be a register tensor, got {lhs!r} and {rhs!r}")
    _reject_packed(op, lhs, rhs)
    for v in (lhs, rhs):
        if not is_tensor_like(v) and not is_scalar(v):
            raise ScriptError(f"{op}: operand {describe(v)} is neither a register tensor nor a scalar")
    if len(tensors) == 2 and lhs.dtype != rhs.dtype:
        raise ScriptError(f"{op}: dtype mismatch between {describe(lhs)} and {describe(rhs)}; "
                          f"cast one side with self.cast(x, dtype)")
    dtype = tensors[0].dtype
    shape = tuple(tensors[0].shape) if len(tensors) == 1 else broadcast_shape(op, lhs.shape, rhs.shape)
    if op in BITWISE_OPS and dtype is not dtypes.boolean and not dtype.is_integer:
        raise ScriptError(f"{op}: operands must be bool (logical) or integer (bitwise) tensors, got "
                          f"{describe(tensors[0])}")
    if op in ("shl", "shr") and not dtype.is_integer:
        raise ScriptError(f"{op}: shifts need integer tensors, got {describe(tensors[0])}")
    if op == "pow" and not dtype.is_float:
        raise ScriptError(f"pow: operands must be floating-point tensors, got {describe(tensors[0])}")
    if op == "div" and not dtype.is_float:
        raise ScriptError(f"div: `/` needs floating-point tensors, got {describe(tensors[0])}; use // for "
                          f"integer division")
    if op in ("floordiv", "mod") and not dtype.is_integer:
        raise ScriptError(f"{op}: operands must be integer tensors, got {describe(tensors[0])}")
    out_dtype = dtypes.boolean if op in COMPARISON_OPS else dtype
    return TensorValue(op, (lhs, rhs), out_dtype, shape)


def where_value(cond: Any, x: Any, y: Any) -> TensorValue:
    _require_tensor("where", cond, "cond")
    _reject_packed("where", x, y)
    if cond.dtype is not dtypes.boolean:
        raise ScriptError(f"where: cond {describe(cond)} must be a bool tensor")
    values = [v for v in (x, y) if is_tensor_like(v)]
    for v in (x, y):
        if not is_tensor_like(v) and not is_scalar(v):
            raise ScriptError(f"where: operand {describe(v)} is neither a register tensor nor a scalar")
    if not values:
        raise ScriptError("where: at least one of x, y must be a register tensor")
    if len(values) == 2 and x.dtype != y.dtype:
        raise ScriptError(f"where: dtype mismatch between {describe(x)} and {describe(y)}")
    shape = tuple(cond.shape)
    for v in values:
        shape = broadcast_shape("where", shape, v.shape)
    return TensorValue("where", (cond, x, y), values[0].dtype, shape)


def cast_value(x: Any, dtype: Any) -> TensorValue:
    _require_tensor("cast", x, "x")
    return TensorValue("cast", (x,), dtypes.as_dtype(dtype), tuple(x.shape))
