"""Layout inference: give every register tensor a layout, and convert where operands disagree.

The rules come from each instruction's registry entry (``tilus_tvm/instructions/``); this pass
only runs them, in four steps:

1. ``configure``: instructions that choose how they run fix their operands' layouts (``dot``
   picks an mma tiling, so tiles loaded for a dot are loaded straight into fragment layout).
2. ``propagate``: layouts flow through instructions, both ways, until nothing changes.
3. A tensor still without a layout (a load or an allocation nothing constrains) gets the default
   coalesced layout; step 2 runs again after each such choice. Loads from memory choose first,
   the narrowest dtype first: their layout sets the width of their vector accesses (8 float16
   per 16-byte vector, against 4 float32), and tensors combined with them follow it.
4. ``required``/``produced``: every instruction is checked against the layouts its operands must
   have and the layout it produces; where one differs (a layout given by the author, a tensor
   used by two dots) a ``ConvertLayout`` is inserted.

The pass changes the function in place: it sets ``RegisterTensor.layout`` (and what ``configure``
records, such as ``Dot.config``) and inserts instructions. Nothing after it chooses a layout.
"""
from __future__ import annotations

from tilus_tvm.errors import CompileError
from tilus_tvm.instructions import lookup
from tilus_tvm.ir import inst as ir
from tilus_tvm.ir.stmt import ForStmt, Function, IfStmt, InstStmt, SeqStmt, WhileStmt, instructions
from tilus_tvm.ir.tensor import RegisterTensor
from tilus_tvm.layout.register import RegisterLayout
from tilus_tvm.passes.layout_choice import default_layout


class LayoutInference:
    def __init__(self, func: Function):
        self.func = func
        self.num_threads = func.num_threads
        self.counter = 0

    def impl(self, inst: ir.Instruction):
        return lookup(type(inst), self.func.arch)

    def run(self) -> None:
        insts = list(instructions(self.func.body))
        for inst in insts:
            configure = self.impl(inst).configure
            if configure is not None:
                configure(inst, self.func)
        self.propagate(insts)
        for inst in sorted(insts, key=self.default_order):
            out = inst.defined
            if isinstance(out, RegisterTensor) and out.layout is None:
                out.layout = default_layout(out.shape, out.dtype.nbits, self.num_threads)
                self.propagate(insts)
        for inst in insts:
            for t in inst.operands():
                if t.layout is None:  # read but never defined by an instruction: cannot happen from the frontend
                    raise CompileError(f"register tensor {t.describe()} has no layout")
        self.func.body = self.insert_conversions(self.func.body)

    @staticmethod
    def default_order(inst: ir.Instruction) -> tuple[int, int]:
        """Sort key of step 3 (``sorted`` is stable: program order within a rank)."""
        if isinstance(inst, (ir.LoadGlobal, ir.LoadShared)):
            return (0, inst.output.dtype.nbits)
        return (1, 0)

    def propagate(self, insts: list[ir.Instruction]) -> None:
        rules = [(inst, self.impl(inst).propagate) for inst in insts]
        rules = [(inst, rule) for inst, rule in rules if rule is not None]
        changed = True
        while changed:
            changed = False
            for inst, rule in rules:
                if rule(inst):
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
            elif isinstance(stmt, (ForStmt, WhileStmt)):
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
        impl = self.impl(inst)
        before: list[InstStmt] = []
        after: list[InstStmt] = []
        converted: dict[int, RegisterTensor] = {}
        for operand, layout in impl.required_operands(inst):
            if operand.layout == layout:
                continue
            if id(operand) not in converted:
                tmp = self.fresh(operand, layout)
                before.append(InstStmt(ir.ConvertLayout(tmp, operand)))
                converted[id(operand)] = tmp
            inst.replace_operand(operand, converted[id(operand)])
        produced = impl.produced_layout(inst)
        if produced is not None and inst.output.layout != produced:
            final = inst.output
            # an in-place dot into a tensor of another layout accumulates in the converted copy of c
            tmp = converted.get(id(final))
            if tmp is None:
                tmp = self.fresh(final, produced)
            inst.output = tmp
            after.append(InstStmt(ir.ConvertLayout(final, tmp)))
        return before + [InstStmt(inst)] + after


def infer_layouts(func: Function) -> Function:
    LayoutInference(func).run()
    return func
