"""Kernels for the math, reduction, scan and view tests: one block loads tiles, applies the operation
under test (named by a string, dispatched in :func:`apply`), and stores the result.

Layouts named in ``LAYOUTS`` put the input tile in a chosen register layout (an mma accumulator
tiled over 4 warps, rows spread over warps, column-major threads, fewer threads than the block)."""
import tilus_tvm as tilus
from tilus_tvm import boolean, float16, float32, float64, int32, void
from tilus_tvm.layout import column_spatial, local, spatial

WARPS = 4
LAYOUTS = {
    "default": None,
    # the mma.sync m16n8k16 accumulator (local(2, 1).spatial(8, 4).local(1, 2)) tiled over 2 x 2 warps
    "mma_c": local(1, 2).spatial(2, 2).local(2, 1).spatial(8, 4).local(1, 2),
    # dimension 0 split over the 4 warps and over lanes: reductions and scans along it cross warps
    "rows_over_warps": spatial(4, 1).local(2, 1).spatial(4, 8).local(1, 4),
    # consecutive lanes down a column
    "column_threads": column_spatial(32, 4).local(1, 8),
    # one warp's worth of threads in a 4-warp block: the other warps hold nothing
    "one_warp": spatial(8, 4).local(4, 8),
    # consecutive columns in consecutive lanes (a thread's elements of a row are 4 apart)
    "lanes_inner": local(1, 8).spatial(32, 4),
}


def apply(s, op, x, y):
    """The operation under test on register tensors ``x`` and ``y`` of one shape (``s`` is the script)."""
    unary = {"exp": s.exp, "exp2": s.exp2, "log": s.log, "sqrt": s.sqrt, "rsqrt": s.rsqrt, "abs": s.abs,
             "round": s.round, "square": s.square, "neg": s.neg, "sigmoid": s.sigmoid}
    if op in unary:
        return unary[op](x)
    if op == "log_abs":
        return s.log(s.abs(x) + 0.5)
    if op == "maximum":
        return s.maximum(x, y)
    if op == "minimum":
        return s.minimum(x, y)
    if op == "where":
        return s.where(x > y, x, y * 2.0)
    if op == "where_scalar":
        return s.where(x < 0.0, 0.0, x)
    if op == "where_scalar_cond":  # a run-time bool scalar picks one tensor (block 0: x, then x + 0)
        return s.where(s.blockIdx.x < 1, x, y) + s.where(s.blockIdx.x > 0, x, 0.0)
    if op == "clip":
        return s.clip(x, -0.5, 0.75)
    if op == "compare_ops":  # operators; the count of true comparisons per element
        checks = [x < y, x <= y, x > y, x >= y, x == y, x != y]
        total = s.register_tensor(dtype=float32, shape=list(x.shape), init=0.0)
        for k in range(6):
            total = total + checks[k].to(float32) * float(1 << k)
        return total
    if op == "compare_methods":  # the same through Tilus's method names
        checks = [s.less_than(x, y), s.less_equal(x, y), s.greater_than(x, y), s.greater_equal(x, y),
                  s.equal(x, y), s.not_equal(x, y)]
        total = s.register_tensor(dtype=float32, shape=list(x.shape), init=0.0)
        for k in range(6):
            total = total + checks[k].to(float32) * float(1 << k)
        return total
    if op == "logical":
        p, q = x > 0.0, y > 0.0
        parts = [p & q, p | q, p ^ q, ~p, s.logical_and(p, q), s.logical_or(p, q), s.logical_xor(p, q),
                 s.logical_not(q)]
        total = s.register_tensor(dtype=float32, shape=list(x.shape), init=0.0)
        for k in range(8):
            total = total + parts[k].to(float32) * float(1 << k)
        return total
    if op == "add_out":  # add(x, y, out=z) into a tensor made before
        z = s.register_tensor(dtype=float32, shape=list(x.shape), init=0.0)
        s.add(x, y, out=z)
        s.mul(z, 3.0, out=z)
        return z
    if op == "inplace_out":  # out= an operand: x = exp(x) - y, computed in place
        s.exp(x, out=x)
        s.sub(x, y, out=x)
        s.where(x > 1.0, 1.0, x, out=x)
        return x
    raise ValueError(op)


class Binary(tilus.Script):
    """out = apply(op, x, y) for one [m, n] tile of x and y in ``layout``."""

    def __init__(self, op, m=32, n=32, layout="default", out_dtype=float32):
        super().__init__()
        self.op, self.m, self.n, self.layout, self.out_dtype = op, m, n, layout, out_dtype

    def __call__(self, x_ptr: ~float32, y_ptr: ~float32, out_ptr: ~void):
        self.attrs.blocks = 1
        self.attrs.warps = WARPS
        gx = self.global_view(x_ptr, dtype=float32, shape=[self.m, self.n])
        gy = self.global_view(y_ptr, dtype=float32, shape=[self.m, self.n])
        go = self.global_view(out_ptr, dtype=self.out_dtype, shape=[self.m, self.n])
        x = self.load_global(gx, offsets=[0, 0], shape=[self.m, self.n], layout=LAYOUTS[self.layout])
        y = self.load_global(gy, offsets=[0, 0], shape=[self.m, self.n])
        out = apply(self, self.op, x, y)
        self.store_global(go, out, offsets=[0, 0])


class IntOps(tilus.Script):
    """Bitwise and shift operators on int32 tiles, and // and % (floored, as in Python)."""

    def __call__(self, x_ptr: ~int32, y_ptr: ~int32, out_ptr: ~int32):
        self.attrs.blocks = 1
        self.attrs.warps = 2
        gx = self.global_view(x_ptr, dtype=int32, shape=[64])
        gy = self.global_view(y_ptr, dtype=int32, shape=[64])
        go = self.global_view(out_ptr, dtype=int32, shape=[9, 64])
        x = self.load_global(gx, offsets=[0], shape=[64])
        y = self.load_global(gy, offsets=[0], shape=[64])
        shift = self.bitwise_and(y, 7)
        results = [x & y, x | y, x ^ y, ~x, self.abs(x) << shift, x >> shift, x // (y | 1), x % (y | 1), self.abs(x)]
        for k in list(range(9)):
            self.store_global(go, results[k], offsets=[k, 0])


class ScalarMinMax(tilus.Script):
    """Python's min and max of run-time scalars (``max(n, 3)``) and abs of a scalar inside a kernel."""

    def __call__(self, a: int32, b: int32, out_ptr: ~int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        go = self.global_view(out_ptr, dtype=int32, shape=[5])
        values = [min(a, b), max(a, b), max(a, 3), min(a, b, -2), abs(a - b)]
        for k in list(range(5)):
            self.store_global(go, self.register_tensor(dtype=int32, shape=[1], init=values[k]), offsets=[k])


def reduce_op(s, op, x, dim, keepdim):
    if op == "any":
        return s.any(x > 1.0, dim=dim, keepdim=keepdim)
    if op == "all":
        return s.all(x > -1.0, dim=dim, keepdim=keepdim)
    return {"sum": s.sum, "max": s.max, "min": s.min}[op](x, dim=dim, keepdim=keepdim)


class Reduce(tilus.Script):
    """out = op(x, dim, keepdim) of an [m, n] tile in ``layout``; ``out_shape`` is the result's shape
    (a 0-d result is stored as the first of two elements)."""

    def __init__(self, op, dim, keepdim, out_shape, layout="default", m=32, n=32, use_out=False):
        super().__init__()
        self.op, self.dim, self.keepdim, self.out_shape = op, dim, keepdim, out_shape
        self.layout, self.m, self.n, self.use_out = layout, m, n, use_out

    def __call__(self, x_ptr: ~float32, out_ptr: ~void):
        self.attrs.blocks = 1
        self.attrs.warps = WARPS
        gx = self.global_view(x_ptr, dtype=float32, shape=[self.m, self.n])
        dtype = boolean if self.op in ("any", "all") else float32
        go = self.global_view(out_ptr, dtype=dtype, shape=list(self.out_shape) or [2])
        x = self.load_global(gx, offsets=[0, 0], shape=[self.m, self.n], layout=LAYOUTS[self.layout])
        if self.use_out:
            r = self.register_tensor(dtype=float32, shape=list(self.out_shape))
            {"sum": self.sum, "max": self.max, "min": self.min}[self.op](x, dim=self.dim, keepdim=self.keepdim,
                                                                          out=r)
        else:
            r = reduce_op(self, self.op, x, self.dim, self.keepdim)
        if not self.out_shape:
            r = self.unsqueeze(r, dim=0)  # a 0-d result, stored as one element
        self.store_global(go, r, offsets=[0] * max(1, len(self.out_shape)))


class DotThen(tilus.Script):
    """c = a @ b on tensor cores (c in the mma accumulator layout), then an op on c:
    ``rowmax`` (max over dim 1, kept), ``colsum`` (sum over dim 0), ``cumsum`` (scan along dim 1),
    ``softmax`` (exp(c - rowmax) / rowsum), ``transpose`` (stored as c^T)."""

    def __init__(self, op, m=32, n=32, k=32):
        super().__init__()
        self.op, self.m, self.n, self.k = op, m, n, k

    def __call__(self, a_ptr: ~float16, b_ptr: ~float16, out_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = WARPS
        ga = self.global_view(a_ptr, dtype=float16, shape=[self.m, self.k])
        gb = self.global_view(b_ptr, dtype=float16, shape=[self.k, self.n])
        a = self.load_global(ga, offsets=[0, 0], shape=[self.m, self.k])
        b = self.load_global(gb, offsets=[0, 0], shape=[self.k, self.n])
        c = self.dot(a, b, acc_dtype=float32)
        if self.op == "rowmax":
            go = self.global_view(out_ptr, dtype=float32, shape=[self.m, 1])
            self.store_global(go, self.max(c, dim=1, keepdim=True), offsets=[0, 0])
        elif self.op == "colsum":
            go = self.global_view(out_ptr, dtype=float32, shape=[self.n])
            self.store_global(go, self.sum(c, dim=0), offsets=[0])
        elif self.op == "cumsum":
            go = self.global_view(out_ptr, dtype=float32, shape=[self.m, self.n])
            self.store_global(go, self.cumsum(c, dim=1), offsets=[0, 0])
        elif self.op == "softmax":
            go = self.global_view(out_ptr, dtype=float32, shape=[self.m, self.n])
            e = self.exp(c - self.max(c, dim=1, keepdim=True))
            self.store_global(go, e / self.sum(e, dim=1, keepdim=True), offsets=[0, 0])
        else:
            go = self.global_view(out_ptr, dtype=float32, shape=[self.n, self.m])
            self.store_global(go, self.transpose(c), offsets=[0, 0])


class Scan(tilus.Script):
    """out = scan(x, dim, op, exclusive) of an [m, n] tile in ``layout`` (``in_place``: out=x)."""

    def __init__(self, op, dim, exclusive=False, layout="default", dtype=float32, m=32, n=32, in_place=False):
        super().__init__()
        self.op, self.dim, self.exclusive, self.layout = op, dim, exclusive, layout
        self.dtype, self.m, self.n, self.in_place = dtype, m, n, in_place

    def __call__(self, x_ptr: ~void, out_ptr: ~void):
        self.attrs.blocks = 1
        self.attrs.warps = WARPS
        gx = self.global_view(x_ptr, dtype=self.dtype, shape=[self.m, self.n])
        go = self.global_view(out_ptr, dtype=self.dtype, shape=[self.m, self.n])
        x = self.load_global(gx, offsets=[0, 0], shape=[self.m, self.n], layout=LAYOUTS[self.layout])
        if self.in_place:
            self.scan(x, dim=self.dim, op=self.op, exclusive=self.exclusive, out=x)
            self.store_global(go, x, offsets=[0, 0])
        elif self.op == "add" and not self.exclusive:
            self.store_global(go, self.cumsum(x, dim=self.dim), offsets=[0, 0])
        else:
            self.store_global(go, self.scan(x, dim=self.dim, op=self.op, exclusive=self.exclusive), offsets=[0, 0])


# a per-thread bit view: every thread's 8 float32 registers of PER_THREAD_IN read as int32 in PER_THREAD_OUT,
# and the same 256 bits per thread as 16 float16 or 4 float64 (other widths: bits split or joined)
PER_THREAD_IN = spatial(16, 8).local(2, 4)
PER_THREAD_OUT = local(4, 1).spatial(8, 16).local(1, 2)
PER_THREAD_WIDTHS = {"view_per_thread_f16": (float16, local(4, 1).spatial(8, 16).local(1, 4)),
                     "view_per_thread_f64": (float64, local(2, 1).spatial(8, 16).local(1, 2))}


def view_case(s, case, x, i):
    """The view under test of the loaded tile ``x`` (``i``: a run-time int32 scalar)."""
    if case == "reshape_flat":
        return s.reshape(x, [-1])
    if case == "reshape_3d":
        return s.reshape(x, [4, 8, 32])
    if case == "reshape_method":
        return x.reshape(16, 64)
    if case == "reshape_reduce":
        return s.sum(s.reshape(x, [32, 4, 8]), dim=2)
    if case == "squeeze":
        return s.squeeze(s.max(x, dim=0, keepdim=True), dim=0)
    if case == "unsqueeze":
        return x + s.unsqueeze(s.sum(x, dim=1), dim=1)
    if case == "flatten":
        return s.flatten(s.reshape(x, [2, 16, 32]), start_dim=1)
    if case == "transpose":
        return s.transpose(x)
    if case == "transpose_method":
        return (x * 2.0).transpose()
    if case == "permute":
        return s.permute(s.reshape(x, [4, 8, 32]), [2, 0, 1])
    if case == "slice_rows":
        return x[0:16]
    if case == "slice_row":
        return x[3]
    if case == "slice_cols":
        return x[:, 8:16]
    if case == "slice_cols16":
        return x[:, 0:16]
    if case == "reshape_gather":
        return s.reshape(x, [16, 48])
    if case == "slice_block":
        return x[16:32, 0:16] + 1.0
    if case == "slice_run_time":
        return x[i, ...]
    if case == "slice_run_time_rows":
        return x[i:i + 8, 4]
    if case == "view_u32":
        return s.view(x, dtype=int32)
    if case == "view_round_trip":
        return s.view(s.view(x, dtype=int32) ^ 0, dtype=float16)
    if case == "view_same_width":
        return s.view(x, dtype=int32)
    if case == "view_split":
        return s.view(x, dtype=float16)
    if case == "view_per_thread":
        return s.view(x, layout=PER_THREAD_OUT, dtype=int32)
    if case in PER_THREAD_WIDTHS:
        dtype, layout = PER_THREAD_WIDTHS[case]
        return s.view(x, layout=layout, dtype=dtype)
    raise ValueError(case)


class View(tilus.Script):
    """out = view_case(case, x) of an [m, n] tile x of ``dtype`` in ``layout``."""

    def __init__(self, case, layout="default", dtype=float32, m=32, n=32):
        super().__init__()
        self.case, self.layout, self.dtype, self.m, self.n = case, layout, dtype, m, n

    def __call__(self, i: int32, x_ptr: ~void, out_ptr: ~void):
        self.attrs.blocks = 1
        self.attrs.warps = WARPS
        gx = self.global_view(x_ptr, dtype=self.dtype, shape=[self.m, self.n])
        layout = PER_THREAD_IN if self.layout == "per_thread" else LAYOUTS[self.layout]
        x = self.load_global(gx, offsets=[0, 0], shape=[self.m, self.n], layout=layout)
        r = view_case(self, self.case, x, i)
        go = self.global_view(out_ptr, dtype=r.dtype, shape=list(r.shape))
        self.store_global(go, r, offsets=[0] * len(r.shape))


class SliceAssign(tilus.Script):
    """x[...] = ... on a loaded [32, 32] tile in ``layout``, then x is stored (``i``: a run-time row)."""

    def __init__(self, case, layout="default"):
        super().__init__()
        self.case, self.layout = case, layout

    def __call__(self, i: int32, x_ptr: ~float32, out_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = WARPS
        gx = self.global_view(x_ptr, dtype=float32, shape=[32, 32])
        x = self.load_global(gx, offsets=[0, 0], shape=[32, 32], layout=LAYOUTS[self.layout])
        if self.case == "scalars":
            x[3] = 0.0
            x[:, 8:16] = -1.0
            x[i, 30] = 7.0
        elif self.case == "tile":  # rows 16..31 take twice rows 0..15 (free in the default layout)
            x[16:32] = x[0:16] * 2.0
        elif self.case == "column":  # column 4 takes the row sums (across threads: shared memory)
            x[:, 4] = self.sum(x, dim=1)
        elif self.case == "augmented":
            x[2:4] += 1.0
            x[0, 0:8] *= 3.0
            x[i] -= x[i + 1]
        self.store_global(self.global_view(out_ptr, dtype=float32, shape=[32, 32]), x, offsets=[0, 0])


def slice_assign_reference(case, x, i):
    x = x.clone()
    if case == "scalars":
        x[3] = 0.0
        x[:, 8:16] = -1.0
        x[i, 30] = 7.0
    elif case == "tile":
        x[16:32] = x[0:16] * 2.0
    elif case == "column":
        x[:, 4] = x.sum(1)
    elif case == "augmented":
        x[2:4] += 1.0
        x[0, 0:8] *= 3.0
        x[i] -= x[i + 1]
    return x
