"""Programmatic dependent launch (attrs.dependent_launch, grid_dependency_wait, launch_dependents): what a
kernel compiles to on the CPU (the launch tag TVM's CUDA runtime reads, griddepcontrol in the PTX), the
errors, and on a Hopper GPU a ping-pong chain of dependent launches, eager and in a CUDA graph."""
import pathlib

import pytest
import torch

import tilus_tvm as tilus
from tilus_tvm import float32, int32
from tilus_tvm.backend.codegen import PROGRAMMATIC_LAUNCH
from tilus_tvm.errors import CompileError, ScriptError

BLOCK = 128


class Relay(tilus.Script):
    """out[i] = x[i] + 1, BLOCK elements a block; ``dependent``: a dependent launch that lets the next kernel
    start at once and reads x (and writes out) only after ``grid_dependency_wait``; ``wait``: whether it waits."""

    def __init__(self, dependent: bool = True, wait: bool = True, trigger: bool = True):
        super().__init__()
        self.dependent, self.wait, self.trigger = dependent, wait, trigger

    def __call__(self, n: int32, x_ptr: ~float32, out_ptr: ~float32):
        self.attrs.blocks = self.utils.ceil_div(n, BLOCK)
        self.attrs.warps = BLOCK // 32
        if self.dependent:
            self.attrs.dependent_launch = True
        if self.trigger:
            self.launch_dependents()
        if self.wait:
            self.grid_dependency_wait()
        gx = self.global_view(x_ptr, dtype=float32, shape=[n])
        go = self.global_view(out_ptr, dtype=float32, shape=[n])
        x = self.load_global(gx, offsets=[self.blockIdx.x * BLOCK], shape=[BLOCK])
        self.store_global(go, x + 1.0, offsets=[self.blockIdx.x * BLOCK])


def compile_relay(target="sm_90", **kwargs):
    x = torch.zeros(1000)
    return Relay(**kwargs).compile(1000, x, x, target=target)


def test_dependent_launch_compiles_to_griddepcontrol_and_the_launch_tag(tmp_path):
    compiled = compile_relay()
    body = compiled.cuda_source[compiled.cuda_source.rindex("__global__"):]
    trigger, wait = body.index("griddepcontrol_launch_dependents()"), body.index("griddepcontrol_wait()")
    assert trigger < wait < body.index("x_ptr_ptr[")  # x is read after the wait
    assert "griddepcontrol.wait;" in compiled.ptx and "griddepcontrol.launch_dependents;" in compiled.ptx
    assert PROGRAMMATIC_LAUNCH in compiled.tir_text  # the host function asks TVM for the launch attribute
    # the attribute reaches the kernel's launch tags, saved with the library TVM's CUDA runtime loads
    library = compiled.export(tmp_path / "relay.so")
    assert PROGRAMMATIC_LAUNCH.encode() in pathlib.Path(library).read_bytes()
    plain = compile_relay(dependent=False, wait=False, trigger=False)
    assert PROGRAMMATIC_LAUNCH not in plain.tir_text and "griddepcontrol" not in plain.cuda_source
    library = plain.export(tmp_path / "plain.so")
    assert PROGRAMMATIC_LAUNCH.encode() not in pathlib.Path(library).read_bytes()


def test_the_instructions_alone_need_no_dependent_launch():
    compiled = compile_relay(dependent=False)  # (both do nothing then)
    assert "griddepcontrol.wait;" in compiled.ptx
    assert PROGRAMMATIC_LAUNCH not in compiled.tir_text


def test_errors():
    with pytest.raises(ScriptError, match="never calls self.grid_dependency_wait"):
        compile_relay(wait=False)
    with pytest.raises(ScriptError, match=r"needs sm_90 or newer, the target is sm_80"):
        compile_relay(target="sm_80")
    with pytest.raises(CompileError, match="GridDependencyWait has no implementation for sm_80"):
        compile_relay(target="sm_80", dependent=False, trigger=False)

    class NotBool(tilus.Script):
        def __call__(self):
            self.attrs.blocks = 1
            self.attrs.warps = 1
            self.attrs.dependent_launch = 1

    with pytest.raises(ScriptError, match="attrs.dependent_launch must be a compile-time bool, got 1"):
        NotBool().compile(target="sm_90")


@pytest.mark.gpu
@pytest.mark.parametrize("graph", [False, True])
def test_a_chain_of_dependent_launches_reads_each_result(graph):
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("programmatic dependent launch needs sm_90")
    n, launches = 1 << 20, 64
    relay = Relay()
    buffers = [torch.zeros(n, device="cuda"), torch.full((n,), float("nan"), device="cuda")]

    def chain():  # ping-pong: each launch reads the last one's output and overwrites what that one read
        for i in range(launches):
            relay(n, buffers[i % 2], buffers[(i + 1) % 2])

    if graph:
        chain()  # (compiles and warms up before the capture)
        buffers[0].zero_()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            chain()
        buffers[1].fill_(float("nan"))
        g.replay()
    else:
        chain()
    torch.cuda.synchronize()
    assert torch.equal(buffers[launches % 2], torch.full((n,), float(launches), device="cuda"))
