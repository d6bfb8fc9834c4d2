"""Computation instructions of ``tilus_tvm.Script``: elementwise math, reductions, scans, dot, printf."""
from __future__ import annotations

from typing import Any, Optional

from tilus_tvm import dtypes
from tilus_tvm.dtypes import DataType
from tilus_tvm.errors import ScriptError
from tilus_tvm.ir.tensor import RegisterTensor
from tilus_tvm.ir.tensor_ops import normalize_dims, scan_value
from tilus_tvm.ir.values import binary_value, cast_value, is_scalar, is_tensor_like, unary_value, where_value
from tilus_tvm.lang.instructions.memory import InstructionBase


_UNARY_DOCS = {
    "exp": "``e ** x``", "exp2": "``2 ** x``", "log": "the natural logarithm", "log2": "the base-2 logarithm",
    "sqrt": "the square root", "rsqrt": "``1 / sqrt(x)``", "sin": "the sine (radians)", "cos": "the cosine (radians)",
    "tanh": "the hyperbolic tangent", "sigmoid": "``1 / (1 + exp(-x))``", "floor": "the largest integer not above x",
    "ceil": "the smallest integer not below x", "erf": "the error function",
    "round": "x rounded to the nearest integer, halves to even (``rint``: 0.5 -> 0, 1.5 -> 2, -2.5 -> -2)",
}


def _unary(op: str):
    def method(self, x: RegisterTensor, *, out: Optional[RegisterTensor] = None) -> RegisterTensor:
        return self._result(op, unary_value(x, op), out)

    method.__name__ = op
    what = _UNARY_DOCS.get(op)
    method.__doc__ = (f"Elementwise {what} of a floating-point register tensor (float16, bfloat16, float32, "
                      f"float64); same shape, dtype and layout. ``out``: a register tensor of the same dtype and "
                      f"shape to write the result into (it may be ``x``).\n\n"
                      f"        >>> y = self.{op}(x)   # doctest: +SKIP\n")
    return method


def _binary(op: str, doc: str):
    def method(self, lhs: Any, rhs: Any, out: Optional[RegisterTensor] = None) -> RegisterTensor:
        return self._result(op, binary_value(lhs, rhs, op), out)

    method.__name__ = op
    method.__doc__ = doc + (" Operands broadcast against each other (equal ranks, size-1 dimensions stretch);"
                            " either may be a scalar, which takes the tensor's dtype; both tensors must have one"
                            " dtype. ``out``: a register tensor of the result's dtype and shape to write into"
                            " (it may be an operand).\n\n"
                            "        >>> z = self.add(x, y)   # doctest: +SKIP\n")
    return method


def _check_reordering(builder, x: RegisterTensor, layout: Any) -> None:
    """cast's ``layout``: a layout of x's shape that gives each thread x's elements (in any register order)."""
    from tilus_tvm.instructions.cast import register_order
    from tilus_tvm.lang.instructions.memory import check_layout

    check_layout("cast", layout, tuple(x.shape), builder.num_threads)
    if x.layout is not None and x.layout != layout and register_order(x.layout, layout) is None:
        raise ScriptError(f"cast: layout {layout} does not give each thread the elements that x's layout "
                          f"{x.layout} gives it (only the register order may differ)")


def _biased_types(op: str, source: Any, dtype: Any):
    """(source, dtype) of a biased cast, checked: 1-, 2- or 4-bit integer codes into float16 or bfloat16."""
    from tilus_tvm.instructions.cast_rules import interleavable

    source, dtype = dtypes.as_dtype(source), dtypes.as_dtype(dtype)
    if not interleavable(source):
        raise ScriptError(f"{op}: biased codes are 1-, 2- or 4-bit integers, not {source.name}")
    if dtype.name not in ("float16", "bfloat16"):
        raise ScriptError(f"{op}: biased codes convert into float16 or bfloat16, not {dtype.name}")
    return source, dtype


class ComputeInstructions(InstructionBase):
    """Elementwise math, casts, reductions, scans, dot and printf."""

    def _result(self, op: str, value: Any, out: Optional[RegisterTensor]) -> Any:
        """``value`` as it is (a lazy tensor value) or, with ``out``, computed into ``out``."""
        builder = self._builder(op)
        return value if out is None else builder.materialize(value, out)

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

    add = _binary("add", "``lhs + rhs`` elementwise.")
    sub = _binary("sub", "``lhs - rhs`` elementwise.")
    mul = _binary("mul", "``lhs * rhs`` elementwise.")
    div = _binary("div", "``lhs / rhs`` elementwise (floating point; ``//`` for integers).")
    mod = _binary("mod", "``lhs % rhs`` elementwise (integers, floored like Python).")
    maximum = _binary("max", "Elementwise maximum.")
    minimum = _binary("min", "Elementwise minimum.")
    pow = _binary("pow", "``lhs ** rhs`` elementwise (floating point).")
    equal = _binary("eq", "``lhs == rhs`` elementwise, a bool tensor.")
    not_equal = _binary("ne", "``lhs != rhs`` elementwise, a bool tensor.")
    less_than = _binary("lt", "``lhs < rhs`` elementwise, a bool tensor.")
    less_equal = _binary("le", "``lhs <= rhs`` elementwise, a bool tensor.")
    greater_than = _binary("gt", "``lhs > rhs`` elementwise, a bool tensor.")
    greater_equal = _binary("ge", "``lhs >= rhs`` elementwise, a bool tensor.")
    logical_and = _binary("and", "Elementwise and of bool tensors (``&``).")
    logical_or = _binary("or", "Elementwise or of bool tensors (``|``).")
    logical_xor = _binary("xor", "Elementwise exclusive or of bool tensors (``^``).")
    bitwise_and = _binary("and", "Elementwise bitwise and of integer tensors (``&``).")
    bitwise_or = _binary("or", "Elementwise bitwise or of integer tensors (``|``).")
    bitwise_xor = _binary("xor", "Elementwise bitwise exclusive or of integer tensors (``^``).")

    def abs(self, x: RegisterTensor, *, out: Optional[RegisterTensor] = None) -> RegisterTensor:
        """Elementwise absolute value of a numeric register tensor; same shape, dtype and layout.

        >>> y = self.abs(x)   # doctest: +SKIP
        """
        return self._result("abs", unary_value(x, "abs"), out)

    def neg(self, x: RegisterTensor, *, out: Optional[RegisterTensor] = None) -> RegisterTensor:
        """``-x`` elementwise, for numeric tensors; same shape and dtype.

        >>> y = self.neg(x)   # the same as -x   # doctest: +SKIP
        """
        return self._result("neg", unary_value(x, "neg"), out)

    def square(self, x: RegisterTensor, *, out: Optional[RegisterTensor] = None) -> RegisterTensor:
        """``x * x`` elementwise, for numeric tensors; same shape and dtype.

        >>> energy = self.sum(self.square(x), dim=1)   # doctest: +SKIP
        """
        return self._result("square", binary_value(x, x, "mul"), out)

    def logical_not(self, x: RegisterTensor, *, out: Optional[RegisterTensor] = None) -> RegisterTensor:
        """Elementwise not of a bool tensor (``~x``); a bool tensor of the same shape. Bitwise not of an
        integer tensor is ``~x``.

        >>> outside = self.logical_not(inside)   # doctest: +SKIP
        """
        if is_tensor_like(x) and x.dtype is not dtypes.boolean:
            raise ScriptError(f"logical_not: x {x!r} must be a bool tensor; bitwise not of integers is ~x")
        return self._result("logical_not", unary_value(x, "not"), out)

    def clip(self, x: RegisterTensor, min: Any, max: Any, *, out: Optional[RegisterTensor] = None
             ) -> RegisterTensor:
        """Every element of ``x`` limited to ``[min, max]``: ``minimum(maximum(x, min), max)``. ``min`` and
        ``max`` are scalars (compile-time numbers or run-time scalar expressions, cast to ``x``'s dtype)
        or tensors that broadcast against ``x``. Same shape and dtype as ``x``.

        >>> y = self.clip(x, -1.0, 1.0)   # doctest: +SKIP
        """
        return self._result("clip", binary_value(binary_value(x, min, "max"), max, "min"), out)

    def where(self, cond: RegisterTensor, x: Any, y: Any, *, out: Optional[RegisterTensor] = None
              ) -> RegisterTensor:
        """``x`` where ``cond`` holds, else ``y`` (elementwise, with broadcasting; x or y may be scalars of
        the other's dtype). ``cond`` is a bool tensor, or a bool scalar (a run-time condition) that picks
        one of the tensors as a whole.

        >>> z = self.where(x > 0.0, x, 0.0)   # doctest: +SKIP
        >>> z = self.where(k < n, x, y)       # k, n run-time scalars   # doctest: +SKIP
        """
        builder = self._builder("where")
        if not is_tensor_like(cond) and is_scalar(cond):
            tensors = [v for v in (x, y) if is_tensor_like(v)]
            if not tensors:
                raise ScriptError("where: with a scalar cond, x or y must be a register tensor")
            cond = builder.allocate_register(dtypes.boolean, [1] * len(tensors[0].shape), None, cond)
        return self._result("where", where_value(cond, x, y), out)

    def cast(self, x: RegisterTensor, dtype: DataType, *, layout: Optional[Any] = None,
             out: Optional[RegisterTensor] = None, placement: Optional[Any] = None,
             scale: float = 1.0, minus: Optional[RegisterTensor] = None,
             times: Optional[RegisterTensor] = None, biased: bool = False) -> RegisterTensor:
        """Convert every element of ``x`` to ``dtype`` (same shape and layout), as C converts: floats
        round to nearest, floats to integers truncate toward zero; ``x.to(dtype)`` is the same. Packed
        low-precision types convert exactly (:mod:`tilus_tvm.instructions.cast`).

        ``layout``: the result's register layout instead of x's, one that gives every thread the elements
        x's gives it, in another register order (``slot_permutation(x.layout, layout)`` is not None):
        the registers are renamed, for free -- a quantized weight stored in
        :func:`~tilus_tvm.layout.interleave_local` order converts fastest into its mma layout this way.
        Checked here when x's layout is known; a layout of other threads is refused.

        ``placement``: x's words hold its codes' bits where this
        :class:`~tilus_tvm.bit_placement.BitPlacement` puts them (``pack_weight`` stores integers of 3, 5, 6,
        7 bits and small floats so), not densely: each pair of slots converts by a few masks and one paired
        fma or multiply. x must be of the placement's type, in a known layout that ``layout`` (if given)
        equals, with whole blocks a thread; dtype float16 or bfloat16. ``scale``: a power of two the result
        is multiplied by, exactly (placement only): ``2**(bias(dtype) - bias(x))`` leaves a float's placed
        pattern as it is, with no multiply -- for a caller that multiplies by its own scales afterwards.

        ``minus`` / ``times``: register tensors of ``dtype`` whose shapes broadcast to x's (each dimension
        equal or 1): the result is ``(cast(x) - minus) * times``, each step rounded in ``dtype`` as separate
        instructions would round it -- a quantized weight's zero point and group scale. Where x holds 1-, 2- or
        4-bit integer codes in interleaved order, the conversion's paired fma takes the zero point, or, for
        unsigned codes without one, the scale, one instruction a pair instead of two, whenever this thread's
        values make its addend exact (integer zero points; scales below ``2**(16 - m)`` in float16's range,
        ``m`` = 10); so does a scale without zero point for placed codes (unsigned integers alike; floats with
        ``scale`` 1, below ``2**16`` over their :func:`~tilus_tvm.instructions.cast_rules.rebias_factor`), for
        ``uint8``, and for 8-bit floats into bfloat16. Otherwise, and for other types, the thread takes the
        separate steps. An integer's zero code times a negative scale may then give +0 where the separate steps give -0.

        ``biased``: for 1-, 2- and 4-bit integer codes in interleaved order (``layout`` given, x's layout
        ``interleave_local(layout, 32 / bits)``) into float16 or bfloat16, with no ``minus`` or ``times``: each
        element of the result is its value plus a constant of its register slot (exactly: the magic number of
        its code's place left in, one ``lop3`` a pair and no fma), which :meth:`cast_bias` gives as a tensor.
        For a dot that takes the biases' dot off afterwards: ``a @ w == a @ biased - a @ bias``.

        >>> h = self.cast(acc, float16)   # doctest: +SKIP
        >>> w = self.cast(self.view(words, dtype=uint4b, layout=interleave_local(mma_a, 8)), float16,
        ...               layout=mma_a)   # doctest: +SKIP
        """
        if biased:
            if placement is not None or scale != 1.0 or minus is not None or times is not None or out is not None:
                raise ScriptError("cast: biased takes no placement, scale, minus, times or out (give layout)")
            return self._biased_cast(x, dtype, layout)
        if placement is not None or scale != 1.0:
            return self._placed_cast(x, dtype, layout, out, placement, scale, minus, times)
        if minus is not None or times is not None:
            return self._affine_cast(x, dtype, layout, out, None, 1.0, minus, times)
        if layout is None:
            return self._result("cast", cast_value(x, dtype), out)
        if out is not None:
            raise ScriptError("cast: give layout or out, not both (out's layout is the result's)")
        builder = self._builder("cast")
        x = builder.materialize(x)
        if not isinstance(x, RegisterTensor):
            raise ScriptError(f"cast: with layout, x must be a register tensor, got {x!r}")
        _check_reordering(builder, x, layout)
        result = builder.new_register(dtypes.as_dtype(dtype), x.shape, layout)
        return builder.materialize(cast_value(x, dtype), result)

    def cast_bias(self, source: DataType, dtype: DataType, layout: Any) -> RegisterTensor:
        """The constants that ``cast(codes, dtype, layout=layout, biased=True)`` adds, for codes of type
        ``source`` (a 1-, 2- or 4-bit integer type): a register tensor of ``dtype`` laid out as ``layout``, each
        slot set once (no instruction in a loop that uses it).

        >>> w = self.cast(codes, float16, layout=mma_a, biased=True)   # doctest: +SKIP
        >>> bias = self.cast_bias(uint2b, float16, mma_a)   # (before the loop)   # doctest: +SKIP
        >>> acc = self.dot(w, x, zero) - self.dot(bias, x, zero)   # doctest: +SKIP
        """
        from tilus_tvm.instructions import cast_rules as rules
        from tilus_tvm.ir.inst import SlotValues
        from tilus_tvm.lang.instructions.memory import check_layout

        builder = self._builder("cast_bias")
        source, dtype = _biased_types("cast_bias", source, dtype)
        if layout is None:
            raise ScriptError("cast_bias: layout (the biased cast's result layout) is required")
        check_layout("cast_bias", layout, tuple(layout.shape), builder.num_threads)
        per_word = 32 // source.nbits
        if layout.local_size % per_word:
            raise ScriptError(f"cast_bias: layout {layout} gives each thread {layout.local_size} registers, not whole "
                              f"words of {per_word} {source.name} codes")
        biases = rules.interleaved_biases(source, dtype.name)
        values = tuple(biases[slot % per_word // 2] for slot in range(layout.local_size))
        return builder.allocate_register(dtype, list(layout.shape), layout, SlotValues(values))

    def _biased_cast(self, x, dtype, layout) -> RegisterTensor:
        from tilus_tvm.instructions.cast import is_interleaved_order, register_order
        from tilus_tvm.ir import inst as ir

        builder = self._builder("cast")
        x = builder.materialize(x)
        if not isinstance(x, RegisterTensor):
            raise ScriptError(f"cast: with biased, x must be a register tensor, got {x!r}")
        source, dtype = _biased_types("cast", x.dtype, dtype)
        if layout is None or x.layout is None:
            raise ScriptError("cast: biased needs layout and x's layout known (x in interleave_local(layout, 32 / "
                              "bits) order)")
        _check_reordering(builder, x, layout)
        order = register_order(x.layout, layout)
        if order is None or not is_interleaved_order(order, source):
            raise ScriptError(f"cast: biased takes x in interleaved order: x's layout {x.layout} must be "
                              f"interleave_local({layout}, {32 // source.nbits})")
        result = builder.new_register(dtype, x.shape, layout)
        builder.emit(ir.Cast(result, x, biased=True))
        return result

    def _affine_cast(self, x, dtype, layout, out, placement, scale, minus, times) -> RegisterTensor:
        """The Cast instruction of cast(x, dtype, minus=, times=), placed codes' too (placement and scale as checked
        by the caller; minus and times may be None)."""
        from tilus_tvm.ir import inst as ir

        builder = self._builder("cast")
        x = builder.materialize(x)
        if not isinstance(x, RegisterTensor):
            raise ScriptError(f"cast: with minus or times, x must be a register tensor, got {x!r}")
        dtype = dtypes.as_dtype(dtype)
        operands = []
        for name, value in (("minus", minus), ("times", times)):
            if value is None:
                operands.append(None)
                continue
            value = builder.materialize(value)
            if not isinstance(value, RegisterTensor) or value.dtype != dtype:
                raise ScriptError(f"cast: {name} must be a register tensor of {dtype.name} (the result's type), got "
                                  f"{value.describe() if isinstance(value, RegisterTensor) else repr(value)}")
            if len(value.shape) != len(x.shape) or any(v not in (1, e) for v, e in zip(value.shape, x.shape)):
                raise ScriptError(f"cast: {name} of shape {list(value.shape)} does not broadcast to x's "
                                  f"{list(x.shape)} (each dimension equal or 1, same rank)")
            operands.append(value)
        if out is not None:
            if layout is not None:
                raise ScriptError("cast: give layout or out, not both (out's layout is the result's)")
            result = builder.destination("cast", dtype, x.shape, out)
        else:
            if layout is not None:
                _check_reordering(builder, x, layout)
            result = builder.new_register(dtype, x.shape, layout)
        builder.emit(ir.Cast(result, x, placement, float(scale), *operands))
        return result

    def _placed_cast(self, x, dtype, layout, out, placement, scale, minus=None, times=None) -> RegisterTensor:
        from tilus_tvm.bit_placement import BitPlacement, power_of_two

        builder = self._builder("cast")
        if not isinstance(placement, BitPlacement):
            raise ScriptError(f"cast: placement must be a tilus_tvm.bit_placement.BitPlacement"
                              f"{' (scale is for placed codes only)' if placement is None else ''}, got {placement!r}")
        x = builder.materialize(x)
        if not isinstance(x, RegisterTensor) or x.dtype != placement.dtype:
            raise ScriptError(f"cast: x must be a register tensor of {placement.dtype.name}, the placement's type, "
                              f"got {x.describe() if isinstance(x, RegisterTensor) else repr(x)}")
        dtype = dtypes.as_dtype(dtype)
        if dtype.name not in ("float16", "bfloat16"):
            raise ScriptError(f"cast: placed codes convert into float16 or bfloat16, not {dtype.name}")
        if not power_of_two(scale):
            raise ScriptError(f"cast: scale must be a power of two (it multiplies exactly), got {scale!r}")
        if out is not None:
            layout = out.layout if layout is None else layout
        layout = x.layout if layout is None else layout
        if x.layout is None or layout != x.layout:
            raise ScriptError(f"cast: placed codes keep their layout: x's layout {x.layout} must be known and equal "
                              f"the result's {layout}")
        if x.layout.local_size % placement.slots:
            raise ScriptError(f"cast: a {placement.dtype.name} placement block is {placement.slots} codes; x's layout "
                              f"gives each thread {x.layout.local_size}, not whole blocks")
        return self._affine_cast(x, dtype, layout if out is None else None, out, placement, scale, minus, times)

    # --- reductions ------------------------------------------------------------------------------
    def _reduce(self, op: str, x: RegisterTensor, dim: Any, keepdim: bool, out: Optional[RegisterTensor]):
        builder = self._builder(op)
        x = builder.materialize(x)
        if not isinstance(x, RegisterTensor):
            raise ScriptError(f"{op}: x must be a register tensor, got {x!r}")
        dims = list(range(len(x.shape))) if dim is None else normalize_dims(op, dim, len(x.shape))
        dims = sorted(dims, reverse=True)  # the last first, so the others keep their positions
        for k, d in enumerate(dims):
            x = builder.reduce(x, d, op, bool(keepdim), out if k == len(dims) - 1 else None)
        return x

    def sum(self, x: RegisterTensor, dim: Any = None, keepdim: bool = False, *,
            out: Optional[RegisterTensor] = None) -> RegisterTensor:
        """Sum over dimension(s) ``dim`` (an int, a list of ints, or None for all), removed or kept as size
        1 with ``keepdim``. Threads that hold parts of one reduced row combine their partial results
        with warp shuffles when they sit in one warp at power-of-two lane strides, else through shared
        memory (rows spread over several warps); the result is held by all of them (a replicated
        layout). ``out``: a register tensor of the result's dtype and shape to write into.

        >>> row_sums = self.sum(x, dim=1, keepdim=True)   # [m, n] -> [m, 1]   # doctest: +SKIP
        >>> total = self.sum(x, dim=[0, 1], keepdim=True)  # [m, n] -> [1, 1]   # doctest: +SKIP
        """
        return self._reduce("sum", x, dim, keepdim, out)

    def max(self, x: RegisterTensor, dim: Any = None, keepdim: bool = False, *,
            out: Optional[RegisterTensor] = None) -> RegisterTensor:
        """Maximum over dimension(s) ``dim`` (see :meth:`sum`). (``max(a, b)`` of two scalars inside a
        kernel is Python's ``max``, which also takes run-time scalar expressions.)"""
        return self._reduce("max", x, dim, keepdim, out)

    def min(self, x: RegisterTensor, dim: Any = None, keepdim: bool = False, *,
            out: Optional[RegisterTensor] = None) -> RegisterTensor:
        """Minimum over dimension(s) ``dim`` (see :meth:`sum`)."""
        return self._reduce("min", x, dim, keepdim, out)

    def any(self, x: RegisterTensor, dim: Any = None, keepdim: bool = False, *,
            out: Optional[RegisterTensor] = None) -> RegisterTensor:
        """Whether any element of a bool tensor holds along dimension(s) ``dim`` (see :meth:`sum`);
        a bool tensor."""
        return self._bool_reduce("any", "max", x, dim, keepdim, out)

    def all(self, x: RegisterTensor, dim: Any = None, keepdim: bool = False, *,
            out: Optional[RegisterTensor] = None) -> RegisterTensor:
        """Whether every element of a bool tensor holds along dimension(s) ``dim`` (see :meth:`sum`);
        a bool tensor."""
        return self._bool_reduce("all", "min", x, dim, keepdim, out)

    def _bool_reduce(self, op: str, via: str, x: Any, dim: Any, keepdim: bool, out: Optional[RegisterTensor]):
        builder = self._builder(op)
        if not is_tensor_like(x) or x.dtype is not dtypes.boolean:
            raise ScriptError(f"{op}: x must be a bool register tensor, got {x!r}")
        counts = self._reduce(via, builder.cast(x, dtypes.int32), dim, keepdim, None)
        return builder.materialize(binary_value(counts, 0, "ne"), out)

    def scan(self, x: RegisterTensor, *, dim: int, op: str = "add", exclusive: bool = False,
             out: Optional[RegisterTensor] = None) -> RegisterTensor:
        """Prefix ``op`` of ``x`` along ``dim``: element ``i`` of the result combines the elements
        ``0..i`` of ``x`` (inclusive) or ``0..i-1`` (``exclusive``; the first is op's identity: 0, 1,
        -inf, +inf, all ones, 0, 0), independently for every other index. ``op`` is one of ``'add'``,
        ``'mul'``, ``'max'``, ``'min'`` and, on integer or bool tensors, ``'and'``, ``'or'``, ``'xor'``.

        Each thread scans its own run of elements, then the threads that share a row combine their
        totals with warp shuffles (or through shared memory when the row spans warps). Layouts in
        which a thread's elements of a row are not one contiguous run are converted first. Same shape
        and dtype as ``x``; ``out`` may be ``x``.

        >>> offsets = self.scan(counts, dim=1, op="add", exclusive=True)   # doctest: +SKIP
        """
        builder = self._builder("scan")
        return builder.materialize(scan_value(x, dim, op, exclusive), out)

    def cumsum(self, x: RegisterTensor, *, dim: int, exclusive: bool = False,
               out: Optional[RegisterTensor] = None) -> RegisterTensor:
        """Cumulative sum along ``dim``: :meth:`scan` with ``op='add'`` (like ``torch.cumsum``)."""
        return self.scan(x, dim=dim, op="add", exclusive=exclusive, out=out)

    def cumprod(self, x: RegisterTensor, *, dim: int, exclusive: bool = False,
                out: Optional[RegisterTensor] = None) -> RegisterTensor:
        """Cumulative product along ``dim``: :meth:`scan` with ``op='mul'`` (like ``torch.cumprod``)."""
        return self.scan(x, dim=dim, op="mul", exclusive=exclusive, out=out)

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
