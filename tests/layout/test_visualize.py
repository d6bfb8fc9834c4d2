"""Text tables (tilus_tvm/layout/visualize.py) and pictures (tilus_tvm/layout/picture.py)."""
import importlib.util
import xml.etree.ElementTree as ET

import pytest

from tilus_tvm.errors import LayoutError
from tilus_tvm.layout import RegisterLayout, local, reduce, repeat, spatial, visualize_layout
from tilus_tvm.layout.picture import PALETTE, layout_cells, render
from tilus_tvm.layout.register import all_indices

SVG = "{http://www.w3.org/2000/svg}"


# ---- text --------------------------------------------------------------------------------------
def test_text_of_the_seed_mapping_example():
    assert visualize_layout(RegisterLayout([4, 6], [2, 2, 3, 2], [0, 2], [3, 1])) == """\
RegisterLayout(shape=[4, 6], mode_shape=[2, 2, 3, 2], spatial_modes=[0, 2], local_modes=[3, 1])
┌──────┬──────┬──────┬──────┬──────┬──────┐
│ 0: 0 │ 0: 2 │ 1: 0 │ 1: 2 │ 2: 0 │ 2: 2 │
├──────┼──────┼──────┼──────┼──────┼──────┤
│ 0: 1 │ 0: 3 │ 1: 1 │ 1: 3 │ 2: 1 │ 2: 3 │
├──────┼──────┼──────┼──────┼──────┼──────┤
│ 3: 0 │ 3: 2 │ 4: 0 │ 4: 2 │ 5: 0 │ 5: 2 │
├──────┼──────┼──────┼──────┼──────┼──────┤
│ 3: 1 │ 3: 3 │ 4: 1 │ 4: 3 │ 5: 1 │ 5: 3 │
└──────┴──────┴──────┴──────┴──────┴──────┘"""


def test_text_of_a_3d_layout_flattens_leading_dimensions_into_rows():
    assert visualize_layout(spatial(2, 1, 2).local(1, 2, 1)) == """\
RegisterLayout(shape=[2, 2, 2], mode_shape=[2, 2, 2], spatial_modes=[0, 2], local_modes=[1])
┌──────┬──────┐
│ 0: 0 │ 1: 0 │
├──────┼──────┤
│ 0: 1 │ 1: 1 │
├──────┼──────┤
│ 2: 0 │ 3: 0 │
├──────┼──────┤
│ 2: 1 │ 3: 1 │
└──────┴──────┘"""


def test_text_of_replicated_and_scalar_layouts():
    assert visualize_layout(reduce(spatial(2, 3), [1])) == """\
RegisterLayout(shape=[2], mode_shape=[2], spatial_modes=[0, -3], local_modes=[])
┌──────────────┬──────────────┐
│ [0, 1, 2]: 0 │ [3, 4, 5]: 0 │
└──────────────┴──────────────┘"""
    assert visualize_layout(RegisterLayout([], [], [-2], [])) == """\
RegisterLayout(shape=[], mode_shape=[], spatial_modes=[-2], local_modes=[])
┌───────────┐
│ [0, 1]: 0 │
└───────────┘"""


def test_visualize_rejects_bad_arguments():
    with pytest.raises(LayoutError, match="visualize_layout: expected a RegisterLayout, got tuple"):
        visualize_layout((2, 3))
    with pytest.raises(LayoutError, match="visualize_layout: fmt must be 'text', 'svg' or 'png', got 'pdf'"):
        visualize_layout(spatial(2), fmt="pdf")


# ---- SVG ---------------------------------------------------------------------------------------
def svg_cells(layout: RegisterLayout, **options) -> tuple[ET.Element, list[ET.Element]]:
    text = visualize_layout(layout, fmt="svg", **options)
    assert isinstance(text, str)
    root = ET.fromstring(text)
    assert root.tag == f"{SVG}svg"
    return root, [g for g in root.iter(f"{SVG}g") if g.get("class") == "cell"]


@pytest.mark.parametrize(
    "layout",
    [
        repeat(2, 1).spatial(8, 4).repeat(1, 2),  # mma C fragment, 2-D
        spatial(6).local(4),  # 1-D
        spatial(2, 1, 2).local(1, 2, 3),  # 3-D
        reduce(spatial(3, 4), [0]),  # replicated
        RegisterLayout([], [], [], []),  # scalar
    ],
)
def test_svg_has_one_labelled_cell_per_element(layout):
    root, cells = svg_cells(layout)
    assert len(cells) == layout.size
    assert root.find(f"{SVG}title").text == str(layout)
    by_index = {tuple(int(x) for x in g.get("data-index").split(",") if x): g for g in cells}
    assert set(by_index) == set(all_indices(layout.shape))
    for index, g in by_index.items():
        holders = layout.holders(*index)
        threads = [t for t, _ in holders]
        labels = [t.text for t in g.iter(f"{SVG}text")]
        assert labels == ["T" + ",".join(map(str, threads)), f"V{holders[0][1]}"]
        assert g.get("data-threads") == ",".join(map(str, threads))
        assert g.find(f"{SVG}rect").get("fill") == PALETTE[threads[0] % len(PALETTE)]


def test_svg_cells_tile_a_grid_coloured_by_thread():
    layout = local(2, 2).spatial(2, 2)  # 4 threads, each on 4 separated cells
    _, cells = svg_cells(layout)
    rects = [g.find(f"{SVG}rect") for g in cells]
    xs = sorted({float(r.get("x")) for r in rects})
    ys = sorted({float(r.get("y")) for r in rects})
    assert len(xs) == 4 and len(ys) == 4
    width = float(rects[0].get("width"))
    assert all(b - a == width for a, b in zip(xs, xs[1:]))
    fills = {}
    for g, rect in zip(cells, rects):
        fills.setdefault(rect.get("fill"), set()).add(g.get("data-threads"))
    assert len(fills) == 4 and all(len(threads) == 1 for threads in fills.values())


def test_svg_options():
    root, _ = svg_cells(spatial(2, 2), indices=False, title=False, cell_width=80)
    assert not [t for t in root.iter(f"{SVG}text") if t.get("class") in ("title", "row-index", "column-index")]
    assert float(root.find(f"{SVG}g").find(f"{SVG}rect").get("width")) == 80
    root, _ = svg_cells(spatial(2, 2))
    assert [t.text for t in root.iter(f"{SVG}text") if t.get("class") == "row-index"] == ["0", "1"]
    assert [t.text for t in root.iter(f"{SVG}text") if t.get("class") == "column-index"] == ["0", "1"]
    with pytest.raises(LayoutError, match="render: unknown option 'colour'"):
        visualize_layout(spatial(2), fmt="svg", colour="red")


def test_cells_follow_the_text_table_order():
    layout = spatial(2, 1, 2).local(1, 2, 3)
    cells = layout_cells(layout)
    assert [(c.row, c.column) for c in cells[:7]] == [(0, 0), (0, 1), (0, 2), (0, 3), (0, 4), (0, 5), (1, 0)]
    assert cells[6].index == (0, 1, 0)


# ---- PNG ---------------------------------------------------------------------------------------
def test_png_bytes_with_matplotlib():
    pytest.importorskip("matplotlib")
    data = visualize_layout(repeat(2, 1).spatial(8, 4).repeat(1, 2), fmt="png")
    assert isinstance(data, bytes)
    assert data[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is not None, reason="matplotlib is installed")
def test_png_without_matplotlib_says_what_is_needed():
    with pytest.raises(LayoutError, match="fmt='png' needs matplotlib"):
        visualize_layout(spatial(2), fmt="png")


def test_render_rejects_unknown_formats():
    with pytest.raises(LayoutError, match="render: fmt must be 'svg' or 'png', got 'gif'"):
        render(spatial(2), "gif")
