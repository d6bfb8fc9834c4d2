"""``PrintTensor``: print a register or shared tile from the GPU as a table.

Thread 0 of each block that runs the instruction prints, so the text of one block comes out whole
and in order (blocks that print at the same time interleave their lines: guard the call with
``if self.blockIdx.x == ...`` to print one block's tile)::

    x = float32[2, 3], register tile, block 0
    ┌──────────┬──────────┬──────────┐
    │   -0.125 │    1.500 │    2.000 │
    ├──────────┼──────────┼──────────┤
    │    3.250 │   -4.000 │    5.000 │
    └──────────┴──────────┴──────────┘

The last dimension runs along a row, the one before it down the columns; a tensor of more
dimensions prints one table per index of its leading dimensions, headed ``[i, j, :, :]``. Cells
are as wide as the element format's width, so a value wider than it pushes its row out of line.

Scratch (register tiles): the whole tile, row-major, in shared memory. The owners of the elements
(the first replica of each) write them there, then thread 0 reads them in order. Shared tiles are
read in place. Barriers before and after keep the reads apart from other threads' writes, so the
call must be reached by every thread of the block (not under a condition that differs between
them; the language's scalars are the same in every thread).
"""
from __future__ import annotations

import math

from tvm import tirx
from tvm.script.ir_builder import tirx as Tb

from tilus_tvm.backend.context import CodegenContext, row_major_linear, sync_threads
from tilus_tvm.instructions.registry import register
from tilus_tvm.ir import inst as ir
from tilus_tvm.ir.printf import printed_width, printf_arguments
from tilus_tvm.ir.tensor import RegisterTensor
from tilus_tvm.layout.register import row_major_unravel

CELLS_PER_CALL = 16  # elements per printf call (CUDA's printf takes at most 32 arguments)


def _printf(fmt: str, *args) -> None:
    fmt, args = printf_arguments(fmt, args)
    Tb.evaluate(Tb.cuda.printf(fmt, *args))


def _border(left: str, middle: str, right: str, cols: int, width: int) -> str:
    return left + middle.join(["─" * (width + 2)] * cols) + right + "\n"


def _header(ctx: CodegenContext, inst: ir.PrintTensor) -> None:
    tensor = inst.tensor
    scope = "register" if isinstance(tensor, RegisterTensor) else "shared"
    text = f"{inst.msg}{' ' if inst.msg and not inst.msg[-1].isspace() else ''}" \
           f"{tensor.dtype.name}{list(tensor.shape)}, {scope} tile, block "
    dims = max(1, len(ctx.func.blocks))
    block = [iv.var for iv in ctx.func.block_vars[:dims]]
    places = ", ".join(["%d"] * dims)
    _printf(text.replace("%", "%%") + (places if dims == 1 else f"({places})") + "\n", *block)


def emit_print_tensor(ctx: CodegenContext, inst: ir.PrintTensor) -> None:
    tensor = inst.tensor
    shape = list(tensor.shape)
    batch_shape, (rows, cols) = shape[:-2], ([1] + shape)[-2:]
    sync_threads()  # writes of other threads (to a shared tile, or to what the scratch overlaps) are done
    if isinstance(tensor, RegisterTensor):
        scratch = ctx.shared_view(ctx.plan.offset_of(inst), tensor.dtype, tensor.size, f"{tensor.name}_print")
        with ctx.guarded(ctx.owner_condition(tensor.layout)):
            with Tb.unroll(0, tensor.layout.local_size) as i:
                position = row_major_linear(ctx.logical(tensor.layout, i), tensor.shape)
                Tb.buffer_store(scratch, ctx.reg(tensor)[i], [position])
        sync_threads()

        def element(index):
            return scratch[row_major_linear(index[-len(shape):], shape)]
    else:
        def element(index):
            buffer, offset = ctx.shared_element(tensor, index[-len(shape):])
            return buffer[offset]

    width = printed_width(inst.fmt)

    def table(batch_index: list) -> None:
        _printf(_border("┌", "┬", "┐", cols, width))
        with Tb.serial(0, rows) as r:
            with ctx.guarded(r > 0):
                _printf(_border("├", "┼", "┤", cols, width))
            for first in range(0, cols, CELLS_PER_CALL):
                columns = range(first, min(cols, first + CELLS_PER_CALL))
                fmt = "".join(f"│ {inst.fmt} " for _ in columns) + ("│\n" if columns[-1] == cols - 1 else "")
                _printf(fmt, *[element(batch_index + [r, c]) for c in columns])
        _printf(_border("└", "┴", "┘", cols, width))

    with ctx.guarded(ctx.tx == 0):
        _header(ctx, inst)
        if not batch_shape:
            table([])
        else:
            with Tb.serial(0, math.prod(batch_shape)) as b:
                batch_index = row_major_unravel(b, batch_shape)
                _printf("[" + ", ".join(["%d"] * len(batch_shape)) + ", :, :]\n", *batch_index)
                table(batch_index)
    sync_threads()  # thread 0 is done reading before anyone overwrites the tile or the scratch


def print_scratch_bytes(inst: ir.PrintTensor) -> int:
    tensor = inst.tensor
    return tensor.dtype.storage_bytes(tensor.size) if isinstance(tensor, RegisterTensor) else 0


register(ir.PrintTensor, emit=emit_print_tensor, scratch=print_scratch_bytes)
