"""Text tables of register layouts, byte for byte as the seeds print them.

Each cell shows ``thread: local`` for the element at that position; a replicated element shows
the list of its threads, ``[0, 4, 8]: 0``. A 1-D layout is one row; a layout of more than two
dimensions is shown with its leading dimensions flattened into rows.
"""
from __future__ import annotations

import math

from tilus_tvm.errors import LayoutError
from tilus_tvm.layout.register import RegisterLayout


def cell_text(layout: RegisterLayout, index: tuple[int, ...]) -> str:
    holders = layout.holders(*index)
    threads = [t for t, _ in holders]
    local = holders[0][1]
    who = str(threads[0]) if len(threads) == 1 else "[" + ", ".join(map(str, threads)) + "]"
    return f"{who}: {local}"


def grid(rows: list[list[str]]) -> str:
    """Draw ``rows`` of cell strings as a box table, each column as wide as its widest cell."""
    widths = [max(len(row[c]) for row in rows) + 2 for c in range(len(rows[0]))]

    def rule(left: str, mid: str, right: str) -> str:
        return left + mid.join("─" * w for w in widths) + right

    lines = [rule("┌", "┬", "┐")]
    for r, row in enumerate(rows):
        if r:
            lines.append(rule("├", "┼", "┤"))
        lines.append("│" + "│".join(" " + cell.ljust(w - 2) + " " for cell, w in zip(row, widths)) + "│")
    lines.append(rule("└", "┴", "┘"))
    return "\n".join(lines)


def layout_rows(layout: RegisterLayout) -> list[list[tuple[int, ...]]]:
    """The logical indices of ``layout`` arranged as the table shows them."""
    shape = layout.shape
    if len(shape) == 0:
        return [[()]]
    num_cols = shape[-1]
    num_rows = math.prod(shape[:-1])
    rows = []
    for r in range(num_rows):
        lead = []
        rest = r
        for extent in reversed(shape[:-1]):
            lead.append(rest % extent)
            rest //= extent
        lead = tuple(reversed(lead))
        rows.append([lead + (c,) for c in range(num_cols)])
    return rows


def visualize_layout(layout: RegisterLayout, fmt: str = "text", **options) -> str | bytes:
    """Show a register layout.

    ``fmt="text"`` (default): the layout's repr followed by a table of ``thread: local`` cells.
    ``fmt="svg"``: an SVG picture (str) with cells coloured by thread, like CuTe's pictures.
    ``fmt="png"``: PNG bytes of the same picture (needs matplotlib).

    >>> print(visualize_layout(spatial(1, 2)))
    RegisterLayout(shape=[1, 2], mode_shape=[2], spatial_modes=[0], local_modes=[])
    ┌──────┬──────┐
    │ 0: 0 │ 1: 0 │
    └──────┴──────┘
    """
    if not isinstance(layout, RegisterLayout):
        raise LayoutError(f"visualize_layout: expected a RegisterLayout, got {type(layout).__name__}")
    if fmt == "text":
        table = grid([[cell_text(layout, idx) for idx in row] for row in layout_rows(layout)])
        return f"{layout}\n{table}"
    if fmt in ("svg", "png"):
        from tilus_tvm.layout import picture

        return picture.render(layout, fmt, **options)
    raise LayoutError(f"visualize_layout: fmt must be 'text', 'svg' or 'png', got {fmt!r}")
