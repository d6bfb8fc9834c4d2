"""Sub-views with a 64-bit base (``self.global_subview``): lowering on the CPU (the base offset in int64
arithmetic, the PTX's 64-bit multiply), the launch checks (a tensor reached only through sub-views may
exceed int32 indexing, every other tensor may not), errors, and values on the GPU."""
import pytest
import torch

import tilus_tvm as tilus
from tilus_tvm import float8_e4m3, float16, float32, int32
from tilus_tvm.errors import CompileError, LaunchError, ScriptError
from tilus_tvm.lang import arguments
from tilus_tvm.runtime import launcher
from tests.helpers import private_cache  # noqa: F401 - autouse: a cache directory per test

BIG = (2**17, 2**15, 64)  # 2**38 elements: on the meta device, nothing is allocated


class RowSums(tilus.Script):
    """``out[b] = sum_r x[b, r, :]`` for ``b < batch``, read through the sub-view ``x[b]``; one block
    more than ``batch``: its leading index is out of range, so its loads are masked (out[batch] = 0)."""

    def __call__(self, batch: int32, rows: int32, x_ptr: ~float16, out_ptr: ~float32):
        self.attrs.blocks = [batch + 1]
        self.attrs.warps = 2
        gx = self.global_view(x_ptr, dtype=float16, shape=[batch, rows, 64])
        go = self.global_view(out_ptr, dtype=float32, shape=[batch + 1, 64])
        x_row = self.global_subview(gx, [self.blockIdx.x])
        acc = self.register_tensor(dtype=float32, shape=[1, 64], init=0.0)
        for r in range(self.utils.ceil_div(rows, 16)):
            tile = self.load_global(x_row, offsets=[r * 16, 0], shape=[16, 64])
            acc = acc + self.sum(tile.to(float32), dim=0, keepdim=True)
        self.store_global(go, acc, offsets=[self.blockIdx.x, 0])


class DirectRowSums(tilus.Script):
    """RowSums through ``x`` itself (int32 offsets from the pointer)."""

    def __call__(self, batch: int32, rows: int32, x_ptr: ~float16, out_ptr: ~float32):
        self.attrs.blocks = [batch + 1]
        self.attrs.warps = 2
        gx = self.global_view(x_ptr, dtype=float16, shape=[batch, rows, 64])
        go = self.global_view(out_ptr, dtype=float32, shape=[batch + 1, 64])
        acc = self.register_tensor(dtype=float32, shape=[1, 64], init=0.0)
        for r in range(self.utils.ceil_div(rows, 16)):
            tile = self.load_global(gx, offsets=[self.blockIdx.x, r * 16, 0], shape=[16, 64])
            acc = acc + self.sum(tile.to(float32), dim=0, keepdim=True)
        self.store_global(go, acc, offsets=[self.blockIdx.x, 0])


class MixedRowSums(tilus.Script):
    """A sub-view of x and one direct access to x: x is indexed with int32 from its pointer."""

    def __call__(self, batch: int32, rows: int32, x_ptr: ~float16, out_ptr: ~float32):
        self.attrs.blocks = [batch]
        self.attrs.warps = 2
        gx = self.global_view(x_ptr, dtype=float16, shape=[batch, rows, 64])
        go = self.global_view(out_ptr, dtype=float32, shape=[batch + 1, 64])
        first = self.load_global(self.global_subview(gx, [self.blockIdx.x]), offsets=[0, 0], shape=[1, 64])
        last = self.load_global(gx, offsets=[self.blockIdx.x, rows - 1, 0], shape=[1, 64])
        self.store_global(go, first.to(float32) + last.to(float32), offsets=[self.blockIdx.x, 0])


def big_args(rows=BIG[1]):
    x = torch.empty(BIG[0], rows, BIG[2], dtype=torch.float16, device="meta")
    out = torch.empty(BIG[0] + 1, 64, dtype=torch.float32, device="meta")
    return (BIG[0], rows, x, out)


def test_subview_base_is_computed_in_64_bits():
    kernel = RowSums()
    program = str(kernel.tile_program(*big_args(), target="sm_90"))
    assert "global_subview(parent=%g1, indices=(blockIdx.x,))" in program
    compiled = kernel.compile(*big_args(), target="sm_90")
    source = compiled.cuda_source
    assert "half* g3_base = (half*)(&(x_ptr" in source and "(int64_t)((int)blockIdx.x)" in source
    ptx = compiled.ptx
    assert "cvt.s64.s32" in ptx and "mul.lo.s64" in ptx  # bh widened, multiplied by the row pitch in 64 bits
    assert "mul.lo.s64" not in DirectRowSums().compile(4, 32, torch.empty(4, 32, 64, dtype=torch.float16),
                                                       torch.empty(5, 64), target="sm_90").ptx


def test_a_tensor_reached_only_through_subviews_checks_their_span():
    compiled = RowSums().compile(*big_args(), target="sm_90")
    x_param = next(p for p in compiled.abi.params if p.name == "x_ptr")
    out_param = next(p for p in compiled.abi.params if p.name == "out_ptr")
    assert x_param.index_span == "(rows * 64)" and x_param.shape == ("batch", "rows", "64")
    assert out_param.index_span is None
    source = launcher.launcher_source(compiled.specs, compiled.abi.params, compiled.grid_source)
    assert "if a1 * 64 > 2147483647 or t1.numel() > 2147483647: raise Refused" in source
    assert "t0.numel()" not in source
    bound = arguments.bind(compiled.specs, big_args(), "RowSums", require_cuda=False)
    arguments.check_index_range("RowSums", compiled.specs, compiled.abi.params, bound)  # 2**38 elements: fine
    too_long = big_args(rows=2**25)  # one sub-view spans 2**31 elements
    bound = arguments.bind(compiled.specs, too_long, "RowSums", require_cuda=False)
    with pytest.raises(LaunchError, match=r"x_ptr is indexed through sub-views spanning 2147483648 elements "
                                          r"\(\(rows \* 64\)\); indices inside a sub-view are int32"):
        compiled.launch(bound)  # refused before anything reaches a GPU


@pytest.mark.parametrize("script", [DirectRowSums, MixedRowSums])
def test_every_other_tensor_keeps_the_int32_check(script):
    compiled = script().compile(*big_args(), target="sm_90")
    assert all(p.index_span is None for p in compiled.abi.params)
    source = launcher.launcher_source(compiled.specs, compiled.abi.params, compiled.grid_source)
    assert "t0.numel() > 2147483647" in source
    bound = arguments.bind(compiled.specs, big_args(), script.__name__, require_cuda=False)
    with pytest.raises(LaunchError, match=r"argument x_ptr spans 274877906944 elements; the kernel indexes it with "
                                          r"int32 \(at most 2147483647\)\. A kernel reaches larger tensors through "
                                          r"sub-views with 64-bit bases \(self.global_subview\)"):
        compiled.launch(bound)


def test_subview_abi_round_trips_through_json():
    from tilus_tvm.passes.kernel_abi import AbiParam, KernelABI

    abi = RowSums().compile(*big_args(), target="sm_90").abi
    assert KernelABI.from_json(abi.to_json()) == abi
    old = ["x_ptr", "tensor", "float16", None, True, False, False]  # written before index_span existed
    assert AbiParam.from_json(old).index_span is None


class SubviewOf(tilus.Script):
    """One misuse of global_subview per ``case``."""

    def __init__(self, case: str):
        super().__init__()
        self.case = case

    def __call__(self, n: int32, scale: float32, x_ptr: ~float16, f8_ptr: ~float8_e4m3, lens_ptr: ~int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        gx = self.global_view(x_ptr, dtype=float16, shape=[n, 4, 64])
        if self.case == "nested":
            self.global_subview(self.global_subview(gx, [0]), [1])
        elif self.case == "every index":
            self.global_subview(gx, [0, 1, 2])
        elif self.case == "float index":
            self.global_subview(gx, [scale])
        elif self.case == "out of range":
            self.global_subview(self.global_view(x_ptr, dtype=float16, shape=[3, 64]), [3])
        elif self.case == "packed":
            self.global_subview(self.global_view(f8_ptr, dtype=float8_e4m3, shape=[n, 64]), [0])
        elif self.case == "pointer":
            self.global_subview(x_ptr, [0])
        elif self.case == "span from memory":  # the launch cannot compute this sub-view's span
            rows = self.load_scalar(self.global_view(lens_ptr, dtype=int32, shape=[1]), [0])
            view = self.global_subview(self.global_view(x_ptr, dtype=float16, shape=[n, rows, 64]), [0])
            self.store_global(view, self.register_tensor(dtype=float16, shape=[1, 64], init=0.0), offsets=[0, 0])


@pytest.mark.parametrize("case,error,match", [
    ("nested", ScriptError, r"g\d+: float16\[4, 64\] \(global sub-view g\d+\[0\] of x_ptr\) is a sub-view already; "
                            r"index g\d+ with all the leading indices at once"),
    ("every index", ScriptError, r"indices \[0, 1, 2\] must be 1 to 2 leading indices"),
    ("float index", ScriptError, r"index scale of dimension 0 must be an int or an integer scalar expression"),
    ("out of range", ScriptError, r"index 3 is out of range for dimension 0"),
    ("packed", ScriptError, r"holds packed float8_e4m3 elements; sub-views support types of 8 bits or more"),
    ("pointer", ScriptError, r"tensor must be a global view \(self.global_view\), got x_ptr: ~float16"),
    ("span from memory", CompileError, r"sub-view g\d+ of x_ptr has shape \[\w+, 64\] and strides \[64, 1\], which "
                                       r"depend on \w+; the launch checks that a sub-view's span fits int32 indexing"),
])
def test_subview_misuse_is_named(case, error, match):
    args = (4, 1.0, torch.empty(4, 4, 64, dtype=torch.float16), torch.empty(4, 64, dtype=torch.float8_e4m3fn),
            torch.empty(1, dtype=torch.int32))
    with pytest.raises(error, match=match):
        SubviewOf(case).compile(*args, target="sm_90")


@pytest.mark.gpu
def test_subview_values_and_masks():
    x = torch.randn(5, 37, 64, dtype=torch.float16, device="cuda")
    out = torch.full((6, 64), float("nan"), device="cuda")
    RowSums()(5, 37, x, out)
    torch.testing.assert_close(out[:5], x.float().sum(dim=1), atol=1e-2, rtol=1e-3)
    assert out[5].abs().max() == 0  # the leading index 5 is outside x: every load was masked
