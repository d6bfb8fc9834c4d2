"""dot_split: the author's warp split, its layouts (C fragments = A fragments of the next product), errors,
and (GPU) values against torch."""
import pytest
import torch

import tilus_tvm as tilus
from tilus_tvm import float16, float32
from tilus_tvm.errors import ScriptError
from tilus_tvm.ir import inst as ir
from tilus_tvm.ir.stmt import instructions


def chained(m, n, k, warps, grid):
    """o = (a @ b).to(float16) @ c: the second product reads the first's fragments directly."""

    class Chained(tilus.Script):
        def __call__(self, a_ptr: ~float16, b_ptr: ~float16, c_ptr: ~float16, o_ptr: ~float32):
            self.attrs.blocks = 1
            self.attrs.warps = warps
            ga = self.global_view(a_ptr, dtype=float16, shape=[m, k])
            gb = self.global_view(b_ptr, dtype=float16, shape=[k, n])
            gc = self.global_view(c_ptr, dtype=float16, shape=[n, 32])
            go = self.global_view(o_ptr, dtype=float32, shape=[m, 32])
            a = self.load_global(ga, offsets=[0, 0], shape=[m, k])
            b = self.load_global(gb, offsets=[0, 0], shape=[k, n])
            c = self.load_global(gc, offsets=[0, 0], shape=[n, 32])
            zeros = self.register_tensor(dtype=float32, shape=[m, n], init=0.0)
            s = self.dot_split(a, b, zeros, warp_grid=grid)
            acc = self.register_tensor(dtype=float32, shape=[m, 32], init=0.0)
            self.dot_split(s.to(float16), c, acc, warp_grid=grid, out=acc)
            self.store_global(go, acc, offsets=[0, 0])

    return Chained()


def args(m, n, k, device="cpu"):
    return (torch.randn(m, k, device=device).half(), torch.randn(k, n, device=device).half(),
            torch.randn(n, 32, device=device).half(), torch.empty(m, 32, device=device))


def test_rows_split_keeps_fragments_in_registers():
    kernel = chained(64, 64, 32, 4, (4, 1))
    program = kernel.tile_program(*args(64, 64, 32), target="sm_90")
    dots = [inst for inst in instructions(program.body) if isinstance(inst, ir.DotSplit)]
    assert [(d.config.warps_m, d.config.warps_n) for d in dots] == [(4, 1), (4, 1)]
    assert not any(isinstance(inst, ir.ConvertLayout) and inst.x is dots[0].output
                   for inst in instructions(program.body))
    ptx = kernel.compile(*args(64, 64, 32), target="sm_90").ptx
    assert "mma.sync.aligned.m16n8k16" in ptx


@pytest.mark.parametrize("grid,match", [((3, 1), "does not divide the block's 4 warps"),
                                        ((4, 2), "does not divide"),
                                        ((2, 2), None), ((8, 1), "does not divide"),
                                        ((4,), "two positive ints")])
def test_dot_split_checks(grid, match):
    kernel = chained(64, 64, 32, 4, grid)
    if match is None:
        kernel.tile_program(*args(64, 64, 32), target="sm_90")
        return
    with pytest.raises(ScriptError, match=match):
        kernel.tile_program(*args(64, 64, 32), target="sm_90")


def test_dot_split_shape_must_tile():
    with pytest.raises(ScriptError, match="m=32 must be a multiple of 64"):
        chained(32, 64, 32, 4, (4, 1)).tile_program(*args(32, 64, 32), target="sm_90")


@pytest.mark.gpu
@pytest.mark.parametrize("grid", [(4, 1), (2, 2), (1, 4)])
def test_dot_split_values(grid):
    a, b, c, o = args(64, 64, 32, device="cuda")
    chained(64, 64, 32, 4, grid)(a, b, c, o)
    expected = (a.float() @ b.float()).half().float() @ c.float()
    torch.testing.assert_close(o, expected, atol=5e-2, rtol=1e-2)
