"""Hopper's wgmma: the accumulator layout against PTX's table, operand descriptors, what the kernel
compiles to (CPU, sm_90a PTX), the errors, and ``MatmulWgmma``'s results on the GPU."""
import re

import pytest
import torch

from tilus_tvm.errors import CompileError, ScriptError
from tilus_tvm.instructions.wgmma import accumulator_layout
from tilus_tvm.intrin import wgmma as ptx
from tilus_tvm.ir import inst as ir
from tilus_tvm.ir.stmt import instructions
from tilus_tvm.layout.swizzle import Swizzle
from tilus_tvm.pipeline import lower_specialized, specialize
from tilus_tvm.schedules.matmul_sm90 import MatmulWgmma
import tilus_tvm as tilus
from tilus_tvm import float16, float32, int32


def wgmma_fragment(thread: int, slot: int) -> tuple[int, int]:
    """The [64 * groups, n] element register ``slot`` of ``thread`` holds (PTX ISA, "Matrix fragments for
    wgmma.mma_async .m64nNk16", accumulator D): rows by warp, lane / 4 and the slot's second bit;
    columns by 8-wide block, lane % 4 and the slot's first bit."""
    warp, lane = divmod(thread, 32)
    row = 16 * warp + lane // 4 + 8 * ((slot // 2) % 2)
    col = 8 * (slot // 4) + 2 * (lane % 4) + slot % 2
    return row, col


@pytest.mark.parametrize("m, n", [(64, 8), (64, 256), (128, 128), (256, 64)])
def test_accumulator_layout_is_ptx_fragment_table(m, n):
    layout = accumulator_layout(m, n)
    assert layout.num_threads == 2 * m and layout.local_size == n // 2
    for thread in range(layout.num_threads):
        for slot in range(layout.local_size):
            assert layout.logical(thread, slot) == wgmma_fragment(thread, slot)


def test_descriptor_bits():
    for pitch, mode in ((128, 1), (64, 2), (32, 3)):
        bits = ptx.descriptor_bits(pitch)
        assert bits >> 62 == mode
        assert (bits >> 32) & 0x3FFF == 8 * pitch // 16  # stride byte offset: 8 rows
        assert (bits >> 16) & 0x3FFF == 1 and bits & 0xFFFF == 0  # no address yet
    with pytest.raises(Exception, match="32, 64 or 128 bytes"):
        ptx.descriptor_bits(256)


def meta(*shape):
    return torch.empty(*shape, dtype=torch.float16, device="meta")


def lowered(kernel, m=512, n=512, k=512, target="sm_90a"):
    specs, spec = specialize(kernel, (m, n, k, meta(m, k), meta(n, k), meta(m, n)), target)
    return lower_specialized(kernel, specs, spec)


@pytest.mark.parametrize("block_k, swizzle", [(64, Swizzle(3, 3, 3)), (32, Swizzle(2, 3, 3)), (16, Swizzle(1, 3, 3))])
def test_operands_get_the_swizzle_wgmma_reads_and_start_on_its_period(block_k, swizzle):
    result = lowered(MatmulWgmma(128, 128, block_k, 4))
    shared = [inst.output for inst in instructions(result.func.body) if isinstance(inst, ir.AllocateShared)]
    sa, sb = shared[:2]
    for tensor in (sa, sb):
        assert tensor.layout.swizzle == swizzle and tensor.layout.strides[-2:] == (block_k, 1)
        assert result.plan.offset_of(tensor) % (16 * block_k) == 0  # 8 rows of block_k 16-bit elements


def test_ptx_has_wgmma_fences_and_cp_async():
    z = torch.zeros(256, 256, dtype=torch.float16)
    code = MatmulWgmma(128, 256, 64, 4, tma=False).compile(256, 256, 256, z, z, z, target="sm_90a").ptx
    assert code.count("wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16") >= 4
    for instruction in ("wgmma.fence.sync.aligned", "wgmma.commit_group.sync.aligned",
                        "wgmma.wait_group.sync.aligned 1", "wgmma.wait_group.sync.aligned 0",
                        "fence.proxy.async.shared::cta", "cp.async.cg.shared.global"):
        assert instruction in code, instruction


def test_bfloat16_and_narrow_tiles_compile():
    z = torch.zeros(128, 128, dtype=torch.bfloat16)
    code = MatmulWgmma(64, 64, 32, 3, dtype="bfloat16").compile(128, 128, 128, z, z, z, target="sm_90a").ptx
    assert "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16" in code


def test_needs_sm_90a():
    with pytest.raises(CompileError, match="sm_90a, not sm_90"):
        lowered(MatmulWgmma(), target="sm_90")
    with pytest.raises(CompileError, match="no implementation for sm_80"):
        lowered(MatmulWgmma(), target="sm_80")


class WgmmaProbe(tilus.Script):
    """One wgmma on [m, 16] x [16, n] tiles, for the errors."""

    def __init__(self, m=64, n=64, warps=4, b_transposed=True, a_layout=None):
        super().__init__()
        self.m, self.n, self.warps, self.b_transposed, self.a_layout = m, n, warps, b_transposed, a_layout

    def __call__(self, out: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = self.warps
        sa = self.shared_tensor(dtype=float16, shape=[self.m, 16], layout=self.a_layout)
        if self.b_transposed:
            sb = self.shared_tensor(dtype=float16, shape=[self.n, 16]).transpose()
        else:
            sb = self.shared_tensor(dtype=float16, shape=[16, self.n])
        acc = self.register_tensor(dtype=float32, shape=[self.m, self.n], init=0.0)
        self.fence_proxy_async()
        self.sync()
        self.wgmma_fence()
        self.wgmma(sa, sb, acc)
        self.wgmma_commit_group()
        self.wgmma_wait_group(0)
        g = self.global_view(out, dtype=float32, shape=[self.m, self.n])
        self.store_global(g, acc, offsets=[0, 0])


def probe_lower(kernel):
    return kernel.lower(torch.empty(kernel.m, kernel.n, dtype=torch.float32), target="sm_90a")


def test_probe_compiles():
    probe_lower(WgmmaProbe())


@pytest.mark.parametrize("kwargs, message", [
    (dict(warps=8), r"8 warps make 2 warpgroups of 64 rows \(m must be 128\); use attrs.warps = 4"),
    (dict(b_transposed=False), "not K-major"),
    (dict(m=32, warps=2), "m=32 must be a multiple of 64"),
    (dict(n=264), "n=264 must be a multiple of 8 from 8 to 256"),
    (dict(a_layout=tilus.layout.shared_row_major(64, 16)), "wgmma needs K-major rows"),
])
def test_errors_name_the_problem(kwargs, message):
    with pytest.raises((CompileError, ScriptError), match=message):
        probe_lower(WgmmaProbe(**kwargs))


def test_configuration_errors():
    for kwargs, message in ((dict(block_m=96), "block_m=96"), (dict(block_k=128), "block_k=128"),
                            (dict(stages=2), "at least 3"), (dict(dtype="float32"), "float16 or bfloat16")):
        with pytest.raises(ScriptError, match=message):
            MatmulWgmma(**kwargs)


def test_row_major_b_is_read_mn_major():
    z = torch.zeros(512, 512, dtype=torch.float16)
    code = MatmulWgmma(128, 256, 64, 4, b_layout="row").compile(512, 512, 512, z, z, z, target="sm_90a").ptx
    wgmmas = re.findall(r"wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 [^;]*;", code)
    assert wgmmas and all(w.endswith("p, 1, 1, 0, 1;") for w in wgmmas)  # transpose-b: B is MN-major
    with pytest.raises(ScriptError, match="multiple of 64 with b_layout='row'"):
        MatmulWgmma(128, 96, 64, 4, b_layout="row")


@pytest.mark.gpu
@pytest.mark.parametrize("b_layout", ["col", "row"])
@pytest.mark.parametrize("config", [(128, 256, 64, 4), (128, 128, 64, 5), (64, 256, 32, 5), (256, 128, 64, 4)])
@pytest.mark.parametrize("m, n, k", [(512, 1024, 2048), (300, 200, 136), (1, 264, 72), (129, 512, 4096)])
def test_results_match_torch(config, m, n, k, b_layout):
    torch.manual_seed(0)
    a = torch.randn(m, k, dtype=torch.float16, device="cuda")
    w = torch.randn(n, k, dtype=torch.float16, device="cuda")
    c = torch.full((m, n), float("nan"), dtype=torch.float16, device="cuda")
    MatmulWgmma(*config, b_layout=b_layout)(m, n, k, a, w if b_layout == "col" else w.t().contiguous(), c)
    torch.testing.assert_close(c.float(), a.float() @ w.float().t(), rtol=2e-3, atol=2e-3 * k ** 0.5)


@pytest.mark.gpu
def test_bfloat16_results():
    torch.manual_seed(1)
    a = torch.randn(256, 512, dtype=torch.bfloat16, device="cuda")
    w = torch.randn(384, 512, dtype=torch.bfloat16, device="cuda")
    c = torch.empty(256, 384, dtype=torch.bfloat16, device="cuda")
    MatmulWgmma(128, 128, 64, 4, dtype="bfloat16")(256, 384, 512, a, w, c)
    torch.testing.assert_close(c.float(), a.float() @ w.float().t(), rtol=1e-2, atol=0.3)


class RegisterA(tilus.Script):
    """acc = a @ b.T with a loaded into registers (wgmma's register-A form) and b [n, k] in shared memory."""

    def __init__(self, m, n, k, warps):
        super().__init__()
        self.m, self.n, self.k, self.warps = m, n, k, warps

    def __call__(self, a_ptr: ~float16, b_ptr: ~float16, c_ptr: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = self.warps
        ga = self.global_view(a_ptr, dtype=float16, shape=[self.m, self.k])
        gb = self.global_view(b_ptr, dtype=float16, shape=[self.n, self.k])
        gc = self.global_view(c_ptr, dtype=float32, shape=[self.m, self.n])
        sb = self.shared_tensor(dtype=float16, shape=[self.n, self.k])
        self.copy_async(src=gb, dst=sb, offsets=[0, 0])
        self.copy_async_wait_all()
        self.fence_proxy_async()
        self.sync()
        a = self.load_global(ga, offsets=[0, 0], shape=[self.m, self.k])
        acc = self.register_tensor(dtype=float32, shape=[self.m, self.n], init=0.0)
        self.wgmma_fence()
        self.wgmma(a, sb.transpose(), acc)
        self.wgmma_commit_group()
        self.wgmma_wait_group(0)
        self.store_global(gc, acc, offsets=[0, 0])


REGISTER_A_SHAPES = [(128, 64, 32, 4), (128, 128, 64, 8), (64, 256, 16, 4), (256, 32, 64, 8)]


@pytest.mark.parametrize("m, n, k, warps", REGISTER_A_SHAPES)
def test_register_a_compiles_to_the_register_form(m, n, k, warps):
    z = torch.zeros(256, 256, dtype=torch.float16)
    code = RegisterA(m, n, k, warps).compile(z, z, z.float(), target="sm_90a").ptx
    forms = re.findall(rf"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.f16.f16 \{{[^}}]*\}}, \{{", code)
    assert len(forms) == m // (16 * warps) * k // 16  # one a warpgroup issues per atom row and k step


@pytest.mark.gpu
@pytest.mark.parametrize("m, n, k, warps", REGISTER_A_SHAPES)
def test_register_a_results(m, n, k, warps):
    torch.manual_seed(m + n + k)
    a = torch.randn(m, k, dtype=torch.float16, device="cuda")
    b = torch.randn(n, k, dtype=torch.float16, device="cuda")
    c = torch.full((m, n), float("nan"), device="cuda")
    RegisterA(m, n, k, warps)(a, b, c)
    torch.testing.assert_close(c, a.float() @ b.float().t(), rtol=1e-3, atol=1e-3 * k)


def test_exports_sm_90a_machine_code_without_a_gpu(tmp_path):
    """A wgmma kernel exported on this GPU-less machine: an nvcc fatbin for sm_90a, no CUDA source."""
    from tests.runtime.test_export import cuda_payloads
    from tilus_tvm.runtime.export import fatbin_entries

    z = torch.zeros(256, 256, dtype=torch.float16)
    path = MatmulWgmma(128, 128, 64, 4).compile(256, 256, 256, z, z, z, target="sm_90a").export(str(tmp_path / "w.so"))
    data = open(path, "rb").read()
    assert b"__global__" not in data and b"wgmma.mma_async" not in data  # compiled, not source or PTX
    (payload,) = cuda_payloads(path)
    assert payload.fmt == "fatbin" and [kind for kind, _ in fatbin_entries(payload.code)] == ["cubin"]


class Pinned(tilus.Script):
    """One wgmma whose wait pins ``pin``: "acc", "other" (a float32 tensor no wgmma writes) or "int"."""

    def __init__(self, pin):
        super().__init__()
        self.pin = pin

    def __call__(self, a_ptr: ~float16, c_ptr: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        ga = self.global_view(a_ptr, dtype=float16, shape=[64, 16])
        gc = self.global_view(c_ptr, dtype=float32, shape=[64, 64])
        sa = self.shared_tensor(dtype=float16, shape=[64, 16])
        self.copy_async(src=ga, dst=sa, offsets=[0, 0])
        self.copy_async_wait_all()
        self.fence_proxy_async()
        self.sync()
        acc = self.register_tensor(dtype=float32, shape=[64, 64], init=0.0)
        other = self.register_tensor(dtype=float32, shape=[64, 64], init=1.0)
        self.wgmma_fence(pin=[acc])
        self.wgmma(sa, sa[0:64, 0:16].transpose(), acc)
        self.wgmma_commit_group()
        self.wgmma_wait_group(0, pin={"acc": [acc], "other": [other], "int": [3]}[self.pin])
        self.store_global(gc, acc + other, offsets=[0, 0])


def test_wgmma_pins_only_what_it_is_told():
    z = torch.zeros(64, 64, dtype=torch.float16)
    code = Pinned("acc").compile(z, z.float(), target="sm_90a").cuda_source
    assert code.count("tilus_wgmma_fence_operand_32(") == 3  # its definition, the fence's pin, the wait's pin
    with pytest.raises(CompileError, match="pin names .* which no wgmma of this kernel accumulates into"):
        Pinned("other").compile(z, z.float(), target="sm_90a")
    with pytest.raises(ScriptError, match="pin takes float32 register tensors"):
        Pinned("int").compile(z, z.float(), target="sm_90a")
