"""tilus_tvm/lang/cuda_helpers.py: ``self.cuda`` -- mma configurations and layouts, checked against our
mma atoms, against the layouts ``dot`` uses, and against the formulas Tilus documents."""
import doctest
import itertools

import pytest
import torch

import tilus_tvm as tilus
from tilus_tvm import bfloat16, float16, float32, int8, int32
from tilus_tvm.errors import ScriptError
from tilus_tvm.instructions.dot import choose_dot_config, dot_layouts
from tilus_tvm.ir import inst as ir
from tilus_tvm.ir.inst import DotConfig
from tilus_tvm.ir.layout.ops import (auto_local_spatial, column_local, column_spatial, local, permute, reduce,
                                     shared_row_major, shared_row_major_swizzle, spatial)
from tilus_tvm.ir.stmt import instructions
from tilus_tvm.lang import cuda_helpers
from tilus_tvm.lang.cuda_helpers import AtomicMmaConfig, BlockMmaConfig, CudaHelpers
from tilus_tvm.layout.atoms import get_mma_atom
from tilus_tvm.runtime import cache

cuda = CudaHelpers
configs = CudaHelpers.atomic_mma_configs


def test_doctests():
    globs = dict(float16=float16, float32=float32, bfloat16=bfloat16)
    assert doctest.testmod(cuda_helpers, extraglobs=globs).failed == 0


def test_self_cuda_is_there_in_init_and_in_the_kernel():
    class Probe(tilus.Script):
        def __init__(self):
            super().__init__()
            self.mma = self.cuda.resolve_dot_config(float16, float32, m=32, n=32, k=16, num_warps=2)

        def __call__(self, x_ptr: ~float32):
            self.attrs.blocks = 1
            self.attrs.warps = 2
            gx = self.global_view(x_ptr, dtype=float32, shape=[32, 32])
            x = self.load_global(gx, offsets=[0, 0], shape=[32, 32])
            self.annotate_layout(x, self.cuda.default_register_layout(num_warps=2, dtype=float32, shape=[32, 32]))
            self.store_global(gx, x + 1.0, offsets=[0, 0])

    probe = Probe()
    assert probe.cuda is CudaHelpers and probe.mma.num_warps == 2
    func = probe.tile_program(torch.empty(32, 32, device="meta"), target="sm_80")
    (load,) = [i for i in instructions(func.body) if isinstance(i, ir.LoadGlobal)]
    assert load.output.layout == cuda.default_register_layout(2, float32, [32, 32])


# ---- atomic configurations ---------------------------------------------------------------------------
# The fragment layouts as Tilus writes them (its AtomicMmaConfig), for the names both sides have.
TILUS_FRAGMENTS = {
    "m16n8k16_f16_f32": (column_local(2, 2).spatial(8, 4).local(1, 2), local(2, 1).column_spatial(4, 8).local(2, 1)),
    "m16n8k16_f16_f16": (column_local(2, 2).spatial(8, 4).local(1, 2), local(2, 1).column_spatial(4, 8).local(2, 1)),
    "m16n8k16_bf16_f32": (column_local(2, 2).spatial(8, 4).local(1, 2), local(2, 1).column_spatial(4, 8).local(2, 1)),
    "m16n8k16_i8_i32": (column_local(2, 1).spatial(8, 4).local(1, 4), column_spatial(4, 8).local(4, 1)),
    "m16n8k32_i8_i32": (column_local(2, 2).spatial(8, 4).local(1, 4), local(2, 1).column_spatial(4, 8).local(4, 1)),
}


@pytest.mark.parametrize("name", sorted(TILUS_FRAGMENTS))
def test_atomic_configs_have_tilus_fragments(name):
    config = getattr(configs, name)
    la, lb = TILUS_FRAGMENTS[name]
    assert (config.la, config.lb, config.lc) == (la, lb, local(2, 1).spatial(8, 4).local(1, 2))
    assert (config.m, config.n, config.vec_k) == (16, 8, 1) and config.name == name


@pytest.mark.parametrize("name", configs.names())
def test_atomic_configs_wrap_our_atoms(name):
    config = getattr(configs, name)
    atom = get_mma_atom(config.operand_type, config.operand_type, config.acc_type, k=config.k)
    assert config.atom is atom and (config.la, config.lb, config.lc) == (atom.a_layout, atom.b_layout, atom.c_layout)
    assert isinstance(config, AtomicMmaConfig) and repr(config) == f"AtomicMmaConfig({name})"


def test_from_dtypes_picks_tilus_instruction():
    assert configs.from_dtypes(float16, float32) is configs.m16n8k16_f16_f32
    assert configs.from_dtypes("float16", "float16") is configs.m16n8k16_f16_f16
    assert configs.from_dtypes(bfloat16, float32) is configs.m16n8k16_bf16_f32
    assert configs.from_dtypes(int8, int32) is configs.m16n8k32_i8_i32
    with pytest.raises(ScriptError, match=r"no mma.sync instruction for operand_dtype=bfloat16 with "
                                          r"accumulator_dtype=bfloat16; supported"):
        configs.from_dtypes(bfloat16, bfloat16)
    with pytest.raises(ScriptError, match="operand_dtype='half8' is not a data type"):
        configs.from_dtypes("half8", float32)


def test_a_missing_instruction_lists_the_ones_there():
    with pytest.raises(AttributeError, match="atomic_mma_configs has no 'm8n8k16_i8_i32'; .* m16n8k32_i8_i32"):
        configs.m8n8k16_i8_i32  # noqa: B018


# ---- block configurations ----------------------------------------------------------------------------
GRIDS = [(1, 1), (2, 2), (4, 1), (1, 4), (2, 4)]
REPEATS = [(1, 1, 1), (2, 4, 1), (1, 2, 2), (4, 8, 1)]


@pytest.mark.parametrize("name", ["m16n8k16_f16_f32", "m16n8k16_bf16_f32", "m16n8k32_i8_i32", "m16n8k8_f16_f16"])
@pytest.mark.parametrize("grid, repeat", list(itertools.product(GRIDS, REPEATS)))
def test_block_layouts_are_the_layouts_dot_uses(name, grid, repeat):
    atomic = getattr(configs, name)
    block = cuda.mma_dot_config(atomic, grid, repeat)
    dot_config = DotConfig("mma", atomic.atom, grid[0], grid[1], 1, *repeat)
    assert (block.la, block.lb, block.lc) == dot_layouts(dot_config)
    assert (block.m, block.n, block.k) == (16 * grid[0] * repeat[0], 8 * grid[1] * repeat[1], atomic.k * repeat[2])
    assert block.lc.num_threads == block.la.num_threads == block.lb.num_threads == 32 * block.num_warps
    assert block.lb_T == permute(block.lb, [1, 0])


@pytest.mark.parametrize("grid, repeat", list(itertools.product(GRIDS, REPEATS)))
def test_block_layouts_are_tilus_warp_grid_formulas(grid, repeat):
    # Tilus's block layouts: the A grid is reduce(spatial(wsm, 1, wsn, ranks=[1, 0, 2]), dims=[2]) etc.
    (wsm, wsn), (wrm, wrn, wrk) = grid, repeat
    atomic = configs.m16n8k16_f16_f32
    block = cuda.mma_dot_config(atomic, grid, repeat)
    assert block.la == reduce(spatial(wsm, 1, wsn, ranks=[1, 0, 2]), dims=[2]).local(wrm, wrk) * atomic.la
    assert block.lb == reduce(spatial(1, wsn, wsm, ranks=[0, 2, 1]), dims=[2]).local(wrk, wrn) * atomic.lb
    assert block.lc == spatial(wsm, wsn).local(wrm, wrn) * atomic.lc


@pytest.mark.parametrize("operand, acc", [(float16, float32), (bfloat16, float32), (int8, int32), (float16, float16)])
@pytest.mark.parametrize("m, n, k, warps", [(64, 64, 32, 4), (128, 128, 64, 8), (16, 128, 64, 4), (128, 16, 64, 4),
                                            (64, 256, 64, 8), (32, 32, 64, 1)])
def test_resolve_picks_the_grid_dot_picks_on_its_own(operand, acc, m, n, k, warps):
    block = cuda.resolve_dot_config(operand, acc, m=m, n=n, k=k, num_warps=warps)
    chosen = choose_dot_config(m, n, k, operand.name, acc.name, warps)
    assert block.warp_spatial == (chosen.warps_m, chosen.warps_n) and chosen.replicas == 1
    assert block.warp_repeat == (chosen.repeat_m, chosen.repeat_n, chosen.repeat_k)
    assert (block.la, block.lb, block.lc) == dot_layouts(chosen)


def test_resolve_honours_warp_m_and_warp_n():
    block = cuda.resolve_dot_config(float16, float32, m=64, n=64, k=64, warp_m=4, warp_n=1)
    assert (block.warp_spatial, block.warp_repeat, block.num_warps) == ((4, 1), (1, 8, 4), 4)
    block = cuda.resolve_dot_config(float16, float32, m=64, n=64, k=16, num_warps=4, warp_n=4)
    assert block.warp_spatial == (1, 4)
    assert isinstance(block, BlockMmaConfig) and block.atomic_mma is configs.m16n8k16_f16_f32


def test_configurations_are_stable_hyper_parameters():
    class Holder(tilus.Script):
        def __init__(self):
            super().__init__()
            self.mma = self.cuda.resolve_dot_config(float16, float32, m=64, n=64, k=32, num_warps=4)
            self.layout_sa = self.cuda.swizzled_shared_layout(float16, shape=[64, 32])

        def __call__(self, x_ptr: ~float32):
            self.attrs.blocks = 1
            self.attrs.warps = 4

    one, two = Holder(), Holder()
    assert repr(one.hyper_parameters()) == repr(two.hyper_parameters())
    assert cache.kernel_key(Holder, one.hyper_parameters(), (), "sm_80") == \
        cache.kernel_key(Holder, two.hyper_parameters(), (), "sm_80")


@pytest.mark.parametrize("call, message", [
    (lambda: cuda.resolve_dot_config(float16, float32, m=60, n=64, k=32, num_warps=4),
     r"tile m=60, n=64, k=32 is not a multiple of the m16n8k16_f16_f32 instruction \(m 16, n 8, k 16\)"),
    (lambda: cuda.resolve_dot_config(float16, float32, m=16, n=8, k=16, num_warps=4),
     r"no grid of 4 warps \(warp_m=None, warp_n=None\) divides the 1 x 1 m16n8k16_f16_f32 tiles"),
    (lambda: cuda.resolve_dot_config(float16, float32, m=64, n=64, k=16, warp_m=2),
     r"give num_warps, or both warp_m and warp_n"),
    (lambda: cuda.resolve_dot_config(float16, float32, m=64, n=64, k=16, num_warps=0),
     r"num_warps must be a positive int, got 0"),
    (lambda: cuda.resolve_dot_config(float16, float32, m=256, n=256, k=64, num_warps=1),
     r"needs \d+ registers per thread for its fragments \(limit 223\)"),
    (lambda: cuda.mma_dot_config("m16n8k16", (1, 1), (1, 1, 1)), r"atomic_mma must be one of"),
    (lambda: cuda.mma_dot_config(configs.m16n8k16_f16_f32, (1, 1, 1), (1, 1, 1)), r"warp_spatial must be"),
    (lambda: cuda.mma_dot_config(configs.m16n8k16_f16_f32, (1, 1), (1, 0, 1)), r"warp_repeat\[1\] must be"),
])
def test_bad_configurations_are_named(call, message):
    with pytest.raises(ScriptError, match=message):
        call()


# ---- layouts -----------------------------------------------------------------------------------------
def tilus_default_register_layout(num_warps, nbytes, shape, vector_size=None):
    """Tilus's definition: vectors of gcd(elements per thread, 16 bytes, last dim), auto_local_spatial."""
    import math

    threads = num_warps * 32
    per_thread = math.prod(shape) // threads
    vector = vector_size or math.gcd(per_thread, 16 // nbytes, shape[-1])
    grid = list(shape[:-1]) + [shape[-1] // vector]
    return auto_local_spatial(threads, grid).local(*([1] * (len(shape) - 1)), vector)


@pytest.mark.parametrize("warps, dtype, shape, vector", [
    (4, float32, [64, 64], None), (4, float16, [64, 64], None), (1, float32, [32, 8], None), (2, float16, [8, 24], None),
    (4, float32, [128], None), (8, float32, [2, 16, 64], None), (4, float16, [64, 64], 2), (1, int8, [32, 64], None),
])
def test_default_register_layout_is_tilus_definition(warps, dtype, shape, vector):
    layout = cuda.default_register_layout(warps, dtype, shape, vector_size=vector)
    assert layout == tilus_default_register_layout(warps, dtype.nbytes, shape, vector)
    assert layout.num_threads == 32 * warps and list(layout.shape) == shape and not layout.is_replicated


def test_default_register_layout_refusals():
    with pytest.raises(ScriptError, match=r"128 threads \(4 warps\) do not divide the 64 elements of shape \[8, 8\]"):
        cuda.default_register_layout(4, float32, [8, 8])
    with pytest.raises(ScriptError, match="vector_size 3 must divide the 16 elements per thread"):
        cuda.default_register_layout(1, float32, [32, 16], vector_size=3)
    with pytest.raises(ScriptError, match="shape must be a non-empty list"):
        cuda.default_register_layout(1, float32, 64)


def test_shared_layouts():
    assert cuda.shared_layout([3, 64, 32]) == shared_row_major(3, 64, 32)
    assert cuda.shared_layout(shape=(4, 4)) == shared_row_major(4, 4)
    assert cuda.swizzled_shared_layout(bfloat16, shape=[2, 64, 64]) == shared_row_major_swizzle([2, 64, 64], 2)
    with pytest.raises(ScriptError, match="shared_layout: shape must be a list or tuple"):
        cuda.shared_layout(64)
    with pytest.raises(ScriptError, match="swizzled_shared_layout: .*rows \\(4\\) must be a multiple of 8"):
        cuda.swizzled_shared_layout(float16, shape=[4, 64])


def test_round_up_to_multiple_in_self_utils():
    utils = tilus.Script().utils
    assert [utils.round_up_to_multiple(v, 16) for v in (0, 1, 16, 17)] == [0, 16, 16, 32]


class PinnedDot(tilus.Script):
    """[64, 64] @ [64, 32] on 4 warps, the accumulator pinned to ``pinned`` (or not pinned)."""

    def __init__(self, pinned=None):
        super().__init__()
        self.pinned = pinned

    def __call__(self, a_ptr: ~float16, b_ptr: ~float16, c_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 4
        ga = self.global_view(a_ptr, dtype=float16, shape=[64, 64])
        gb = self.global_view(b_ptr, dtype=float16, shape=[64, 32])
        gc = self.global_view(c_ptr, dtype=float32, shape=[64, 32])
        acc = self.register_tensor(dtype=float32, shape=[64, 32], layout=self.pinned, init=0.0)
        a = self.load_global(ga, offsets=[0, 0], shape=[64, 64])
        b = self.load_global(gb, offsets=[0, 0], shape=[64, 32])
        self.dot(a, b, acc, out=acc)
        self.store_global(gc, acc, offsets=[0, 0])


@pytest.mark.parametrize("grid", [None, (4, 1), (2, 2), (1, 4)])
def test_dot_runs_on_the_grid_of_a_pinned_accumulator(grid):
    pinned = None if grid is None else cuda.resolve_dot_config(float16, float32, m=64, n=32, k=64, warp_m=grid[0],
                                                               warp_n=grid[1])
    kernel = PinnedDot(None if pinned is None else pinned.lc)
    args = (torch.empty(64, 64, dtype=torch.float16, device="meta"),
            torch.empty(64, 32, dtype=torch.float16, device="meta"), torch.empty(64, 32, device="meta"))
    insts = list(instructions(kernel.tile_program(*args, target="sm_80").body))
    (dot,) = [i for i in insts if isinstance(i, ir.Dot)]
    default = cuda.resolve_dot_config(float16, float32, m=64, n=32, k=64, num_warps=4)
    assert (dot.config.warps_m, dot.config.warps_n) == (grid or default.warp_spatial)
    assert not [i for i in insts if isinstance(i, ir.ConvertLayout)]  # the loads take the fragment layouts


def test_an_accumulator_pinned_to_no_mma_layout_is_converted():
    kernel = PinnedDot(spatial(8, 16).local(8, 2))
    args = (torch.empty(64, 64, dtype=torch.float16, device="meta"),
            torch.empty(64, 32, dtype=torch.float16, device="meta"), torch.empty(64, 32, device="meta"))
    insts = list(instructions(kernel.tile_program(*args, target="sm_80").body))
    (dot,) = [i for i in insts if isinstance(i, ir.Dot)]
    assert (dot.config.warps_m, dot.config.warps_n) == (2, 2)  # the grid dot picks on its own
    assert len([i for i in insts if isinstance(i, ir.ConvertLayout)]) == 2  # acc into fragments and back
