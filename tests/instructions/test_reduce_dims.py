"""sum, max, min, any and all over one, several or all dimensions, with keepdim and out=, in layouts
whose reduced rows stay in a thread, cross lanes, or cross warps: lowering and PTX on the CPU (sm_80,
sm_90), errors, and numerics against torch on the GPU."""
import pytest
import torch
import tvm

from tilus_tvm import float32
from tilus_tvm.errors import ScriptError
from tests.instructions import tile_ops as T
from tests.helpers import CaseScript
from tests.helpers import private_cache  # noqa: F401 - autouse: a cache directory per test


def result_shape(dim, keepdim, shape=(32, 32)):
    dims = range(len(shape)) if dim is None else [dim] if isinstance(dim, int) else dim
    dims = [d % len(shape) for d in dims]
    return tuple(1 if d in dims else s for d, s in enumerate(shape) if keepdim or d not in dims)


def reference(op, x, dim, keepdim):
    dims = tuple(range(x.dim())) if dim is None else (dim,) if isinstance(dim, int) else tuple(dim)
    if op == "any":
        return (x > 1.0).any(dim=dims, keepdim=keepdim) if len(dims) == 1 else \
            (x > 1.0).flatten().any().reshape(result_shape(dim, keepdim, x.shape))
    if op == "all":
        return (x > -1.0).all(dim=dims[0], keepdim=keepdim) if len(dims) == 1 else \
            (x > -1.0).flatten().all().reshape(result_shape(dim, keepdim, x.shape))
    fn = {"sum": torch.sum, "max": torch.amax, "min": torch.amin}[op]
    return fn(x, dim=dims, keepdim=keepdim)


def output_for(op, dim, keepdim, device="cpu"):
    shape = result_shape(dim, keepdim) or (2,)
    dtype = torch.bool if op in ("any", "all") else torch.float32
    return torch.zeros(shape, dtype=dtype, device=device)


def kernel(op, dim, keepdim, layout, use_out=False):
    return T.Reduce(op, dim, keepdim, result_shape(dim, keepdim), layout, use_out=use_out)


CASES = [(op, dim, keepdim, layout)
         for layout in T.LAYOUTS
         for op, (dim, keepdim) in zip(["sum", "max", "min", "sum"], [(0, False), (1, True), (None, False), ([0, 1], True)])]


@pytest.mark.parametrize("op, dim, keepdim, layout", CASES)
def test_lowers(op, dim, keepdim, layout):
    mod = kernel(op, dim, keepdim, layout).lower(torch.zeros(32, 32), output_for(op, dim, keepdim), target="sm_80")
    for func in mod.functions.values():
        tvm.tirx.analysis.verify_well_formed(func)


@pytest.mark.parametrize("layout, dim, across_warps", [("rows_over_warps", 0, True), ("rows_over_warps", 1, False),
                                                       ("column_threads", 0, False), ("mma_c", 1, True),
                                                       ("mma_c", 0, True)])
def test_rows_across_warps_go_through_shared_memory(layout, dim, across_warps):
    program = kernel("sum", dim, False, layout).tile_program(torch.zeros(32, 32), output_for("sum", dim, False),
                                                             target="sm_80")
    assert (program.shared_bytes > 0) == across_warps


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_compiles_to_shuffles_and_barriers(arch):
    ptx = kernel("max", None, True, "rows_over_warps").compile(torch.zeros(32, 32), output_for("max", None, True),
                                                               target=arch).ptx
    assert f".target {arch}" in ptx and "shfl.sync.bfly" in ptx and "bar.sync" in ptx


def test_reduce_over_all_dims_is_one_reduction_per_dim():
    program = str(kernel("sum", None, False, "default").tile_program(torch.zeros(32, 32), output_for("sum", None, False),
                                                                     target="sm_80"))
    assert "reduce(x=%x, dim=1, op='sum', keepdim=False)" in program
    assert "register float32[] " in program and program.count("= reduce(") == 2


class Bad(CaseScript):
    def __call__(self, x_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        x = self.load_global(self.global_view(x_ptr, dtype=float32, shape=[8, 8]), offsets=[0, 0], shape=[8, 8])
        if self.case == "range":
            self.sum(x, dim=2)
        if self.case == "twice":
            self.max(x, dim=[1, -1])
        if self.case == "any_float":
            self.any(x, dim=0)
        if self.case == "out_shape":
            self.min(x, dim=0, out=self.register_tensor(dtype=float32, shape=[8, 1]))
        if self.case == "dim_type":
            self.sum(x, dim=0.5)


@pytest.mark.parametrize("case, message", [
    ("range", "sum: dim 2 is out of range for a tensor of rank 2"),
    ("twice", r"max: dim \[1, -1\] names a dimension twice"),
    ("any_float", "any: x must be a bool register tensor"),
    ("out_shape", r"min: out .*\[8, 1\].* must be a register tensor of dtype float32 and shape \[8\]"),
    ("dim_type", "sum: dim must be an int or a list of ints, got 0.5"),
])
def test_errors(case, message):
    with pytest.raises(ScriptError, match=message):
        Bad(case).tile_program(torch.zeros(8, 8), target="sm_80")


# --- GPU ----------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("op, dim, keepdim, layout", CASES + [
    ("any", 1, False, "mma_c"), ("all", 0, True, "rows_over_warps"), ("any", None, True, "column_threads"),
    ("all", [0, 1], False, "one_warp")])
def test_matches_torch(op, dim, keepdim, layout):
    x = torch.randn(32, 32, device="cuda")
    if op == "all":
        x[5, 7] = -3.0  # one false element: all() over its row/column/tile is false, elsewhere true
    out = output_for(op, dim, keepdim, "cuda")
    if out.dtype == torch.float32:
        out.fill_(float("nan"))
    kernel(op, dim, keepdim, layout)(x, out)
    expected = reference(op, x, dim, keepdim)
    if not result_shape(dim, keepdim):
        out = out[:1].reshape(())
    if out.dtype == torch.bool:
        assert torch.equal(out, expected)
    else:
        torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-4)


@pytest.mark.gpu
@pytest.mark.parametrize("op, dim, keepdim, layout", [("sum", 0, False, "rows_over_warps"),
                                                      ("max", 1, True, "mma_c")])
def test_out_tensor_receives_the_result(op, dim, keepdim, layout):
    x = torch.randn(32, 32, device="cuda")
    out = output_for(op, dim, keepdim, "cuda").fill_(float("nan"))
    kernel(op, dim, keepdim, layout, use_out=True)(x, out)
    torch.testing.assert_close(out, reference(op, x, dim, keepdim), rtol=1e-5, atol=1e-4)


@pytest.mark.gpu
@pytest.mark.parametrize("op", ["rowmax", "colsum", "softmax"])
def test_reductions_of_a_dot_result(op):
    a = torch.randn(32, 32, device="cuda").half()
    b = torch.randn(32, 32, device="cuda").half()
    c = a.float() @ b.float()
    expected = {"rowmax": c.amax(1, keepdim=True), "colsum": c.sum(0), "softmax": torch.softmax(c, dim=1)}[op]
    out = torch.full_like(expected, float("nan"))
    T.DotThen(op)(a, b, out)
    torch.testing.assert_close(out, expected, rtol=1e-3, atol=1e-3)
