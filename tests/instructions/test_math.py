"""Elementwise math, comparisons, logical and bitwise operators, ``out=`` forms and scalar min/max:
lowering and PTX on the CPU (sm_80, sm_90), errors, and numerics against torch on the GPU."""
import re

import pytest
import torch
import tvm

from tilus_tvm import float32, int32
from tilus_tvm.errors import ScriptError
from tests.instructions import tile_ops as T
from tests.helpers import CaseScript
from tests.helpers import private_cache  # noqa: F401 - autouse: a cache directory per test


def weighted(flags):
    return sum(f.float() * float(1 << k) for k, f in enumerate(flags))


def logical_reference(x, y):
    p, q = x > 0, y > 0
    return weighted([p & q, p | q, p ^ q, ~p, p & q, p | q, p ^ q, ~q])


def in_place_reference(x, y):
    t = torch.exp(x) - y
    return torch.where(t > 1, torch.ones_like(t), t)


# op -> (reference(x, y), inputs made positive)
REFERENCES = {
    "exp": (lambda x, y: torch.exp(x), False),
    "exp2": (lambda x, y: torch.exp2(x), False),
    "log": (lambda x, y: torch.log(x), True),
    "log_abs": (lambda x, y: torch.log(x.abs() + 0.5), False),
    "sqrt": (lambda x, y: torch.sqrt(x), True),
    "rsqrt": (lambda x, y: torch.rsqrt(x), True),
    "abs": (lambda x, y: x.abs(), False),
    "round": (lambda x, y: torch.round(x), False),
    "square": (lambda x, y: x * x, False),
    "neg": (lambda x, y: -x, False),
    "sigmoid": (lambda x, y: torch.sigmoid(x), False),
    "maximum": (lambda x, y: torch.maximum(x, y), False),
    "minimum": (lambda x, y: torch.minimum(x, y), False),
    "where": (lambda x, y: torch.where(x > y, x, y * 2), False),
    "where_scalar": (lambda x, y: torch.where(x < 0, torch.zeros_like(x), x), False),
    "clip": (lambda x, y: x.clamp(-0.5, 0.75), False),
    "where_scalar_cond": (lambda x, y: x, False),
    "compare_ops": (lambda x, y: weighted([x < y, x <= y, x > y, x >= y, x == y, x != y]), False),
    "compare_methods": (lambda x, y: weighted([x < y, x <= y, x > y, x >= y, x == y, x != y]), False),
    "logical": (logical_reference, False),
    "add_out": (lambda x, y: (x + y) * 3, False),
    "inplace_out": (in_place_reference, False),
}
OPS = list(REFERENCES)


def f32(*shape):
    return torch.zeros(*shape)


@pytest.mark.parametrize("op", OPS)
def test_lowers_in_an_mma_accumulator_layout(op):
    mod = T.Binary(op, layout="mma_c").lower(f32(32, 32), f32(32, 32), f32(32, 32), target="sm_80")
    for func in mod.functions.values():
        tvm.tirx.analysis.verify_well_formed(func)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("op, instruction", [("round", r"cvt\.rni(\.ftz)?\.f32\.f32"), ("rsqrt", r"rsqrt\.approx"),
                                             ("sqrt", r"sqrt\.(approx|rn)"), ("maximum", r"max(\.ftz)?\.f32"),
                                             ("abs", r"abs(\.ftz)?\.f32"), ("exp2", r"ex2\.approx")])
def test_ptx_holds_the_instruction(op, instruction, arch):
    ptx = T.Binary(op).compile(f32(32, 32), f32(32, 32), f32(32, 32), target=arch).ptx
    assert f".target {arch}" in ptx and re.search(instruction, ptx)


def test_round_is_half_to_even_and_out_forms_write_in_place():
    source = T.Binary("round").compile(f32(32, 32), f32(32, 32), f32(32, 32), target="sm_80").cuda_source
    assert "nearbyintf(" in source  # rint: 0.5 -> 0, 1.5 -> 2 (torch.round's rule), not roundf
    program = str(T.Binary("inplace_out").tile_program(f32(32, 32), f32(32, 32), f32(32, 32), target="sm_80"))
    # exp, sub and where all write the loaded tensor x itself: no new tensor is declared for them
    assert "%x = unary(x=%x, op='exp')" in program and "%x = binary(lhs=%x, rhs=%y, op='sub')" in program
    assert "%x = where(cond=" in program


def test_integer_operators_compile_to_bitwise_instructions():
    i32 = torch.zeros(64, dtype=torch.int32)
    compiled = T.IntOps().compile(i32, i32, torch.zeros(9, 64, dtype=torch.int32), target="sm_90")
    source = compiled.cuda_source
    for text in (" & ", " | ", " ^ ", "~", " << ", " >> "):
        assert text in source
    assert "and.b32" in compiled.ptx and "xor.b32" in compiled.ptx and "shl.b32" in compiled.ptx


def test_scalar_min_max_of_run_time_values():
    source = T.ScalarMinMax().compile(1, 2, torch.zeros(5, dtype=torch.int32), target="sm_80").cuda_source
    assert "min(a, b)" in source and "max(a, b)" in source and "max(a, 3)" in source


class Bad(CaseScript):
    def __call__(self, x_ptr: ~float32, i_ptr: ~int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        x = self.load_global(self.global_view(x_ptr, dtype=float32, shape=[32]), offsets=[0], shape=[32])
        i = self.load_global(self.global_view(i_ptr, dtype=int32, shape=[32]), offsets=[0], shape=[32])
        if self.case == "exp_int":
            self.exp(i)
        if self.case == "float_and":
            y = x & x
        if self.case == "float_shift":
            y = x << 2
        if self.case == "not_float":
            y = self.logical_not(x)
        if self.case == "invert_float":
            y = ~x
        if self.case == "out_shape":
            self.add(x, x, out=self.register_tensor(dtype=float32, shape=[16]))
        if self.case == "out_dtype":
            self.exp(x, out=self.register_tensor(dtype=int32, shape=[32]))
        if self.case == "mixed":
            y = self.maximum(x, i)
        if self.case == "clip_tensor_bound":
            y = self.clip(x, i, 1.0)
        if self.case == "pow_int":
            y = i ** 2


@pytest.mark.parametrize("case, message", [
    ("exp_int", "exp: operand .*int32.* must have a floating-point dtype"),
    ("float_and", "and: operands must be bool .logical. or integer .bitwise. tensors"),
    ("float_shift", "shl: shifts need integer tensors"),
    ("not_float", "logical_not: x .* must be a bool tensor"),
    ("invert_float", "~: operand .* must be an integer .bitwise not. or bool tensor"),
    ("out_shape", r"add: out .*float32\[16\].* must be a register tensor of dtype float32 and shape \[32\]"),
    ("out_dtype", r"exp: out .*int32\[32\].* must be a register tensor of dtype float32"),
    ("mixed", "max: dtype mismatch between"),
    ("clip_tensor_bound", "max: dtype mismatch between"),
    ("pow_int", "pow: operands must be floating-point tensors"),
])
def test_errors_name_the_operation_and_operand(case, message):
    with pytest.raises(ScriptError, match=message):
        Bad(case).tile_program(f32(32), torch.zeros(32, dtype=torch.int32), target="sm_80")


# --- GPU ----------------------------------------------------------------------------------------
# every op in the mma accumulator layout; a few in the default layout and in one warp of four
GPU_CASES = [(op, "mma_c") for op in OPS] + [(op, layout) for op in ("exp", "rsqrt", "where", "compare_ops",
                                                                      "logical", "add_out")
                                             for layout in ("default", "one_warp")]


@pytest.mark.gpu
@pytest.mark.parametrize("op, layout", GPU_CASES)
def test_matches_torch(op, layout):
    reference, positive = REFERENCES[op]
    x = torch.randn(32, 32, device="cuda")
    y = torch.randn(32, 32, device="cuda")
    y[::3] = x[::3]  # some equal pairs for == and !=
    if positive:
        x = x.abs() + 0.1
    out = torch.full_like(x, float("nan"))
    T.Binary(op, layout=layout)(x, y, out)
    torch.testing.assert_close(out, reference(x, y), rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
def test_round_halves_to_even():
    x = torch.tensor([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, 0.49] * 128, device="cuda").reshape(32, 32)
    out = torch.full_like(x, float("nan"))
    T.Binary("round")(x, x, out)
    assert torch.equal(out, torch.round(x))


@pytest.mark.gpu
def test_integer_operators():
    x = torch.randint(-(1 << 20), 1 << 20, (64,), dtype=torch.int32, device="cuda")
    y = torch.randint(-(1 << 20), 1 << 20, (64,), dtype=torch.int32, device="cuda")
    out = torch.full((9, 64), -7, dtype=torch.int32, device="cuda")
    T.IntOps()(x, y, out)
    shift = y & 7
    expected = torch.stack([x & y, x | y, x ^ y, ~x, x.abs() << shift, x >> shift, torch.div(x, y | 1, rounding_mode="floor"),
                            torch.remainder(x, y | 1), x.abs()])
    assert torch.equal(out, expected)


@pytest.mark.gpu
def test_scalar_min_max():
    out = torch.full((5,), -99, dtype=torch.int32, device="cuda")
    T.ScalarMinMax()(7, -4, out)
    assert out.tolist() == [-4, 7, 7, -4, 11]
