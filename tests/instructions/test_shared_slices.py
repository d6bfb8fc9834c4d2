"""Sub-tile views of shared tensors (``smem[:, 16:32]``, ``smem[8:24]``, ``smem[:, j]``, views of views)
under swizzled and row-major layouts: loads (element-wise and ldmatrix), stores and cp.async through
them; lowering and PTX on the CPU (sm_80, sm_90), errors, and numerics on the GPU."""
import pytest
import torch
import tvm

import tilus_tvm as tilus
from tilus_tvm import float16, float32, int32
from tilus_tvm.errors import CompileError, ScriptError
from tilus_tvm.layout.shared import shared_row_major
from tilus_tvm.layout.swizzle import Swizzle
from tests.helpers import CaseScript
from tests.helpers import private_cache  # noqa: F401 - autouse: a cache directory per test


LAYOUTS = {"swizzled": shared_row_major(64, 64).swizzled(Swizzle(3, 3, 3)), "row_major": shared_row_major(64, 64),
           "inferred": None}


class SharedSlices(tilus.Script):
    """x [64, 64] float16 goes to shared memory (registers -> shared, or cp.async into sub-tiles), then
    ``case`` reads parts of it back through sub-tile views into out."""

    def __init__(self, case, layout="swizzled"):
        super().__init__()
        self.case, self.layout = case, layout

    def __call__(self, j: int32, x_ptr: ~float16, out_ptr: ~float16):
        self.attrs.blocks = 1
        self.attrs.warps = 4
        gx = self.global_view(x_ptr, dtype=float16, shape=[64, 64])
        s = self.shared_tensor(dtype=float16, shape=[64, 64], layout=LAYOUTS[self.layout])
        if self.case == "copy_async_halves":  # cp.async into the two column halves
            for half in list(range(2)):
                self.copy_async(src=gx, dst=s[:, half * 32:half * 32 + 32], offsets=[0, half * 32])
            self.copy_async_wait_all()
        elif self.case == "store_quarters":  # registers into four row blocks
            for q in list(range(4)):
                self.store_shared(s[q * 16:q * 16 + 16, :], self.load_global(gx, offsets=[q * 16, 0], shape=[16, 64]))
        else:
            self.store_shared(s, self.load_global(gx, offsets=[0, 0], shape=[64, 64]))
        self.sync()
        if self.case == "columns":
            go = self.global_view(out_ptr, dtype=float16, shape=[64, 16])
            self.store_global(go, self.load_shared(s[:, 16:32]), offsets=[0, 0])
        elif self.case == "rows":
            go = self.global_view(out_ptr, dtype=float16, shape=[16, 64])
            self.store_global(go, self.load_shared(s[8:24]), offsets=[0, 0])
        elif self.case == "column_run_time":
            go = self.global_view(out_ptr, dtype=float16, shape=[64])
            self.store_global(go, self.load_shared(s[:, j]), offsets=[0])
        elif self.case == "window_run_time":
            go = self.global_view(out_ptr, dtype=float16, shape=[8, 16])
            self.store_global(go, self.load_shared(s[j:j + 8, 40:56]), offsets=[0, 0])
        elif self.case == "transposed_block":
            go = self.global_view(out_ptr, dtype=float16, shape=[32, 16])
            self.store_global(go, self.load_shared(s[16:32, 0:32].transpose()), offsets=[0, 0])
        elif self.case == "reshape":
            go = self.global_view(out_ptr, dtype=float16, shape=[128, 32])
            self.store_global(go, self.load_shared(self.reshape_shared(s, [128, 32])), offsets=[0, 0])
        elif self.case == "reshape_then_index":
            go = self.global_view(out_ptr, dtype=float16, shape=[32, 64])
            self.store_global(go, self.load_shared(self.reshape_shared(s, [2, 32, 64])[1]), offsets=[0, 0])
        elif self.case == "view_of_view":
            go = self.global_view(out_ptr, dtype=float16, shape=[8, 8])
            self.store_global(go, self.load_shared(s[32:64][:, 24:40][4:12, 8:16]), offsets=[0, 0])
        else:
            go = self.global_view(out_ptr, dtype=float16, shape=[64, 64])
            self.store_global(go, self.load_shared(s), offsets=[0, 0])
        self.free_shared(s)


def reference(case, x, j):
    return {"columns": x[:, 16:32], "rows": x[8:24], "column_run_time": x[:, j], "window_run_time": x[j:j + 8, 40:56],
            "transposed_block": x[16:32, 0:32].T, "view_of_view": x[32:64][:, 24:40][4:12, 8:16],
            "reshape": x.reshape(128, 32), "reshape_then_index": x.reshape(2, 32, 64)[1]}.get(case, x)


CASES = ["columns", "rows", "column_run_time", "window_run_time", "transposed_block", "view_of_view",
         "copy_async_halves", "store_quarters", "reshape", "reshape_then_index"]


def args(case, device="cpu", j=5):
    x = torch.zeros(64, 64, dtype=torch.float16, device=device)
    return j, x, torch.zeros_like(reference(case, x, j)).contiguous()


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("case", CASES)
def test_lowers(case, layout):
    for func in SharedSlices(case, layout).lower(*args(case), target="sm_80").functions.values():
        tvm.tirx.analysis.verify_well_formed(func)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_aligned_sub_tiles_keep_vector_accesses_and_cp_async(arch):
    ptx = SharedSlices("copy_async_halves").compile(*args("copy_async_halves"), target=arch).ptx
    assert f".target {arch}" in ptx and "cp.async.cg.shared.global" in ptx and "ld.shared.v4" in ptx


class SlicedDot(tilus.Script):
    """c = a @ b with k split in two halves of one shared tile each: ldmatrix through sub-tile views."""

    def __call__(self, a_ptr: ~float16, b_ptr: ~float16, c_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 4
        ga = self.global_view(a_ptr, dtype=float16, shape=[32, 64])
        gb = self.global_view(b_ptr, dtype=float16, shape=[64, 32])
        sa = self.shared_tensor(dtype=float16, shape=[32, 64])
        sb = self.shared_tensor(dtype=float16, shape=[64, 32])
        self.copy_async(src=ga, dst=sa, offsets=[0, 0])
        self.copy_async(src=gb, dst=sb, offsets=[0, 0])
        self.copy_async_wait_all()
        self.sync()
        acc = self.register_tensor(dtype=float32, shape=[32, 32], init=0.0)
        for k in list(range(2)):
            acc = self.dot(self.load_shared(sa[:, k * 32:k * 32 + 32]), self.load_shared(sb[k * 32:k * 32 + 32]), acc)
        self.store_global(self.global_view(c_ptr, dtype=float32, shape=[32, 32]), acc, offsets=[0, 0])


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_sub_tiles_of_a_swizzled_operand_load_with_ldmatrix(arch):
    a, b, c = torch.zeros(32, 64, dtype=torch.float16), torch.zeros(64, 32, dtype=torch.float16), torch.zeros(32, 32)
    program = SlicedDot().tile_program(a, b, c, target=arch)
    assert "Sw<" in str(program)  # the inferred layouts are swizzled
    ptx = SlicedDot().compile(a, b, c, target=arch).ptx
    assert "ldmatrix.sync.aligned" in ptx and "mma.sync.aligned" in ptx


def test_a_swizzle_that_permutes_across_a_sub_tile_is_addressed_in_the_root():
    layout = LAYOUTS["swizzled"]

    class Probe(tilus.Script):
        def __call__(self):
            self.attrs.blocks = 1
            self.attrs.warps = 1
            s = self.shared_tensor(dtype=float16, shape=[64, 64], layout=layout)
            views.extend([s[:, 16:32], s[8:16], s[:, 0:64], s[0:8, 4:8], s[0:8, 32:64]])

    views = []
    Probe().tile_program(target="sm_80")
    columns, rows, whole, low_bits, half = views
    # rows 8..15 start at a multiple of the swizzle's 512-element period: a plain offset; columns 16 and 32
    # set offset bits the swizzle flips, so those sub-tiles are addressed through the root
    assert rows.linear_in_root() and whole.linear_in_root()
    assert not columns.linear_in_root() and not half.linear_in_root()
    assert low_bits.linear_in_root()  # columns 4..7: bits below the 8-element unit the swizzle moves whole
    assert columns.root_coords([3, 5]) == [3, 21] and half.root_coords([2, 1]) == [2, 33]


class BadSlices(CaseScript):
    def __call__(self, n: int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        s = self.shared_tensor(dtype=float16, shape=[16, 16])
        if self.case == "step":
            t = s[0:16:2]
        if self.case == "length":
            t = s[:, n:2 * n]
        if self.case == "range":
            t = s[:, 12:20]
        if self.case == "rank":
            t = s[0, 0, 0]
        if self.case == "index":
            t = s[16, 0]
        if self.case == "ellipsis":
            t = s[..., 0, ...]
        if self.case == "reshape_size":
            t = self.reshape_shared(s, [8, 8])
        if self.case == "reshape_strided":
            t = self.load_shared(self.reshape_shared(s[:, 0:8], [128]))


@pytest.mark.parametrize("case, message", [
    ("step", "slices with a step are not supported"), ("length", "must have a compile-time length"),
    ("range", r"the slice 12:20 is empty or outside \[0, 16\)"), ("rank", "3 indices for a tensor of rank 2"),
    ("index", "index 16 is out of range for dimension 0 of size 16"), ("ellipsis", "at most one ... in an index"),
    ("reshape_size", r"reshape_shared: cannot view .*\(256 elements\) as shape \[8, 8\] \(64 elements\)"),
])
def test_errors(case, message):
    with pytest.raises(ScriptError, match=message):
        BadSlices(case).tile_program(4, target="sm_80")


def test_reshape_of_a_strided_view_is_a_compile_error():
    with pytest.raises(CompileError, match="reshape_shared: .* is not row-major and compact"):
        BadSlices("reshape_strided").compile(4, target="sm_80")


# --- GPU ----------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("case", CASES)
def test_matches_torch(case, layout):
    x = torch.randn(64, 64, device="cuda").half()
    j = 13
    _, _, out = args(case, "cuda", j)
    out.fill_(float("nan"))
    SharedSlices(case, layout)(j, x, out)
    assert torch.equal(out, reference(case, x, j))


@pytest.mark.gpu
def test_sliced_dot():
    a = torch.randn(32, 64, device="cuda").half()
    b = torch.randn(64, 32, device="cuda").half()
    c = torch.full((32, 32), float("nan"), device="cuda")
    SlicedDot()(a, b, c)
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-3, atol=1e-3)
