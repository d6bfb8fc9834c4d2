"""C ``printf`` formats from kernels: each conversion checked against its argument, arguments
converted to what device ``printf`` reads.

Device ``printf`` is variadic, so C's default promotions apply to its arguments: ``float`` is
passed as ``double``, small integers as ``int``. Two kinds of scalars fall outside them and would
print garbage: 16-bit floats (``__half``, ``__nv_bfloat16`` are structs, not promoted) and a
32-bit integer read by a 64-bit conversion (``%lld``), or the reverse. :func:`printf_arguments`
casts 16-bit floats to float32, prints 32-bit integers given to ``%lld`` through ``%d``, and refuses the
rest: a float for ``%d``, an integer for ``%f``, a 64-bit integer for ``%d``, a count of
arguments that differs from the format's.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Sequence

from tilus_tvm import dtypes
from tilus_tvm.errors import ScriptError
from tilus_tvm.ir.scalar import expr_dtype, is_expr

# %[flags][width][.precision][length]conversion
_SPEC = re.compile(r"%(?P<flags>[-+ #0]*)(?P<width>\*|\d+)?(?:\.(?P<precision>\*|\d*))?"
                   r"(?P<length>hh|h|ll|l|j|z|t|L)?(?P<conversion>[diouxXfFeEgGaAcsp%])")

INTEGER_CONVERSIONS = frozenset("diouxXc")
FLOAT_CONVERSIONS = frozenset("fFeEgGaA")


@dataclass(frozen=True)
class Conversion:
    """One ``%...`` conversion of a format: its text, the length modifier and the conversion letter."""

    text: str
    length: str
    conversion: str
    width: int | None
    start: int  # position in the format

    @property
    def wide(self) -> bool:
        """Whether it reads a 64-bit integer (``%ld``, ``%lld``; ``long`` is 64 bits on CUDA's hosts)."""
        return self.length in ("l", "ll", "j", "z", "t")


def conversions(fmt: str) -> list[Conversion]:
    """The conversions of ``fmt`` that take an argument, in order (``%%`` takes none).

    >>> [c.text for c in conversions("%d items, %5.2f%% done, %lld")]
    ['%d', '%5.2f', '%lld']
    """
    found, position = [], 0
    while True:
        start = fmt.find("%", position)
        if start < 0:
            return found
        match = _SPEC.match(fmt, start)
        if match is None:
            raise ScriptError(f"printf: format {fmt!r} has an incomplete or unknown conversion at "
                              f"{fmt[start:start + 8]!r}; escape a literal percent sign as %%")
        position = match.end()
        if match["conversion"] == "%":
            continue
        if match["width"] == "*" or match["precision"] == "*":
            raise ScriptError(f"printf: {match.group(0)!r} in format {fmt!r}: a width or precision given as an "
                              f"argument (*) is not supported; write the number in the format")
        width = int(match["width"]) if match["width"] else None
        found.append(Conversion(match.group(0), match["length"] or "", match["conversion"], width, start))


def _argument(position: int, conv: Conversion, value: Any, fmt: str) -> tuple[str, Any]:
    """``(conversion, value)``: ``value`` as the scalar expression the conversion reads, and the
    conversion's text, adjusted to the value (see the module docstring)."""
    from tvm import tirx  # here, not at the top: importing tilus_tvm does not import TVM

    where = f"printf: argument {position} ({value!r}) for {conv.text!r} in format {fmt!r}"
    if isinstance(value, str):
        if conv.conversion != "s":
            raise ScriptError(f"{where}: a string needs %s")
        return conv.text, value
    if conv.conversion in "sp":
        raise ScriptError(f"{where}: {conv.text} takes a compile-time string; give scalars to numeric conversions")
    if isinstance(value, bool):
        value = tirx.const(int(value), "int32")
    elif isinstance(value, int):
        value = tirx.const(value, "int64" if not -2**31 <= value < 2**31 else "int32")
    elif isinstance(value, float):
        value = tirx.const(value, "float64")
    elif not is_expr(value):
        raise ScriptError(f"{where}: expected a scalar (int, float, str or a scalar expression)")
    dtype = dtypes.as_dtype(expr_dtype(value))
    if conv.conversion in FLOAT_CONVERSIONS:
        if dtype.kind != "float":
            raise ScriptError(f"{where}: {conv.text} prints a float, the argument is {dtype.name}; cast it with "
                              f"float(...) or use an integer conversion such as %d")
        return conv.text, (value if dtype.nbits >= 32 else tirx.Cast("float32", value))
    if dtype.kind == "float":
        raise ScriptError(f"{where}: {conv.text} prints an integer, the argument is {dtype.name}; use %f (or %g)")
    if dtype.nbits > 32 and not conv.wide:
        raise ScriptError(f"{where}: {conv.text} reads 32 bits, the argument is {dtype.name}; use %lld "
                          f"(or %llu, %llx)")
    text = conv.text
    if conv.wide and dtype.nbits <= 32:  # print it through a 32-bit conversion (a widening cast may be narrowed)
        text = text[:len(text) - 1 - len(conv.length)] + conv.conversion
    signed = dtype.kind == "bool" or dtype.signed
    return text, (value if dtype.nbits in (32, 64) else tirx.Cast("int32" if signed else "uint32", value))


def printf_arguments(fmt: Any, args: Sequence[Any]) -> tuple[str, tuple[Any, ...]]:
    """``(fmt, args)`` for device ``printf``: every argument checked against its conversion and
    converted (see the module docstring); compile-time strings for ``%s`` are written into the
    format, since device code receives only the format as a string literal.

    >>> printf_arguments("%s has %d rows", ["tile", 4])[0]
    'tile has %d rows'
    """
    if not isinstance(fmt, str):
        raise ScriptError(f"printf: the format must be a str, got {fmt!r}")
    convs = conversions(fmt)
    if len(convs) != len(args):
        raise ScriptError(f"printf: format {fmt!r} has {len(convs)} conversion(s) "
                          f"({', '.join(c.text for c in convs) or 'none'}), got {len(args)} argument(s)")
    pieces, values, position = [], [], 0
    for i, (conv, arg) in enumerate(zip(convs, args)):
        text, value = _argument(i, conv, arg, fmt)
        pieces.append(fmt[position:conv.start])
        position = conv.start + len(conv.text)
        if isinstance(value, str):
            pieces.append((text % value).replace("%", "%%"))
        else:
            pieces.append(text)
            values.append(value)
    pieces.append(fmt[position:])
    return "".join(pieces), tuple(values)


def element_format(dtype: Any) -> str:
    """The default conversion of one element of ``dtype`` in ``print_tensor``: a fixed width, so the
    table's columns line up (``%8.3f`` for floats, ``%6d`` for integers, ``%1d`` for bool)."""
    if dtype.kind == "bool":
        return "%1d"
    if dtype.kind == "float":
        return "%8.3f"
    wide = "ll" if dtype.nbits > 32 else ""
    return f"%{'8' if wide else '6'}{wide}{'d' if dtype.signed else 'u'}"


def check_element_format(op: str, fmt: Any, dtype: Any) -> str:
    """``fmt`` if it holds exactly one conversion that prints an element of ``dtype``."""
    if not isinstance(fmt, str):
        raise ScriptError(f"{op}: fmt must be a str such as {element_format(dtype)!r}, got {fmt!r}")
    convs = conversions(fmt)
    if len(convs) != 1 or convs[0].conversion in "sp":
        raise ScriptError(f"{op}: fmt {fmt!r} must hold exactly one numeric conversion for the element, such "
                          f"as {element_format(dtype)!r}")
    from tvm import tirx

    try:
        printf_arguments(fmt, [tirx.Var("element", dtype.tvm_name or dtype.name)])
    except ScriptError as exc:
        raise ScriptError(f"{op}: fmt {fmt!r} cannot print {dtype.name} elements: {exc}") from None
    return fmt


def printed_width(fmt: str, fallback: int = 6) -> int:
    """Characters ``fmt`` prints when its one conversion fills exactly its width (``fallback`` when it
    gives none): the width of a table cell's text."""
    (conv,) = conversions(fmt)
    literal = fmt[:conv.start] + fmt[conv.start + len(conv.text):]
    return (conv.width if conv.width is not None else fallback) + len(literal.replace("%%", "%"))
