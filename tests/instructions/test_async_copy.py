"""copy_async and shared-tensor views: vector sizes, zero-fill, errors, the planner's view of copies
in flight, and (GPU) round trips through shared memory."""
import pytest
import torch

import tilus_tvm as tilus
from tilus_tvm import float16, float32, int32
from tilus_tvm.ir import inst as ir
from tilus_tvm.ir.stmt import instructions
from tilus_tvm.pipeline import lower_specialized, specialize


class Stage(tilus.Script):
    """out = x[rows, cols] staged through a 2-stage shared buffer with copy_async (zero outside x)."""

    def __init__(self, rows, cols, free_early=False):
        super().__init__()
        self.rows, self.cols, self.free_early = rows, cols, free_early

    def __call__(self, m: int32, n: int, x_ptr: ~float16, out_ptr: ~float16):
        self.attrs.blocks = 1
        self.attrs.warps = 4
        gx = self.global_view(x_ptr, dtype=float16, shape=[m, n])
        go = self.global_view(out_ptr, dtype=float16, shape=[self.rows, self.cols * 2])
        s = self.shared_tensor(dtype=float16, shape=[2, self.rows, self.cols])
        for stage in range(2):
            self.copy_async(src=gx, dst=s[stage], offsets=[0, stage * self.cols])
        self.copy_async_commit_group()
        if self.free_early:
            self.free_shared(s)
            t = self.shared_tensor(dtype=float16, shape=[self.rows, self.cols])
            self.copy_async_wait_all()
            self.sync()
            self.free_shared(t)
        else:
            self.copy_async_wait_group(0)
            self.sync()
            for stage in range(2):
                tile = self.load_shared(s[stage])
                self.store_global(go, tile, offsets=[0, stage * self.cols])


def cuda_of(kernel, *args, target="sm_90"):
    return kernel.compile(*args, target=target).cuda_source


def test_vector_size_follows_alignment():
    out = torch.zeros(32, 64, dtype=torch.float16)
    by_n = {}
    for n in (64, 62, 63):
        x = torch.zeros(64 * n + 8, dtype=torch.float16)[:64 * n].view(64, n)
        by_n[n] = cuda_of(Stage(32, 32), 64, n, x, out)
    assert "cp_async_cg_src_size_async_cg_shared_global_16" in by_n[64]  # rows of 64 halves: 16-byte vectors
    assert "ca_shared_global_4" in by_n[62] and "_16(" not in by_n[62]  # 124-byte rows: 4-byte vectors
    assert "shared_global_" not in by_n[63]  # 126-byte rows: not even 4-byte aligned, element by element


def test_copies_in_flight_keep_their_memory():
    kernel = Stage(32, 32, free_early=True)
    args = (64, 64, torch.empty(64, 64, dtype=torch.float16, device="meta"),
            torch.empty(32, 64, dtype=torch.float16, device="meta"))
    specs, spec = specialize(kernel, args, "sm_90")
    result = lower_specialized(kernel, specs, spec)
    first, second = [i.output for i in instructions(result.func.body) if isinstance(i, ir.AllocateShared)]
    start = result.plan.offset_of(first)
    end = start + first.dtype.storage_bytes(first.layout.cosize)
    other = result.plan.offset_of(second)
    assert other >= end or other + second.dtype.storage_bytes(second.layout.cosize) <= start


def test_errors_name_the_problem():
    class Bad(tilus.Script):
        def __call__(self, x_ptr: ~float32):
            self.attrs.blocks = 1
            self.attrs.warps = 1
            g = self.global_view(x_ptr, dtype=float32, shape=[32])
            s = self.shared_tensor(dtype=float16, shape=[32])
            self.copy_async(src=g, dst=s, offsets=[0])

    with pytest.raises(tilus.ScriptError, match="differ in dtype"):
        Bad().lower(torch.empty(32, device="meta"), target="sm_80")

    class BadWait(tilus.Script):
        def __call__(self):
            self.attrs.blocks = 1
            self.attrs.warps = 1
            self.copy_async_wait_group(-1)

    with pytest.raises(tilus.ScriptError, match="non-negative compile-time int"):
        BadWait().lower(target="sm_80")

    class BadIndex(tilus.Script):
        def __call__(self):
            self.attrs.blocks = 1
            self.attrs.warps = 1
            s = self.shared_tensor(dtype=float16, shape=[2, 16, 16])
            s[2]

    with pytest.raises(tilus.ScriptError, match="index out of range"):
        BadIndex().lower(target="sm_80")


@pytest.mark.gpu
@pytest.mark.parametrize("m, n", [(64, 64), (20, 40), (33, 63)])
def test_copy_async_round_trip_zero_fills_outside(m, n):
    x = torch.randn(m, n, dtype=torch.float16, device="cuda")
    out = torch.full((32, 64), float("nan"), dtype=torch.float16, device="cuda")
    Stage(32, 32)(m, n, x, out)
    expected = torch.zeros(32, 64, dtype=torch.float16, device="cuda")
    expected[:min(m, 32), :min(n, 64)] = x[:32, :64]
    torch.testing.assert_close(out, expected)
