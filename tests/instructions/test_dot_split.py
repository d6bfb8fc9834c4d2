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


def batched(batch, m, n, k, warps, grid, reduce=True):
    """o = sum_i a[i] @ b[i] (``reduce``) or o[i] = a[i] @ b[i]: a batched dot_split, each product on its own warps,
    the partial products added across the warp groups by ``sum``."""

    class Batched(tilus.Script):
        def __call__(self, a_ptr: ~float16, b_ptr: ~float16, o_ptr: ~float32):
            self.attrs.blocks = 1
            self.attrs.warps = warps
            ga = self.global_view(a_ptr, dtype=float16, shape=[batch, m, k])
            gb = self.global_view(b_ptr, dtype=float16, shape=[batch, k, n])
            a = self.load_global(ga, offsets=[0, 0, 0], shape=[batch, m, k])
            b = self.load_global(gb, offsets=[0, 0, 0], shape=[batch, k, n])
            zeros = self.register_tensor(dtype=float32, shape=[batch, m, n], init=0.0)
            c = self.dot_split(a, b, zeros, warp_grid=grid)
            if reduce:
                go = self.global_view(o_ptr, dtype=float32, shape=[m, n])
                self.store_global(go, self.sum(c, dim=0), offsets=[0, 0])
            else:
                go = self.global_view(o_ptr, dtype=float32, shape=[batch, m, n])
                self.store_global(go, c, offsets=[0, 0, 0])

    return Batched()


def batched_args(batch, m, n, k, reduce=True, device="cpu"):
    return (torch.randn(batch, m, k, device=device).half(), torch.randn(batch, k, n, device=device).half(),
            torch.empty(*(() if reduce else (batch,)), m, n, device=device))


def test_batched_dot_split_puts_the_batch_on_the_outer_warps():
    kernel = batched(2, 64, 16, 32, 8, (4, 1))
    program = kernel.tile_program(*batched_args(2, 64, 16, 32), target="sm_90")
    dot = next(inst for inst in instructions(program.body) if isinstance(inst, ir.DotSplit))
    assert (dot.config.batch, dot.config.warps_m, dot.config.replicas) == (2, 4, 1)
    c = dot.output.layout
    assert c.shape == (2, 64, 16) and c.num_threads == 256
    assert {c.thread_of([i, 17, 3]) // 128 for i in range(2)} == {0, 1}  # product i on warps 4i .. 4i + 3
    assert c.local_size == dot.config.repeat_m * dot.config.repeat_n * 4  # what one product takes a thread
    ptx = kernel.compile(*batched_args(2, 64, 16, 32), target="sm_90").ptx
    assert "mma.sync.aligned.m16n8k16" in ptx and "bar.sync" in ptx  # the sum across warp groups


@pytest.mark.parametrize("batch,warps,grid,match", [(2, 4, (4, 1), "a batch of 2 x warp_grid \\[4, 1\\] does not "
                                                                   "divide the block's 4 warps"),
                                                    (3, 8, (2, 1), "does not divide the block's 8 warps"),
                                                    (2, 8, (4, 1), None), (2, 16, (4, 1), None)])
def test_batched_dot_split_checks(batch, warps, grid, match):
    kernel = batched(batch, 64, 16, 32, warps, grid)
    if match is None:
        kernel.tile_program(*batched_args(batch, 64, 16, 32), target="sm_90")
        return
    with pytest.raises(ScriptError, match=match):
        kernel.tile_program(*batched_args(batch, 64, 16, 32), target="sm_90")


def test_batched_dot_split_shapes_must_agree():
    class Mismatch(tilus.Script):
        def __call__(self, o_ptr: ~float32):
            self.attrs.blocks = 1
            self.attrs.warps = 8
            a = self.register_tensor(dtype=float16, shape=[2, 64, 32], init=0.0)
            b = self.register_tensor(dtype=float16, shape=[3, 32, 16], init=0.0)
            c = self.register_tensor(dtype=float32, shape=[2, 64, 16], init=0.0)
            self.dot_split(a, b, c, warp_grid=(4, 1))

    with pytest.raises(ScriptError, match=r"expected a \[batch, m, k\], b \[batch, k, n\]"):
        Mismatch().tile_program(torch.empty(1), target="sm_90")


def test_dot_split_refuses_four_dimensions():
    class FourD(tilus.Script):
        def __call__(self, o_ptr: ~float32):
            self.attrs.blocks = 1
            self.attrs.warps = 8
            a = self.register_tensor(dtype=float16, shape=[1, 2, 64, 32], init=0.0)
            b = self.register_tensor(dtype=float16, shape=[1, 2, 32, 16], init=0.0)
            c = self.register_tensor(dtype=float32, shape=[1, 2, 64, 16], init=0.0)
            self.dot_split(a, b, c, warp_grid=(4, 1))

    with pytest.raises(ScriptError, match="a must be a 2-D or 3-D register tensor"):
        FourD().tile_program(torch.empty(1), target="sm_90")


@pytest.mark.gpu
@pytest.mark.parametrize("batch,warps,grid,reduce", [(2, 8, (4, 1), True), (2, 8, (4, 1), False),
                                                     (4, 8, (2, 1), True), (2, 16, (4, 1), True)])
def test_batched_dot_split_values(batch, warps, grid, reduce):
    a, b, o = batched_args(batch, 64, 16, 32, reduce, device="cuda")
    batched(batch, 64, 16, 32, warps, grid, reduce)(a, b, o)
    products = a.float() @ b.float()
    torch.testing.assert_close(o, products.sum(0) if reduce else products, atol=5e-2, rtol=1e-2)
