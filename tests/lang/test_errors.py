"""Bad kernels and bad launches give Python errors that name the problem (CPU only)."""
import pytest
import torch

import tilus_tvm as tilus
from tilus_tvm import float16, float32, int32
from tilus_tvm.layout import spatial
from tilus_tvm.utils import cdiv
from tests.helpers import CaseScript, load_tutorial
from tests.helpers import private_cache  # noqa: F401 - autouse: a cache directory per test


def compile_kernel(kernel, *args):
    return kernel.compile(*args, target="sm_80")


class NotAnnotated(tilus.Script):
    def __call__(self, n):
        self.attrs.blocks = 1
        self.attrs.warps = 1


class BadAnnotation(tilus.Script):
    def __call__(self, n: str):
        self.attrs.blocks = 1
        self.attrs.warps = 1


class Warps(tilus.Script):
    def __init__(self, warps):
        super().__init__()
        self.warps = warps

    def __call__(self):
        self.attrs.blocks = 1
        self.attrs.warps = self.warps


class NoBlocks(tilus.Script):
    def __call__(self):
        self.attrs.warps = 1


class Body(CaseScript):
    """A kernel whose body is a function given at construction (each test states the mistake)."""

    def __call__(self, n: int32, x_ptr: ~float32, h_ptr: ~float16):
        self.attrs.blocks = 1
        self.attrs.warps = 4
        g = self.global_view(x_ptr, dtype=float32, shape=[n, 64])
        a = self.load_global(g, offsets=[0, 0], shape=[16, 64])
        if self.case == "broadcast":
            b = self.load_global(g, offsets=[0, 0], shape=[64, 16])
            c = a + b
        if self.case == "dot_shapes":
            c = self.dot(a, a, self.register_tensor(dtype=float32, shape=[16, 64], init=0.0))
        if self.case == "dot_dtypes":
            h = self.global_view(h_ptr, dtype=float16, shape=[64, 64])
            b = self.load_global(h, offsets=[0, 0], shape=[64, 64])
            c = self.dot(a, b, self.register_tensor(dtype=float32, shape=[16, 64], init=0.0))
        if self.case == "offsets":
            c = self.load_global(g, offsets=[0], shape=[16, 64])
        if self.case == "view_dtype":
            c = self.global_view(x_ptr, dtype=float16, shape=[n])
        if self.case == "layout_shape":
            c = self.register_tensor(dtype=float32, shape=[16, 64], layout=spatial(16, 4))
        if self.case == "layout_threads":
            c = self.register_tensor(dtype=float32, shape=[32, 16], layout=spatial(32, 16))
        if self.case == "undefined":
            c = a + undefined_name  # noqa: F821
        if self.case == "loop_rebind":
            s = 0
            for i in range(n):
                s = s + i
        if self.case == "tensor_truth":
            if a:
                pass
        if self.case == "int_division":
            c = n / 2  # noqa: F841 - the division itself is the mistake under test
        if self.case == "tile_shape":
            self.load_global(g, offsets=[0, 0], shape=[n, 64])
        if self.case == "while_else":
            while n > 0:
                pass
            else:
                pass
        if self.case == "return_value":
            return a


def args():
    return 4, torch.zeros(4, 64), torch.zeros(64, 64, dtype=torch.float16)


def test_parameter_without_annotation():
    with pytest.raises(tilus.ScriptError, match="parameter 'n' has no annotation"):
        compile_kernel(NotAnnotated(), 1)


def test_parameter_with_unknown_annotation():
    with pytest.raises(tilus.ScriptError, match="parameter 'n' has annotation"):
        compile_kernel(BadAnnotation(), 1)


@pytest.mark.parametrize("warps, message", [(0, r"in \[1, 32\]"), (33, r"in \[1, 32\]"),
                                            (4.0, "compile-time int")])
def test_warps_out_of_range(warps, message):
    with pytest.raises(tilus.ScriptError, match=message):
        compile_kernel(Warps(warps))


def test_blocks_must_be_set():
    with pytest.raises(tilus.ScriptError, match="never sets self.attrs.blocks"):
        compile_kernel(NoBlocks())


CASES = {
    "broadcast": "shapes \\[16, 64\\] and \\[64, 16\\] cannot be broadcast",
    "dot_shapes": "dot: incompatible shapes a \\[16, 64\\], b \\[16, 64\\]",
    "dot_dtypes": "dot: a and b must have the same dtype",
    "offsets": "offsets \\[0\\] must list one offset per dimension",
    "view_dtype": "dtype float16 differs from the pointer's element type float32",
    "layout_shape": "layout .* has shape \\[16, 4\\], the tensor has shape \\[16, 64\\]",
    "layout_threads": "spreads over 512 threads, the block has only 128",
    "undefined": "name 'undefined_name' is not defined",
    "loop_rebind": "'s' is assigned inside a run-time loop or branch but defined outside",
    "tensor_truth": "has no truth value",
    "int_division": "use `//` for integer division",
    "tile_shape": "must hold positive compile-time ints",
    "while_else": "while ... else is not supported",
    "return_value": "cannot return a value",
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_script_errors_name_the_problem_and_the_line(case):
    with pytest.raises(tilus.ScriptError, match=CASES[case]) as info:
        compile_kernel(Body(case), *args())
    assert "test_errors.py:" in str(info.value)  # the kernel line is attached


def test_launch_refuses_cpu_tensors(monkeypatch):
    # with a GPU present the CPU tensor is named; on a machine without one, the missing GPU is
    # (tests/runtime/test_launch.py)
    monkeypatch.setattr("tilus_tvm.lang.arguments.cuda_available", lambda: True)
    kernel = load_tutorial("02_add_one").AddOneKernel(128, 4)
    a = torch.arange(16, dtype=torch.float32)
    with pytest.raises(tilus.LaunchError, match="argument a_ptr is a tensor on cpu"):
        kernel(16, a, torch.empty_like(a))


def test_launch_refuses_wrong_dtype():
    kernel = load_tutorial("02_add_one").AddOneKernel(128, 4)
    with pytest.raises(tilus.LaunchError, match="argument a_ptr must be a float32 tensor .* got torch.float16"):
        kernel(16, torch.zeros(16, dtype=torch.float16), torch.zeros(16))


def test_launch_refuses_wrong_argument_count():
    kernel = load_tutorial("02_add_one").AddOneKernel(128, 4)
    with pytest.raises(tilus.LaunchError, match=r"takes 3 arguments \(n: int32, a_ptr: ~float32, b_ptr: ~float32\), "
                                                r"got 2"):
        kernel(16, torch.zeros(16))


def test_launch_refuses_non_tensor_pointer_and_bad_scalar():
    kernel = load_tutorial("02_add_one").AddOneKernel(128, 4)
    with pytest.raises(tilus.LaunchError, match="a_ptr .* must be a torch tensor"):
        kernel(16, [0.0] * 16, torch.zeros(16))
    with pytest.raises(tilus.LaunchError, match="argument n \\(int32\\) must be an integer"):
        kernel(1.5, torch.zeros(16), torch.zeros(16))


def test_compile_time_argument_type_checked():
    kernel = load_tutorial("03_matmul").Matmul()
    a = torch.zeros(4, 64, dtype=torch.float16)
    with pytest.raises(tilus.LaunchError, match="argument n_size is a compile-time int, got float"):
        kernel.compile(4, 64.0, 64, a, a, a, target="sm_80")


@pytest.mark.parametrize("target", ["ampere", "sm_999", "sm_75"])
def test_bad_target_is_refused_before_any_compiler_runs(target, monkeypatch):
    import tvm

    def no_compile(*args, **kwargs):
        raise AssertionError("tvm.compile ran for an unknown target")

    monkeypatch.setattr(tvm, "compile", no_compile)
    kernel = load_tutorial("02_add_one").AddOneKernel(128, 4)
    with pytest.raises(tilus.CompileError, match=f"unknown target '{target}'"):
        kernel.compile(16, torch.zeros(16), torch.zeros(16), target=target)


def test_instructions_outside_a_kernel():
    with pytest.raises(tilus.ScriptError, match="only be used inside a kernel"):
        Warps(1).register_tensor(dtype=float32, shape=[4])


def test_shared_memory_over_the_limit():
    class Huge(tilus.Script):
        def __call__(self):
            self.attrs.blocks = 1
            self.attrs.warps = 1
            self.shared_tensor(dtype=float32, shape=[256, 256])

    with pytest.raises(tilus.CompileError, match="needs 262144 bytes of shared memory, the target allows"):
        Huge().compile(target="sm_80")


def test_cdiv():
    assert [cdiv(n, 4) for n in range(9)] == [0, 1, 1, 1, 1, 2, 2, 2, 2]
