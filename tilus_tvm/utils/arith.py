"""Integer helpers for kernel authors: tile counts, divisibility, powers of two.

``cdiv`` also works on run-time scalar expressions inside a kernel (it only uses ``+`` and ``//``);
the others take compile-time Python ints (hyper-parameters, shapes) and reject anything else.
"""
from __future__ import annotations

import math
from typing import Any, Iterable

from tilus_tvm.errors import ScriptError


def _int(value: Any, op: str, name: str, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ScriptError(f"{op}: {name} must be an int, got {value!r} ({type(value).__name__})")
    if value < minimum:
        raise ScriptError(f"{op}: {name} must be at least {minimum}, got {value}")
    return value


def cdiv(a: Any, b: Any) -> Any:
    """Ceiling division ``(a + b - 1) // b`` of non-negative integers (or scalar expressions): how many
    tiles of ``b`` cover ``a``.

    >>> cdiv(10, 4), cdiv(8, 4)
    (3, 2)
    """
    return (a + b - 1) // b


def idiv(a: int, b: int) -> int:
    """``a // b`` where ``b`` must divide ``a`` exactly (a shape split into whole tiles).

    Raises :class:`~tilus_tvm.errors.ScriptError` naming both numbers when it does not.

    >>> idiv(128, 16)
    8
    """
    a, b = _int(a, "idiv", "a"), _int(b, "idiv", "b", minimum=1)
    if a % b:
        raise ScriptError(f"idiv: {b} does not divide {a} (remainder {a % b})")
    return a // b


def gcd(a: int, b: int, *others: int) -> int:
    """Greatest common divisor of two or more non-negative ints (``gcd(x, 0) == x``).

    >>> gcd(48, 18), gcd(64, 24, 16)
    (6, 8)
    """
    values = [_int(v, "gcd", f"argument {i}") for i, v in enumerate((a, b, *others))]
    return math.gcd(*values)


def lcm(a: int, b: int, *others: int) -> int:
    """Least common multiple of two or more positive ints.

    >>> lcm(4, 6), lcm(2, 3, 4)
    (12, 12)
    """
    values = [_int(v, "lcm", f"argument {i}", minimum=1) for i, v in enumerate((a, b, *others))]
    return math.lcm(*values)


def prod(values: Iterable[Any]) -> Any:
    """Product of the items of ``values`` (1 when empty); ints, floats or scalar expressions.

    >>> prod([2, 3, 4]), prod([])
    (24, 1)
    """
    result: Any = 1
    for i, value in enumerate(values):
        result = value if i == 0 else result * value
    return result


def is_power_of_two(n: int) -> bool:
    """Whether the int ``n`` is 1, 2, 4, 8, ...

    >>> is_power_of_two(64), is_power_of_two(96), is_power_of_two(0)
    (True, False, False)
    """
    n = _int(n, "is_power_of_two", "n", minimum=-(2**63))
    return n > 0 and n & (n - 1) == 0


def floor_log2(n: int) -> int:
    """``floor(log2(n))`` of a positive int: the index of its highest set bit.

    >>> floor_log2(1), floor_log2(64), floor_log2(100)
    (0, 6, 6)
    """
    return _int(n, "floor_log2", "n", minimum=1).bit_length() - 1


def nbytes_from_nbits(nbits: int) -> int:
    """Bytes in ``nbits`` bits, which must be a whole number of bytes.

    >>> nbytes_from_nbits(128)
    16
    """
    nbits = _int(nbits, "nbytes_from_nbits", "nbits")
    if nbits % 8:
        raise ScriptError(f"nbytes_from_nbits: {nbits} bits is not a whole number of bytes")
    return nbits // 8
