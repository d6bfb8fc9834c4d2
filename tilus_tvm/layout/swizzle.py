"""XOR swizzles in CuTe's ``Swizzle<B, M, S>`` form.

A swizzle permutes offsets by XOR-ing ``B`` bits taken from one place into another:

    yyy_mask = (2**B - 1) << (M + max(0, S))
    swizzle(offset) = offset ^ ((offset & yyy_mask) >> S)        (a negative S shifts left)

``M`` is the number of least-significant bits kept constant (the unit of 2**M elements moves as a
whole), ``B`` the number of bits in the mask, ``S`` the distance of the shift. For 16-bit elements
in rows of 64 elements (128 bytes) ``Swizzle(3, 3, 3)`` moves 16-byte chunks so that the 8 rows of
an 8x8 ldmatrix tile land in 8 different bank groups. A swizzle is an involution on offsets below
``2**(M + B + |S|)`` when ``|S| >= B`` (CuTe's requirement), which the constructor checks.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tilus_tvm.errors import LayoutError


@dataclass(frozen=True)
class Swizzle:
    """``Swizzle(bits, base, shift)``: CuTe's ``Swizzle<B, M, S>``.

    >>> Swizzle(3, 3, 3)(0b001_000_101)
    77
    """

    bits: int
    base: int
    shift: int

    def __post_init__(self):
        for name in ("bits", "base", "shift"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise LayoutError(f"Swizzle: {name} must be an int, got {value!r}")
        if self.bits < 0 or self.base < 0:
            raise LayoutError(f"Swizzle: bits and base must be non-negative, got {self}")
        if abs(self.shift) < self.bits:
            raise LayoutError(f"Swizzle: |shift| must be at least bits (the masks would overlap), got {self}")

    @property
    def yyy_mask(self) -> int:
        """The bits that are read."""
        return ((1 << self.bits) - 1) << (self.base + max(0, self.shift))

    @property
    def zzz_mask(self) -> int:
        """The bits that are flipped."""
        return ((1 << self.bits) - 1) << (self.base - min(0, self.shift))

    @property
    def span(self) -> int:
        """Offsets below ``span`` are permuted among themselves (the swizzle's period)."""
        return 1 << (self.base + self.bits + abs(self.shift))

    def __call__(self, offset: Any) -> Any:
        """Apply the swizzle to an int or a TVM ``PrimExpr`` offset."""
        if self.bits == 0:
            return offset
        picked = offset & self.yyy_mask
        moved = picked >> self.shift if self.shift >= 0 else picked << -self.shift
        return offset ^ moved

    def __str__(self) -> str:
        return f"Sw<{self.bits},{self.base},{self.shift}>"
