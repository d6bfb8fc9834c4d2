"""scan / cumsum / cumprod along either dimension, inclusive and exclusive, in layouts whose rows stay
in a thread, cross lanes (shuffles) or cross warps (shared memory), and layouts that need a
conversion first: lowering and PTX on the CPU (sm_80, sm_90), errors, and numerics on the GPU."""
import numpy as np
import pytest
import torch
import tvm

from tilus_tvm import float32, int32
from tilus_tvm.errors import ScriptError
from tilus_tvm.instructions.scan import _Plan, scan_layout
from tilus_tvm.layout import local, spatial
from tests.instructions import tile_ops as T
from tests.helpers import CaseScript
from tests.helpers import private_cache  # noqa: F401 - autouse: a cache directory per test


CASES = [  # op, dim, exclusive, layout, dtype
    ("add", 1, False, "default", float32),          # a row within a warp: shuffles
    ("add", 0, False, "default", float32),          # converted, then across warps
    ("max", 1, True, "mma_c", float32),             # the accumulator layout: converted, across 2 warps
    ("min", 0, False, "rows_over_warps", float32),  # across 4 warps
    ("mul", 1, True, "column_threads", float32),
    ("add", 1, True, "one_warp", float32),          # 32 threads of a 128-thread block
    ("xor", 1, False, "default", int32),
    ("and", 0, True, "rows_over_warps", int32),
    ("or", 1, False, "mma_c", int32),
    ("add", 0, True, "mma_c", int32),
]


def args(dtype, device="cpu"):
    torch_dtype = dtype.torch_dtype
    return torch.zeros(32, 32, dtype=torch_dtype, device=device), torch.zeros(32, 32, dtype=torch_dtype, device=device)


@pytest.mark.parametrize("op, dim, exclusive, layout, dtype", CASES)
def test_lowers(op, dim, exclusive, layout, dtype):
    mod = T.Scan(op, dim, exclusive, layout, dtype).lower(*args(dtype), target="sm_80")
    for func in mod.functions.values():
        tvm.tirx.analysis.verify_well_formed(func)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_rows_within_a_warp_scan_with_shuffles(arch):
    kernel = T.Scan("add", 1, False, "default")
    assert kernel.tile_program(*args(float32), target=arch).shared_bytes == 0
    ptx = kernel.compile(*args(float32), target=arch).ptx
    assert f".target {arch}" in ptx and "shfl.sync.idx" in ptx and "bar.sync" not in ptx


def test_rows_across_warps_scan_through_shared_memory_after_a_conversion():
    program = T.Scan("max", 1, True, "mma_c").tile_program(*args(float32), target="sm_80")
    text = str(program)
    assert "convert_layout(" in text and "scan(x=" in text and program.shared_bytes > 0
    assert "bar.sync" in T.Scan("min", 0, False, "rows_over_warps").compile(*args(float32), target="sm_90").ptx


def test_in_place_scan_writes_its_input():
    text = str(T.Scan("add", 1, True, in_place=True).tile_program(*args(float32), target="sm_80"))
    assert "%x = scan(x=%x, dim=1, op='add', exclusive=True)" in text


@pytest.mark.parametrize("layout, dim", [(local(2, 1).spatial(16, 8).local(1, 4), 0),
                                         (local(1, 2).spatial(2, 2).local(2, 1).spatial(8, 4).local(1, 2), 1),
                                         (spatial(4, 1).local(2, 1).spatial(4, 8).local(1, 4), 0)])
def test_scan_layout_puts_the_threads_first_and_keeps_holders_per_digit(layout, dim):
    friendly = scan_layout(layout, dim)
    assert scan_layout(friendly, dim) == friendly
    assert friendly.num_threads == layout.num_threads and friendly.local_size == layout.local_size
    plan = _Plan(friendly, dim)
    run = friendly.local_size // len(plan.runs)
    # every element of a row sits at rank * run + position in its thread's run
    for thread in range(friendly.num_threads):
        for g, slots in enumerate(plan.runs):
            for position, slot in enumerate(slots):
                index = friendly.logical(thread, slot)
                assert index[dim] == plan.rank(friendly, thread) * run + position
                other = plan.thread_of_rank(friendly, thread, 0)
                assert plan.rank(friendly, other) == 0 and plan.others(friendly, other) == plan.others(friendly, thread)


class Bad(CaseScript):
    def __call__(self, x_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        x = self.load_global(self.global_view(x_ptr, dtype=float32, shape=[8, 8]), offsets=[0, 0], shape=[8, 8])
        if self.case == "op":
            self.scan(x, dim=0, op="sub")
        if self.case == "bitwise_float":
            self.scan(x, dim=0, op="xor")
        if self.case == "dim":
            self.cumsum(x, dim=2)
        if self.case == "bool_add":
            self.cumsum(x > 0.0, dim=1)
        if self.case == "out":
            self.cumprod(x, dim=1, out=self.register_tensor(dtype=float32, shape=[8, 4]))


@pytest.mark.parametrize("case, message", [
    ("op", "scan: op must be one of add, mul, max, min, and, or, xor, got 'sub'"),
    ("bitwise_float", "scan: op 'xor' needs an integer or bool tensor"),
    ("dim", "scan: dim 2 is out of range"),
    ("bool_add", "scan: op 'add' is not defined on bool tensor"),
    ("out", r"scan: out .* must be a register tensor of dtype float32 and shape \[8, 8\]"),
])
def test_errors(case, message):
    with pytest.raises(ScriptError, match=message):
        Bad(case).tile_program(torch.zeros(8, 8), target="sm_80")


# --- GPU ----------------------------------------------------------------------------------------
def reference(op, x, dim, exclusive):
    if op in ("xor", "and", "or"):
        ufunc = {"xor": np.bitwise_xor, "and": np.bitwise_and, "or": np.bitwise_or}[op]
        result = torch.from_numpy(ufunc.accumulate(x.cpu().numpy(), axis=dim)).to(x.device)
    elif op == "add":
        result = torch.cumsum(x, dim)
    elif op == "mul":
        result = torch.cumprod(x, dim)
    else:
        result = (torch.cummax if op == "max" else torch.cummin)(x, dim).values
    if not exclusive:
        return result
    identity = {"add": 0, "mul": 1, "xor": 0, "or": 0, "and": -1, "max": float("-inf"), "min": float("inf")}[op]
    first = torch.full_like(result.narrow(dim, 0, 1), identity)
    return torch.cat([first, result.narrow(dim, 0, result.shape[dim] - 1)], dim)


def random_input(op, dtype):
    if dtype is int32:
        return torch.randint(-(1 << 30), 1 << 30, (32, 32), dtype=torch.int32, device="cuda")
    x = torch.randn(32, 32, device="cuda")
    return 1 + 0.05 * x if op == "mul" else x


@pytest.mark.gpu
@pytest.mark.parametrize("op, dim, exclusive, layout, dtype", CASES)
def test_matches_torch(op, dim, exclusive, layout, dtype):
    x = random_input(op, dtype)
    out = torch.full_like(x, float("nan")) if dtype is float32 else torch.full_like(x, -7)
    T.Scan(op, dim, exclusive, layout, dtype)(x, out)
    expected = reference(op, x, dim, exclusive)
    if dtype is int32 and op != "add":
        assert torch.equal(out, expected)
    elif dtype is int32:
        assert torch.equal(out, expected.to(torch.int32))  # wraps like int32 arithmetic
    else:
        torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-4)


@pytest.mark.gpu
def test_in_place_exclusive_cumsum():
    x = torch.randn(32, 32, device="cuda")
    out = torch.full_like(x, float("nan"))
    T.Scan("add", 1, True, in_place=True)(x, out)
    torch.testing.assert_close(out, reference("add", x, 1, True), rtol=1e-5, atol=1e-4)


@pytest.mark.gpu
def test_cumsum_of_a_dot_result():
    a = torch.randn(32, 32, device="cuda").half()
    b = torch.randn(32, 32, device="cuda").half()
    out = torch.full((32, 32), float("nan"), device="cuda")
    T.DotThen("cumsum")(a, b, out)
    torch.testing.assert_close(out, torch.cumsum(a.float() @ b.float(), 1), rtol=1e-3, atol=1e-3)
