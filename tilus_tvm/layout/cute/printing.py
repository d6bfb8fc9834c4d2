"""``print_layout``: a rank-2 layout as the table CuTe (and seed 001) draws, 0-indexed.

    (2,3):(1,8)
           0    1    2
        +----+----+----+
     0  |  0 |  8 | 16 |
        +----+----+----+
     1  |  1 |  9 | 17 |
        +----+----+----+

The first line is the layout; then the column numbers; then, per row, a rule and the row number
followed by the values ``layout(m, n)``. Every cell is ``num_digits(cosize) + 2`` wide with the
value right-aligned and one space after it; the column-number line ends with a space.
"""
from __future__ import annotations

from typing import Any

from tilus_tvm.errors import LayoutError
from tilus_tvm.layout.cute import int_tuple as it
from tilus_tvm.layout.cute.layout import Layout


def _num_digits(value: int) -> int:
    return len(str(abs(value)))


def format_layout(layout: Any) -> str:
    """The text :func:`print_layout` prints (with its final newline). A rank-1 layout is drawn as
    one column. ``layout`` may be any layout whose values are ints (a composed layout too)."""
    rank = it.rank(layout.shape)
    if rank not in (1, 2):
        raise LayoutError(f"print_layout: layout {layout} has rank {rank}; only rank-1 and rank-2 layouts are drawn")
    rows = it.product(it.get_mode(layout.shape, 0))
    cols = it.product(layout.shape[1]) if rank == 2 else 1
    values = [[layout(m, n) if rank == 2 else layout(m) for n in range(cols)] for m in range(rows)]
    for row in values:
        for v in row:
            if not it.is_int(v):
                raise LayoutError(f"print_layout: layout {layout} has a non-integer value {v!r}")
    if isinstance(layout, Layout):
        cosize = layout.cosize
    else:
        cosize = max(abs(v) for row in values for v in row) + 1
    width = _num_digits(cosize) + 2
    rule = "    " + ("+" + "-" * width) * cols + "+"
    lines = [str(layout), "    " + "".join(f"  {n:>{width - 2}} " for n in range(cols))]
    for m, row in enumerate(values):
        lines.append(rule)
        lines.append(f"{m:2d}  " + "".join(f"| {v:>{width - 2}} " for v in row) + "|")
    lines.append(rule)
    return "\n".join(lines) + "\n"


def print_layout(layout: Any) -> None:
    """Print ``layout`` as a table of its values (see the module docstring).

    >>> print_layout(Layout((2, 2), (1, 2)))
    (2,2):(1,2)
          0   1
        +---+---+
     0  | 0 | 2 |
        +---+---+
     1  | 1 | 3 |
        +---+---+
    """
    print(format_layout(layout), end="")
