"""self.static_assert: checked while the kernel compiles; its failures and misuses are ScriptErrors that
carry the message and the kernel's line (CPU only)."""
import pytest
import torch
from tvm import tirx

import tilus_tvm as tilus
from tilus_tvm import float32, int32
from tests.helpers import private_cache  # noqa: F401 - autouse: a cache directory per test


class Tiled(tilus.Script):
    def __init__(self, block_n: int, case: str = "ok"):
        super().__init__()
        self.block_n = block_n
        self.case = case

    def __call__(self, n: int32, k: int, x_ptr: ~float32):
        self.attrs.blocks = self.utils.ceil_div(n, self.block_n)
        self.attrs.warps = 1
        self.static_assert(self.block_n % 32 == 0, f"block_n must be a multiple of 32, got {self.block_n}")
        self.static_assert(k in (1, 2, 4), "k must be 1, 2 or 4")
        if self.case == "runtime":
            self.static_assert(n % 32 == 0, "n must be a multiple of 32")
        if self.case == "tensor":
            x = self.load_global(self.global_view(x_ptr, dtype=float32, shape=[n]), offsets=[0], shape=[32])
            self.static_assert(x > 0.0, "positive")
        if self.case == "msg":
            self.static_assert(True, 42)
        if self.case == "no_msg":
            self.static_assert(self.block_n > 64)
        g = self.global_view(x_ptr, dtype=float32, shape=[n])
        x = self.load_global(g, offsets=[self.blockIdx.x * self.block_n], shape=[self.block_n])
        self.store_global(g, x * float(k), offsets=[self.blockIdx.x * self.block_n])


def compile_kernel(kernel, k=2):
    return kernel.compile(100, k, torch.zeros(100), target="sm_80")


def test_true_conditions_compile():
    assert ".entry" in compile_kernel(Tiled(64)).ptx


@pytest.mark.parametrize("block_n, k, message, line", [
    (48, 2, "static_assert failed: block_n must be a multiple of 32, got 48", "self.static_assert(self.block_n % 32"),
    (64, 3, "static_assert failed: k must be 1, 2 or 4", "self.static_assert(k in (1, 2, 4)"),
])
def test_a_false_condition_stops_compilation_with_the_message_and_line(block_n, k, message, line):
    with pytest.raises(tilus.ScriptError) as info:
        compile_kernel(Tiled(block_n), k)
    text = str(info.value)
    assert text.startswith(message)
    assert "test_static_assert.py:" in text and line in text


@pytest.mark.parametrize("case, message", [
    ("runtime", "the condition .* is only known at run time"),
    ("tensor", "the condition is a tensor"),
    ("msg", "msg must be a str, got 42"),
    ("no_msg", "^static_assert failed\n"),
])
def test_misuses(case, message):
    with pytest.raises(tilus.ScriptError, match=message) as info:
        compile_kernel(Tiled(64, case))
    assert "test_static_assert.py:" in str(info.value)


def test_tvm_constants_are_compile_time():
    tilus.Script.static_assert(tirx.const(True, "bool"), "holds")
    with pytest.raises(tilus.ScriptError, match="static_assert failed: zero"):
        tilus.Script.static_assert(tirx.const(0, "int32"), "zero")
