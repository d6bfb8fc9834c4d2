"""Element addresses (``t.item_ptr(i, j)``, ``t[i, j].item_ptr()``, ``~t[i, j]``) of global and shared
tensors, and ``register_tensor(init=...)`` with a value or a function of the indices: lowering on the
CPU, errors, and values on the GPU (addresses checked by their distance from the first element)."""
import pytest
import torch
import tvm
from tvm import tirx

import tilus_tvm as tilus
from tilus_tvm import float16, float32, int32, int64
from tilus_tvm.errors import ScriptError
from tilus_tvm.layout.shared import shared_row_major
from tilus_tvm.layout.swizzle import Swizzle
from tests.helpers import CaseScript
from tests.helpers import private_cache  # noqa: F401 - autouse: a cache directory per test


SWIZZLED = shared_row_major(64, 64).swizzled(Swizzle(3, 3, 3))


def global_address(pointer):
    return tirx.call_extern("uint64", "__cvta_generic_to_global", pointer)


def shared_address(pointer):
    return tirx.call_extern("uint64", "__cvta_generic_to_shared", pointer)


class Addresses(tilus.Script):
    """Byte distances from element (0, 0) of: x[i, j] (three spellings), a shared [64, 64] float16 tile's
    element (i, j) (two spellings) and element (i, j) of its sub-tile s[:, 16:32]."""

    def __call__(self, i: int32, j: int32, x_ptr: ~float32, out_ptr: ~int64):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        gx = self.global_view(x_ptr, dtype=float32, shape=[64, 32])
        go = self.global_view(out_ptr, dtype=int64, shape=[6])
        s = self.shared_tensor(dtype=float16, shape=[64, 64], layout=SWIZZLED)
        origin = global_address(gx.item_ptr(0, 0))
        shared_origin = shared_address(~s[0, 0])
        p = gx.item_ptr(i, j)
        q = gx[i, j].item_ptr()
        distances = [global_address(p) - origin, global_address(q) - origin, global_address(~gx[i, j]) - origin,
                     shared_address(s.item_ptr(i, j)) - shared_origin, shared_address(~s[i, j]) - shared_origin,
                     shared_address(s[:, 16:32].item_ptr(i, j)) - shared_origin]
        for k in list(range(6)):
            self.store_global(go, self.register_tensor(dtype=int64, shape=[1], init=distances[k]), offsets=[k])
        self.free_shared(s)


def expected_distances(i, j):
    return [(i * 32 + j) * 4] * 3 + [SWIZZLED.offset(i, j) * 2] * 2 + [SWIZZLED.offset(i, 16 + j) * 2]


def test_item_ptr_binds_a_typed_pointer():
    args = (3, 5, torch.zeros(64, 32), torch.zeros(6, dtype=torch.int64))
    program = str(Addresses().tile_program(*args, target="sm_80"))
    assert "tensor_item_ptr(var=g1_ptr" in program and "tensor=%s3[:, 16:32], indices=(i, j))" in program
    source = Addresses().compile(*args, target="sm_90").cuda_source
    assert "float* g1_ptr" in source and "half* s3_ptr" in source


class InitFunctions(tilus.Script):
    """register_tensor(init=...) with a function of the indices that uses a run-time loop variable and a
    scalar defined in the kernel, a constant function, and a scalar expression."""

    def __call__(self, base: int32, out_ptr: ~int32, f_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 2
        go = self.global_view(out_ptr, dtype=int32, shape=[3, 4, 16])
        gf = self.global_view(f_ptr, dtype=float32, shape=[2, 8, 8])
        offset = base * 2
        for k in range(3):
            t = self.register_tensor(dtype=int32, shape=[4, 16], init=lambda i, j: i * 16 + j + k * 100 + offset)
            self.store_global(go, t, offsets=[k, 0, 0], dims=[1, 2])
        identity = self.register_tensor(dtype=float32, shape=[8, 8], init=lambda r, c: r == c)
        self.store_global(gf, identity, offsets=[0, 0, 0], dims=[1, 2])
        filled = self.register_tensor(dtype=float32, shape=[8, 8], init=base * 0.5)
        self.store_global(gf, filled, offsets=[1, 0, 0], dims=[1, 2])


def test_init_functions_are_applied_while_translating():
    args = (7, torch.zeros(3, 4, 16, dtype=torch.int32), torch.zeros(2, 8, 8))
    program = str(InitFunctions().tile_program(*args, target="sm_80"))
    assert "init=lambda i, j: i * 16 + j + k * 100 + base * 2)" in program
    assert "init=lambda r, c: r == c)" in program
    for func in InitFunctions().lower(*args, target="sm_90").functions.values():
        tvm.tirx.analysis.verify_well_formed(func)


class BadPointers(CaseScript):
    def __call__(self, x_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        gx = self.global_view(x_ptr, dtype=float32, shape=[8, 8])
        s = self.shared_tensor(dtype=float32, shape=[8, 8])
        r = self.register_tensor(dtype=float32, shape=[8, 8], init=0.0)
        if self.case == "count":
            p = gx.item_ptr(1)
        if self.case == "range":
            p = s.item_ptr(1, 8)
        if self.case == "many":
            p = ~s
        if self.case == "float":
            p = gx.item_ptr(1, 0.5)
        if self.case == "init":
            t = self.register_tensor(dtype=float32, shape=[8], init=lambda i: r)


@pytest.mark.parametrize("case, message", [
    ("count", r"item_ptr: 1 indices for g\d+: float32\[8, 8\].* of rank 2"),
    ("range", "item_ptr: index 8 is out of range for dimension 1"),
    ("many", "item_ptr: .* has more than one element; give the element's indices"),
    ("float", "item_ptr: index 0.5 of dimension 1 must be an int or an integer scalar"),
    ("init", r"register_tensor: init\(i\) must return a scalar"),
])
def test_errors(case, message):
    with pytest.raises(ScriptError, match=message):
        BadPointers(case).tile_program(torch.zeros(8, 8), target="sm_80")


# --- GPU ----------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("i, j", [(0, 0), (3, 5), (17, 13), (63, 15)])
def test_addresses(i, j):
    out = torch.full((6,), -1, dtype=torch.int64, device="cuda")
    Addresses()(i, j, torch.zeros(64, 32, device="cuda"), out)
    assert out.tolist() == expected_distances(i, j)


@pytest.mark.gpu
def test_init_values():
    out = torch.full((3, 4, 16), -1, dtype=torch.int32, device="cuda")
    f = torch.full((2, 8, 8), float("nan"), device="cuda")
    InitFunctions()(7, out, f)
    i, j = torch.meshgrid(torch.arange(4), torch.arange(16), indexing="ij")
    expected = torch.stack([i * 16 + j + k * 100 + 14 for k in range(3)]).to(torch.int32)
    assert torch.equal(out.cpu(), expected)
    assert torch.equal(f[0].cpu(), torch.eye(8)) and torch.equal(f[1].cpu(), torch.full((8, 8), 3.5))
