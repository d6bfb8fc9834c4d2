"""tilus_tvm.layout.cute.printing: seed 001's tables, 0-indexed, byte for byte.

The expected strings are the seed's tables with every index and value shifted down by one (row
and column labels too); the layout line is in our notation (no spaces, no ``_`` static marks).
``test_expected_tables_are_the_seed_tables_shifted`` derives them from the seed text to prove it.
"""
import pathlib
import re

import pytest

import tilus_tvm.cute as cute
from tilus_tvm.errors import LayoutError

L = cute.Layout
TILE = L((2, 2), (1, 2))
MATRIX_OF_TILES = L((3, 4), (4, 1))
RAKED = cute.raked_product(TILE, MATRIX_OF_TILES)
SUBTILE = (L(2, 3), L(2, 4))

COMPLEMENT = (
    "(2,3):(1,8)\n"
    "       0    1    2 \n"
    "    +----+----+----+\n"
    " 0  |  0 |  8 | 16 |\n"
    "    +----+----+----+\n"
    " 1  |  1 |  9 | 17 |\n"
    "    +----+----+----+\n"
)
COMPLEMENT_CONCATENATED = (
    "(4,(2,3)):(2,(1,8))\n"
    "       0    1    2    3    4    5 \n"
    "    +----+----+----+----+----+----+\n"
    " 0  |  0 |  1 |  8 |  9 | 16 | 17 |\n"
    "    +----+----+----+----+----+----+\n"
    " 1  |  2 |  3 | 10 | 11 | 18 | 19 |\n"
    "    +----+----+----+----+----+----+\n"
    " 2  |  4 |  5 | 12 | 13 | 20 | 21 |\n"
    "    +----+----+----+----+----+----+\n"
    " 3  |  6 |  7 | 14 | 15 | 22 | 23 |\n"
    "    +----+----+----+----+----+----+\n"
)
TILE_TABLE = (
    "(2,2):(1,2)\n"
    "      0   1 \n"
    "    +---+---+\n"
    " 0  | 0 | 2 |\n"
    "    +---+---+\n"
    " 1  | 1 | 3 |\n"
    "    +---+---+\n"
)
MATRIX_OF_TILES_TABLE = (
    "(3,4):(4,1)\n"
    "       0    1    2    3 \n"
    "    +----+----+----+----+\n"
    " 0  |  0 |  1 |  2 |  3 |\n"
    "    +----+----+----+----+\n"
    " 1  |  4 |  5 |  6 |  7 |\n"
    "    +----+----+----+----+\n"
    " 2  |  8 |  9 | 10 | 11 |\n"
    "    +----+----+----+----+\n"
)
LOGICAL_PRODUCT = (
    "((2,2),(3,4)):((1,2),(16,4))\n"
    "       0    1    2    3    4    5    6    7    8    9   10   11 \n"
    "    +----+----+----+----+----+----+----+----+----+----+----+----+\n"
    " 0  |  0 | 16 | 32 |  4 | 20 | 36 |  8 | 24 | 40 | 12 | 28 | 44 |\n"
    "    +----+----+----+----+----+----+----+----+----+----+----+----+\n"
    " 1  |  1 | 17 | 33 |  5 | 21 | 37 |  9 | 25 | 41 | 13 | 29 | 45 |\n"
    "    +----+----+----+----+----+----+----+----+----+----+----+----+\n"
    " 2  |  2 | 18 | 34 |  6 | 22 | 38 | 10 | 26 | 42 | 14 | 30 | 46 |\n"
    "    +----+----+----+----+----+----+----+----+----+----+----+----+\n"
    " 3  |  3 | 19 | 35 |  7 | 23 | 39 | 11 | 27 | 43 | 15 | 31 | 47 |\n"
    "    +----+----+----+----+----+----+----+----+----+----+----+----+\n"
)
BLOCKED_PRODUCT = (
    "((2,3),(2,4)):((1,16),(2,4))\n"
    "       0    1    2    3    4    5    6    7 \n"
    "    +----+----+----+----+----+----+----+----+\n"
    " 0  |  0 |  2 |  4 |  6 |  8 | 10 | 12 | 14 |\n"
    "    +----+----+----+----+----+----+----+----+\n"
    " 1  |  1 |  3 |  5 |  7 |  9 | 11 | 13 | 15 |\n"
    "    +----+----+----+----+----+----+----+----+\n"
    " 2  | 16 | 18 | 20 | 22 | 24 | 26 | 28 | 30 |\n"
    "    +----+----+----+----+----+----+----+----+\n"
    " 3  | 17 | 19 | 21 | 23 | 25 | 27 | 29 | 31 |\n"
    "    +----+----+----+----+----+----+----+----+\n"
    " 4  | 32 | 34 | 36 | 38 | 40 | 42 | 44 | 46 |\n"
    "    +----+----+----+----+----+----+----+----+\n"
    " 5  | 33 | 35 | 37 | 39 | 41 | 43 | 45 | 47 |\n"
    "    +----+----+----+----+----+----+----+----+\n"
)
RAKED_PRODUCT = (
    "((3,2),(4,2)):((16,1),(4,2))\n"
    "       0    1    2    3    4    5    6    7 \n"
    "    +----+----+----+----+----+----+----+----+\n"
    " 0  |  0 |  4 |  8 | 12 |  2 |  6 | 10 | 14 |\n"
    "    +----+----+----+----+----+----+----+----+\n"
    " 1  | 16 | 20 | 24 | 28 | 18 | 22 | 26 | 30 |\n"
    "    +----+----+----+----+----+----+----+----+\n"
    " 2  | 32 | 36 | 40 | 44 | 34 | 38 | 42 | 46 |\n"
    "    +----+----+----+----+----+----+----+----+\n"
    " 3  |  1 |  5 |  9 | 13 |  3 |  7 | 11 | 15 |\n"
    "    +----+----+----+----+----+----+----+----+\n"
    " 4  | 17 | 21 | 25 | 29 | 19 | 23 | 27 | 31 |\n"
    "    +----+----+----+----+----+----+----+----+\n"
    " 5  | 33 | 37 | 41 | 45 | 35 | 39 | 43 | 47 |\n"
    "    +----+----+----+----+----+----+----+----+\n"
)
LOGICAL_DIVIDE = (
    "((2,3),(2,4)):((1,16),(2,4))\n"
    "       0    1    2    3    4    5    6    7 \n"
    "    +----+----+----+----+----+----+----+----+\n"
    " 0  |  0 |  2 |  4 |  6 |  8 | 10 | 12 | 14 |\n"
    "    +----+----+----+----+----+----+----+----+\n"
    " 1  |  1 |  3 |  5 |  7 |  9 | 11 | 13 | 15 |\n"
    "    +----+----+----+----+----+----+----+----+\n"
    " 2  | 16 | 18 | 20 | 22 | 24 | 26 | 28 | 30 |\n"
    "    +----+----+----+----+----+----+----+----+\n"
    " 3  | 17 | 19 | 21 | 23 | 25 | 27 | 29 | 31 |\n"
    "    +----+----+----+----+----+----+----+----+\n"
    " 4  | 32 | 34 | 36 | 38 | 40 | 42 | 44 | 46 |\n"
    "    +----+----+----+----+----+----+----+----+\n"
    " 5  | 33 | 35 | 37 | 39 | 41 | 43 | 45 | 47 |\n"
    "    +----+----+----+----+----+----+----+----+\n"
)
ZIPPED_DIVIDE = (
    "((2,2),(3,4)):((1,2),(16,4))\n"
    "       0    1    2    3    4    5    6    7    8    9   10   11 \n"
    "    +----+----+----+----+----+----+----+----+----+----+----+----+\n"
    " 0  |  0 | 16 | 32 |  4 | 20 | 36 |  8 | 24 | 40 | 12 | 28 | 44 |\n"
    "    +----+----+----+----+----+----+----+----+----+----+----+----+\n"
    " 1  |  1 | 17 | 33 |  5 | 21 | 37 |  9 | 25 | 41 | 13 | 29 | 45 |\n"
    "    +----+----+----+----+----+----+----+----+----+----+----+----+\n"
    " 2  |  2 | 18 | 34 |  6 | 22 | 38 | 10 | 26 | 42 | 14 | 30 | 46 |\n"
    "    +----+----+----+----+----+----+----+----+----+----+----+----+\n"
    " 3  |  3 | 19 | 35 |  7 | 23 | 39 | 11 | 27 | 43 | 15 | 31 | 47 |\n"
    "    +----+----+----+----+----+----+----+----+----+----+----+----+\n"
)

EXAMPLES = [
    # (seed call, layout, expected table)
    ("print_layout(complement(@Layout(4,2), 24))", cute.complement(L(4, 2), 24), COMPLEMENT),
    ("print_layout(make_layout(@Layout(4, 2),complement(@Layout(4, 2), 24)))",
     cute.make_layout(L(4, 2), cute.complement(L(4, 2), 24)), COMPLEMENT_CONCATENATED),
    ("print_layout(tile)", TILE, TILE_TABLE),
    ("print_layout(matrix_of_tiles)", MATRIX_OF_TILES, MATRIX_OF_TILES_TABLE),
    ("print_layout(logical_product(tile, matrix_of_tiles))", cute.logical_product(TILE, MATRIX_OF_TILES),
     LOGICAL_PRODUCT),
    ("print_layout(blocked_product(tile, matrix_of_tiles))", cute.blocked_product(TILE, MATRIX_OF_TILES),
     BLOCKED_PRODUCT),
    ("print_layout(raked_product(tile, matrix_of_tiles))", RAKED, RAKED_PRODUCT),
    ("print_layout(logical_divide(raked_prod, subtile))", cute.logical_divide(RAKED, SUBTILE), LOGICAL_DIVIDE),
    ("print_layout(zipped_divide(raked_prod, subtile))", cute.zipped_divide(RAKED, SUBTILE), ZIPPED_DIVIDE),
]
IDS = ["complement", "concatenated", "tile", "matrix_of_tiles", "logical_product", "blocked_product",
       "raked_product", "logical_divide", "zipped_divide"]


@pytest.mark.parametrize("call, layout, expected", EXAMPLES, ids=IDS)
def test_seed_tables(call, layout, expected):
    assert cute.format_layout(layout) == expected


@pytest.mark.parametrize("call, layout, expected", EXAMPLES[:2], ids=IDS[:2])
def test_print_layout_prints_the_table(call, layout, expected, capsys):
    cute.print_layout(layout)
    assert capsys.readouterr().out == expected


# ---- the expected strings are the seed's tables, shifted to 0-indexed -------------------------------
def seed_text():
    name = "001_dfca15fee6b903d5.txt"
    local_copy = pathlib.Path(__file__).parent / "seeds" / name
    return (local_copy if local_copy.exists() else pathlib.Path("/work/shared/seeds") / name).read_text()


def seed_block(text, call):
    """What the seed prints after ``call``: its layout line and table (one line where the page
    lost its line breaks)."""
    start = text.index("julia> " + call) + len("julia> " + call)
    ends = [i for i in (text.find("\n\n", start), text.find("\njulia>", start)) if i >= 0]
    return text[start:min(ends, default=len(text))].rstrip("\n")


def shift_down(line):
    """Every number in a table line minus one, right-aligned in the same width."""
    return re.sub(r"\d+", lambda m: str(int(m.group()) - 1).rjust(len(m.group())), line)


@pytest.mark.parametrize("call, layout, expected", EXAMPLES, ids=IDS)
def test_expected_tables_are_the_seed_tables_shifted(call, layout, expected):
    block = seed_block(seed_text(), call)
    if "\n" in block:                      # the table kept its lines: compare them exactly
        header, *table = block.split("\n")
        assert [shift_down(line) for line in table] == expected.splitlines()[1:]
    else:                                  # one line: compare the tokens
        header, table = block[: block.index(") 1 ") + 1], block[block.index(") 1 ") + 1:]
        assert [shift_down(token).strip() for token in table.split()] == expected.split()[1:]
    assert header.replace("_", "").replace(" ", "") == str(layout) == expected.splitlines()[0]


# ---- other shapes -------------------------------------------------------------------------------
def test_rank1_layout_is_one_column():
    assert cute.format_layout(L(3, 4)) == (
        "3:4\n"
        "      0 \n"
        "    +---+\n"
        " 0  | 0 |\n"
        "    +---+\n"
        " 1  | 4 |\n"
        "    +---+\n"
        " 2  | 8 |\n"
        "    +---+\n"
    )


def test_wide_values_widen_every_cell():
    text = cute.format_layout(L((2, 2), (1, 100)))
    assert text.splitlines()[1] == "        0     1 "
    assert text.splitlines()[3] == " 0  |   0 | 100 |"


def test_composed_layouts_print_too():
    swizzled = cute.make_composed_layout(cute.Swizzle(1, 0, 1), 0, L((2, 2), (2, 1)))
    assert cute.format_layout(swizzled).splitlines()[3:6:2] == [" 0  | 0 | 1 |", " 1  | 3 | 2 |"]


def test_print_layout_rejects_rank_3():
    with pytest.raises(LayoutError, match=r"print_layout: layout \(2,2,2\):\(1,2,4\) has rank 3"):
        cute.format_layout(L((2, 2, 2)))
