"""Global views with strides that are not row-major (a transposed output, a row pitch wider than the
view). TVM 0.27's LowerTIRx ignores a declared buffer's strides; backend/strided.py flattens such
functions first. Checked here by evaluating every address the generated CUDA stores to and loads
from, for every thread, against the view's strides."""
import re

import torch

import tilus_tvm as tilus
from tilus_tvm import float32, int32
from tests.helpers import private_cache  # noqa: F401 - autouse: a cache directory per test


class StridedCopy(tilus.Script):
    """Loads a [16, 8] tile of x (row pitch ``pitch``) and stores it transposed: y^T is a [16, 8] view of
    y [8, 16] with strides [1, 16]."""

    def __init__(self, pitch: int):
        super().__init__()
        self.pitch = pitch

    def __call__(self, x_ptr: ~float32, y_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        gx = self.global_view(x_ptr, dtype=float32, shape=[16, 8], strides=[self.pitch, 1])
        gy = self.global_view(y_ptr, dtype=float32, shape=[16, 8], strides=[1, 16])
        tile = self.load_global(gx, offsets=[0, 0], shape=[16, 8])
        self.store_global(gy, tile, offsets=[0, 0])


def _evaluate(expr: str, thread: int) -> int:
    expr = expr.replace("((int)threadIdx.x)", str(thread)).replace("((int)blockIdx.x)", "0").replace("/", "//")
    return eval(expr)  # integer arithmetic: + * >> & only


LOAD = re.compile(r"\*\(float(\d)\*\)\(tile_ptr \+ (\d+)\) = \*\(float\d\*\)\(x_ptr_ptr(?:_\d+)? \+ (.*)\);$")
STORE = re.compile(r"y_ptr_ptr(?:_\d+)?\[(.*)\] = tile_ptr\[(\d+)\];$")


def _moves(source: str, thread: int) -> dict[int, int]:
    """x's element -> y's element, as the CUDA source moves them for ``threadIdx.x = thread``: vector loads
    ``*(float4*)(tile + s) = *(float4*)(x + i)`` into registers, scalar stores ``y[i] = tile[s]``."""
    loaded, stored = {}, {}
    for line in source.splitlines():
        line = line.strip()
        if match := LOAD.match(line):
            width, slot, base = int(match.group(1)), int(match.group(2)), _evaluate(match.group(3), thread)
            loaded.update({slot + v: base + v for v in range(width)})
        elif match := STORE.match(line):
            stored[int(match.group(2))] = _evaluate(match.group(1), thread)
    assert loaded and loaded.keys() == stored.keys(), (loaded, stored)
    return {loaded[slot]: stored[slot] for slot in loaded}


def test_transposed_store_and_pitched_load_use_the_strides():
    source = StridedCopy(pitch=12).compile(torch.zeros(16 * 12), torch.zeros(8 * 16), target="sm_90").cuda_source
    moves = {}
    for thread in range(32):
        moves.update(_moves(source, thread))
    # x[i, j] at i * 12 + j goes to y^T[i, j] = y[j, i] at i + 16 * j
    assert moves == {i * 12 + j: i + 16 * j for i in range(16) for j in range(8)}


def test_row_major_views_are_left_to_tvm():
    from tilus_tvm.backend.strided import compact
    from tvm import tirx

    n = tirx.Var("n", "int32")
    assert compact([4, n], [n, 1]) and compact([2, 3, 5], [15, 5, 1])
    assert not compact([4, n], [1, 4]) and not compact([16, 8], [12, 1])
