"""``global_tensor`` workspaces and the ``lock_semaphore`` / ``release_semaphore`` pair
(tilus_tvm/lang/instructions/workspace.py, tilus_tvm/instructions/workspace.py, the kernel ABI's
workspaces): the TIR and PTX they compile to, their errors, and on the GPU an ordered reduction
across blocks whose semaphores stay clean over repeated launches."""
import re

import pytest
import torch

import tilus_tvm as tilus
from tilus_tvm import float16, float32, int32
from tilus_tvm.errors import CompileError, ScriptError
from tilus_tvm.ir import inst as ir
from tilus_tvm.ir.stmt import instructions
from tilus_tvm.passes.kernel_abi import KernelABI

STEPS = 4  # blocks along z that add into one tile, in order


class OrderedSum(tilus.Script):
    """y[j] = x[0, j] + x[1, j] + ... summed in the order of blockIdx.z through a float32 workspace:
    block z waits for semaphore == z, adds the partial, passes z + 1 on; the last block writes y and
    resets the semaphore to 0 (the workspace contract). With ``last=True`` (``LastAddsUp``) every block z
    stores x[z] and arrives at its tile's counter (``arrive_last``); the last of the STEPS to arrive adds
    the STEPS partials in z order and writes y. No block waits."""

    def __init__(self, block: int = 128, last: bool = False):
        super().__init__()
        self.block, self.last = block, last

    def __call__(self, n: int32, x_ptr: ~float32, y_ptr: ~float32):
        tiles = self.utils.ceil_div(n, self.block)
        self.attrs.blocks = [tiles, 1, STEPS]
        self.attrs.warps = 4
        gx = self.global_view(x_ptr, dtype=float32, shape=[STEPS, n])
        gy = self.global_view(y_ptr, dtype=float32, shape=[n])
        partial = self.global_tensor(dtype=float32, shape=[STEPS if self.last else 1, n], requires_clean=False)
        semaphores = self.global_tensor(dtype=int32, shape=[tiles], requires_clean=True)
        semaphore: ~int32 = semaphores[self.blockIdx.x].item_ptr()
        offset: int32 = self.blockIdx.x * self.block
        x = self.load_global(gx, offsets=[self.blockIdx.z, offset], shape=[self.block])
        if self.last:
            self.store_global(partial, x, offsets=[self.blockIdx.z, offset])
            if self.arrive_last(semaphore, STEPS):
                total = self.load_global(partial, offsets=[0, offset], shape=[self.block])
                for z in range(1, STEPS):
                    total = total + self.load_global(partial, offsets=[z, offset], shape=[self.block])
                self.store_global(gy, total, offsets=[offset])
        else:
            if self.blockIdx.z > 0:
                self.lock_semaphore(semaphore, value=self.blockIdx.z)
                x = x + self.load_global(partial, offsets=[0, offset], shape=[self.block])
            if self.blockIdx.z == STEPS - 1:
                self.store_global(gy, x, offsets=[offset])
                self.release_semaphore(semaphore, value=0)
            else:
                self.store_global(partial, x, offsets=[0, offset])
                self.release_semaphore(semaphore, value=self.blockIdx.z + 1)


def LastAddsUp() -> OrderedSum:  # noqa: N802 - read as the kernel's name
    return OrderedSum(last=True)


class BlockShapedWorkspace(tilus.Script):
    def __call__(self, n: int32, y_ptr: ~float32):
        self.attrs.blocks = 2
        self.attrs.warps = 1
        w = self.global_tensor(dtype=float32, shape=[self.blockIdx.x + 1, n], requires_clean=False)
        self.store_global(self.global_view(y_ptr, dtype=float32, shape=[n]),
                          self.load_global(w, offsets=[0, 0], shape=[32]), offsets=[0])


class BoundScalarShape(tilus.Script):
    """A workspace sized by a kernel scalar bound to an expression of a parameter."""

    def __call__(self, n: int32, y_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        rows: int32 = (n + 31) // 32
        w = self.global_tensor(dtype=float32, shape=[rows, 32], requires_clean=False)
        self.store_global(self.global_view(y_ptr, dtype=float32, shape=[n]),
                          self.load_global(w, offsets=[0, 0], shape=[32]), offsets=[0])


class NameClash(tilus.Script):
    """A Script parameter named like the workspace the builder would create."""

    def __call__(self, n: int32, workspace1: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        w = self.global_tensor(dtype=float32, shape=[n], requires_clean=True)
        self.store_global(self.global_view(workspace1, dtype=float32, shape=[n]),
                          self.load_global(w, offsets=[0], shape=[32]), offsets=[0])


def meta(*shape, dtype=torch.float32):
    return torch.empty(*shape, dtype=dtype, device="meta")


def test_workspaces_are_extra_flat_parameters_after_the_scripts():
    func = OrderedSum().lower(1000, meta(STEPS, 1000), meta(1000), target="sm_90")["ordered_sum"]
    names = [str(p.name) for p in func.params]
    assert names[:3] == ["n", "x_ptr", "y_ptr"] and len(names) == 5
    partial, semaphores = (p.ty for p in func.params[3:])
    assert (str(partial.dtype), str(semaphores.dtype)) == ("float32", "int32")
    assert len(partial.shape) == 1 and len(semaphores.shape) == 1  # any length: the runtime may pass more


def test_abi_lists_each_workspace_with_its_size_on_the_host():
    program = OrderedSum().tile_program(1000, meta(STEPS, 1000), meta(1000), target="sm_80")
    allocations = [inst for inst in instructions(program.body) if isinstance(inst, ir.AllocateGlobal)]
    assert [a.requires_clean for a in allocations] == [False, True]
    compiled = OrderedSum().compile(1000, torch.empty(STEPS, 1000), torch.empty(1000), target="sm_80")
    partial, semaphores = compiled.abi.workspaces
    assert (partial.dtype, partial.requires_clean, semaphores.dtype, semaphores.requires_clean) == (
        "float32", False, "int32", True)
    for n in (1, 128, 129, 1000):
        scalars = {"n": n}
        assert eval(partial.numel, {}, scalars) == n
        assert eval(semaphores.numel, {}, scalars) == -(-n // 128)
    assert KernelABI.from_json(compiled.abi.to_json()) == compiled.abi  # as kept in the disk cache and exports


def test_a_kernel_scalar_in_the_shape_is_substituted():
    compiled = BoundScalarShape().compile(100, torch.empty(100), target="sm_80")
    (workspace,) = compiled.abi.workspaces
    assert [eval(workspace.numel, {}, {"n": n}) for n in (1, 32, 33, 100)] == [32, 32, 64, 128]


def test_a_workspace_named_like_a_parameter_is_renamed():
    compiled = NameClash().compile(64, torch.empty(64), target="sm_80")
    (workspace,) = compiled.abi.workspaces
    assert workspace.name != "workspace1" and workspace.name.startswith("workspace1")
    assert workspace.requires_clean


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_ptx_spins_with_acquire_and_releases_after_a_barrier_and_fence(arch):
    compiled = OrderedSum().compile(1000, torch.empty(STEPS, 1000), torch.empty(1000), target=arch)
    ptx = compiled.ptx
    lines = [line.strip() for line in ptx.splitlines()]
    polls = [i for i, line in enumerate(lines) if line.startswith("ld.relaxed.gpu.global")]
    acquires = [i for i, line in enumerate(lines) if line.startswith("ld.acquire.gpu.global")]
    releases = [i for i, line in enumerate(lines) if line.startswith("st.release.gpu.global.b32")]
    assert polls and len(acquires) == 1 and len(releases) == 2  # one lock, a release in each branch
    after = lines[acquires[0]:]
    barrier = next(i for i, line in enumerate(after) if line.startswith("bar.sync"))
    partial_load = next(i for i, line in enumerate(after) if line.startswith("ld.global.f32"))
    assert barrier < partial_load  # every thread reads the partial only after the barrier that ends the spin
    for release in releases:
        before = lines[max(0, release - 12):release]
        assert any(line.startswith("membar.gl") or line.startswith("fence.") for line in before)
        assert any(line.startswith("bar.sync") for line in before)
    # the spin: a loop whose body polls the semaphore and branches back while it differs
    code = "\n".join(line for line in lines if line and not line.startswith("//"))
    assert re.search(r"(\$L__BB\d+_\d+):\n[^$]*?ld\.relaxed\.gpu\.global\.s32[^\n]*\n"
                     r"setp\.ne\.s32[^\n]*\n@%p\d+ bra\s+\1;", code)
    source = compiled.cuda_source
    assert "__syncthreads()" in source and "__threadfence()" in source


def test_destination_passing_form_is_refused_with_the_reason():
    with pytest.raises(CompileError, match=r"global_tensor.*R\.call_tir"):
        OrderedSum().lower(1000, meta(STEPS, 1000), meta(1000), target="sm_90", dps=True)


def test_workspace_shape_must_not_depend_on_the_block():
    with pytest.raises(CompileError, match=r"depends on blockIdx.x.*run-time scalar parameters"):
        BlockShapedWorkspace().tile_program(64, meta(64), target="sm_80")


class Misuse(tilus.Script):
    def __init__(self, case: str):
        super().__init__()
        self.case = case

    def __call__(self, n: int32, x_ptr: ~float32, h_ptr: ~float16):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        gx = self.global_view(x_ptr, dtype=float32, shape=[n])
        sems = self.global_tensor(dtype=int32, shape=[4, 4], requires_clean=True)
        case = self.case
        if case == "no_requires_clean":
            self.global_tensor(dtype=int32, shape=[4])
        elif case == "requires_clean_int":
            self.global_tensor(dtype=int32, shape=[4], requires_clean=1)
        elif case == "layout":
            self.global_tensor(dtype=int32, shape=[4], layout="row", requires_clean=True)
        elif case == "zero_extent":
            self.global_tensor(dtype=int32, shape=[0, 4], requires_clean=True)
        elif case == "float_extent":
            self.global_tensor(dtype=int32, shape=[n * 0.5], requires_clean=True)
        elif case == "sub_byte":
            self.global_tensor(dtype=tilus.int4b, shape=[4], requires_clean=True)
        elif case == "whole_tensor":
            self.lock_semaphore(sems, 1)
        elif case == "partial_index":
            self.lock_semaphore(sems[0].item_ptr(), 1)
        elif case == "index_out_of_range":
            self.lock_semaphore(sems[4, 0].item_ptr(), 1)
        elif case == "float_semaphore":
            self.release_semaphore(gx[0].item_ptr(), 1)
        elif case == "float_value":
            self.release_semaphore(sems[0, 0].item_ptr(), 1.5)
        elif case == "huge_value":
            self.lock_semaphore(sems[0, 0].item_ptr(), 2**31)
        elif case == "pointer_value":
            self.lock_semaphore(x_ptr, 1)
        elif case == "arrive_whole_tensor":
            self.arrive_last(sems, 4)
        elif case == "arrive_float_counter":
            self.arrive_last(gx[0].item_ptr(), 4)
        elif case == "arrive_no_blocks":
            self.arrive_last(sems[0, 0].item_ptr(), 0)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_arrive_last_is_a_fenced_atomic_and_a_barrier_or(arch):
    """A barrier, thread 0's fence and atomic add, the last block's fence and reset, bar.red.or: no spin loop."""
    compiled = LastAddsUp().compile(1000, torch.empty(STEPS, 1000), torch.empty(1000), target=arch)
    assert "__syncthreads_or" in compiled.cuda_source
    lines = [line.strip() for line in compiled.ptx.splitlines()]
    atomic = next(i for i, line in enumerate(lines) if re.match(r"atom\.global\.add\.[us]32", line))
    assert any(line.startswith("bar.sync") for line in lines[:atomic])  # the block's stores are done
    assert any(line.startswith("membar.gl") for line in lines[atomic - 6:atomic])  # and fenced
    vote = next(i for i, line in enumerate(lines) if line.startswith("bar.red.or.pred"))
    assert atomic < vote and any(line.startswith("membar.gl") for line in lines[atomic:vote])  # the last's fence
    assert not any(line.startswith("ld.acquire") for line in lines)  # nothing spins
    program = str(LastAddsUp().tile_program(1000, meta(STEPS, 1000), meta(1000), target=arch))
    assert "arrive_last(" in program


@pytest.mark.parametrize("case, message", [
    ("no_requires_clean", r"requires_clean"),
    ("requires_clean_int", r"global_tensor: requires_clean must be True or False, got 1"),
    ("layout", r"global_tensor: layout 'row' is not supported"),
    ("zero_extent", r"global_tensor: shape \[0, 4\] must have positive extents"),
    ("float_extent", r"global_tensor: shape entry .* must be an integer"),
    ("sub_byte", r"global_tensor: dtype int4b has no torch counterpart"),
    ("whole_tensor", r"lock_semaphore: semaphore .* is a whole tensor; name one element"),
    ("partial_index", r"item_ptr: 1 indices for .* of rank 2"),
    ("index_out_of_range", r"index 4 is out of range for dimension 0 of"),
    ("float_semaphore", r"release_semaphore: semaphore .* must be int32, got float32"),
    ("float_value", r"release_semaphore: value must be an int or an integer scalar expression, got 1.5"),
    ("huge_value", r"lock_semaphore: value 2147483648 does not fit the int32 semaphore"),
    ("pointer_value", r"lock_semaphore: semaphore must be an element of a global tensor"),
    ("arrive_whole_tensor", r"arrive_last: semaphore .* is a whole tensor; name one element"),
    ("arrive_float_counter", r"arrive_last: semaphore .* must be int32, got float32"),
    ("arrive_no_blocks", r"arrive_last: total must be at least 1"),
])
def test_misuse_is_a_script_error_naming_the_argument(case, message):
    with pytest.raises(ScriptError, match=message):
        Misuse(case).tile_program(8, meta(8), meta(8, dtype=torch.float16), target="sm_80")


# --- GPU ------------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("script", [OrderedSum, LastAddsUp], ids=["semaphore_chain", "arrive_last"])
def test_ordered_sum_across_blocks_and_clean_semaphores_over_launches(script):
    """Both hand-offs: the chain of semaphores and the last block to arrive, bit for bit in split order; the
    semaphores / counters are zero again after every launch."""
    kernel = script()
    for n in (1000, 128, 4000, 1000):  # the workspaces grow for 4000 and are reused after
        x = torch.randn(STEPS, n, device="cuda")
        y = torch.full((n,), float("nan"), device="cuda")
        for _ in range(3):
            y.fill_(float("nan"))
            kernel(n, x, y)
        expected = x[0]
        for z in range(1, STEPS):
            expected = expected + x[z]  # the same order in float32: bit for bit
        torch.testing.assert_close(y, expected, rtol=0, atol=0)
    (compiled,) = kernel._tilus.kernels.values()
    semaphores = compiled.workspaces().tensors[1][torch.cuda.current_device()]
    assert semaphores.numel() >= -(-4000 // 128) and int(semaphores.abs().sum()) == 0


class ParameterSemaphores(tilus.Script):
    """Semaphores in a tensor the caller passes (not a workspace)."""

    def __call__(self, n: int32, sems_ptr: ~int32):
        self.attrs.blocks = [2, 3]
        self.attrs.warps = 2
        sems = self.global_view(sems_ptr, dtype=int32, shape=[3, 2])
        self.lock_semaphore(sems[self.blockIdx.y, self.blockIdx.x].item_ptr(), 0)
        self.release_semaphore(sems[self.blockIdx.y, self.blockIdx.x], n)


def test_semaphores_in_a_parameter_make_it_read_and_written():
    compiled = ParameterSemaphores().compile(5, torch.zeros(3, 2, dtype=torch.int32), target="sm_80")
    (_, sems) = compiled.abi.params
    assert sems.reads and sems.writes and compiled.abi.workspaces == ()
    assert "(&(sems_ptr_ptr[((((int)blockIdx.y) * 2) + ((int)blockIdx.x))]))" in compiled.cuda_source
