"""tilus_tvm/ir/verifier.py: one broken program per check, each error naming the pass and quoting the
instruction as the printer prints it; and programs that are fine pass."""
import pytest
from tvm import tirx

from tilus_tvm import boolean, float16, float32, int8, int32
from tilus_tvm.errors import CompileError, VerificationError
from tilus_tvm.ir import inst as ir
from tilus_tvm.ir.printer import IRPrinter
from tilus_tvm.ir.stmt import ForStmt, Function, IfStmt, InstStmt, Param, SeqStmt
from tilus_tvm.ir.tensor import GlobalTensor, RegisterTensor, SharedTensor
from tilus_tvm.ir.verifier import verify
from tilus_tvm.layout.register import local, spatial
from tilus_tvm.layout.shared import shared_row_major

PASS = "layout_inference"


def seq(*items):
    return SeqStmt([InstStmt(s) if isinstance(s, ir.Instruction) else s for s in items])


def function(*items, warps=1):
    return Function("k", [], (1,), warps, seq(*items))


def reg(dtype=float32, shape=(32,), name="t", layout=None):
    return RegisterTensor(dtype, shape, layout=layout, name=name)


def loop(*items):
    return ForStmt(tirx.Var("i", "int32"), 0, 4, 1, seq(*items))


def printed_line(func, inst):
    printer = IRPrinter()
    printer.function(func)
    return printer.line_of(inst)


def expect_error(func, bad, match, require_layouts=False, pass_name=PASS):
    """verify() fails at ``bad``, names the pass, the kernel and the instruction's printed line."""
    with pytest.raises(VerificationError, match=match) as info:
        verify(func, pass_name, require_layouts=require_layouts)
    message = str(info.value)
    assert message.startswith(f"after pass '{pass_name}': ")
    assert f"in kernel k: {printed_line(func, bad)}" in message
    return message


def test_verification_error_is_a_compile_error():
    assert issubclass(VerificationError, CompileError)


# ---- definition before use -------------------------------------------------------------------
def test_a_tensor_used_before_it_is_defined():
    x, y = reg(name="x"), reg(name="y")
    bad = ir.Unary(y, x, "neg")
    message = expect_error(function(bad, ir.AllocateRegister(x, 0.0)), bad, "used before it is defined")
    assert message == ("after pass 'layout_inference': register tensor %x is used before it is defined\n"
                       "  in kernel k: %y: register float32[32] = unary(x=%x, op='neg')")


def test_a_tensor_defined_in_a_loop_is_not_visible_after_it():
    x, y = reg(name="x"), reg(name="y")
    bad = ir.Unary(y, x, "neg")
    expect_error(function(loop(ir.AllocateRegister(x, 0.0)), bad), bad, "outside the loop or branch")


def test_a_tensor_defined_in_a_branch_is_not_visible_after_it():
    x, y = reg(name="x"), reg(name="y")
    bad = ir.Unary(y, x, "neg")
    branch = IfStmt(tirx.Var("c", "bool"), seq(), seq(ir.AllocateRegister(x, 0.0)))
    expect_error(function(branch, bad), bad, "register tensor %x is used outside the loop or branch")


def test_a_shared_tensor_used_before_it_is_allocated():
    s, x = SharedTensor(float32, (32,), layout=shared_row_major(32), name="s"), reg(name="x")
    bad = ir.StoreShared(s, x, (0,), (0,))
    expect_error(function(ir.AllocateRegister(x, 0.0), bad, ir.AllocateShared(s)), bad,
                 "shared tensor %s is used before it is defined")


def test_loop_carried_tensors_are_assigned_into_tensors_defined_before_the_loop():
    acc, x, y = reg(name="acc"), reg(name="x"), reg(name="y")
    branch = IfStmt(tirx.Var("c", "bool"), seq(ir.Assign(acc, x)), seq(ir.Assign(acc, y)))
    func = function(ir.AllocateRegister(acc, 0.0),
                    loop(ir.AllocateRegister(x, 1.0), ir.Binary(y, acc, x, "add"), branch),
                    ir.Unary(reg(name="out"), acc, "neg"))
    verify(func, PASS)


# ---- layouts ---------------------------------------------------------------------------------
def test_a_layout_of_another_shape():
    x = reg(shape=(32,), name="x", layout=spatial(32) * local(2))
    bad = ir.AllocateRegister(x, 0.0)
    expect_error(function(bad), bad, r"register tensor %x of shape \[32\] has a layout of shape \[64\]")


def test_a_layout_over_more_threads_than_the_block_has():
    x = reg(shape=(64,), name="x", layout=spatial(64))
    bad = ir.AllocateRegister(x, 0.0)
    expect_error(function(bad, warps=1), bad, "spreads over 64 threads but the block has 32 \\(1 warp\\)")
    verify(function(ir.AllocateRegister(reg(shape=(64,), layout=spatial(64)), 0.0), warps=2), PASS)


def test_a_missing_layout_is_reported_where_the_tensor_is_defined():
    x = reg(shape=(32,), name="x")
    first = ir.AllocateRegister(x, 0.0)
    bad = ir.Unary(reg(name="y", layout=spatial(32)), x, "neg")
    func = function(first, bad)
    verify(func, "transpile")  # layouts are optional before layout inference
    expect_error(func, first, "register tensor %x has no layout", require_layouts=True)


def test_every_register_tensor_needs_a_layout_only_when_required():
    x = reg(name="x", layout=spatial(32))
    y = reg(name="y")
    bad = ir.Binary(y, x, 1.0, "mul")
    func = function(ir.AllocateRegister(x, 0.0), bad)
    verify(func, "transpile", require_layouts=False)
    expect_error(func, bad, "register tensor %y has no layout", require_layouts=True, pass_name="shared_memory")


# ---- dtypes ----------------------------------------------------------------------------------
def dtype_cases():
    """(name, definitions, the broken instruction, what the message says)."""
    f32, f16, b = reg(float32, name="f"), reg(float16, name="h"), reg(boolean, name="b")
    a8, b8 = reg(int8, (16, 16), name="a8"), reg(float16, (16, 8), name="b16")
    acc = reg(int32, (16, 8), name="acc")
    ptr = Param("p", "pointer", float32)
    g = GlobalTensor(float32, (32,), (1,), ptr, name="g")
    s = SharedTensor(float16, (32,), layout=shared_row_major(32), name="s")
    defs = [ir.AllocateRegister(t, 0) for t in (f32, f16, b, a8, b8, acc)] + [ir.GlobalView(g), ir.AllocateShared(s)]
    return [
        ("binary", defs, ir.Binary(reg(float32, name="o"), f32, f16, "add"),
         "binary: lhs %f is float32 but rhs %h is float16"),
        ("binary_output", defs, ir.Binary(reg(float16, name="o"), f32, 2.0, "mul"),
         "binary: output %o is float16 but lhs %f is float32"),
        ("comparison", defs, ir.Binary(reg(float32, name="o"), f32, 0.0, "lt"),
         "binary: output %o is float32, expected bool"),
        ("where", defs, ir.Where(reg(float32, name="o"), b, f32, f16), "where: x %f is float32 but y %h is float16"),
        ("where_cond", defs, ir.Where(reg(float32, name="o"), f32, f32, 0.0), "where: cond %f is float32, expected bool"),
        ("dot", defs, ir.Dot(reg(int32, (16, 8), name="o"), a8, b8, acc), "dot: a %a8 is int8 but b %b16 is float16"),
        ("assign", defs, ir.Assign(f16, f32), "assign: src %f is float32 but dst %h is float16"),
        ("convert_layout", defs, ir.ConvertLayout(reg(float16, name="o"), f32),
         "convert_layout: output %o is float16 but x %f is float32"),
        ("load_global", defs, ir.LoadGlobal(reg(float16, name="o"), g, (0,), (0,)),
         "load_global: output %o is float16 but src %g is float32"),
        ("load_shared", defs, ir.LoadShared(reg(float32, name="o"), s, (0,), (0,)),
         "load_shared: output %o is float32 but src %s is float16"),
        ("store_shared", defs, ir.StoreShared(s, f32, (0,), (0,)),
         "store_shared: src %f is float32 but dst %s is float16"),
        ("store_global", defs, ir.StoreGlobal(g, f16, (0,), (0,)),
         "store_global: src %h is float16 but dst %g is float32"),
    ]


@pytest.mark.parametrize("name,defs,bad,match", dtype_cases(), ids=[c[0] for c in dtype_cases()])
def test_a_dtype_mismatch(name, defs, bad, match):
    expect_error(function(*defs, bad), bad, match)


def test_matching_dtypes_pass():
    f, g, c = reg(float32, name="f"), reg(float32, name="g"), reg(boolean, name="c")
    verify(function(ir.AllocateRegister(f, 0.0), ir.AllocateRegister(g, 0.0),
                    ir.Binary(c, f, g, "lt"), ir.Binary(reg(float32, name="s"), f, 1.0, "add"),
                    ir.Where(reg(float32, name="w"), c, f, 0.0)), PASS)


# ---- shared memory lifetime ------------------------------------------------------------------
def shared_program():
    s = SharedTensor(float32, (32,), layout=shared_row_major(32), name="s")
    x = reg(name="x")
    return s, x, [ir.AllocateShared(s), ir.AllocateRegister(x, 0.0), ir.StoreShared(s, x, (0,), (0,))]


def test_shared_memory_used_after_free_shared():
    s, x, insts = shared_program()
    free = ir.FreeShared(s)
    bad = ir.LoadShared(reg(name="y"), s, (0,), (0,))
    message = expect_error(function(*insts, free, bad), bad, "shared tensor %s is used after it was freed")
    assert "freed by `free_shared(tensor=%s)`" in message


def test_shared_memory_freed_inside_a_loop_is_freed_after_it():
    s, x, insts = shared_program()
    bad = ir.StoreShared(s, x, (0,), (0,))
    expect_error(function(*insts, loop(ir.FreeShared(s)), bad), bad, "used after it was freed")


def test_shared_memory_freed_twice():
    s, x, insts = shared_program()
    bad = ir.FreeShared(s)
    expect_error(function(*insts, ir.FreeShared(s), bad), bad, "shared tensor %s is freed twice")


def test_a_free_in_one_branch_does_not_affect_the_other():
    s, x, insts = shared_program()
    branch = IfStmt(tirx.Var("c", "bool"), seq(ir.FreeShared(s)), seq(ir.StoreShared(s, x, (0,), (0,)),
                                                                       ir.FreeShared(s)))
    verify(function(*insts, branch), PASS)
    bad = ir.Sync()
    after = ir.LoadShared(reg(name="y"), s, (0,), (0,))
    expect_error(function(*insts, branch, bad, after), after, "used after it was freed")


# ---- programs from the frontend --------------------------------------------------------------
def test_the_example_kernels_verify_after_every_pass():
    import torch

    from tests.lang import kernels as K
    from tilus_tvm import option

    assert option.get_option("debug.verify")  # the pipeline verifies between passes: these would raise
    K.LoopCarried().tile_program(3, torch.zeros(3, 64), torch.zeros(64), target="sm_80")
    K.SharedRoundTrip().tile_program(torch.zeros(32, 64, dtype=torch.float16),
                                     torch.zeros(32, 64, dtype=torch.float16), target="sm_80")
    K.ScalarControl().tile_program(5, torch.zeros(5, dtype=torch.int32), target="sm_80")
