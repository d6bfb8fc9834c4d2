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


def reordered_cast(src_dtype, dst_dtype, src_layout, dst_layout, warps: int = 4):
    """y = cast(x) for one tile of src_layout's shape, loaded in ``src_layout`` and converted into
    ``dst_layout`` (the same threads' elements in another register order: cast(..., layout=))."""
    rows, cols = src_layout.shape

    class ReorderedCast(tilus.Script):
        def __call__(self, x_ptr: ~src_dtype, y_ptr: ~dst_dtype):
            self.attrs.blocks = 1
            self.attrs.warps = warps
            gx = self.global_view(x_ptr, dtype=src_dtype, shape=[rows, cols])
            gy = self.global_view(y_ptr, dtype=dst_dtype, shape=[rows, cols])
            x = self.load_global(gx, offsets=[0, 0], shape=[rows, cols], layout=src_layout)
            self.store_global(gy, self.cast(x, dst_dtype, layout=dst_layout), offsets=[0, 0])

    return ReorderedCast()


def biased_cast(src_dtype, dst_dtype, src_layout, dst_layout, warps: int = 4):
    """y = cast(x, biased=True) and b = cast_bias(...) for one tile of src_layout's shape (x loaded in
    ``src_layout``, interleaved, converted into ``dst_layout``)."""
    rows, cols = src_layout.shape

    class BiasedCast(tilus.Script):
        def __call__(self, x_ptr: ~src_dtype, y_ptr: ~dst_dtype, b_ptr: ~dst_dtype):
            self.attrs.blocks = 1
            self.attrs.warps = warps
            gx = self.global_view(x_ptr, dtype=src_dtype, shape=[rows, cols])
            gy = self.global_view(y_ptr, dtype=dst_dtype, shape=[rows, cols])
            gb = self.global_view(b_ptr, dtype=dst_dtype, shape=[rows, cols])
            bias = self.cast_bias(src_dtype, dst_dtype, dst_layout)
            x = self.load_global(gx, offsets=[0, 0], shape=[rows, cols], layout=src_layout)
            self.store_global(gy, self.cast(x, dst_dtype, layout=dst_layout, biased=True), offsets=[0, 0])
            self.store_global(gb, bias, offsets=[0, 0])

    return BiasedCast()


def affine_cast(src_dtype, dst_dtype, src_layout, dst_layout, minus: bool, times: bool, warps: int = 4,
                placement=None):
    """y = (cast(x) - z) * s for one tile of src_layout's shape, z and s one value a row ([rows, 1], broadcast;
    either left out), x loaded in ``src_layout`` and converted into ``dst_layout`` (cast(..., minus=, times=)),
    x's words holding its codes by ``placement`` if given."""
    rows, cols = src_layout.shape

    class AffineCast(tilus.Script):
        def __call__(self, x_ptr: ~src_dtype, z_ptr: ~dst_dtype, s_ptr: ~dst_dtype, y_ptr: ~dst_dtype):
            self.attrs.blocks = 1
            self.attrs.warps = warps
            gx = self.global_view(x_ptr, dtype=src_dtype, shape=[rows, cols])
            gz = self.global_view(z_ptr, dtype=dst_dtype, shape=[rows, 1])
            gs = self.global_view(s_ptr, dtype=dst_dtype, shape=[rows, 1])
            gy = self.global_view(y_ptr, dtype=dst_dtype, shape=[rows, cols])
            x = self.load_global(gx, offsets=[0, 0], shape=[rows, cols], layout=src_layout)
            z = self.load_global(gz, offsets=[0, 0], shape=[rows, 1]) if minus else None
            s = self.load_global(gs, offsets=[0, 0], shape=[rows, 1]) if times else None
            self.store_global(gy, self.cast(x, dst_dtype, layout=dst_layout, placement=placement, minus=z, times=s),
                              offsets=[0, 0])

    return AffineCast()


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


def column_runs_layout(rows: int, cols: int, warps: int):
    """A layout whose slots run down columns (dimension 0): no thread holds consecutive elements of a
    row, so packed loads and stores take the element-by-element path."""
    from tilus_tvm.layout import local, spatial

    threads = warps * 32
    assert threads % cols == 0 and rows * cols % threads == 0, (rows, cols, threads)
    return spatial(threads // cols, cols).local(rows * cols // threads, 1)


def view_words(dtype, out_dtype, words_per_thread: int, warps: int = 4, into: bool = False):
    """Each thread loads ``words_per_thread`` int32 words, views them as ``dtype`` codes (a layout with
    the codes of a thread consecutive along the last dimension), casts and stores [threads, codes].
    ``into``: the view writes a register tensor made beforehand (``out=``) in that layout."""
    from tilus_tvm.layout import local, spatial

    threads = warps * 32
    codes = words_per_thread * 32 // dtype.nbits

    class ViewWords(tilus.Script):
        def __call__(self, w_ptr: ~int32, y_ptr: ~out_dtype):
            self.attrs.blocks = 1
            self.attrs.warps = warps
            gw = self.global_view(w_ptr, dtype=int32, shape=[threads, words_per_thread])
            gy = self.global_view(y_ptr, dtype=out_dtype, shape=[threads, codes])
            w = self.load_global(gw, offsets=[0, 0], shape=[threads, words_per_thread],
                                 layout=spatial(threads, 1).local(1, words_per_thread))
            codes_layout = spatial(threads, 1).local(1, codes)
            if into:
                q = self.register_tensor(dtype=dtype, shape=[threads, codes], layout=codes_layout)
                self.view(w, dtype=dtype, layout=codes_layout, out=q)
            else:
                q = self.view(w, dtype=dtype, layout=codes_layout)
            self.store_global(gy, self.cast(q, out_dtype), offsets=[0, 0])

    return ViewWords()


def relayout(dtype, rows: int, cols: int, warps: int = 4, init=None):
    """y = x, the tile loaded in one layout and assigned into a tensor of another (a packed layout
    conversion through shared memory); with ``init``, y is that register tensor's init instead."""
    from tilus_tvm.layout import spatial

    threads = warps * 32
    first = spatial(threads // 8, 8).local(rows * 8 // threads, cols // 8)
    second = column_runs_layout(rows, cols, warps)

    class Relayout(tilus.Script):
        def __call__(self, x_ptr: ~dtype, y_ptr: ~dtype):
            self.attrs.blocks = 1
            self.attrs.warps = warps
            gx = self.global_view(x_ptr, dtype=dtype, shape=[rows, cols])
            gy = self.global_view(y_ptr, dtype=dtype, shape=[rows, cols])
            if init is None:
                y = self.register_tensor(dtype=dtype, shape=[rows, cols], layout=second)
                self.assign(y, self.load_global(gx, offsets=[0, 0], shape=[rows, cols], layout=first))
            else:
                y = self.register_tensor(dtype=dtype, shape=[rows, cols], layout=second, init=init)
            self.store_global(gy, y, offsets=[0, 0])

    return Relayout()


def every_code(types, threads: int = 128, codes_per_thread: int = 8):
    """One kernel for many types (unrolled over ``types``): for type ``t`` (index ``i``), each thread
    views its ``t.nbits`` input bytes ``w[i]`` as 8 codes and stores them cast to float32, float16 and
    bfloat16; and casts its 8 float32 / float16 probes ``p32[i]`` / ``p16[i]`` into ``t``, storing the
    codes' bytes (the packing of :mod:`tilus_tvm.lowp`) in ``e32[i]`` / ``e16[i]``."""
    from tilus_tvm import bfloat16, uint8
    from tilus_tvm.layout import spatial

    count, width = len(types), max(t.nbits for t in types)
    codes_layout = spatial(threads, 1).local(1, codes_per_thread)

    class EveryCode(tilus.Script):
        def __call__(self, w_ptr: ~uint8, p32_ptr: ~float32, p16_ptr: ~float16, f32_ptr: ~float32,
                     f16_ptr: ~float16, bf16_ptr: ~bfloat16, e32_ptr: ~uint8, e16_ptr: ~uint8):
            self.attrs.blocks = 1
            self.attrs.warps = threads // 32
            gw = self.global_view(w_ptr, dtype=uint8, shape=[count, threads, width])
            gp32 = self.global_view(p32_ptr, dtype=float32, shape=[count, threads, codes_per_thread])
            gp16 = self.global_view(p16_ptr, dtype=float16, shape=[count, threads, codes_per_thread])
            gf32 = self.global_view(f32_ptr, dtype=float32, shape=[count, threads, codes_per_thread])
            gf16 = self.global_view(f16_ptr, dtype=float16, shape=[count, threads, codes_per_thread])
            gbf16 = self.global_view(bf16_ptr, dtype=bfloat16, shape=[count, threads, codes_per_thread])
            ge32 = self.global_view(e32_ptr, dtype=uint8, shape=[count, threads, width])
            ge16 = self.global_view(e16_ptr, dtype=uint8, shape=[count, threads, width])
            for i, dtype in enumerate(types):
                bytes_layout = spatial(threads, 1).local(1, dtype.nbits)
                w = self.load_global(gw, offsets=[i, 0, 0], shape=[threads, dtype.nbits], dims=[1, 2],
                                     layout=bytes_layout)
                q = self.view(w, dtype=dtype, layout=codes_layout)
                self.store_global(gf32, self.cast(q, float32), offsets=[i, 0, 0], dims=[1, 2])
                self.store_global(gf16, self.cast(q, float16), offsets=[i, 0, 0], dims=[1, 2])
                self.store_global(gbf16, self.cast(q, bfloat16), offsets=[i, 0, 0], dims=[1, 2])
                p32 = self.load_global(gp32, offsets=[i, 0, 0], shape=[threads, codes_per_thread], dims=[1, 2],
                                       layout=codes_layout)
                p16 = self.load_global(gp16, offsets=[i, 0, 0], shape=[threads, codes_per_thread], dims=[1, 2],
                                       layout=codes_layout)
                e32 = self.view(self.cast(p32, dtype), dtype=uint8, layout=bytes_layout)
                e16 = self.view(self.cast(p16, dtype), dtype=uint8, layout=bytes_layout)
                self.store_global(ge32, e32, offsets=[i, 0, 0], dims=[1, 2])
                self.store_global(ge16, e16, offsets=[i, 0, 0], dims=[1, 2])

    return EveryCode()


def packed_views(dtype, warps: int = 4):
    """A packed [32, 64] tile, loaded in two layouts, through register views, cast to float32:
    ``a`` = x[:, 16:48] of a layout holding four column chunks a thread (free: the slice is chunks 1-2
    of every thread), ``b`` = x[:, 8:40] of a layout holding 16 consecutive columns a thread (a gather
    through shared memory), ``c`` = x[5] (a row: a gather), ``d`` = the transpose of x (free),
    ``e`` = x reshaped to [64, 32] (free)."""
    from tilus_tvm.layout import local, spatial

    chunked = local(1, 4).spatial(32, 4).local(1, 4)
    runs = spatial(32, 4).local(1, 16)

    class PackedViews(tilus.Script):
        def __call__(self, x_ptr: ~dtype, a_ptr: ~float32, b_ptr: ~float32, c_ptr: ~float32, d_ptr: ~float32,
                     e_ptr: ~float32):
            self.attrs.blocks = 1
            self.attrs.warps = warps
            gx = self.global_view(x_ptr, dtype=dtype, shape=[32, 64])
            x1 = self.load_global(gx, offsets=[0, 0], shape=[32, 64], layout=chunked)
            x2 = self.load_global(gx, offsets=[0, 0], shape=[32, 64], layout=runs)
            ga = self.global_view(a_ptr, dtype=float32, shape=[32, 32])
            gb = self.global_view(b_ptr, dtype=float32, shape=[32, 32])
            gc = self.global_view(c_ptr, dtype=float32, shape=[64])
            gd = self.global_view(d_ptr, dtype=float32, shape=[64, 32])
            ge = self.global_view(e_ptr, dtype=float32, shape=[64, 32])
            self.store_global(ga, self.cast(x1[:, 16:48], float32), offsets=[0, 0])
            self.store_global(gb, self.cast(x2[:, 8:40], float32), offsets=[0, 0])
            self.store_global(gc, self.cast(x2[5], float32), offsets=[0])
            self.store_global(gd, self.cast(self.transpose(x1), float32), offsets=[0, 0])
            self.store_global(ge, self.cast(self.reshape(x2, [64, 32]), float32), offsets=[0, 0])

    return PackedViews()
