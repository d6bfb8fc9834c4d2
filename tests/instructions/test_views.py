"""Views of register tensors: reshape, squeeze, unsqueeze, flatten, transpose, permute, subscripts and
bit views. Free where the layout keeps every element in its register (checked: no shared memory),
gathered through shared memory otherwise: lowering and PTX on the CPU, errors, numerics on the GPU."""
import pytest
import torch
import tvm

import tilus_tvm as tilus
from tilus_tvm import float16, float32, int32, int4b, uint4b, void
from tilus_tvm.errors import CompileError, ScriptError
from tests.instructions import tile_ops as T
from tests.helpers import CaseScript
from tests.helpers import private_cache  # noqa: F401 - autouse: a cache directory per test


def per_thread_reference(x, target=T.PER_THREAD_OUT, dtype=int32):
    """Each thread's elements of x in PER_THREAD_IN, slot 0 first, as bytes; read as ``dtype`` into its
    slots of ``target``."""
    source, held = T.PER_THREAD_IN, x.cpu()
    out = torch.zeros(list(target.shape), dtype=dtype.torch_dtype)
    for thread in range(128):
        slots = torch.stack([held[source.logical(thread, slot)] for slot in range(source.local_size)])
        values = slots.view(torch.uint8).view(dtype.torch_dtype)
        for slot in range(target.local_size):
            out[target.logical(thread, slot)] = values[slot]
    return out.to(x.device)


def widths_reference(case):
    dtype, layout = T.PER_THREAD_WIDTHS[case]
    return lambda x, i: per_thread_reference(x, layout, dtype)


# case, layout, input dtype, (m, n), free (no shared memory), reference(x, i)
CASES = [
    ("reshape_flat", "default", float32, (32, 32), True, lambda x, i: x.reshape(-1)),
    ("reshape_flat", "mma_c", float32, (32, 32), True, lambda x, i: x.reshape(-1)),
    ("reshape_3d", "default", float32, (32, 32), True, lambda x, i: x.reshape(4, 8, 32)),
    ("reshape_method", "mma_c", float32, (32, 32), True, lambda x, i: x.reshape(16, 64)),
    ("reshape_reduce", "default", float32, (32, 32), True, lambda x, i: x.reshape(32, 4, 8).sum(2)),
    ("reshape_gather", "default", float32, (48, 16), False, lambda x, i: x.reshape(16, 48)),
    ("squeeze", "rows_over_warps", float32, (32, 32), False, lambda x, i: x.amax(0)),  # the max crosses warps
    ("unsqueeze", "rows_over_warps", float32, (32, 32), True, lambda x, i: x + x.sum(1, keepdim=True)),
    ("flatten", "default", float32, (32, 32), True, lambda x, i: x.reshape(2, 512)),
    ("transpose", "mma_c", float32, (32, 32), True, lambda x, i: x.T),
    ("transpose_method", "default", float32, (32, 32), True, lambda x, i: (2 * x).T),
    ("permute", "default", float32, (32, 32), True, lambda x, i: x.reshape(4, 8, 32).permute(2, 0, 1)),
    ("slice_rows", "default", float32, (32, 32), True, lambda x, i: x[0:16]),
    ("slice_row", "default", float32, (32, 32), False, lambda x, i: x[3]),
    ("slice_cols", "default", float32, (32, 32), False, lambda x, i: x[:, 8:16]),
    ("slice_cols16", "mma_c", float32, (32, 32), True, lambda x, i: x[:, 0:16]),
    ("slice_cols", "mma_c", float32, (32, 32), False, lambda x, i: x[:, 8:16]),
    ("slice_block", "mma_c", float32, (32, 32), False, lambda x, i: x[16:32, 0:16] + 1),
    ("slice_run_time", "default", float32, (32, 32), False, lambda x, i: x[i]),
    ("slice_run_time_rows", "mma_c", float32, (32, 32), False, lambda x, i: x[i:i + 8, 4]),
    ("view_u32", "default", float16, (32, 32), True, lambda x, i: x.view(torch.int32)),
    ("view_u32", "mma_c", float16, (32, 32), True, lambda x, i: x.view(torch.int32)),
    ("view_u32", "lanes_inner", float16, (32, 32), False, lambda x, i: x.view(torch.int32)),
    ("view_round_trip", "default", float16, (32, 32), True, lambda x, i: x),
    ("view_same_width", "default", float32, (32, 32), True, lambda x, i: x.view(torch.int32)),
    ("view_split", "default", int32, (32, 32), True, lambda x, i: x.view(torch.float16)),
    ("view_per_thread", "per_thread", float32, (32, 32), True, lambda x, i: per_thread_reference(x)),
    ("view_per_thread_f16", "per_thread", float32, (32, 32), True, widths_reference("view_per_thread_f16")),
    ("view_per_thread_f64", "per_thread", float32, (32, 32), True, widths_reference("view_per_thread_f64")),
]
IDS = [f"{case}-{layout}" for case, layout, *_ in CASES]


def expected_on(case, device):
    """The reference's shape and dtype, from zeros on ``device``."""
    _, _, dtype, (m, n), _, reference = case
    x = torch.zeros(m, n, dtype=dtype.torch_dtype, device=device)
    return x, reference(x, 5)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_free_views_use_no_shared_memory_and_lower(case):
    name, layout, dtype, (m, n), free, _ = case
    x, expected = expected_on(case, "cpu")
    kernel = T.View(name, layout, dtype, m, n)
    assert (kernel.tile_program(5, x, torch.zeros_like(expected), target="sm_80").shared_bytes == 0) == free
    for func in kernel.lower(5, x, torch.zeros_like(expected), target="sm_80").functions.values():
        tvm.tirx.analysis.verify_well_formed(func)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("case", [CASES[9], CASES[20], CASES[22]], ids=[IDS[9], IDS[20], IDS[22]])
def test_compiles_to_ptx(case, arch):
    name, layout, dtype, (m, n), free, _ = case
    x, expected = expected_on(case, "cpu")
    ptx = T.View(name, layout, dtype, m, n).compile(5, x, torch.zeros_like(expected), target=arch).ptx
    assert f".target {arch}" in ptx and ("bar.sync" in ptx) == (not free)


def test_a_free_transpose_copies_registers_only():
    program = str(T.View("transpose", "mma_c").tile_program(0, torch.zeros(32, 32), torch.zeros(32, 32),
                                                             target="sm_80"))
    assert "permute_register(x=%x, dims=(1, 0))" in program and "convert_layout" not in program


class Bad(CaseScript):
    def __call__(self, n: int32, x_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        x = self.load_global(self.global_view(x_ptr, dtype=float32, shape=[8, 8]), offsets=[0, 0], shape=[8, 8],
                             layout=T.spatial(8, 4).local(1, 2))
        if self.case == "reshape_size":
            self.reshape(x, [3, 8])
        if self.case == "squeeze_size":
            self.squeeze(x, dim=0)
        if self.case == "transpose_3d":
            self.transpose(self.reshape(x, [2, 4, 8]))
        if self.case == "permute_dims":
            self.permute(x, [0, 0])
        if self.case == "view_nothing":
            self.view(x)
        if self.case == "view_sub_byte":
            self.view(x, dtype=int4b)
        if self.case == "view_bool":
            self.view(x > 0.0, dtype=int32)
        if self.case == "view_bool_codes":
            self.view(x > 0.0, dtype=uint4b, layout=T.spatial(8, 4).local(1, 4))
        if self.case == "view_bits":
            self.view(x, layout=T.spatial(8, 4).local(1, 4), dtype=int32)
        if self.case == "slice_step":
            y = x[::2]
        if self.case == "slice_length":
            y = x[n:2 * n]
        if self.case == "slice_range":
            y = x[:, 6:10]
        if self.case == "slice_rank":
            y = x[0, 0, 0]
        if self.case == "slice_float":
            y = x[0.5]
        if self.case == "unpack":
            a, b = x + 1.0


@pytest.mark.parametrize("case, message", [
    ("reshape_size", r"reshape: cannot reshape .*\(64 elements\) to shape \[3, 8\] \(24 elements\)"),
    ("squeeze_size", "squeeze: dimension 0 of .* has size 8, not 1"),
    ("transpose_3d", "transpose: .* is not 2-D"),
    ("permute_dims", r"permute: dims \[0, 0\] names a dimension twice"),
    ("view_nothing", "view: give a dtype, a layout or both"),
    ("view_sub_byte", "changes the element width .32 -> 4 bits., so the view needs layout="),
    ("view_bool", "view: dtype bool cannot be viewed bit for bit"),
    ("view_bool_codes", "view: dtype bool cannot be viewed bit for bit"),
    ("view_bits", r"view: each of the 32 threads of layout .* holds 2 x 32 bits of float32, but layout .* spreads "
                  r"4 x 32 bits of int32"),
    ("slice_step", "slices with a step are not supported"),
    ("slice_length", "must have a compile-time length"),
    ("slice_range", r"the slice 6:10 is empty or outside \[0, 8\)"),
    ("slice_rank", "3 indices for a tensor of rank 2"),
    ("slice_float", "index 0.5 must be an int, an integer scalar or a slice"),
    ("unpack", "cannot be iterated over or unpacked"),
])
def test_errors(case, message):
    with pytest.raises(ScriptError, match=message):
        Bad(case).tile_program(4, torch.zeros(8, 8), target="sm_80")


class LateBitView(tilus.Script):
    """A per-thread view of a tensor whose layout is only known after inference, and does not fit."""

    def __call__(self, x_ptr: ~float32, y_ptr: ~int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        x = self.load_global(self.global_view(x_ptr, dtype=float32, shape=[8, 8]), offsets=[0, 0], shape=[8, 8])
        y = x * 2.0
        self.store_global(self.global_view(x_ptr, dtype=float32, shape=[8, 8]), y, offsets=[0, 0])
        v = self.view(y, layout=T.spatial(8, 4).local(1, 4), dtype=int32)
        self.store_global(self.global_view(y_ptr, dtype=int32, shape=[8, 16]), v, offsets=[0, 0])


def test_a_per_thread_view_that_does_not_fit_the_inferred_layout_is_a_compile_error():
    with pytest.raises(CompileError, match="view: each of the 32 threads of layout"):
        LateBitView().compile(torch.zeros(8, 8), torch.zeros(8, 16, dtype=torch.int32), target="sm_80")


class PerThreadView(tilus.Script):
    """x [8, 8] (float32; int32 words when ``packed``) viewed per thread as int32 (uint4b codes) in
    ``layout``. x's layout is given (spatial(8, 4).local(1, 2): 2 x 32 bits per thread) or, ``late``,
    inferred (the default layout holds as many bits)."""

    def __init__(self, packed, layout, late=False):
        super().__init__()
        self.packed, self.layout, self.late = packed, layout, late

    def __call__(self, x_ptr: ~void):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        dtype = int32 if self.packed else float32
        g = self.global_view(x_ptr, dtype=dtype, shape=[8, 8])
        x = self.load_global(g, offsets=[0, 0], shape=[8, 8], layout=None if self.late else T.spatial(8, 4).local(1, 2))
        if self.late:
            x = x + x
            self.store_global(g, x, offsets=[0, 0])
        self.view(x, dtype=uint4b if self.packed else int32, layout=self.layout)


# packed, layout of the view, what the message says after "holds 2 x 32 bits of <x's dtype>, but layout .* spreads"
UNFIT_VIEWS = [
    (False, T.spatial(8, 4).local(1, 4), "4 x 32 bits of int32 over 32 threads: 64 bits per thread against 128"),
    (True, T.spatial(8, 4).local(1, 8), "8 x 4 bits of uint4b over 32 threads: 64 bits per thread against 32"),
    (False, T.spatial(4, 4).local(1, 2), "2 x 32 bits of int32 over 16 threads: 64 bits per thread against 64"),
    (True, T.spatial(4, 4).local(1, 16), "16 x 4 bits of uint4b over 16 threads: 64 bits per thread against 64"),
]


@pytest.mark.parametrize("packed, layout, spreads", UNFIT_VIEWS,
                         ids=["bits", "bits-packed", "threads", "threads-packed"])
def test_a_per_thread_view_that_moves_bits_between_threads_is_one_error(packed, layout, spreads):
    """Plain and packed dtypes: one check, a ScriptError at the view's line when x's layout is known,
    a CompileError with the same message once inference gave it."""
    x = torch.zeros(8, 8, dtype=torch.int32 if packed else torch.float32)
    message = (rf"view: each of the 32 threads of layout .* holds 2 x 32 bits of {'int32' if packed else 'float32'}, "
               rf"but layout .* spreads {spreads} .*a view keeps every bit in its thread")
    with pytest.raises(ScriptError, match=message) as built:
        PerThreadView(packed, layout).tile_program(x, target="sm_80")
    assert built.type is ScriptError and "self.view(x, dtype=" in str(built.value)
    with pytest.raises(CompileError, match=message):
        PerThreadView(packed, layout, late=True).compile(x, target="sm_80")


def test_every_per_thread_view_is_a_register_view():
    """A layout or a packed dtype: RegisterView (emitted by register_bits); neither: the row-major ViewRegister."""
    x = torch.zeros(32, 32)
    program = str(T.View("view_per_thread", "per_thread").tile_program(0, x, x.int(), target="sm_80"))
    assert "= register_view(x=%x)" in program and "view_register" not in program
    program = str(T.View("view_u32", "default", float16).tile_program(0, x.half(), torch.zeros(32, 16, dtype=torch.int32),
                                                                      target="sm_80"))
    assert "= view_register(x=%x)" in program and "register_view" not in program


class ViewInto(tilus.Script):
    """The per-thread view of case view_per_thread (PER_THREAD_IN as int32 in PER_THREAD_OUT) written
    into ``out=y``, a register tensor of ``y_dtype`` made in ``y_layout`` (None: it takes the view's)."""

    def __init__(self, y_layout=None, y_dtype=int32):
        super().__init__()
        self.y_layout, self.y_dtype = y_layout, y_dtype

    def __call__(self, x_ptr: ~float32, out_ptr: ~int32):
        self.attrs.blocks = 1
        self.attrs.warps = T.WARPS
        x = self.load_global(self.global_view(x_ptr, dtype=float32, shape=[32, 32]), offsets=[0, 0], shape=[32, 32],
                             layout=T.PER_THREAD_IN)
        y = self.register_tensor(dtype=self.y_dtype, shape=[32, 32], layout=self.y_layout)
        self.view(x, dtype=int32, layout=T.PER_THREAD_OUT, out=y)
        self.store_global(self.global_view(out_ptr, dtype=int32, shape=[32, 32]), y, offsets=[0, 0])


def test_a_per_thread_view_writes_into_out():
    args = (torch.zeros(32, 32), torch.zeros(32, 32, dtype=torch.int32))
    program = str(ViewInto().tile_program(*args, target="sm_80"))
    assert f"%y: register int32[32, 32] layout={T.PER_THREAD_OUT!r} = allocate_register(init=None)" in program
    assert "\n    %y = register_view(x=%x)\n" in program
    with pytest.raises(ScriptError, match=r"view: out y: int32\[32, 32\] has layout .*, not the layout given to the "
                                          r"view: RegisterLayout"):
        ViewInto(T.PER_THREAD_IN).tile_program(*args, target="sm_80")
    with pytest.raises(ScriptError, match=r"view: out y: float32\[32, 32\] must be a register tensor of dtype int32"):
        ViewInto(y_dtype=float32).tile_program(*args, target="sm_80")


# --- GPU ----------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_matches_torch(case):
    name, layout, dtype, (m, n), _, reference = case
    if dtype is int32:
        x = torch.randint(-(1 << 31), (1 << 31) - 1, (m, n), dtype=torch.int32, device="cuda")
    else:
        x = torch.randn(m, n, device="cuda").to(dtype.torch_dtype)
    i = 5 if name != "slice_run_time_rows" else 9
    expected = reference(x, i)
    out = torch.full(expected.shape, -1, dtype=expected.dtype, device=expected.device)  # row-major, like the kernel
    T.View(name, layout, dtype, m, n)(i, x, out)
    if expected.dtype == torch.float16:
        assert torch.equal(out.view(torch.int16), expected.contiguous().view(torch.int16))  # bit for bit (NaNs too)
    elif expected.dtype == torch.int32:
        assert torch.equal(out, expected)
    else:
        torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
def test_a_per_thread_view_into_out_matches_torch():
    x = torch.randn(32, 32, device="cuda")
    out = torch.full((32, 32), -1, dtype=torch.int32, device="cuda")
    ViewInto()(x, out)
    assert torch.equal(out, per_thread_reference(x))


# --- x[index] = value ---------------------------------------------------------------------------
ASSIGN_CASES = [("scalars", "default", False), ("scalars", "mma_c", False), ("tile", "default", True),
                ("tile", "mma_c", False), ("column", "rows_over_warps", False), ("augmented", "default", False),
                ("augmented", "one_warp", False)]


@pytest.mark.parametrize("case, layout, free", ASSIGN_CASES)
def test_slice_assignment_lowers(case, layout, free):
    kernel = T.SliceAssign(case, layout)
    program = kernel.tile_program(5, torch.zeros(32, 32), torch.zeros(32, 32), target="sm_80")
    assert "slice_assign_register(dst=%x" in str(program)
    if case == "tile":  # nothing else needs shared memory
        assert (program.shared_bytes == 0) == free
    for func in kernel.lower(5, torch.zeros(32, 32), torch.zeros(32, 32), target="sm_90").functions.values():
        tvm.tirx.analysis.verify_well_formed(func)


class BadAssign(CaseScript):
    def __call__(self, x_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        g = self.global_view(x_ptr, dtype=float32, shape=[8, 8])
        x = self.load_global(g, offsets=[0, 0], shape=[8, 8])
        if self.case == "shape":
            x[0:2] = x[0:4]
        if self.case == "global":
            g[0, 0] = 1.0
        if self.case == "value":
            x[0] = "a"


@pytest.mark.parametrize("case, message", [
    ("shape", r"= .*\[4, 8\]: the sub-tile has shape \[2, 8\]"),
    ("global", "cannot assign to an element of .*global view"),
    ("value", "expected a register tensor or a scalar"),
])
def test_slice_assignment_errors(case, message):
    with pytest.raises(ScriptError, match=message):
        BadAssign(case).tile_program(torch.zeros(8, 8), target="sm_80")


@pytest.mark.gpu
@pytest.mark.parametrize("case, layout, free", ASSIGN_CASES)
def test_slice_assignment_matches_torch(case, layout, free):
    x = torch.randn(32, 32, device="cuda")
    out = torch.full_like(x, float("nan"))
    T.SliceAssign(case, layout)(6, x, out)
    torch.testing.assert_close(out, T.slice_assign_reference(case, x, 6), rtol=1e-5, atol=1e-5)
