"""tilus_tvm/ir/printer.py: exact text for small programs built by hand, and the examples' programs."""
from dataclasses import dataclass

from tvm import tirx

from tilus_tvm import bfloat16, boolean, float16, float32, int32
from tilus_tvm.ir import inst as ir
from tilus_tvm.ir.printer import IRPrinter, print_function, print_instruction, snake_case
from tilus_tvm.ir.stmt import (AssignScalar, BindScalar, DeclareScalar, ForStmt, Function, IfStmt, InstStmt, Param,
                               SeqStmt)
from tilus_tvm.ir.tensor import GlobalTensor, RegisterTensor, SharedTensor
from tilus_tvm.layout.atoms import get_mma_atom
from tilus_tvm.layout.register import local, spatial
from tilus_tvm.layout.shared import shared_row_major


def body(*insts_or_stmts):
    return SeqStmt([s if not isinstance(s, ir.Instruction) else InstStmt(s) for s in insts_or_stmts])


def scale_kernel():
    """y[i] = x[i] + acc over a loop, then a branch and a shared-memory round trip."""
    n = tirx.Var("n", "int32")
    i = tirx.Var("i", "int32")
    n_param = Param("n", "scalar", int32, var=n)
    x_ptr = Param("x_ptr", "pointer", float32)
    y_ptr = Param("y_ptr", "pointer", float32)
    block = Param("block", "const", value=128)
    gx = GlobalTensor(float32, (n,), (1,), x_ptr, name="gx")
    gy = GlobalTensor(float32, (n,), (1,), y_ptr, name="gy")
    layout = spatial(32) * local(4)
    acc = RegisterTensor(float32, (128,), layout=layout, name="acc")
    x = RegisterTensor(float32, (128,), layout=layout, name="x")
    y = RegisterTensor(float32, (128,), layout=layout, name="y")
    s = SharedTensor(float32, (128,), layout=shared_row_major(128), name="s")
    loop = ForStmt(i, 0, 4, 1, body(
        ir.LoadGlobal(x, gx, (i * 128,), (0,)),
        ir.Binary(y, x, acc, "add"),
        ir.Assign(acc, y),
    ), unroll=True)
    branch = IfStmt(n > 0, body(ir.StoreGlobal(gy, acc, (0,), (0,))), body(ir.Sync()))
    return Function("scale", [n_param, x_ptr, y_ptr, block], ((n + 127) // 128,), 1, body(
        ir.GlobalView(gx),
        ir.GlobalView(gy),
        ir.AllocateRegister(acc, 0.0),
        loop,
        branch,
        ir.AllocateShared(s),
        ir.StoreShared(s, acc, (0,), (0,)),
        ir.FreeShared(s),
    ))


SCALE_TEXT = """\
kernel scale(n: int32, x_ptr: ~float32, y_ptr: ~float32, block: const = 128):
    attrs.blocks = [(n + 127) // 128]
    attrs.warps = 1
    attrs.arch = 'sm_80'
    attrs.shared_bytes = 0
    %gx: global float32[n] strides=[1] pointer=x_ptr = global_view()
    %gy: global float32[n] strides=[1] pointer=y_ptr = global_view()
    %acc: register float32[128] layout=RegisterLayout(shape=[128], mode_shape=[32, 4], spatial_modes=[0], local_modes=[1]) = allocate_register(init=0.0)
    for i in range(0, 4, 1) unroll:
        %x: register float32[128] layout=RegisterLayout(shape=[128], mode_shape=[32, 4], spatial_modes=[0], local_modes=[1]) = load_global(src=%gx, offsets=(i * 128,), dims=(0,))
        %y: register float32[128] layout=RegisterLayout(shape=[128], mode_shape=[32, 4], spatial_modes=[0], local_modes=[1]) = binary(lhs=%x, rhs=%acc, op='add')
        assign(dst=%acc, src=%y)
    if n > 0:
        store_global(dst=%gy, src=%acc, offsets=(0,), dims=(0,))
    else:
        sync()
    %s: shared float32[128] layout=SharedLayout(shape=[128], strides=[1]) = allocate_shared()
    store_shared(dst=%s, src=%acc, offsets=(0,), dims=(0,))
    free_shared(tensor=%s)
"""


def test_small_program_prints_exactly():
    assert print_function(scale_kernel()) == SCALE_TEXT


def test_str_of_a_function_is_the_printed_text():
    func = scale_kernel()
    assert str(func) == print_function(func)


def test_printing_is_deterministic_and_has_no_addresses():
    func = scale_kernel()
    assert print_function(func) == print_function(func)
    assert "0x" not in print_function(func)


def test_tensors_without_layout_scalars_and_a_redefinition():
    k = tirx.Var("k", "int32")
    offset = tirx.Var("offset", "int32")
    total = tirx.decl_buffer((1,), "int32", "total")
    a = RegisterTensor(float16, (16, 16), name="a")
    b = RegisterTensor(float16, (16, 8), name="b")
    c = RegisterTensor(float32, (16, 8), name="c")
    func = Function("tiny", [], (1, 2), 4, body(
        BindScalar(offset, k * 16),
        DeclareScalar(total, 0),
        AssignScalar(total, total[0] + offset),
        ir.AllocateRegister(a),
        ir.AllocateRegister(b),
        ir.AllocateRegister(c, 0.0),
        ir.Dot(c, a, b, c),
    ), aligned_pointers=frozenset({"q", "p"}), arch="sm_90", shared_bytes=256)
    assert print_function(func) == """\
kernel tiny():
    attrs.blocks = [1, 2]
    attrs.warps = 4
    attrs.arch = 'sm_90'
    attrs.shared_bytes = 256
    attrs.aligned_pointers = ['p', 'q']
    let offset: int32 = k * 16
    var total: int32 = 0
    total = total + offset
    %a: register float16[16, 16] = allocate_register(init=None)
    %b: register float16[16, 8] = allocate_register(init=None)
    %c: register float32[16, 8] = allocate_register(init=0.0)
    %c = dot(a=%a, b=%b, c=%c, config=None)
"""


def test_tensors_sharing_a_name_get_distinct_suffixes():
    first = RegisterTensor(float32, (4,), name="z")
    second = RegisterTensor(float32, (4,), name="z")
    func = Function("names", [], (1,), 1, body(ir.AllocateRegister(first, 1.0), ir.Unary(second, first, "neg"),
                                               ir.Unary(first, second, "abs")))
    lines = print_function(func).splitlines()[5:]
    assert lines == ["    %z: register float32[4] = allocate_register(init=1.0)",
                     "    %z.1: register float32[4] = unary(x=%z, op='neg')",
                     "    %z = unary(x=%z.1, op='abs')"]


def test_init_functions_print_as_the_expression_they_build():
    t = RegisterTensor(int32, (4, 8), name="iota")
    assert print_instruction(ir.AllocateRegister(t, lambda i, j: i * 8 + j)) == \
        "%iota: register int32[4, 8] = allocate_register(init=lambda i, j: i * 8 + j)"


def test_dot_config_names_its_mma_atom():
    a, b = RegisterTensor(bfloat16, (16, 16), name="a"), RegisterTensor(bfloat16, (16, 8), name="b")
    c = RegisterTensor(float32, (16, 8), name="c")
    atom = get_mma_atom("bfloat16", "bfloat16", "float32")
    dot = ir.Dot(c, a, b, c, ir.DotConfig("mma", atom))
    assert print_instruction(dot) == (
        "%c: register float32[16, 8] = dot(a=%a, b=%b, c=%c, config=DotConfig(kind='mma', "
        "atom=MmaAtom(m16n8k16, a=bfloat16, b=bfloat16, c=float32), warps_m=1, warps_n=1, replicas=1, "
        "repeat_m=1, repeat_n=1, repeat_k=1, batch=0))")


def test_a_new_instruction_class_prints_without_changes_to_the_printer():
    @dataclass(eq=False)
    class ShuffleDown(ir.Instruction):
        output: RegisterTensor
        x: RegisterTensor
        delta: int
        lanes: tuple
        mask: object = None

    x = RegisterTensor(boolean, (32,), name="x")
    out = RegisterTensor(boolean, (32,), name="out")
    assert print_instruction(ShuffleDown(out, x, 4, (0, 1), [x])) == \
        "%out: register bool[32] = shuffle_down(x=%x, delta=4, lanes=(0, 1), mask=[%x])"


def test_instruction_names_are_snake_case():
    assert [snake_case(n) for n in ("LoadGlobal", "Sync", "ConvertLayout", "MMASync")] == \
        ["load_global", "sync", "convert_layout", "mma_sync"]


def test_empty_bodies_print_pass():
    i = tirx.Var("i", "int32")
    func = Function("empty", [], (1,), 1, body(ForStmt(i, 0, 2, 1, SeqStmt())))
    assert print_function(func).splitlines()[-2:] == ["    for i in range(0, 2, 1):", "        pass"]


def test_the_printer_remembers_each_instructions_line():
    func = scale_kernel()
    printer = IRPrinter()
    printer.function(func)
    free = func.body.stmts[-1].inst
    assert printer.line_of(free) == "free_shared(tensor=%s)"


def test_an_example_kernel_after_every_pass():
    from tests.lang import kernels as K
    import torch

    program = K.LoopCarried().tile_program(3, torch.zeros(3, 64), torch.zeros(64), target="sm_80")
    text = str(program)
    assert text.startswith("kernel loop_carried(steps: int32, x_ptr: ~float32, out_ptr: ~float32):\n")
    assert "    for k in range(0, steps, 1):\n" in text
    assert "        assign(dst=%acc, src=" in text
    assert "%acc: register float32[64] layout=RegisterLayout(" in text
