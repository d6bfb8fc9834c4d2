"""TMA (tma_load, mbarrier_init, mbarrier_wait): what a kernel compiles to on the CPU (tensor maps as
``__grid_constant__`` parameters encoded on the host, ``cp.async.bulk.tensor`` in the PTX), the errors,
and ``MatmulWgmma(tma=True)`` against torch on the GPU."""
import pytest
import torch

import tilus_tvm as tilus
from tilus_tvm import float16, float32, int32, uint64
from tilus_tvm.errors import CompileError, ScriptError
from tilus_tvm.instructions.tma import swizzle_for, tma_layout
from tilus_tvm.ir import inst as ir
from tilus_tvm.ir.stmt import instructions
from tilus_tvm.ir.tensor import SharedTensor
from tilus_tvm.layout.swizzle import Swizzle
from tilus_tvm.pipeline import lower_specialized, specialize
from tilus_tvm.schedules.matmul_sm90 import MatmulWgmma


class TileCopy(tilus.Script):
    """out[m, n] = x[m, n] through shared memory, one [rows, cols] tile a block, loaded by TMA."""

    def __init__(self, rows: int = 64, cols: int = 64, layout=None, view: str = "whole"):
        super().__init__()
        self.rows, self.cols, self.layout, self.view = rows, cols, layout, view

    def __call__(self, m: int32, n: int, x_ptr: ~float16, out_ptr: ~float16):
        rows, cols = self.rows, self.cols
        self.attrs.blocks = [self.utils.ceil_div(m, rows), self.utils.ceil_div(n, cols)]
        self.attrs.warps = 4
        gx = self.global_view(x_ptr, dtype=float16, shape=[m, n])
        go = self.global_view(out_ptr, dtype=float16, shape=[m, n])
        tile = self.shared_tensor(dtype=float16, shape=[2, rows, cols], layout=self.layout)
        bars = self.shared_tensor(dtype=uint64, shape=[2])
        self.mbarrier_init(bars, arrivals=1)
        dst = tile[1] if self.view == "whole" else tile[1, :, 0:cols // 2]
        self.tma_load(src=gx, dst=dst, offsets=[self.blockIdx.x * rows, self.blockIdx.y * cols], barrier=bars[1])
        self.mbarrier_wait(bars[1], 0)
        values = self.load_shared(tile[1])
        self.store_global(go, values, offsets=[self.blockIdx.x * rows, self.blockIdx.y * cols])


class ReleasedRing(tilus.Script):
    """out[m, :cols] = the sum of x's column tiles, each tile through a ring of ``stages`` TMA stages that every
    thread releases with mbarrier_arrive and the issuing thread waits for (tma_load(after=)) before refilling."""

    def __init__(self, stages: int = 2, rows: int = 64, cols: int = 64):
        super().__init__()
        self.stages, self.rows, self.cols = stages, rows, cols

    def __call__(self, m: int32, tiles: int32, x_ptr: ~float16, out_ptr: ~float32):
        rows, cols, stages = self.rows, self.cols, self.stages
        self.attrs.blocks = [self.utils.ceil_div(m, rows)]
        self.attrs.warps = 4
        gx = self.global_view(x_ptr, dtype=float16, shape=[m, tiles * cols])
        go = self.global_view(out_ptr, dtype=float32, shape=[m, cols])
        ring = self.shared_tensor(dtype=float16, shape=[stages, rows, cols])
        full = self.shared_tensor(dtype=uint64, shape=[stages])
        free = self.shared_tensor(dtype=uint64, shape=[stages])
        self.mbarrier_init(full, arrivals=1)
        self.mbarrier_init(free, arrivals=self.attrs.warps * 32)
        m0 = self.blockIdx.x * rows
        total = self.register_tensor(dtype=float32, shape=[rows, cols], init=0.0)
        for j in range(stages - 1):
            if j < tiles:
                self.tma_load(src=gx, dst=ring[j], offsets=[m0, j * cols], barrier=full[j])
        for t in range(tiles):
            ahead = t + stages - 1
            if ahead < tiles:  # that stage's previous tile, t - 1, released by every thread
                self.tma_load(src=gx, dst=ring[ahead % stages], offsets=[m0, ahead * cols], barrier=full[ahead % stages],
                              after=(free[ahead % stages], (ahead // stages + 1) % 2))
            self.mbarrier_wait(full[t % stages], t // stages % 2)
            total = total + self.load_shared(ring[t % stages]).to(float32)
            self.mbarrier_arrive(free[t % stages])
        self.store_global(go, total, offsets=[m0, 0])


def meta(*shape):
    return torch.empty(*shape, dtype=torch.float16, device="meta")


def test_swizzle_is_tmas_and_wgmmas():
    assert swizzle_for(128, 16) == Swizzle(3, 3, 3) and swizzle_for(64, 16) == Swizzle(2, 3, 3)
    assert swizzle_for(32, 16) == Swizzle(1, 3, 3) and swizzle_for(48, 16) is None
    assert swizzle_for(128, 8) == Swizzle(3, 4, 3)  # bytes: 16-byte units of 16 elements
    root = SharedTensor(float16, (4, 128, 64), name="s")
    layout = tma_layout(root)
    assert layout.strides == (8192, 64, 1) and layout.swizzle == Swizzle(3, 3, 3)
    assert tma_layout(SharedTensor(float16, (64, 256), name="s")).swizzle is None  # rows past 128 bytes


def test_tile_copy_compiles_to_tensor_map_and_bulk_copy():
    kernel = TileCopy(64, 64)
    x = torch.zeros(100, 192, dtype=torch.float16)
    compiled = kernel.compile(100, 192, x, x, target="sm_90")
    source = compiled.cuda_source
    assert source.count("const __grid_constant__ CUtensorMap") == 2  # declaration and definition
    for ptx in ("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes",
                "mbarrier.init.shared.b64", "mbarrier.arrive.expect_tx.shared.b64", "mbarrier.try_wait.parity",
                "fence.mbarrier_init.release.cluster"):
        assert ptx in compiled.ptx, ptx
    assert "tensormap_encode_tiled" in compiled.tir_text  # encoded on the host, before the launch
    # the destination got TMA's 128-byte swizzle and starts on its 1024-byte period
    specs, spec = specialize(kernel, (100, 192, meta(100, 192), meta(100, 192)), "sm_90")
    lowered = lower_specialized(kernel, specs, spec)
    (tile, bars) = [inst.output for inst in instructions(lowered.func.body) if isinstance(inst, ir.AllocateShared)]
    assert tile.layout.swizzle == Swizzle(3, 3, 3) and lowered.plan.offset_of(tile) % 1024 == 0


def test_released_ring_lowers_to_arrive_and_a_guarded_wait():
    """mbarrier_arrive: one arrival by every thread; tma_load(after=): thread 0 alone waits for the release, then
    arrives expecting the bytes and issues the copy (no __syncthreads in the loop)."""
    x = torch.zeros(128, 64 * 5, dtype=torch.float16)
    compiled = ReleasedRing(3).compile(128, 5, x, torch.zeros(128, 64), target="sm_90")
    assert "mbarrier.arrive.shared.b64 _" in compiled.ptx
    body = compiled.cuda_source[compiled.cuda_source.rindex("__global__"):]
    first_wait = body.index("tvm_builtin_cuda_mbarrier_wait(")  # the release's: in thread 0's branch
    branch = body[:first_wait].rindex("if (((int)threadIdx.x) == 0) {")
    assert "}" not in body[branch:first_wait]
    loop = body[first_wait:]
    assert loop.index("arrive_expect_tx") < loop.index("}") < loop.index("mbarrier_arrive_nocount")
    assert "__syncthreads" not in loop


def test_matmul_tma_ptx():
    z = torch.zeros(512, 512, dtype=torch.float16)
    for b_layout, loads in (("col", 2), ("row", 1 + 256 // 64)):
        code = MatmulWgmma(128, 256, 64, 4, b_layout=b_layout, tma=True).compile(512, 512, 512, z, z, z,
                                                                                target="sm_90a").ptx
        assert "cp.async.bulk.tensor.2d" in code and "wgmma.mma_async.sync.aligned.m64n256k16" in code
        assert "cp.async.cg.shared.global" not in code  # no thread copies the tiles
        assert f"mbarrier.init.shared.b64 [%r{0}" not in code  # (the arrival count is an immediate)
        assert code.count("cp.async.bulk.tensor") >= loads


def test_matmul_takes_tma_when_the_operands_allow():
    """tma=None: TMA for 16-byte aligned operands with rows of a multiple of 16 bytes, else cp.async."""
    def ptx(m, n, k, a, b, **kwargs):
        c = torch.zeros(m, n, dtype=torch.float16)
        return MatmulWgmma(128, 128, 64, 4, **kwargs).compile(m, n, k, a, b, c, target="sm_90a").ptx

    z = torch.zeros(256, 256, dtype=torch.float16)
    assert "cp.async.bulk.tensor" in ptx(256, 256, 256, z, z)
    shifted = torch.zeros(256 * 256 + 8, dtype=torch.float16)[4:4 + 256 * 256].view(256, 256)  # 8-byte aligned
    assert "cp.async.bulk.tensor" not in ptx(256, 256, 256, shifted, z)
    odd = torch.zeros(256, 260, dtype=torch.float16)  # rows of 520 bytes
    assert "cp.async.bulk.tensor" not in ptx(256, 256, 260, odd, odd)
    with pytest.raises(CompileError, match="not known to be 16-byte aligned"):
        ptx(256, 256, 256, shifted, z, tma=True)
    with pytest.raises(ScriptError, match="tma must be None"):
        MatmulWgmma(tma="yes")


def test_errors():
    x = torch.zeros(100, 192, dtype=torch.float16)
    with pytest.raises(CompileError, match="TMA writes whole tiles"):
        TileCopy(64, 64, view="half").compile(100, 192, x, x, target="sm_90")
    from tilus_tvm.layout.shared import shared_row_major

    padded = shared_row_major(2, 64, 64).swizzled(Swizzle(2, 3, 4))
    with pytest.raises(CompileError, match="TMA swizzles rows"):
        TileCopy(64, 64, layout=padded).compile(100, 192, x, x, target="sm_90")
    with pytest.raises(CompileError, match="no implementation for sm_80"):
        TileCopy(64, 64).compile(100, 192, x, x, target="sm_80")
    odd = torch.zeros(100, 100, dtype=torch.float16)
    with pytest.raises(CompileError, match="multiples of 16 bytes"):
        TileCopy(64, 64).compile(100, 100, odd, odd, target="sm_90")
    with pytest.raises(CompileError, match="not known to be 16-byte aligned"):
        shifted = torch.zeros(100 * 192 + 1, dtype=torch.float16)[1:].view(100, 192)
        TileCopy(64, 64).compile(100, 192, shifted, x, target="sm_90")

    class Misused(tilus.Script):
        def __init__(self, case: str):
            super().__init__()
            self.case = case

        def __call__(self, x_ptr: ~float16):
            self.attrs.blocks = [1]
            self.attrs.warps = 4
            gx = self.global_view(x_ptr, dtype=float16, shape=[512, 64])
            bars = self.shared_tensor(dtype=uint64, shape=[1])
            self.mbarrier_init(bars, arrivals=0 if self.case == "arrivals" else 1)
            if self.case == "box":
                tile = self.shared_tensor(dtype=float16, shape=[512, 64])
                self.tma_load(src=gx, dst=tile, offsets=[0, 0], barrier=bars[0])
            elif self.case == "barrier":
                tile = self.shared_tensor(dtype=float16, shape=[64, 64])
                wrong = self.shared_tensor(dtype=int32, shape=[2])
                self.tma_load(src=gx, dst=tile, offsets=[0, 0], barrier=wrong[0])
            elif self.case == "phase":
                self.mbarrier_wait(bars[0], 2)
            elif self.case in ("after", "after_phase"):
                tile = self.shared_tensor(dtype=float16, shape=[64, 64])
                after = bars[0] if self.case == "after" else (bars[0], 3)
                self.tma_load(src=gx, dst=tile, offsets=[0, 0], barrier=bars[0], after=after)
            elif self.case == "arrive":
                self.mbarrier_arrive(bars)
            elif self.case == "per_warp":
                self.mbarrier_arrive(bars[0], per_warp=1)
            else:
                self.aligned(gx)

    for case, message in (("barrier", "barrier must be one element of a uint64 shared tensor"),
                          ("arrivals", "arrivals must be a compile-time int"),
                          ("box", "TMA copies boxes of at most 256 along each dimension"),
                          ("phase", "phase must be 0 or 1"),
                          ("after", r"after must be None or \(bars\[j\], phase\)"),
                          ("after_phase", "tma_load: phase must be 0 or 1"),
                          ("arrive", "mbarrier_arrive: barrier must be one element"),
                          ("per_warp", "mbarrier_arrive: per_warp must be True or False, got 1"),
                          ("aligned", "aligned: expected a pointer parameter")):
        with pytest.raises(ScriptError, match=message):
            Misused(case).compile(torch.zeros(512, 64, dtype=torch.float16), target="sm_90")


@pytest.mark.gpu
@pytest.mark.parametrize("m, n", [(64, 64), (100, 192), (130, 70 * 8)])
def test_tile_copy_matches(m, n):
    x = torch.randn(m, n, dtype=torch.float16, device="cuda")
    out = torch.full_like(x, float("nan"))
    TileCopy(64, 64)(m, n, x, out)
    torch.testing.assert_close(out, x, rtol=0, atol=0)


@pytest.mark.gpu
@pytest.mark.parametrize("stages, m, tiles", [(2, 64, 7), (3, 130, 9), (4, 100, 2)])
def test_released_ring_matches(stages, m, tiles):
    x = torch.randn(m, tiles * 64, dtype=torch.float16, device="cuda")
    out = torch.full((m, 64), float("nan"), device="cuda")
    ReleasedRing(stages)(m, tiles, x, out)
    torch.testing.assert_close(out, x.float().view(m, tiles, 64).sum(1), rtol=1e-5, atol=1e-3)


@pytest.mark.gpu
@pytest.mark.parametrize("config, b_layout, dtype", [
    ((128, 256, 64, 4), "col", torch.float16), ((128, 256, 64, 4), "row", torch.float16),
    ((128, 128, 64, 5), "col", torch.bfloat16), ((64, 128, 32, 4), "col", torch.float16),
    ((128, 128, 64, 3), "row", torch.bfloat16)])
@pytest.mark.parametrize("m, n, k", [(256, 256, 256), (300, 520, 264), (1000, 256, 1024), (128, 64, 8)])
def test_matmul_tma_matches_torch(config, b_layout, dtype, m, n, k):
    if b_layout == "row" and n % 8:
        pytest.skip("row-major b needs n a multiple of 8 (16-byte strides)")
    a = (torch.rand(m, k, device="cuda") - 0.5).to(dtype)
    w = (torch.rand(n, k, device="cuda") - 0.5).to(dtype)
    b = w if b_layout == "col" else w.t().contiguous()
    c = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
    MatmulWgmma(*config, dtype=dtype, b_layout=b_layout, tma=True)(m, n, k, a, b, c)
    torch.testing.assert_close(c, (a.float() @ w.float().t()).to(dtype), atol=2e-2, rtol=2e-2)


def test_gated_configurations():
    from tilus_tvm.schedules.matmul import kernel_for

    with pytest.raises(ScriptError, match="gated=True takes b_layout='col'"):
        MatmulWgmma(b_layout="row", gated=True)
    with pytest.raises(ScriptError, match="gated=True needs wgmma"):
        kernel_for(1024, torch.float16, "col", True, wgmma=False, gated=True)
    z = torch.zeros(256, 256, dtype=torch.float16)
    code = MatmulWgmma(128, 256, 64, 4, gated=True).compile(256, 128, 256, z, z, z[:, :128].contiguous(),
                                                             target="sm_90a").ptx
    assert code.count("cp.async.bulk.tensor.2d") >= 3 and "ex2.approx" in code  # a, gate rows, up rows; sigmoid


@pytest.mark.gpu
@pytest.mark.parametrize("tma", [None, False])
@pytest.mark.parametrize("m, n, k, dtype", [(256, 128, 256, torch.float16), (300, 200, 264, torch.float16),
                                            (1000, 344, 512, torch.bfloat16)])
def test_gated_matmul_matches_torch(tma, m, n, k, dtype):
    """gated=True: c = silu(a @ w[:n].T) * (a @ w[n:].T), w [2n, k] (a gate/up projection)."""
    a = (torch.rand(m, k, device="cuda") - 0.5).to(dtype)
    w = (torch.rand(2 * n, k, device="cuda") - 0.5).to(dtype)
    c = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
    MatmulWgmma(128, 256, 64, 4, dtype=dtype, tma=tma, gated=True)(m, n, k, a, w, c)
    product = a.float() @ w.float().t()
    gate, up = product[:, :n], product[:, n:]
    torch.testing.assert_close(c.float(), torch.nn.functional.silu(gate) * up, atol=3e-2, rtol=2e-2)


def test_tensor_map_extents_come_from_parameters():
    class InsideExtent(tilus.Script):
        def __call__(self, m: int32, x_ptr: ~float16):
            self.attrs.blocks = [1]
            self.attrs.warps = 4
            rows: int32 = m * self.blockIdx.x + 64
            gx = self.global_view(x_ptr, dtype=float16, shape=[rows, 64])
            tile = self.shared_tensor(dtype=float16, shape=[64, 64])
            bars = self.shared_tensor(dtype=uint64, shape=[1])
            self.mbarrier_init(bars, arrivals=1)
            self.tma_load(src=gx, dst=tile, offsets=[0, 0], barrier=bars[0])
            self.mbarrier_wait(bars[0], 0)

    x = torch.zeros(64, 64, dtype=torch.float16)
    with pytest.raises(CompileError, match="computed inside the kernel"):
        InsideExtent().compile(64, x, target="sm_90")


def test_wgmma_tile_fills_the_gpu():
    """matmul()'s choice on sm_90a: the largest MatmulWgmma tile whose grid fills half the SMs (132 here)."""
    from tilus_tvm.schedules.matmul import kernel_for, wgmma_tile

    assert wgmma_tile(64, 28672) is None  # too few rows for wgmma's 64-row warpgroups to pay
    assert wgmma_tile(128, 28672) == (128, 256, 64, 4)  # 112 blocks
    assert wgmma_tile(256, 11008) == (128, 256, 64, 4)  # 86 blocks
    assert wgmma_tile(256, 4096) == (64, 128, 64, 5)  # 32 and 64 blocks are too few, 128 are not
    assert wgmma_tile(128, 4096) is None  # 64 blocks at most: Matmul's table or split K
    assert wgmma_tile(512, 512) == (64, 128, 64, 5)  # from 257 rows always, the tile with the most blocks
    assert wgmma_tile(100) == (128, 256, 64, 4)  # n unknown: a wide output
    assert type(kernel_for(256, torch.float16, "col", True, wgmma=True, n=4096)).__name__ == "MatmulWgmma"
    assert type(kernel_for(128, torch.float16, "col", True, wgmma=True, n=4096)).__name__ == "Matmul"
