"""while, break and continue in kernels: the tile program they translate to, the TIR and CUDA they
lower to (sm_80 and sm_90), and the errors for what cannot be lowered (CPU only)."""
import pytest
import torch
import tvm

import tilus_tvm as tilus
from tilus_tvm import float32, int32
from tests.lang import control_kernels as C
from tests.helpers import private_cache  # noqa: F401 - autouse: a cache directory per test


def f32(*shape):
    return torch.zeros(*shape)


def f16(*shape):
    return torch.zeros(*shape, dtype=torch.float16)


def i32(*shape):
    return torch.zeros(*shape, dtype=torch.int32)


KERNELS = {
    "threshold_scan": lambda: (C.ThresholdScan(), (3, 10, 2.0, f32(3, 10), f32(3), i32(3, 2))),
    "first_non_positive": lambda: (C.FirstNonPositive(), (3, 10, f32(3, 10), i32(3))),
    "tile_loop_jumps": lambda: (C.TileLoopJumps(), (3, 5, 2, f32(3, 320), i32(3), f32(3, 64))),
    "grid3d": lambda: (C.Grid3D(), (2, 3, 100, f32(2, 3, 100), f32(2, 3, 100))),
    "while_matmul": lambda: (C.WhileMatmul(), (40, f16(64, 40), f16(40, 64), f32(64, 64))),
}


def body_lines(kernel, *args) -> list[str]:
    """The tile program's statements (the header's attrs lines left out), stripped of indentation
    only where a test compares whole lines."""
    text = str(kernel.tile_program(*args, target="sm_80"))
    return [line for line in text.splitlines()[1:] if not line.strip().startswith("attrs.")]


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("name", sorted(KERNELS))
def test_kernels_compile_to_ptx(name, arch):
    kernel, args = KERNELS[name]()
    compiled = kernel.compile(*args, target=arch)
    tvm.tirx.analysis.verify_well_formed(compiled.prim_func)
    assert f".target {arch}" in compiled.ptx and ".entry" in compiled.ptx


def test_while_with_continue_and_break_translates_to_a_loop():
    kernel, args = KERNELS["threshold_scan"]()
    lines = body_lines(kernel, *args)
    start = next(i for i, line in enumerate(lines) if line.strip().startswith("while"))
    assert [line.strip() for line in lines[start:start + 11]] == [
        "while i < n:",
        "var g1_at2: float32",
        "load_global_scalar(buffer=g1_at2, src=%g1, indices=(blockIdx.x, i))",
        "i = i + 1",
        "if g1_at2 < T.float32(0.0):",
        "continue",
        "total = total + g1_at2",
        "count = count + 1",
        "if total > limit:",
        "break",
        "%g3: global float32[rows] strides=[1] pointer=out_ptr = global_view()",
    ]
    source = kernel.compile(*args, target="sm_80").cuda_source
    loop = source[source.index("while (1)"):source.index("r5_ptr[0] = total_ptr[0]")]
    assert "if (!((i_ptr[0] < n))) { break; }" in loop  # the condition is tested before every iteration
    assert loop.count("continue;") == 1 and loop.count("break;") == 2


def test_while_condition_that_needs_statements_repeats_them_every_iteration():
    kernel, args = KERNELS["first_non_positive"]()
    lines = [line.strip() for line in body_lines(kernel, *args)]
    start = lines.index("while T.bool(True):")
    assert lines[start + 1:start + 6] == [
        "var g1_at2: float32",
        "load_global_scalar(buffer=g1_at2, src=%g1, indices=(blockIdx.x, i))",
        "if not g1_at2 > T.float32(0.0):",
        "break",
        "i = i + 1",
    ]


def test_layout_conversions_are_inserted_inside_while_bodies():
    kernel, args = KERNELS["while_matmul"]()
    lines = [line.strip() for line in body_lines(kernel, *args)]
    start = lines.index("while k < k_size:")
    body = [line.split(" = ")[-1].split("(")[0] for line in lines[start + 1:start + 7]]
    assert body == ["load_global", "load_global", "convert_layout", "dot", "assign", "k + 16"]
    assert "mma.sync.aligned.m16n8k16" in kernel.compile(*args, target="sm_80").ptx


def test_break_in_an_unrolled_range_keeps_the_loop_for_nvcc_to_unroll():
    kernel, args = KERNELS["tile_loop_jumps"]()
    source = kernel.compile(*args, target="sm_80").cuda_source
    # TVM's own unrolling would copy the body four times and leave `break` outside any loop
    assert "#pragma unroll\n  for (int v_1 = 0; v_1 < 4; ++v_1) {" in source
    assert "if (v_1 == cut) {\n      break;" in source


def test_unrolled_range_without_jumps_is_still_unrolled_by_tvm():
    class Unrolled(tilus.Script):
        def __call__(self, out_ptr: ~float32):
            self.attrs.blocks = 1
            self.attrs.warps = 1
            acc = self.register_tensor(dtype=float32, shape=[32], init=1.0)
            for k in self.range(3, unroll=True):
                acc = acc * 2.0
            self.store_global(self.global_view(out_ptr, dtype=float32, shape=[32]), acc, offsets=[0])

    source = Unrolled().compile(f32(32), target="sm_80").cuda_source
    assert "#pragma unroll" not in source and "for (" not in source


def test_compile_time_loop_with_compile_time_break_and_continue_is_unrolled_while_translating():
    kernel, args = KERNELS["tile_loop_jumps"]()
    adds = [line.split("binary(")[1] for line in body_lines(kernel, *args) if "rhs=" in line and "op='add'" in line
            and "%acc." in line.split("=")[0]]
    assert adds == ["lhs=%acc, rhs=10.0, op='add')", "lhs=%acc.1, rhs=20.0, op='add')"]


def test_statements_after_an_unconditional_break_are_not_translated():
    class AfterBreak(tilus.Script):
        def __call__(self, n: int32):
            self.attrs.blocks = 1
            self.attrs.warps = 1
            for i in range(n):
                self.printf("before %d\n", i)
                break
                self.printf("never\n")
            self.printf("after\n")

    text = str(AfterBreak().tile_program(4, target="sm_80"))
    assert "before" in text and "after" in text and "never" not in text


def test_while_over_an_int_condition_and_compile_time_conditions():
    class Conditions(tilus.Script):
        def __init__(self, enabled: bool):
            super().__init__()
            self.enabled = enabled

        def __call__(self, n: int32):
            self.attrs.blocks = 1
            self.attrs.warps = 1
            left: int32 = n
            while left:
                left -= 1
            while self.enabled:
                self.printf("once\n")
                break

    lines = [line.strip() for line in body_lines(Conditions(True), 3)]
    assert "while left != 0:" in lines
    assert lines[-3:] == ["while T.bool(True):", "printf(fmt='once\\n', args=())", "break"]
    lines = [line.strip() for line in body_lines(Conditions(False), 3)]
    assert sum(line.startswith("while") for line in lines) == 1  # `while False` emits nothing


class Mistake(tilus.Script):
    """Each case is one mistake in a loop (the test states it)."""

    def __init__(self, case: str):
        super().__init__()
        self.case = case

    def __call__(self, n: int32, x_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        g = self.global_view(x_ptr, dtype=float32, shape=[n])
        if self.case == "runtime_break_in_unrolled_loop":
            for k in [0, 1, 2]:
                if k < n:
                    break
        if self.case == "runtime_continue_in_unrolled_loop":
            for k in [0, 1, 2]:
                if k < n:
                    continue
        if self.case == "tensor_condition":
            x = self.load_global(g, offsets=[0], shape=[32])
            while x:
                pass
        if self.case == "python_counter":
            k = 0
            while k < n:
                k = k + 1
        if self.case == "while_else":
            while n > 0:
                pass
            else:
                pass


MISTAKES = {
    "runtime_break_in_unrolled_loop": "'break' under a run-time condition in a loop that is unrolled while compiling",
    "runtime_continue_in_unrolled_loop": "'continue' under a run-time condition in a loop that is unrolled",
    "tensor_condition": "has no truth value",
    "python_counter": "declare it as a variable with a type, e.g. `k: int32 = ...`",
    "while_else": "while ... else is not supported",
}


@pytest.mark.parametrize("case", sorted(MISTAKES))
def test_mistakes_in_loops_name_the_problem_and_the_line(case):
    with pytest.raises(tilus.ScriptError, match=MISTAKES[case]) as info:
        Mistake(case).compile(4, f32(4), target="sm_80")
    assert "test_control_flow.py:" in str(info.value)


def nonzero(value):
    """``value != 0`` evaluated outside the kernel's code: TVM's NotEqualOp, not an NE expression."""
    return value != 0


def test_comparison_returned_by_a_helper_is_a_run_time_condition():
    """TVM's ``expr != x`` made by plain Python (a helper, a method) is a NotEqualOp whose truth is object
    identity: an if on it must still branch at run time, with its else, not be taken as always true."""
    class HelperCondition(tilus.Script):
        def __call__(self, n: int32, out_ptr: ~float32):
            self.attrs.blocks = 1
            self.attrs.warps = 1
            go = self.global_view(out_ptr, dtype=float32, shape=[32])
            if nonzero(n - 3):
                self.store_global(go, self.register_tensor(dtype=float32, shape=[32], init=1.0), offsets=[0])
            else:
                self.store_global(go, self.register_tensor(dtype=float32, shape=[32], init=2.0), offsets=[0])
            flag = 1 if nonzero(n) else 0  # an IfExp on it is a run-time select too
            self.store_global(go, self.register_tensor(dtype=float32, shape=[32], init=flag * 3.0), offsets=[0])

    text = str(HelperCondition().tile_program(4, f32(32), target="sm_80"))
    assert "if n - 3 != 0:" in text and "else:" in text
    source = HelperCondition().compile(4, f32(32), target="sm_80").cuda_source
    assert "2.000000e+00" in source and "1.000000e+00" in source
