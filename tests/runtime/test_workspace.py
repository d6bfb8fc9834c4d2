"""Workspaces at launch (tilus_tvm/runtime/workspace.py and the launch paths in kernel.py and
launcher.py): allocation on the launch device, zeroing, growth, reuse by the fast path, the
generated launcher's lines, and that kernels without workspaces launch exactly as before.

Runs on the CPU with the fake compiled functions of test_launch.py (device -1 stands for the CPU)."""
import pytest
import torch

from tests.instructions.test_workspace import STEPS, OrderedSum
from tests.runtime.test_launch import AddOne, compiled_kernels, fake_gpu  # noqa: F401 - fake_gpu is a fixture
from tilus_tvm.errors import LaunchError
from tilus_tvm.passes.kernel_abi import WorkspaceSpec
from tilus_tvm.runtime import launcher
from tilus_tvm.runtime.workspace import WorkspacePool, evaluate_numel

PARTIAL = WorkspaceSpec("workspace3", "float32", "n", False)
SEMAPHORES = WorkspaceSpec("workspace5", "int32", "(n + 127) // 128", True)


def test_pool_allocates_zeroed_and_scratch_tensors_per_device_and_grows_by_doubling():
    pool = WorkspacePool([PARTIAL, SEMAPHORES], "ordered_sum")
    partial, semaphores = pool.tensors_for(-1, {"n": 1000})
    assert (partial.dtype, partial.numel(), semaphores.dtype, semaphores.numel()) == (torch.float32, 1000,
                                                                                      torch.int32, 8)
    assert int(semaphores.abs().sum()) == 0
    semaphores[3] = 7  # what a kernel breaking the contract would leave
    again = pool.tensors_for(-1, {"n": 500})
    assert again[0] is partial and again[1] is semaphores  # big enough: reused, never cleared
    grown = pool.tensors_for(-1, {"n": 1100})
    assert grown[0].numel() == 2000 and grown[1].numel() == 16 and int(grown[1].abs().sum()) == 0
    assert pool.tensors_for(-1, {"n": 5000})[0].numel() == 5000  # more than double: exactly what is needed
    pool.clear()
    assert all(not tensors for tensors in pool.tensors)


def test_a_workspace_beyond_int32_indexing_is_a_launch_error():
    pool = WorkspacePool([WorkspaceSpec("workspace1", "float32", "n * 4096", False)], "big")
    with pytest.raises(LaunchError, match=r"big: workspace workspace1 \(n \* 4096\) needs 4294967296 elements.*int32"):
        pool.tensors_for(-1, {"n": 2**20})


def test_numel_text_is_evaluated_with_the_scalars():
    assert evaluate_numel("max((n + 15) // 16, 1) * 32", {"n": 33}) == 96


def test_generated_launcher_looks_workspaces_up_and_refuses_when_missing_or_small(fake_gpu):
    kernel = OrderedSum()
    x, y = torch.randn(STEPS, 1000), torch.empty(1000)
    kernel(1000, x, y)
    (compiled,) = compiled_kernels(kernel)
    source = launcher.launcher_source(compiled.specs, compiled.abi.params, compiled.grid_source,
                                      compiled.abi.workspaces)
    assert source.endswith(
        "        d = t0.get_device()\n"
        "        w0 = ws0.get(d)\n"
        "        if w0 is None or w0.numel() < a0: raise Refused\n"
        "        w1 = ws1.get(d)\n"
        "        if w1 is None or w1.numel() < (a0 + 128 - 1) // 128: raise Refused\n"
        "        function(a0, t0, t1, w0, w1)\n"
        "    return launch\n")
    pool = compiled.workspaces()
    launch = launcher.make_launcher(compiled.specs, compiled.abi.params, compiled.grid_source,
                                    lambda *args: None, WorkspacePool(pool.specs, "fresh"))
    with pytest.raises(launcher.Refused):
        launch(1000, x, y)  # a pool with nothing allocated yet: the careful path must allocate


def test_first_launch_allocates_and_later_launches_reuse_through_the_fast_path(fake_gpu):
    kernel = OrderedSum()
    x, y = torch.randn(STEPS, 1000), torch.empty(1000)
    kernel(1000, x, y)
    kernel(1000, x, y)
    kernel(600, x[:, :600].contiguous(), y[:600])
    assert fake_gpu.careful == 1
    (compiled,) = compiled_kernels(kernel)
    calls = compiled.function().calls
    assert len(calls) == 3 and all(len(call) == 5 for call in calls)
    partial, semaphores = calls[0][3:]
    assert all(call[3] is partial and call[4] is semaphores for call in calls)
    assert partial.numel() == 1000 and semaphores.numel() == 8 and int(semaphores.abs().sum()) == 0
    kernel(3000, torch.randn(STEPS, 3000), torch.empty(3000))  # needs more: the careful path grows them
    assert fake_gpu.careful == 2
    grown = compiled.function().calls[-1][3:]
    assert grown[0].numel() == 3000 and grown[1].numel() == 24
    kernel(1000, x, y)
    assert fake_gpu.careful == 2 and compiled.function().calls[-1][3] is grown[0]


def test_kernels_without_workspaces_keep_their_launcher(fake_gpu):
    kernel = AddOne()
    kernel(16, torch.rand(16), torch.empty(16))
    (compiled,) = compiled_kernels(kernel)
    assert compiled.workspaces() is None and compiled.abi.workspaces == ()
    assert "get_device" not in launcher.launcher_source(compiled.specs, compiled.abi.params, compiled.grid_source)
    assert isinstance(compiled.abi.to_json(), list)  # the cache and export format of such kernels is unchanged
