"""print_tensor: the CUDA it compiles to and its errors (CPU), and the exact text it prints (GPU, in a
subprocess, against tables built here from the same data)."""
import subprocess
import sys

import pytest
import torch

import tilus_tvm as tilus
from tilus_tvm import float32, int32
from tests.helpers import CaseScript, ROOT
from tests.instructions import print_kernels as P
from tests.helpers import private_cache  # noqa: F401 - autouse: a cache directory per test


def inputs():
    d = P.data(0)
    return d["x"], d["i"], d["h"]


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_print_tiles_compiles(arch):
    compiled = P.PrintTiles().compile(*inputs(), target=arch)
    assert ".entry" in compiled.ptx
    # the box-drawing characters reach the PTX as UTF-8 bytes: U+2502 '│' is e2 94 82
    assert "226,148,130" in compiled.ptx.replace(" ", "")
    compiled = P.PrintOneBlock().compile(P.data(0)["y"], target=arch)
    assert ".entry" in compiled.ptx


def test_print_tiles_formats():
    source = P.PrintTiles().compile(*inputs(), target="sm_80").cuda_source
    # TVM writes '│' (U+2502) as \u2502; backend/cuda_source.py turns that into octal UTF-8 bytes for NVRTC
    bar = "\\342\\224\\202"
    assert "\\u2502" not in source
    assert '"x = float32[4, 8], register tile, block %d\\n"' in source
    assert '"' + f"{bar} %8.3f " * 8 + bar + '\\n"' in source
    assert '"i: int32[2, 3, 4], register tile, block %d\\n"' in source
    assert '"[%d, :, :]\\n"' in source
    assert '"positive bool[4, 8], register tile, block %d\\n"' in source
    assert '"' + f"{bar} %1d " * 8 + bar + '\\n"' in source
    # 20 columns: one printf call of 16 cells, one of 4 that ends the row
    assert '"' + f"{bar} %6.2f " * 16 + '"' in source
    assert '"' + f"{bar} %6.2f " * 4 + bar + '\\n"' in source
    assert '"h float16[3, 20], shared tile, block %d\\n"' in source


def test_register_tile_is_gathered_through_scratch_shared_memory():
    program = P.PrintTiles().tile_program(*inputs(), target="sm_80")
    assert program.shared_bytes >= 4 * 8 * 4  # the float32 [4, 8] tile


class Mistake(CaseScript):
    def __call__(self, x_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        g = self.global_view(x_ptr, dtype=float32, shape=[32])
        x = self.load_global(g, offsets=[0], shape=[32])
        if self.case == "global":
            self.print_tensor("g", g)
        if self.case == "scalar":
            self.print_tensor("n", 3)
        if self.case == "msg":
            self.print_tensor(x, x)
        if self.case == "fmt_int_for_float":
            self.print_tensor("x", x, fmt="%d")
        if self.case == "fmt_two_conversions":
            self.print_tensor("x", x, fmt="%f %f")
        if self.case == "fmt_not_str":
            self.print_tensor("x", x, fmt=8)
        if self.case == "fmt_for_int":
            self.print_tensor("x", x.to(int32), fmt="%5.1f")


MISTAKES = {
    "global": "is a global tensor; load the tile to print into registers first",
    "scalar": "tensor must be a register or shared tensor, got 3",
    "msg": "msg must be a str",
    "fmt_int_for_float": "fmt '%d' cannot print float32 elements: .*%d prints an integer",
    "fmt_two_conversions": "fmt '%f %f' must hold exactly one numeric conversion",
    "fmt_not_str": "fmt must be a str such as '%8.3f', got 8",
    "fmt_for_int": "fmt '%5.1f' cannot print int32 elements",
}


@pytest.mark.parametrize("case", sorted(MISTAKES))
def test_mistakes_name_the_problem_and_the_line(case):
    with pytest.raises(tilus.ScriptError, match=MISTAKES[case]) as info:
        Mistake(case).compile(torch.zeros(32), target="sm_80")
    assert "test_print_tensor.py:" in str(info.value)


def table(header: str, rows: list[list], fmt: str, width: int) -> list[str]:
    """The lines print_tensor prints for a 2-D tile (written out here, independently of the emitter)."""
    segment = "─" * (width + 2)
    cols = len(rows[0])
    lines = [header] if header is not None else []
    lines.append("┌" + "┬".join([segment] * cols) + "┐")
    for r, row in enumerate(rows):
        if r:
            lines.append("├" + "┼".join([segment] * cols) + "┤")
        lines.append("".join(f"│ {fmt % v} " for v in row) + "│")
    lines.append("└" + "┴".join([segment] * cols) + "┘")
    return lines


def expected_output(d: dict) -> str:
    x, i, h, y = d["x"], d["i"], d["h"].float(), d["y"]
    lines = table("x = float32[4, 8], register tile, block 0", x.tolist(), "%8.3f", 8)
    lines += ["i: int32[2, 3, 4], register tile, block 0"]
    for b in range(2):
        lines += [f"[{b}, :, :]"] + table(None, i[b].tolist(), "%6d", 6)
    lines += table("positive bool[4, 8], register tile, block 0", (x > 0).int().tolist(), "%1d", 1)
    lines += table("h float16[3, 20], shared tile, block 0", h.tolist(), "%6.2f", 6)
    block = y[2:4] * 2.0  # block (1, 1) loads rows 2 and 3
    lines += table("float32[2, 32], register tile, block (1, 1)", block.tolist(), "%7.2f", 7)
    lines += table("row max float32[2, 1], register tile, block (1, 1)", y[2:4].amax(1, keepdim=True).tolist(),
                   "%8.3f", 8)
    return "\n".join(lines) + "\n"


@pytest.mark.gpu
@pytest.mark.parametrize("seed", [0, 1])
def test_printed_tables_match_exactly(seed, tmp_path):
    path = tmp_path / "inputs.pt"
    result = subprocess.run([sys.executable, "-m", "tests.instructions.print_kernels", str(seed), str(path)],
                            capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout == expected_output(torch.load(path))
