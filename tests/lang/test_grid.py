"""Grids of up to 3 dimensions: CUDA's limits checked where the kernel sets attrs.blocks (compile-time
extents) and at launch (run-time extents); blockIdx.z bound in the TIR."""
import pytest
import torch

import tilus_tvm as tilus
from tilus_tvm import int32
from tests.lang import control_kernels as C
from tests.helpers import private_cache  # noqa: F401 - autouse: a cache directory per test


class Grid(tilus.Script):
    def __init__(self, blocks):
        super().__init__()
        self.blocks = blocks

    def grid(self, n):
        """``self.blocks`` with "n" standing for the run-time parameter (a plain method: it runs as Python)."""
        return [n if b == "n" else b for b in self.blocks] if isinstance(self.blocks, list) else self.blocks

    def __call__(self, n: int32):
        self.attrs.blocks = self.grid(n)
        self.attrs.warps = 1
        self.printf("%d %d %d\n", self.blockIdx.x, self.blockIdx.y, self.blockIdx.z)


@pytest.mark.parametrize("blocks", [[2**31 - 1, 65535, 65535], [0, 1, 1], ["n", 65535, "n"], 7])
def test_grids_within_limits_compile(blocks):
    func = Grid(blocks).lower(3, target="sm_80")["grid"]
    assert func.script().count("T.launch_thread(\"blockIdx") == 3


@pytest.mark.parametrize("blocks, message", [
    ([1, 65536], "grid dimension y is 65536, CUDA allows 0 to 65535 \\(y and z are limited to 65535; put the large"),
    ([1, 1, 70000], "grid dimension z is 70000, CUDA allows 0 to 65535"),
    ([2**31], "grid dimension x is 2147483648, CUDA allows 0 to 2147483647\\n"),
    ([-1], "grid dimension x is -1"),
    ([1, 2, 3, 4], "attrs.blocks must have 1 to 3 dimensions"),
    ([2.0], "attrs.blocks entry 2.0 must be an int"),
    (["n", "n", 1.5], "attrs.blocks entry 1.5 must be an int"),
])
def test_grids_beyond_limits_are_refused_with_the_line(blocks, message):
    with pytest.raises(tilus.ScriptError, match=message) as info:
        Grid(blocks).lower(3, target="sm_80")
    assert "test_grid.py:" in str(info.value)


def test_bool_expression_is_not_a_grid_extent():
    class BoolGrid(tilus.Script):
        def __call__(self, n: int32):
            self.attrs.blocks = [n > 2]
            self.attrs.warps = 1

    with pytest.raises(tilus.ScriptError, match="must be an int or an integer scalar expression"):
        BoolGrid().lower(3, target="sm_80")


def test_three_dimensional_grid_binds_blockidx_z():
    args = (2, 3, 100, torch.zeros(2, 3, 100), torch.zeros(2, 3, 100))
    text = C.Grid3D().lower(*args, target="sm_80")["grid3_d"].script()
    assert 'T.launch_thread("blockIdx.x", (width + 32 - 1) // 32)' in text
    assert 'T.launch_thread("blockIdx.y", height)' in text
    assert 'T.launch_thread("blockIdx.z", depth)' in text
    assert "blockIdx_z * height + blockIdx_y" in text  # self.gridDim.y is the grid's y extent


def test_grid_dim_needs_the_grid_first():
    class Early(tilus.Script):
        def __call__(self, n: int32):
            self.printf("%d\n", self.gridDim.x)
            self.attrs.blocks = n
            self.attrs.warps = 1

    with pytest.raises(tilus.ScriptError, match="self.gridDim is read before self.attrs.blocks is set"):
        Early().lower(3, target="sm_80")


@pytest.mark.gpu
def test_run_time_extent_beyond_the_limit_is_refused_at_launch():
    x = torch.randn(1, 70000, 1, device="cuda")
    with pytest.raises(tilus.LaunchError, match="grid dimension y is 70000, it must be in \\[0, 65535\\]"):
        C.Grid3D()(1, 70000, 1, x, torch.empty_like(x))
