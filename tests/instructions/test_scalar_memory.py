"""load_scalar and assign: a run-time scalar read from global memory drives a loop; list elements
are overwritten in place."""
import pytest
import torch

import tilus_tvm as tilus
from tilus_tvm import float32, int32
from tilus_tvm.errors import ScriptError


class PrefixSums(tilus.Script):
    """out[b, :] = sum of the first lengths[b] rows of x[b] (two accumulators in a list)."""

    def __call__(self, batch: int32, rows: int32, lengths_ptr: ~int32, x_ptr: ~float32, out_ptr: ~float32):
        self.attrs.blocks = batch
        self.attrs.warps = 1
        b = self.blockIdx.x
        gl = self.global_view(lengths_ptr, dtype=int32, shape=[batch])
        gx = self.global_view(x_ptr, dtype=float32, shape=[batch, rows, 64])
        go = self.global_view(out_ptr, dtype=float32, shape=[batch, 64])
        n = self.load_scalar(gl, [b])
        acc = []
        for half in list(range(2)):
            acc.append(self.register_tensor(dtype=float32, shape=[32], init=0.0))
        for i in range(n):
            for h in list(range(2)):
                self.assign(acc[h], acc[h] + self.load_global(gx, offsets=[b, i, h * 32], shape=[32]))
        for h2 in list(range(2)):
            self.store_global(go, acc[h2], offsets=[b, h2 * 32])


class BadScalar(tilus.Script):
    def __init__(self, which):
        super().__init__()
        self.which = which

    def __call__(self, x_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        gx = self.global_view(x_ptr, dtype=float32, shape=[4, 4])
        t = self.register_tensor(dtype=float32, shape=[4], init=0.0)
        if self.which == "indices":
            self.load_scalar(gx, [0])
        elif self.which == "src":
            self.load_scalar(t, [0])
        else:
            self.assign(t, self.register_tensor(dtype=float32, shape=[8], init=0.0))


def test_load_scalar_compiles_for_sm_90():
    args = (3, 10, torch.empty(3, dtype=torch.int32), torch.empty(3, 10, 64), torch.empty(3, 64))
    program = str(PrefixSums().tile_program(*args, target="sm_90"))
    assert "load_global_scalar(buffer=" in program and program.count("assign(") >= 2
    source = PrefixSums().compile(*args, target="sm_90").cuda_source
    assert "lengths_ptr_ptr[((int)blockIdx.x)]" in source


@pytest.mark.parametrize("which,match", [("indices", r"offsets \[0\] must list one offset per dimension"),
                                         ("src", "src must be a global tensor"),
                                         ("assign", "must be a register tensor of dst's shape")])
def test_errors(which, match):
    with pytest.raises(ScriptError, match=match):
        BadScalar(which).tile_program(torch.empty(4, 4), target="sm_90")


@pytest.mark.gpu
def test_load_scalar_values():
    lengths = torch.tensor([0, 3, 10], dtype=torch.int32, device="cuda")
    x = torch.randn(3, 10, 64, device="cuda")
    out = torch.full((3, 64), float("nan"), device="cuda")
    PrefixSums()(3, 10, lengths, x, out)
    expected = torch.stack([x[b, :int(lengths[b])].sum(0) for b in range(3)])
    torch.testing.assert_close(out, expected)
