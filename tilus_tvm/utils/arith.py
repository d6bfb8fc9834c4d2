"""Integer helpers that work on Python ints and on scalar expressions inside kernels."""
from __future__ import annotations

from typing import Any


def cdiv(a: Any, b: Any) -> Any:
    """Ceiling division ``(a + b - 1) // b`` of non-negative integers (or scalar expressions).

    >>> cdiv(10, 4)
    3
    """
    return (a + b - 1) // b
