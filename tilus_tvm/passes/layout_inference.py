"""Layout inference: give every register tensor a layout, and convert where operands disagree.

1. ``dot`` fixes the layouts of its operands (an mma atom tiled over the warps, or a CUDA-core
   tiling), so tiles loaded for a dot are loaded straight into fragment layout.
2. Layouts flow through elementwise instructions, casts, assignments and reductions, both ways,
   until nothing changes.
3. A tensor still without a layout (a load or an allocation nothing constrains) gets the default
   coalesced layout; step 2 runs again after each such choice.
4. Every instruction is checked against the layouts its operands must have; where one differs (a
   layout given by the author, a tensor used by two dots) a ``ConvertLayout`` is inserted.

The pass changes the function in place: it sets ``RegisterTensor.layout`` and ``Dot.config`` and
inserts instructions. Nothing after it chooses a layout.
"""
from __future__ import annotations

from typing import Callable, Optional

from tilus_tvm.errors import CompileError
from tilus_tvm.ir import inst as ir
from tilus_tvm.ir.stmt import ForStmt, Function, IfStmt, InstStmt, SeqStmt, instructions
from tilus_tvm.ir.tensor import RegisterTensor
from tilus_tvm.layout.register import RegisterLayout
from tilus_tvm.layout.register_ops import reduce
from tilus_tvm.passes.layout_choice import broadcast_layout, choose_dot_config, default_layout, dot_layouts


def _set(tensor: RegisterTensor, layout: RegisterLayout) -> bool:
    if tensor.layout is None:
        tensor.layout = layout
        return True
    return False


# --- propagation rules: each returns True when it assigned a layout ---------------------------------
def _propagate_same(out: RegisterTensor, x: RegisterTensor) -> bool:
    if out.layout is None and x.layout is not None:
        return _set(out, x.layout)
    if x.layout is None and out.layout is not None:
        return _set(x, out.layout)
    return False


def _propagate_elementwise(out: RegisterTensor, operands: list) -> bool:
    tensors = [t for t in operands if isinstance(t, RegisterTensor)]
    changed = False
    if out.layout is None:
        full = [t for t in tensors if t.shape == out.shape and t.layout is not None]
        if not full:
            return False
        changed = _set(out, full[0].layout)
    for t in tensors:
        if t.layout is None:
            changed |= _set(t, broadcast_layout(out.layout, t.shape))
    return changed


def _rule_unary(inst) -> bool:
    return _propagate_same(inst.output, inst.x)


def _rule_binary(inst: ir.Binary) -> bool:
    return _propagate_elementwise(inst.output, [inst.lhs, inst.rhs])


def _rule_where(inst: ir.Where) -> bool:
    return _propagate_elementwise(inst.output, [inst.cond, inst.x, inst.y])


def _rule_assign(inst: ir.Assign) -> bool:
    return _propagate_same(inst.dst, inst.src)


def _rule_reduce(inst: ir.Reduce) -> bool:
    if inst.output.layout is None and inst.x.layout is not None:
        return _set(inst.output, reduce(inst.x.layout, [inst.dim], keepdims=inst.keepdim))
    return False


PROPAGATION_RULES: dict[type, Callable] = {
    ir.Unary: _rule_unary, ir.Cast: _rule_unary, ir.Binary: _rule_binary, ir.Where: _rule_where,
    ir.Assign: _rule_assign, ir.Reduce: _rule_reduce,
}


# --- requirements checked in step 4 ----------------------------------------------------------------
def _required_operands(inst: ir.Instruction) -> list[tuple[RegisterTensor, RegisterLayout]]:
    """(operand, the layout it must have) for every constrained operand of ``inst``."""
    if isinstance(inst, ir.Dot):
        a, b, c = dot_layouts(inst.config)
        return [(inst.a, a), (inst.b, b), (inst.c, c)]
    if isinstance(inst, (ir.Unary, ir.Cast)):
        return [(inst.x, inst.output.layout)]
    if isinstance(inst, ir.Binary):
        return [(t, broadcast_layout(inst.output.layout, t.shape)) for t in (inst.lhs, inst.rhs)
                if isinstance(t, RegisterTensor)]
    if isinstance(inst, ir.Where):
        return [(t, broadcast_layout(inst.output.layout, t.shape)) for t in (inst.cond, inst.x, inst.y)
                if isinstance(t, RegisterTensor)]
    if isinstance(inst, ir.Assign):
        return [(inst.src, inst.dst.layout)]
    return []


def _required_output(inst: ir.Instruction) -> Optional[RegisterLayout]:
    """The layout the instruction produces, when it is not free to produce the output's layout."""
    if isinstance(inst, ir.Dot):
        return dot_layouts(inst.config)[2]
    if isinstance(inst, ir.Reduce):
        return reduce(inst.x.layout, [inst.dim], keepdims=inst.keepdim)
    return None


class LayoutInference:
    def __init__(self, func: Function):
        self.func = func
        self.num_threads = func.num_threads
        self.counter = 0

    def run(self) -> None:
        insts = list(instructions(self.func.body))
        for inst in insts:
            if isinstance(inst, ir.Dot):
                self.configure_dot(inst)
        self.propagate(insts)
        for inst in insts:
            out = inst.defined
            if isinstance(out, RegisterTensor) and out.layout is None:
                out.layout = default_layout(out.shape, out.dtype.nbits, self.num_threads)
                self.propagate(insts)
        for inst in insts:
            for t in inst.operands():
                if t.layout is None:  # read but never defined by an instruction: cannot happen from the frontend
                    raise CompileError(f"register tensor {t.describe()} has no layout")
        self.func.body = self.insert_conversions(self.func.body)

    def configure_dot(self, inst: ir.Dot) -> None:
        (m, k), n = inst.a.shape, inst.b.shape[1]
        inst.config = choose_dot_config(m, n, k, inst.a.dtype.name, inst.c.dtype.name, self.func.warps)
        a, b, c = dot_layouts(inst.config)
        for tensor, layout in ((inst.a, a), (inst.b, b), (inst.c, c), (inst.output, c)):
            _set(tensor, layout)

    def propagate(self, insts: list[ir.Instruction]) -> None:
        changed = True
        while changed:
            changed = False
            for inst in insts:
                rule = PROPAGATION_RULES.get(type(inst))
                if rule is not None and rule(inst):
                    changed = True

    # --- step 4 ---------------------------------------------------------------------------------
    def fresh(self, like: RegisterTensor, layout: RegisterLayout) -> RegisterTensor:
        self.counter += 1
        return RegisterTensor(like.dtype, like.shape, layout=layout, name=f"{like.name}_cvt{self.counter}")

    def insert_conversions(self, seq: SeqStmt) -> SeqStmt:
        out: list = []
        for stmt in seq.stmts:
            if isinstance(stmt, SeqStmt):
                out.append(self.insert_conversions(stmt))
            elif isinstance(stmt, ForStmt):
                stmt.body = self.insert_conversions(stmt.body)
                out.append(stmt)
            elif isinstance(stmt, IfStmt):
                stmt.then_body = self.insert_conversions(stmt.then_body)
                if stmt.else_body is not None:
                    stmt.else_body = self.insert_conversions(stmt.else_body)
                out.append(stmt)
            elif isinstance(stmt, InstStmt):
                out.extend(self.fix_instruction(stmt.inst))
            else:
                out.append(stmt)
        return SeqStmt(out)

    def fix_instruction(self, inst: ir.Instruction) -> list[InstStmt]:
        before: list[InstStmt] = []
        after: list[InstStmt] = []
        converted: dict[int, RegisterTensor] = {}
        for operand, layout in _required_operands(inst):
            if operand.layout == layout:
                continue
            if id(operand) not in converted:
                tmp = self.fresh(operand, layout)
                before.append(InstStmt(ir.ConvertLayout(tmp, operand)))
                converted[id(operand)] = tmp
            inst.replace_operand(operand, converted[id(operand)])
        produced = _required_output(inst)
        if produced is not None and inst.output.layout != produced:
            final = inst.output
            # an in-place dot into a tensor of another layout accumulates in the converted copy of c
            tmp = converted.get(id(final)) or self.fresh(final, produced)
            inst.output = tmp
            after.append(InstStmt(ir.ConvertLayout(final, tmp)))
        return before + [InstStmt(inst)] + after


def infer_layouts(func: Function) -> Function:
    LayoutInference(func).run()
    return func
