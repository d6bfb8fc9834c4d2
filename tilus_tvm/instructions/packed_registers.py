"""Register tensors as bits: ``RegisterView`` (``self.view``), and what ``AllocateRegister`` and
``ConvertLayout`` do for packed low-precision tensors (their entries hand packed tensors here).

A thread's slots of a register tensor, laid end to end, are a bit stream: packed types hold it in
``uint32`` words (:mod:`tilus_tvm.instructions.packed`), other types one element per array entry.

``RegisterView``: layout rule -- when the view keeps the element width and no layout was given, it
has ``x``'s layout (both ways); otherwise the author gives it. No scratch. Emitter: the output's
storage is cut out of ``x``'s bit stream (word copies when both are packed or 32-bit; shifts and
masks otherwise, every index a constant).

``AllocateRegister`` with ``init``: each slot's value converted by ``cast``'s rules into a code,
codes packed into words. ``ConvertLayout``: through shared memory, one byte per element (the code),
like the plain conversion: owners write, everyone reads back and packs.
"""
from __future__ import annotations

from typing import Any

from tvm import tirx
from tvm.script.ir_builder import tirx as Tb

from tilus_tvm import dtypes
from tilus_tvm.backend.context import CodegenContext, row_major_linear, sync_threads
from tilus_tvm.errors import CompileError
from tilus_tvm.instructions.elementwise import propagate_same
from tilus_tvm.instructions.packed import bits_of, pack_words, u32
from tilus_tvm.instructions.registry import register
from tilus_tvm.ir import inst as ir
from tilus_tvm.ir.scalar import expr_dtype
from tilus_tvm.ir.values import is_scalar
from tilus_tvm.lowp import encode_scalar, is_packed


# ---- bit streams ------------------------------------------------------------------------------------------
def stream_words(ctx: CodegenContext, tensor) -> list:
    """The thread's bits of ``tensor`` as uint32 word expressions (slot 0 in the low bits of word 0)."""
    buffer = ctx.reg(tensor)
    length = int(buffer.shape[0])
    if is_packed(tensor.dtype):
        return [buffer[i] for i in range(length)]
    nbits = tensor.dtype.nbits
    as_bits = [tirx.reinterpret(f"uint{nbits}", buffer[i]) for i in range(length)]
    if nbits == 64:
        return [w for value in as_bits for w in (tirx.Cast("uint32", value),
                                                 tirx.Cast("uint32", value >> tirx.const(32, "uint64")))]
    if nbits == 32:
        return as_bits
    codes = [tirx.Cast("uint32", value) for value in as_bits]
    return pack_words(codes, nbits)


def store_stream(ctx: CodegenContext, tensor, words: list) -> None:
    """Fill ``tensor``'s register storage from the bit stream ``words``."""
    buffer = ctx.reg(tensor)
    length = int(buffer.shape[0])
    if is_packed(tensor.dtype):
        for i in range(length):
            Tb.buffer_store(buffer, words[i], [i])
        return
    nbits, dtype = tensor.dtype.nbits, buffer.dtype
    for i in range(length):
        if nbits == 64:
            value = tirx.Cast("uint64", words[2 * i]) | (tirx.Cast("uint64", words[2 * i + 1]) << tirx.const(32, "uint64"))
        elif nbits == 32:
            value = words[i]
        else:
            value = tirx.Cast(f"uint{nbits}", bits_of(words, i * nbits, nbits))
        Tb.buffer_store(buffer, tirx.reinterpret(dtype, value) if dtype != f"uint{nbits}" else value, [i])


# ---- RegisterView -----------------------------------------------------------------------------------------
def propagate_view(inst: ir.RegisterView) -> bool:
    if inst.output.dtype.nbits == inst.x.dtype.nbits and inst.output.shape == inst.x.shape:
        return propagate_same(inst.output, inst.x)
    return False


def check_view(inst: ir.RegisterView) -> None:
    out, x = inst.output, inst.x
    if out.layout.num_threads != x.layout.num_threads:
        raise CompileError(f"view of {x.describe()} (layout {x.layout}, {x.layout.num_threads} threads) as "
                           f"{out.describe()} (layout {out.layout}, {out.layout.num_threads} threads): a view "
                           f"keeps every element in its thread, so both must spread over the same threads")
    in_bits, out_bits = x.layout.local_size * x.dtype.nbits, out.layout.local_size * out.dtype.nbits
    if in_bits != out_bits:
        raise CompileError(f"view of {x.describe()} as {out.describe()}: each thread holds {in_bits} bits of x "
                           f"({x.layout.local_size} x {x.dtype.nbits}) but {out_bits} of the view "
                           f"({out.layout.local_size} x {out.dtype.nbits}); the layouts must give the same bits")


def emit_view(ctx: CodegenContext, inst: ir.RegisterView) -> None:
    check_view(inst)
    out, x = inst.output, inst.x
    if out.dtype == x.dtype or (not is_packed(out.dtype) and not is_packed(x.dtype)
                                and out.dtype.nbits == x.dtype.nbits):
        src, dst = ctx.reg(x), ctx.reg(out)
        for i in range(int(dst.shape[0])):
            value = src[i] if out.dtype == x.dtype else tirx.reinterpret(dst.dtype, src[i])
            Tb.buffer_store(dst, value, [i])
        return
    store_stream(ctx, out, stream_words(ctx, x))


# ---- AllocateRegister / ConvertLayout of packed tensors -------------------------------------------------------
def emit_packed_allocate(ctx: CodegenContext, inst: ir.AllocateRegister) -> None:
    """``init`` (a number or a function of the indices) converted to codes by ``cast``'s rules."""
    from tilus_tvm.instructions.cast import convert

    out = inst.output
    codes = []
    for slot in range(out.layout.local_size):
        if is_scalar(inst.init) and isinstance(inst.init, (bool, int, float)):
            codes.append(u32(encode_scalar(inst.init, out.dtype)))
            continue
        value = inst.init if is_scalar(inst.init) else inst.init(*ctx.logical(out.layout, slot))
        if isinstance(value, (bool, int, float)):
            codes.append(u32(encode_scalar(value, out.dtype)))
        else:
            codes.append(convert(value, dtypes.as_dtype(expr_dtype(value)), out.dtype))
    buffer = ctx.reg(out)
    for index, word in enumerate(pack_words(codes, out.dtype.nbits)):
        Tb.buffer_store(buffer, word, [index])


def convert_scratch_bytes(inst: ir.ConvertLayout) -> int:
    """Scratch of a packed layout conversion: one byte (the code) per element."""
    return inst.x.size


def emit_packed_convert_layout(ctx: CodegenContext, inst: ir.ConvertLayout) -> None:
    src, out = inst.x, inst.output
    nbits = src.dtype.nbits
    scratch = ctx.shared_view(ctx.plan.offset_of(inst), dtypes.uint8, src.size, f"{out.name}_scratch")
    words = stream_words(ctx, src)
    sync_threads()
    with ctx.guarded(ctx.owner_condition(src.layout)):
        for slot in range(src.layout.local_size):
            position = row_major_linear(ctx.logical(src.layout, slot), src.shape)
            Tb.buffer_store(scratch, tirx.Cast("uint8", bits_of(words, slot * nbits, nbits)), [position])
    sync_threads()
    codes = [u32(scratch[row_major_linear(ctx.logical(out.layout, slot), out.shape)])
             for slot in range(out.layout.local_size)]
    buffer = ctx.reg(out)
    for index, word in enumerate(pack_words(codes, nbits)):
        Tb.buffer_store(buffer, word, [index])
    sync_threads()


register(ir.RegisterView, emit=emit_view, propagate=propagate_view)
