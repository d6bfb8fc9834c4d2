"""Pictures of register layouts: the text table's grid, each cell filled with its thread's colour.

As in CuTe's layout pictures, the fill colour is a fixed palette indexed by thread id, so the
cells of one thread share a colour and a thread's footprint is seen at a glance. Each cell reads
``T<thread>`` over ``V<local>`` (the register slot); a replicated cell lists all its threads,
``T0,4,8``, and takes the colour of its first one. Rows and columns are those of the text
table (``visualize.layout_rows``): a 1-D layout is one row, leading dimensions of a layout of
more than two dimensions are flattened into rows. Row and column indices are drawn along the
left and top edges.

``svg`` is plain Python; ``png`` draws the same picture with matplotlib.
"""
from __future__ import annotations

import io
from dataclasses import dataclass
from xml.sax.saxutils import escape, quoteattr

from tilus_tvm.errors import LayoutError
from tilus_tvm.layout.register import RegisterLayout
from tilus_tvm.layout.visualize import layout_rows

# Light, distinguishable fills (black text stays readable); thread t gets PALETTE[t % 16].
PALETTE = (
    "#a6c8ff", "#b6f0b0", "#fff2a8", "#ffb8b0", "#d7c4ff", "#a8ece8", "#ffd6a5", "#f5c2e7",
    "#c9d8ef", "#dcedc1", "#f3e6c0", "#e8c5c5", "#c8c0e0", "#c2e0dc", "#e6d2bd", "#e0c6da",
)

DEFAULTS = {"cell_width": 44, "cell_height": 36, "font_size": 11, "indices": True, "title": True}
CHAR_WIDTH = 0.65  # of the font size: a monospace advance (0.6) with some slack
MARGIN = 4


@dataclass(frozen=True)
class Cell:
    """One element of the picture: where it is drawn and what it says."""

    row: int
    column: int
    index: tuple[int, ...]
    threads: tuple[int, ...]
    local: int

    @property
    def colour(self) -> str:
        return PALETTE[self.threads[0] % len(PALETTE)]

    @property
    def labels(self) -> tuple[str, str]:
        return "T" + ",".join(map(str, self.threads)), f"V{self.local}"


def layout_cells(layout: RegisterLayout) -> list[Cell]:
    """The cells of the picture, row by row."""
    cells = []
    for r, row in enumerate(layout_rows(layout)):
        for c, index in enumerate(row):
            holders = layout.holders(*index)
            cells.append(Cell(r, c, index, tuple(t for t, _ in holders), holders[0][1]))
    return cells


def render(layout: RegisterLayout, fmt: str, **options) -> str | bytes:
    """Draw ``layout`` as ``fmt`` ``"svg"`` (a str) or ``"png"`` (bytes, needs matplotlib).

    Options: ``cell_width``, ``cell_height`` (pixels, at least as wide as the longest label),
    ``font_size``, ``indices`` (draw row/column indices), ``title`` (draw the layout's repr).
    """
    if not isinstance(layout, RegisterLayout):
        raise LayoutError(f"render: expected a RegisterLayout, got {type(layout).__name__}")
    unknown = sorted(set(options) - set(DEFAULTS))
    if unknown:
        raise LayoutError(f"render: unknown option {unknown[0]!r}, expected one of {sorted(DEFAULTS)}")
    style = _Style(layout, {**DEFAULTS, **options})
    if fmt == "svg":
        return _svg(layout, style)
    if fmt == "png":
        return _png(layout, style)
    raise LayoutError(f"render: fmt must be 'svg' or 'png', got {fmt!r}")


class _Style:
    """Pixel geometry of one picture."""

    def __init__(self, layout: RegisterLayout, options: dict):
        self.cells = layout_cells(layout)
        self.rows = layout_rows(layout)
        self.font_size = options["font_size"]
        longest = max(len(label) for cell in self.cells for label in cell.labels)
        self.cell_width = max(options["cell_width"], int(longest * CHAR_WIDTH * self.font_size) + 8)
        self.cell_height = max(options["cell_height"], int(2.6 * self.font_size))
        self.title = str(layout) if options["title"] else None
        self.indices = options["indices"]
        self.row_names = [",".join(map(str, row[0][:-1])) for row in self.rows]
        self.left = MARGIN
        if self.indices:
            self.left += int(max(map(len, self.row_names)) * CHAR_WIDTH * self.font_size) + 8
        self.top = MARGIN + (2 * self.font_size if self.title else 0) + (self.font_size + 6 if self.indices else 0)
        num_columns = len(self.rows[0])
        self.width = self.left + num_columns * self.cell_width + MARGIN
        if self.title:
            self.width = max(self.width, int(len(self.title) * CHAR_WIDTH * self.font_size) + 2 * MARGIN)
        self.height = self.top + len(self.rows) * self.cell_height + MARGIN

    def origin(self, cell: Cell) -> tuple[int, int]:
        return self.left + cell.column * self.cell_width, self.top + cell.row * self.cell_height


def _svg(layout: RegisterLayout, style: _Style) -> str:
    fs = style.font_size
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{style.width}" height="{style.height}" '
        f'viewBox="0 0 {style.width} {style.height}" font-family="monospace" font-size="{fs}">',
        f"<title>{escape(str(layout))}</title>",
        f'<rect width="{style.width}" height="{style.height}" fill="white"/>',
    ]
    if style.title:
        out.append(f'<text class="title" x="{MARGIN}" y="{MARGIN + fs}">{escape(style.title)}</text>')
    if style.indices:
        y = style.top - 6
        for c in range(len(style.rows[0])):
            x = style.left + c * style.cell_width + style.cell_width / 2
            out.append(f'<text class="column-index" x="{x:g}" y="{y}" text-anchor="middle" fill="#555">{c}</text>')
        for r, name in enumerate(style.row_names):
            if not name:  # a 1-D layout's single row has no index
                continue
            y = style.top + r * style.cell_height + style.cell_height / 2 + fs / 3
            out.append(f'<text class="row-index" x="{style.left - 6}" y="{y:g}" text-anchor="end" '
                       f'fill="#555">{escape(name)}</text>')
    for cell in style.cells:
        x, y = style.origin(cell)
        thread_label, local_label = cell.labels
        cx = x + style.cell_width / 2
        out.append(
            f'<g class="cell" data-index={quoteattr(",".join(map(str, cell.index)))} '
            f'data-threads={quoteattr(",".join(map(str, cell.threads)))} data-local="{cell.local}">'
            f'<rect x="{x}" y="{y}" width="{style.cell_width}" height="{style.cell_height}" '
            f'fill="{cell.colour}" stroke="black" stroke-width="1"/>'
            f'<text x="{cx:g}" y="{y + style.cell_height / 2 - 2:g}" text-anchor="middle">{thread_label}</text>'
            f'<text x="{cx:g}" y="{y + style.cell_height / 2 + fs:g}" text-anchor="middle">{local_label}</text>'
            f"</g>"
        )
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _png(layout: RegisterLayout, style: _Style) -> bytes:
    try:
        from matplotlib.figure import Figure
        from matplotlib.patches import Rectangle
    except ImportError as err:
        raise LayoutError("visualize_layout: fmt='png' needs matplotlib (pip install matplotlib, or the "
                          "package's [viz] extra); fmt='svg' needs nothing") from err
    dpi = 100
    figure = Figure(figsize=(style.width / dpi, style.height / dpi), dpi=dpi)
    axes = figure.add_axes((0, 0, 1, 1))
    axes.set_xlim(0, style.width)
    axes.set_ylim(style.height, 0)  # y grows downwards, as in the SVG
    axes.axis("off")
    points = style.font_size * 72 / dpi
    text = {"family": "monospace", "fontsize": points, "ha": "center", "va": "center"}
    if style.title:
        axes.text(MARGIN, MARGIN + style.font_size / 2, style.title, **{**text, "ha": "left"})
    if style.indices:
        for c in range(len(style.rows[0])):
            axes.text(style.left + (c + 0.5) * style.cell_width, style.top - 6 - style.font_size / 2, str(c),
                      color="#555", **text)
        for r, name in enumerate(style.row_names):
            if not name:
                continue
            axes.text(style.left - 6, style.top + (r + 0.5) * style.cell_height, name, color="#555",
                      **{**text, "ha": "right"})
    for cell in style.cells:
        x, y = style.origin(cell)
        axes.add_patch(Rectangle((x, y), style.cell_width, style.cell_height, facecolor=cell.colour,
                                 edgecolor="black", linewidth=0.8))
        thread_label, local_label = cell.labels
        cx, cy = x + style.cell_width / 2, y + style.cell_height / 2
        axes.text(cx, cy - style.font_size * 0.6, thread_label, **text)
        axes.text(cx, cy + style.font_size * 0.6, local_label, **text)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi)
    return buffer.getvalue()
