"""Launching: the fast path and its table, the careful path's errors, no GPU (tilus_tvm/runtime/jit.py,
kernel.py, launcher.py).

The CPU tests launch with CPU tensors against kernels compiled for sm_90 whose compiled function
is replaced by a fake that checks its arguments the way TVM's entry code does and raises TVM's
messages; the GPU tests run the real thing.
"""
import math
import re
import warnings

import pytest
import torch

import tilus_tvm as tilus
from tests.helpers import load_tutorial
from tests.lang import kernels as K
from tilus_tvm.lang import arguments
from tilus_tvm.runtime import jit, launcher
from tilus_tvm.runtime.kernel import CompiledKernel


def AddOne(block_n=128, warps=4):  # noqa: N802 - a class, as the tutorial names it
    return load_tutorial("02_add_one").AddOneKernel(block_n, warps)


class FakeFunction:
    """Stands for a compiled function: checks its arguments as TVM's entry code does (scalar types, tensor
    dtype, rank, shape against the scalars, contiguity; not the device), raising with TVM's wording, and
    records the calls it accepts."""

    def __init__(self, kernel: CompiledKernel):
        self.kernel = kernel
        self.calls = []
        self.error = None  # raised by every call when set

    def __call__(self, *args):
        if self.error is not None:
            raise self.error
        scalars = [a for a, p in zip(args, self.kernel.abi.params) if p.kind == "scalar"]
        signature = ", ".join(p.name for p in self.kernel.abi.params)
        for index, (value, param) in enumerate(zip(args, self.kernel.abi.params)):
            where = f" on argument #{index} when calling:\n  `{self.kernel.name}({signature})`,\n"
            if param.kind != "tensor":
                if param.dtype.startswith(("int", "uint")) and not isinstance(value, int):
                    raise TypeError(f"Mismatched type{where}  expected int")
                continue
            if str(value.dtype) != f"torch.{param.dtype}":
                raise TypeError(f"Mismatched {param.name}.dtype{where}  expected {param.dtype}")
            expected = self.kernel.expected_shape(param, scalars) if param.shape is not None else None
            if value.dim() != (1 if expected is None else len(expected)):
                raise ValueError(f"Mismatched {param.name}.ndim{where}  expected {len(expected or (0,))}")
            for axis, extent in enumerate(expected or ()):
                if value.shape[axis] != extent:
                    raise ValueError(f"Mismatched {param.name}.shape[{axis}]{where}  expected to match "
                                     f"{param.shape[axis]}")
            if not value.is_contiguous():
                raise ValueError(f"Mismatched {param.name}.strides{where}  expected to be compact array")
        self.calls.append(args)


class FakeGPU:
    def __init__(self):
        self.careful = 0  # launches that took the careful path


@pytest.fixture
def fake_gpu(monkeypatch, tmp_path):
    """Launch on the CPU: tensors may stay there, kernels are compiled for sm_90 (into a private disk
    cache) and their compiled functions are FakeFunctions."""
    tilus.set_cache_dir(tmp_path)
    gpu = FakeGPU()
    bind = arguments.bind
    monkeypatch.setattr(arguments, "bind", lambda specs, args, kernel, require_cuda: bind(specs, args, kernel, False))
    monkeypatch.setattr(jit, "resolve_arch", lambda target: "sm_90")

    def function(self):
        if self._function is None:
            self._function = FakeFunction(self)
        return self._function

    monkeypatch.setattr(CompiledKernel, "function", function)
    careful = jit.launch_carefully

    def counted(script, args):
        gpu.careful += 1
        careful(script, args)

    monkeypatch.setattr(jit, "launch_carefully", counted)
    yield gpu
    tilus.set_cache_dir(None)


def compiled_kernels(script):
    return list(script._tilus.kernels.values())


# --- no GPU -------------------------------------------------------------------------------------

@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without a CUDA GPU")
def test_launch_without_a_gpu_says_so_and_points_to_compile_only_use():
    a = torch.arange(16, dtype=torch.float32)
    with pytest.raises(tilus.LaunchError, match="AddOneKernel: cannot launch, this machine has no CUDA GPU") as info:
        AddOne()(16, a, torch.empty_like(a))
    for hint in ('kernel.compile(*args, target="sm_90")', 'kernel.lower(*args, target="sm_90")',
                 "kernel.tile_program(*args)"):
        assert hint in str(info.value)


def test_a_cpu_tensor_is_named_when_there_is_a_gpu(monkeypatch):
    monkeypatch.setattr(arguments, "cuda_available", lambda: True)
    a = torch.arange(16, dtype=torch.float32)
    with pytest.raises(tilus.LaunchError, match="argument a_ptr is a tensor on cpu; kernels run on the GPU"):
        AddOne()(16, a, torch.empty_like(a))


def test_argument_errors_come_before_the_missing_gpu():
    with pytest.raises(tilus.LaunchError, match="takes 3 arguments"):
        AddOne()(16, torch.zeros(16))
    with pytest.raises(tilus.LaunchError, match="must be a float32 tensor"):
        AddOne()(16, torch.zeros(16, dtype=torch.float16), torch.zeros(16))


# --- the launch table ---------------------------------------------------------------------------

def test_generated_code_of_the_add_one_kernel(fake_gpu):
    kernel = AddOne()
    kernel(16, torch.rand(16), torch.empty(16))
    (compiled,) = compiled_kernels(kernel)
    assert launcher.key_source(compiled.specs) == "(t0.data_ptr() % 16 == 0, t1.data_ptr() % 16 == 0, )"
    assert launcher.launcher_source(compiled.specs, compiled.abi.params, compiled.grid_source) == (
        "def make_launcher(function):\n"
        "    def launch(a0, t0, t1):\n"
        "        if not -2147483648 <= a0 <= 2147483647: raise Refused\n"
        "        g0 = (a0 + 128 - 1) // 128\n"
        "        if not 0 < g0 <= 2147483647: raise Refused\n"
        "        if t0.numel() > 2147483647 or t1.numel() > 2147483647: raise Refused\n"
        "        function(a0, t0, t1)\n"
        "    return launch\n")


def test_second_launch_goes_straight_to_the_compiled_function(fake_gpu):
    kernel = AddOne()
    a, b = torch.rand(64), torch.empty(64)
    kernel(64, a, b)
    kernel(64, a, b)
    kernel(32, a[:32], b[:32])  # other sizes, same specialisation
    assert fake_gpu.careful == 1
    (compiled,) = compiled_kernels(kernel)
    calls = compiled.function().calls
    assert [(n, x.data_ptr(), y.shape[0]) for n, x, y in calls] == [
        (64, a.data_ptr(), 64), (64, a.data_ptr(), 64), (32, a.data_ptr(), 32)]
    assert all(x is a and y is b for _, x, y in calls[:2])


def test_alignment_selects_another_kernel(fake_gpu):
    kernel = AddOne()
    aligned, unaligned = torch.rand(64), torch.rand(65)[1:]
    assert unaligned.data_ptr() % 16 != 0
    out = torch.empty(64)
    kernel(64, aligned, out)
    kernel(64, unaligned, out)
    kernel(64, aligned, out)
    kernel(64, unaligned, out)
    assert fake_gpu.careful == 2
    first, second = compiled_kernels(kernel)
    assert (first.aligned, second.aligned) == (frozenset({"a_ptr", "b_ptr"}), frozenset({"b_ptr"}))
    assert [x.data_ptr() for _, x, _ in first.function().calls] == [aligned.data_ptr()] * 2
    assert [x.data_ptr() for _, x, _ in second.function().calls] == [unaligned.data_ptr()] * 2


def test_a_new_compile_time_value_gets_another_kernel(fake_gpu):
    kernel = K.Casts()
    x, y = torch.rand(100), torch.empty(100)
    kernel(3, x, y)
    kernel(4, x, y)
    kernel(3, x, y)
    kernel(4, x, y)
    assert fake_gpu.careful == 2
    three, four = compiled_kernels(kernel)
    assert (three.const_values, four.const_values) == ({"scale": 3}, {"scale": 4})
    assert len(three.function().calls) == len(four.function().calls) == 2
    with pytest.raises(tilus.LaunchError, match="argument scale is a compile-time int, got bool True"):
        kernel(True, x, y)  # True == 1, but a bool is no int here, table or not
    kernel(1, x, y)
    with pytest.raises(tilus.LaunchError, match="argument scale is a compile-time int, got bool True"):
        kernel(True, x, y)


def test_refused_arguments_still_get_the_careful_errors(fake_gpu):
    kernel = AddOne()
    a, b = torch.rand(16), torch.empty(16)
    kernel(16, a, b)
    with pytest.raises(tilus.LaunchError, match=r"argument n=2147483648 is out of range for int32"):
        kernel(2**31, a, b)
    with pytest.raises(tilus.LaunchError, match="takes 3 arguments"):
        kernel(16, a)
    with pytest.raises(tilus.LaunchError, match="argument a_ptr must be a float32 tensor"):
        kernel(16, a.half(), b)
    with pytest.raises(tilus.LaunchError, match="argument a_ptr .* must be a torch tensor"):
        kernel(16, [0.0] * 16, b)
    kernel(torch.tensor(16), a, b)  # a 0-d tensor for a scalar: converted on the careful path
    kernel(0, a[:0], b[:0])  # an empty grid launches nothing
    (compiled,) = compiled_kernels(kernel)
    assert [call[0] for call in compiled.function().calls] == [16, 16]


def test_a_compiled_kernel_called_directly_checks_what_it_was_compiled_for(fake_gpu):
    x, y = torch.rand(100), torch.empty(100)
    compiled = K.Casts().compile(3, x, y, target="sm_90")
    compiled(3, x, y)
    compiled(3, x, y)
    assert len(compiled.function().calls) == 2
    with pytest.raises(tilus.LaunchError, match="was compiled for scale=3, got 4"):
        compiled(4, x, y)
    with pytest.raises(tilus.LaunchError, match="compiled for a 16-byte aligned x_ptr"):
        compiled(3, torch.rand(101)[1:], y)


# --- the compiled function's own checks, translated -----------------------------------------------

def test_a_tensor_too_small_for_a_shaped_parameter_is_named_with_the_expected_shape(fake_gpu):
    kernel = AddOne()
    with pytest.raises(tilus.LaunchError, match=re.escape(
            "add_one_kernel: argument a_ptr has shape (8,), the kernel expects (n) = (16,): 16 elements from its "
            "data pointer, its storage holds 8")) as info:
        kernel(16, torch.rand(8), torch.empty(16))
    assert "Mismatched a_ptr.shape[0] on argument #1" in str(info.value.__cause__)


def test_the_same_error_after_the_fast_path_refuses(fake_gpu):
    kernel = AddOne()
    kernel(16, torch.rand(16), torch.empty(16))
    with pytest.raises(tilus.LaunchError, match=re.escape("argument b_ptr has shape (4,), the kernel expects (n)")):
        kernel(16, torch.rand(16), torch.empty(4))


def test_a_flat_or_larger_tensor_is_read_as_the_expected_shape(fake_gpu):
    kernel = K.Elementwise(32, 48, 2)
    m = 5
    x = torch.rand(m * 48)  # flat
    y = torch.rand(2 * m, 1)  # larger
    z = torch.empty(m, 48)
    kernel(m, x, y, z)
    (compiled,) = compiled_kernels(kernel)
    (call,) = compiled.function().calls
    assert [tuple(t.shape) for t in call[1:]] == [(m, 48), (m, 1), (m, 48)]
    assert [t.data_ptr() for t in call[1:]] == [x.data_ptr(), y.data_ptr(), z.data_ptr()]
    assert call[3] is z
    window = torch.rand(4 * m * 48)[:m * 48 - 1]  # too short, but its storage goes on: raw pointer semantics
    kernel(m, window, y, z)
    assert compiled.function().calls[-1][1].shape == (m, 48)


def test_a_repaired_argument_is_reported_once_as_a_slow_launch(fake_gpu):
    kernel = K.Elementwise(32, 48, 2)
    m = 5
    x, y, z = torch.rand(m * 48), torch.rand(m, 1), torch.empty(m, 48)
    with pytest.warns(tilus.SlowLaunchWarning, match=re.escape(
            "argument x_ptr has shape (240,), the kernel expects (m, 48) = (5, 48)")) as record:
        kernel(m, x, y, z)
        kernel(m, x, y, z)
    assert len(record) == 1  # once per argument of a compiled kernel, though every such launch is slow
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        kernel(m, x.view(m, 48), y, z)  # the expected shape: no repair, no warning


def test_a_transposed_tensor_of_the_expected_shape_is_refused(fake_gpu):
    kernel = K.Elementwise(32, 48, 2)
    x = torch.rand(48, 5).t()
    with pytest.raises(tilus.LaunchError, match=re.escape(
            "argument x_ptr has the expected shape (m, 48) = (5, 48) but is not contiguous (strides (1, 5))")):
        kernel(5, x, torch.rand(5, 1), torch.empty(5, 48))


def test_other_errors_of_the_compiled_function_pass_through(fake_gpu, monkeypatch):
    kernel = AddOne()
    kernel(16, torch.rand(16), torch.empty(16))
    (compiled,) = compiled_kernels(kernel)
    compiled.function().error = RuntimeError("CUDALaunch Error: CUDA_ERROR_ILLEGAL_ADDRESS")
    with pytest.raises(RuntimeError, match="CUDA_ERROR_ILLEGAL_ADDRESS"):
        kernel(16, torch.rand(16), torch.empty(16))


def test_expected_shape_substitutes_the_scalars(fake_gpu):
    compiled = K.Elementwise(32, 48, 2).compile(7, torch.rand(7, 48), torch.rand(7, 1), torch.empty(7, 48),
                                                target="sm_90")
    shapes = [compiled.expected_shape(p, [7]) for p in compiled.abi.params if p.kind == "tensor"]
    assert shapes == [(7, 48), (7, 1), (7, 48)]
    assert math.prod(shapes[0]) == 7 * 48


# --- on the GPU ---------------------------------------------------------------------------------

def nan_like(t):
    return torch.full_like(t, float("nan"))


@pytest.mark.gpu
def test_fast_path_results_with_poisoned_outputs():
    kernel = AddOne(128, 4)
    for n in (1, 100, 128, 1000, 100, 1):  # the table serves the repeats
        a = torch.randn(n, device="cuda")
        b = nan_like(a)
        kernel(n, a, b)
        torch.testing.assert_close(b, a + 1)
    assert len(kernel._tilus.launch_table.launchers) == 1


@pytest.mark.gpu
def test_launch_from_a_side_stream_is_ordered_on_that_stream():
    """The kernel runs on torch's current stream: on a side stream it waits for the work before it there."""
    kernel = AddOne(128, 4)
    n = 1 << 20
    a = torch.zeros(n, device="cuda")
    b = nan_like(a)
    kernel(n, a, b)  # compiled and in the table
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)  # keeps the side stream busy; the default stream is idle
        a.fill_(2.0)
        kernel(n, a, b)  # the fast path
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    torch.testing.assert_close(b, torch.full_like(a, 3.0))


@pytest.mark.gpu
def test_flat_and_larger_tensors_for_shaped_parameters_on_the_gpu():
    kernel = K.Elementwise(32, 48, 2)
    m = 40
    x = torch.randn(m, 48, device="cuda")
    y = torch.randn(m, 1, device="cuda")
    z = nan_like(torch.empty(2 * m, 48, device="cuda"))  # larger
    kernel(m, x.reshape(-1), torch.cat([y, y]), z)
    expected = torch.maximum(torch.where(x > 0, x * y, torch.exp(x) - 1), torch.tensor(-0.5, device="cuda"))
    torch.testing.assert_close(z[:m], expected)
    assert z[m:].isnan().all()


@pytest.mark.gpu
def test_wrong_shape_on_the_gpu_is_a_launch_error():
    kernel = K.Elementwise(32, 48, 2)
    m = 40
    with pytest.raises(tilus.LaunchError, match=re.escape("argument x_ptr has shape (40, 47), the kernel expects "
                                                          "(m, 48) = (40, 48): 1920 elements from its data pointer, "
                                                          "its storage holds 1880")):
        kernel(m, torch.randn(m, 47, device="cuda"), torch.randn(m, 1, device="cuda"),
               torch.empty(m, 48, device="cuda"))
    x = torch.randn(m, 48, device="cuda")
    z = nan_like(x)
    kernel(m, x, torch.randn(m, 1, device="cuda"), z)  # still launches afterwards
    torch.cuda.synchronize()
    assert not z.isnan().any()
