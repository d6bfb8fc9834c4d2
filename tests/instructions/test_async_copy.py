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


class OwnRing(tilus.Script):
    """out = x ([rows, 3 * cols]) through a 3-deep ring of shared tiles that each thread fills for itself
    (``copy_async(layout=)``) and reads back with the same layout: no barrier anywhere."""

    def __init__(self, layout):
        super().__init__()
        self.layout = layout

    def __call__(self, m: int32, x_ptr: ~float16, out_ptr: ~float16):
        rows, cols = self.layout.shape
        self.attrs.blocks = 1
        self.attrs.warps = 4
        gx = self.global_view(x_ptr, dtype=float16, shape=[m, 3 * cols])
        go = self.global_view(out_ptr, dtype=float16, shape=[rows, 3 * cols])
        ring = self.shared_tensor(dtype=float16, shape=[3, rows, cols])
        for j in range(2):
            self.copy_async(src=gx, dst=ring[j], offsets=[0, j * cols], layout=self.layout)
            self.copy_async_commit_group()
        for i in range(3):
            self.copy_async(src=gx, dst=ring[(i + 2) % 3], offsets=[0, (i + 2) * cols], layout=self.layout)
            self.copy_async_commit_group()
            self.copy_async_wait_group(2)  # this thread's copies of tile i have landed
            tile = self.load_shared(ring[i % 3], layout=self.layout)
            self.store_global(go, tile, offsets=[0, i * cols])


def own_ring_layouts():
    from tilus_tvm.layout import register as reg

    return {"16-byte": reg.compose(reg.spatial(16, 8), reg.local(1, 8)),  # a thread: 8 consecutive halves
            "8-byte": reg.compose(reg.spatial(8, 16), reg.local(2, 4))}  # 2 rows of 4 halves


@pytest.mark.parametrize("name", ["16-byte", "8-byte"])
def test_copy_async_by_layout_needs_no_barrier(name):
    layout = own_ring_layouts()[name]
    x = torch.zeros(16, 192, dtype=torch.float16)
    code = cuda_of(OwnRing(layout), 16, x, torch.zeros(16, 192, dtype=torch.float16))
    size = {"16-byte": "cg_src_size_async_cg_shared_global_16", "8-byte": "ca_src_size_async_ca_shared_global_8"}[name]
    assert size in code and "__syncthreads" not in code
    assert "cp.async.wait_group 2;" in code


def test_copy_async_layout_must_fit_the_tile():
    class Mismatch(tilus.Script):
        def __call__(self, x_ptr: ~float16):
            self.attrs.blocks = 1
            self.attrs.warps = 4
            gx = self.global_view(x_ptr, dtype=float16, shape=[16, 64])
            s = self.shared_tensor(dtype=float16, shape=[16, 32])
            self.copy_async(src=gx, dst=s, offsets=[0, 0], layout=own_ring_layouts()["16-byte"])

    with pytest.raises(tilus.ScriptError, match=r"copy_async: layout .* has shape \[16, 64\], the tensor has shape "
                                                 r"\[16, 32\]"):
        Mismatch().lower(torch.empty(16, 64, dtype=torch.float16, device="meta"), target="sm_80")


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["16-byte", "8-byte"])
@pytest.mark.parametrize("m", [16, 11])
def test_copy_async_by_layout_round_trip(name, m):
    """Each thread reads back what it copied itself; rows of x beyond m arrive as zeros."""
    x = torch.randn(m, 192, dtype=torch.float16, device="cuda")
    out = torch.full((16, 192), float("nan"), dtype=torch.float16, device="cuda")
    OwnRing(own_ring_layouts()[name])(m, x, out)
    expected = torch.zeros(16, 192, dtype=torch.float16, device="cuda")
    expected[:m] = x
    torch.testing.assert_close(out, expected)
