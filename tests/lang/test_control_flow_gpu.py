"""while, break and continue, and 3-D grids, run on the GPU against Python references on fresh random
data, with poisoned outputs."""
import pytest
import torch

from tests.lang import control_kernels as C

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("rows, n, limit", [(1, 1, 0.5), (7, 33, 3.0), (64, 200, 10.0), (5, 50, 1e9)])
def test_while_with_continue_and_break(rows, n, limit):
    x = torch.randn(rows, n, device="cuda")
    out = torch.full((rows,), float("nan"), device="cuda")
    stats = torch.full((rows, 2), -1, dtype=torch.int32, device="cuda")
    C.ThresholdScan()(rows, n, limit, x, out, stats)
    sums, expected_stats = C.threshold_scan_reference(x.cpu(), limit)
    assert stats.cpu().tolist() == expected_stats
    assert out.cpu().tolist() == sums  # the same float32 additions in the same order


@pytest.mark.parametrize("rows, n", [(3, 1), (16, 40), (100, 257)])
def test_while_condition_read_from_memory_each_iteration(rows, n):
    x = torch.rand(rows, n, device="cuda") + 0.1
    stops = torch.randint(0, n, (rows,))
    x[torch.arange(rows), stops] = -torch.rand(rows, device="cuda")  # one non-positive value per row
    out = torch.full((rows,), -1, dtype=torch.int32, device="cuda")
    C.FirstNonPositive()(rows, n, x, out)
    assert out.cpu().tolist() == [int((row <= 0).nonzero()[0]) for row in x.cpu()]


@pytest.mark.parametrize("skip", [0, 1, 2])
@pytest.mark.parametrize("cut", [-1, 0, 2, 3])
@pytest.mark.parametrize("rows, tiles, warps", [(4, 5, 2), (9, 1, 1), (3, 12, 4)])
def test_break_and_continue_in_tile_loops(rows, tiles, warps, cut, skip):
    x = torch.randn(rows, tiles * 64, device="cuda")
    stop = torch.randint(-1, tiles + 1, (rows,), dtype=torch.int32, device="cuda")
    out = torch.full((rows, 64), float("nan"), device="cuda")
    C.TileLoopJumps(skip, warps)(rows, tiles, cut, x, stop, out)
    expected = torch.stack(C.tile_loop_reference(x.cpu(), stop.cpu(), cut, skip))
    torch.testing.assert_close(out.cpu(), expected)


@pytest.mark.parametrize("k_size", [16, 40, 256])
def test_matmul_with_a_while_k_loop(k_size):
    a = torch.randn(64, k_size, device="cuda").half()
    b = torch.randn(k_size, 64, device="cuda").half()
    c = torch.full((64, 64), float("nan"), device="cuda")
    C.WhileMatmul()(k_size, a, b, c)
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("depth, height, width", [(1, 1, 1), (3, 5, 100), (4, 2, 64), (70, 3, 33)])
def test_three_dimensional_grid(depth, height, width):
    x = torch.randn(depth, height, width, device="cuda")
    out = torch.full_like(x, float("nan"))
    C.Grid3D()(depth, height, width, x, out)
    row = torch.arange(depth * height, device="cuda", dtype=torch.float32).view(depth, height, 1)
    torch.testing.assert_close(out, x + row)
