"""Kernels over packed low-precision tensors, shared by the CPU lowering tests and the GPU tests."""
import tilus_tvm as tilus
from tilus_tvm import float16, float32, int32


def cast_copy(src_dtype, dst_dtype, rows: int, cols: int, warps: int = 4, layout=None):
    """y[m, cols] = cast(x[m, cols]) in tiles of ``rows`` rows: loads and stores of either side may be packed."""

    class CastCopy(tilus.Script):
        def __call__(self, m: int32, x_ptr: ~src_dtype, y_ptr: ~dst_dtype):
            self.attrs.blocks = self.utils.ceil_div(m, rows)
            self.attrs.warps = warps
            gx = self.global_view(x_ptr, dtype=src_dtype, shape=[m, cols])
            gy = self.global_view(y_ptr, dtype=dst_dtype, shape=[m, cols])
            x = self.load_global(gx, offsets=[self.blockIdx.x * rows, 0], shape=[rows, cols], layout=layout)
            self.store_global(gy, self.cast(x, dst_dtype), offsets=[self.blockIdx.x * rows, 0])

    return CastCopy()


def shared_round_trip(dtype, rows: int, cols: int, warps: int = 4):
    """y = x through a shared tensor of ``dtype`` (stored by one layout, loaded with its transpose's)."""

    class SharedRoundTrip(tilus.Script):
        def __call__(self, x_ptr: ~dtype, y_ptr: ~dtype):
            self.attrs.blocks = 1
            self.attrs.warps = warps
            gx = self.global_view(x_ptr, dtype=dtype, shape=[rows, cols])
            gy = self.global_view(y_ptr, dtype=dtype, shape=[rows, cols])
            s = self.shared_tensor(dtype=dtype, shape=[rows, cols])
            self.store_shared(s, self.load_global(gx, offsets=[0, 0], shape=[rows, cols]))
            self.sync()
            self.store_global(gy, self.load_shared(s), offsets=[0, 0])

    return SharedRoundTrip()
