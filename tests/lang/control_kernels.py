"""Kernels with while loops, break and continue, and 3-D grids: compiled by the CPU tests
(test_control_flow.py) and run against Python references by the GPU tests
(test_control_flow_gpu.py)."""
import numpy

import tilus_tvm as tilus
from tilus_tvm import float16, float32, int32
from tilus_tvm.layout import spatial


class ThresholdScan(tilus.Script):
    """Row ``b`` (one block each): walk the row with a ``while`` loop, skip negative values
    (``continue``), add the others until the sum exceeds ``limit`` (``break``). Writes the sum, how
    many values were added and where the walk stopped."""

    def __call__(self, rows: int32, n: int32, limit: float32, x_ptr: ~float32, out_ptr: ~float32,
                 stats_ptr: ~int32):
        self.attrs.blocks = rows
        self.attrs.warps = 1
        b = self.blockIdx.x
        gx = self.global_view(x_ptr, dtype=float32, shape=[rows, n])
        total: float32 = 0.0
        count: int32 = 0
        i: int32 = 0
        while i < n:
            value = self.load_scalar(gx, [b, i])
            i += 1
            if value < 0.0:
                continue
            total += value
            count += 1
            if total > limit:
                break
        go = self.global_view(out_ptr, dtype=float32, shape=[rows])
        gs = self.global_view(stats_ptr, dtype=int32, shape=[rows, 2])
        self.store_global(go, self.register_tensor(dtype=float32, shape=[1], init=total), offsets=[b])
        stats = self.register_tensor(dtype=int32, shape=[1, 2], init=lambda r, c: count if c == 0 else i)
        self.store_global(gs, stats, offsets=[b, 0])


def threshold_scan_reference(x, limit):
    """(sums, [[count, stop], ...]) of :class:`ThresholdScan`, in Python with float32 arithmetic (the
    kernel's), so the comparisons with ``limit`` come out the same."""
    limit = numpy.float32(limit)
    sums, stats = [], []
    for row in x.numpy().astype(numpy.float32):
        total, count, i = numpy.float32(0.0), 0, 0
        while i < len(row):
            value = row[i]
            i += 1
            if value < 0.0:
                continue
            total = numpy.float32(total + value)
            count += 1
            if total > limit:
                break
        sums.append(float(total))
        stats.append([count, i])
    return sums, stats


class FirstNonPositive(tilus.Script):
    """The index of the first value <= 0 of each row: a ``while`` whose condition reads global memory
    (``load_scalar``), so the read is repeated before every iteration. Each row holds one."""

    def __call__(self, rows: int32, n: int32, x_ptr: ~float32, out_ptr: ~int32):
        self.attrs.blocks = rows
        self.attrs.warps = 1
        b = self.blockIdx.x
        gx = self.global_view(x_ptr, dtype=float32, shape=[rows, n])
        i: int32 = 0
        while self.load_scalar(gx, [b, i]) > 0.0:
            i += 1
        go = self.global_view(out_ptr, dtype=int32, shape=[rows])
        self.store_global(go, self.register_tensor(dtype=int32, shape=[1], init=i), offsets=[b])


class TileLoopJumps(tilus.Script):
    """Sum tiles of a row in a run-time loop over tiles: tiles whose index is in ``skip`` mod 3 are
    skipped (``continue``), and the loop stops after tile ``stop[b]`` (``break`` on a value read from
    memory). A second, unrolled loop (``self.range(4, unroll=True)``) adds tiles 0..3 scaled by
    their index, leaving at the first index equal to ``cut`` (a run-time break in an unrolled loop);
    a Python-unrolled loop adds 10, 20 (compile-time continue and break)."""

    def __init__(self, skip: int = 1, warps: int = 2):
        super().__init__()
        self.skip = skip
        self.warps = warps

    def __call__(self, rows: int32, tiles: int32, cut: int32, x_ptr: ~float32, stop_ptr: ~int32,
                 out_ptr: ~float32):
        self.attrs.blocks = rows
        self.attrs.warps = self.warps
        b = self.blockIdx.x
        gx = self.global_view(x_ptr, dtype=float32, shape=[rows, tiles * 64])
        gstop = self.global_view(stop_ptr, dtype=int32, shape=[rows])
        stop = self.load_scalar(gstop, [b])
        acc = self.register_tensor(dtype=float32, shape=[64], init=0.0)
        for k in range(tiles):
            if k % 3 == self.skip:
                continue
            acc = acc + self.load_global(gx, offsets=[b, k * 64], shape=[64])
            if k >= stop:
                break
        for k in self.range(4, unroll=True):
            if k == cut:
                break
            acc = acc + self.load_global(gx, offsets=[b, k * 64], shape=[64]) * float(k)
        for step in [10.0, 15.0, 20.0, 30.0]:
            if step == 15.0:
                continue
            if step > 25.0:
                break
            acc = acc + step
        go = self.global_view(out_ptr, dtype=float32, shape=[rows, 64])
        self.store_global(go, acc, offsets=[b, 0])


def tile_loop_reference(x, stop, cut, skip):
    """:class:`TileLoopJumps` in Python: one [64] tensor per row."""
    rows, tiles = x.shape[0], x.shape[1] // 64
    out = []
    for b in range(rows):
        # tiles past the row's end read as zeros (load_global masks them)
        tile = [x[b, k * 64:(k + 1) * 64] if k < tiles else x.new_zeros(64) for k in range(max(tiles, 4))]
        acc = x.new_zeros(64)
        for k in range(tiles):
            if k % 3 == skip:
                continue
            acc = acc + tile[k]
            if k >= int(stop[b]):
                break
        for k in range(4):
            if k == cut:
                break
            acc = acc + tile[k] * float(k)
        out.append(acc + 30.0)
    return out


class Grid3D(tilus.Script):
    """A 3-D grid: block (x, y, z) adds ``z * height + y`` (its row's number, from ``self.gridDim``) to
    the 32-wide tile ``x`` of row (z, y) of a [depth, height, width] tensor."""

    def __call__(self, depth: int32, height: int32, width: int32, x_ptr: ~float32, out_ptr: ~float32):
        self.attrs.blocks = [self.utils.ceil_div(width, 32), height, depth]
        self.attrs.warps = 1
        gx = self.global_view(x_ptr, dtype=float32, shape=[depth, height, width])
        go = self.global_view(out_ptr, dtype=float32, shape=[depth, height, width])
        x, y, z = self.blockIdx
        tile = self.load_global(gx, offsets=[z, y, x * 32], shape=[32])
        self.store_global(go, tile + float(z * self.gridDim.y + y), offsets=[z, y, x * 32])


class WhileMatmul(tilus.Script):
    """c[64, 64] = a[64, k] @ b[k, 64] with the k loop written as ``while``; ``a`` is loaded in a layout
    of the author's, so layout inference converts it for mma inside the loop body."""

    def __call__(self, k_size: int32, a_ptr: ~float16, b_ptr: ~float16, c_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 4
        ga = self.global_view(a_ptr, dtype=float16, shape=[64, k_size])
        gb = self.global_view(b_ptr, dtype=float16, shape=[k_size, 64])
        gc = self.global_view(c_ptr, dtype=float32, shape=[64, 64])
        acc = self.register_tensor(dtype=float32, shape=[64, 64], init=0.0)
        k: int32 = 0
        while k < k_size:
            a = self.load_global(ga, offsets=[0, k], shape=[64, 16], layout=spatial(16, 8).local(4, 2))
            b = self.load_global(gb, offsets=[k, 0], shape=[16, 64])
            acc = self.dot(a, b, acc)
            k += 16
        self.store_global(gc, acc, offsets=[0, 0])
