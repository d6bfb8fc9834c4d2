"""Small kernels exercising each instruction family; used by the CPU compile tests and the GPU tests."""
import tilus_tvm as tilus
from tilus_tvm import bfloat16, float16, float32, int32
from tilus_tvm.layout.shared import shared_column_major, shared_row_major
from tilus_tvm.layout.swizzle import Swizzle
from tilus_tvm.utils import cdiv


class Elementwise(tilus.Script):
    """z = max(where(x > 0, x * y, exp(x) - 1), -0.5) with y a broadcast column, rows masked."""

    def __init__(self, block_m=32, n=48, warps=2):
        super().__init__()
        self.block_m, self.n, self.warps = block_m, n, warps

    def __call__(self, m: int32, x_ptr: ~float32, y_ptr: ~float32, z_ptr: ~float32):
        self.attrs.blocks = cdiv(m, self.block_m)
        self.attrs.warps = self.warps
        row = self.blockIdx.x * self.block_m
        gx = self.global_view(x_ptr, dtype=float32, shape=[m, self.n])
        gy = self.global_view(y_ptr, dtype=float32, shape=[m, 1])
        gz = self.global_view(z_ptr, dtype=float32, shape=[m, self.n])
        x = self.load_global(gx, offsets=[row, 0], shape=[self.block_m, self.n])
        y = self.load_global(gy, offsets=[row, 0], shape=[self.block_m, 1])
        z = self.where(x > 0.0, x * y, self.exp(x) - 1.0)
        z = self.maximum(z, -0.5)
        self.store_global(gz, z, offsets=[row, 0])


class Softmax(tilus.Script):
    """Row softmax of a [m, n] float32 matrix: max and sum reductions within warps."""

    def __init__(self, block_m=8, n=128, warps=4):
        super().__init__()
        self.block_m, self.n, self.warps = block_m, n, warps

    def __call__(self, m: int32, x_ptr: ~float32, y_ptr: ~float32):
        self.attrs.blocks = cdiv(m, self.block_m)
        self.attrs.warps = self.warps
        gx = self.global_view(x_ptr, dtype=float32, shape=[m, self.n])
        gy = self.global_view(y_ptr, dtype=float32, shape=[m, self.n])
        x = self.load_global(gx, offsets=[self.blockIdx.x * self.block_m, 0], shape=[self.block_m, self.n])
        e = self.exp(x - self.max(x, dim=1, keepdim=True))
        y = e / self.sum(e, dim=1, keepdim=True)
        self.store_global(gy, y, offsets=[self.blockIdx.x * self.block_m, 0])


class ColumnReduce(tilus.Script):
    """Column sums, maxima and minima of a [rows, cols] tile: reductions across warps (shared memory)."""

    def __init__(self, rows=64, cols=32, warps=4):
        super().__init__()
        self.rows, self.cols, self.warps = rows, cols, warps

    def __call__(self, x_ptr: ~float32, out_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = self.warps
        gx = self.global_view(x_ptr, dtype=float32, shape=[self.rows, self.cols])
        go = self.global_view(out_ptr, dtype=float32, shape=[3, self.cols])
        x = self.load_global(gx, offsets=[0, 0], shape=[self.rows, self.cols])
        self.store_global(go, self.sum(x, dim=0), offsets=[0, 0], dims=[1])
        self.store_global(go, self.max(x, dim=0), offsets=[1, 0], dims=[1])
        self.store_global(go, self.min(x, dim=0), offsets=[2, 0], dims=[1])


class SharedRoundTrip(tilus.Script):
    """Registers -> shared (a swizzled or column-major layout) -> registers of another shape."""

    def __init__(self, swizzle=True):
        super().__init__()
        self.swizzle = swizzle

    def __call__(self, x_ptr: ~float16, y_ptr: ~float16):
        self.attrs.blocks = 1
        self.attrs.warps = 4
        gx = self.global_view(x_ptr, dtype=float16, shape=[32, 64])
        gy = self.global_view(y_ptr, dtype=float16, shape=[32, 64])
        if self.swizzle:
            layout = shared_row_major(32, 64).swizzled(Swizzle(3, 3, 3))
        else:
            layout = shared_column_major(32, 64)
        s = self.shared_tensor(dtype=float16, shape=[32, 64], layout=layout)
        x = self.load_global(gx, offsets=[0, 0], shape=[32, 64])
        self.store_shared(s, x)
        self.sync()
        for half in range(2):
            part = self.load_shared(s, offsets=[16 * half, 0], shape=[16, 64])
            self.store_global(gy, part + part, offsets=[16 * half, 0])
        self.free_shared(s)


def dot_kernel(m, n, k, a_dtype, c_dtype, warps=4, a_layout=None, with_c=True):
    """A one-block kernel computing c = a @ b (+ 1 when with_c) for a [m, k], b [k, n]."""

    class Dot(tilus.Script):
        def __call__(self, a_ptr: ~a_dtype, b_ptr: ~a_dtype, c_ptr: ~c_dtype):
            self.attrs.blocks = 1
            self.attrs.warps = warps
            ga = self.global_view(a_ptr, dtype=a_dtype, shape=[m, k])
            gb = self.global_view(b_ptr, dtype=a_dtype, shape=[k, n])
            gc = self.global_view(c_ptr, dtype=c_dtype, shape=[m, n])
            a = self.load_global(ga, offsets=[0, 0], shape=[m, k], layout=a_layout)
            b = self.load_global(gb, offsets=[0, 0], shape=[k, n])
            if with_c:
                c = self.register_tensor(dtype=c_dtype, shape=[m, n], init=1)
                c = self.dot(a, b, c)
            else:
                c = self.dot(a, b, acc_dtype=c_dtype)
            self.store_global(gc, c, offsets=[0, 0])

    return Dot()


class ScalarControl(tilus.Script):
    """Run-time loops and branches over scalars: out[i] = sum(range(i)) for even i, -i for odd i."""

    def __call__(self, n: int32, out_ptr: ~int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        go = self.global_view(out_ptr, dtype=int32, shape=[n])
        for i in range(n):
            total: int32 = 0
            if i % 2 == 0:
                for j in range(i):
                    total += j
            else:
                total = -i
            value = self.register_tensor(dtype=int32, shape=[1], init=total)
            self.store_global(go, value, offsets=[i])


class LoopCarried(tilus.Script):
    """acc = acc * 0.5 + x_k inside a loop: a register tensor re-assigned across iterations."""

    def __call__(self, steps: int32, x_ptr: ~float32, out_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 2
        gx = self.global_view(x_ptr, dtype=float32, shape=[steps, 64])
        go = self.global_view(out_ptr, dtype=float32, shape=[64])
        acc = self.register_tensor(dtype=float32, shape=[64], init=0.0)
        for k in range(steps):
            x = self.load_global(gx, offsets=[k, 0], shape=[64])
            acc = acc * 0.5 + x
        self.store_global(go, acc, offsets=[0])


class Printf(tilus.Script):
    def __call__(self, value: int32):
        self.attrs.blocks = 2
        self.attrs.warps = 2
        self.printf("block %d value %d\n", self.blockIdx.x, value)


class Casts(tilus.Script):
    """float32 -> float16 -> bfloat16 -> float32, and int8 -> int32 with a compile-time scale."""

    def __init__(self):
        super().__init__()

    def __call__(self, scale: int, x_ptr: ~float32, y_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        gx = self.global_view(x_ptr, dtype=float32, shape=[100])
        gy = self.global_view(y_ptr, dtype=float32, shape=[100])
        x = self.load_global(gx, offsets=[0], shape=[128])
        y = x.to(float16).to(bfloat16).to(float32) * float(scale)
        self.store_global(gy, y, offsets=[0])



class ColumnOfColumnMajor(tilus.Script):
    """Copy column j of a column-major [m, n] matrix: the tile runs along global dimension 0, the one
    with unit stride, so its loads are vectorised along dimension 0."""

    def __call__(self, m: int, n: int, j: int32, x_ptr: ~float32, out_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        gx = self.global_view(x_ptr, dtype=float32, shape=[m, n], strides=[1, m])
        go = self.global_view(out_ptr, dtype=float32, shape=[m])
        column = self.load_global(gx, offsets=[0, j], shape=[m], dims=[0])
        self.store_global(go, column, offsets=[0])


class LargeShared(tilus.Script):
    """A 96 KB shared tensor: more than the 48 KB a kernel gets without opting in."""

    def __call__(self, x_ptr: ~float32, y_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 8
        gx = self.global_view(x_ptr, dtype=float32, shape=[192, 128])
        gy = self.global_view(y_ptr, dtype=float32, shape=[192, 128])
        s = self.shared_tensor(dtype=float32, shape=[192, 128])
        self.store_shared(s, self.load_global(gx, offsets=[0, 0], shape=[192, 128]))
        self.sync()
        flipped = self.load_shared(s, offsets=[0, 0], shape=[192, 128])
        self.store_global(gy, flipped * 2.0, offsets=[0, 0])


class Scale(tilus.Script):
    """y = x * alpha over n values: alpha is a run-time scalar no tensor shape gives."""

    def __call__(self, n: int32, alpha: float32, x_ptr: ~float32, y_ptr: ~float32):
        self.attrs.blocks = (n + 127) // 128
        self.attrs.warps = 4
        gx = self.global_view(x_ptr, dtype=float32, shape=[n])
        gy = self.global_view(y_ptr, dtype=float32, shape=[n])
        x = self.load_global(gx, offsets=[self.blockIdx.x * 128], shape=[128])
        self.store_global(gy, x * alpha, offsets=[self.blockIdx.x * 128])
