"""Register tensors as bits: every per-thread view (``RegisterView``, and the free row-major
``ViewRegister`` of :mod:`tilus_tvm.instructions.views`), and what ``AllocateRegister`` and
``ConvertLayout`` do for packed low-precision tensors (their entries hand packed tensors here).

A thread's slots of a register tensor, laid end to end, are a bit stream: packed types hold it in
``uint32`` words (:mod:`tilus_tvm.instructions.packed`), other types one element per array entry.

``RegisterView`` (``self.view`` with a layout or a packed type): layout rule -- the output has the
layout the author gave, or ``x``'s when none was given (the widths are then equal); an input without
a layout gets the one that gives each thread the output's bits, where the widths divide and its shape
fits (``x``'s layout itself for equal widths, ``split_local`` / ``merge_local`` of it otherwise). No
scratch. Emitter (:func:`copy_bits`): the output's storage is cut out of ``x``'s bit stream, every
index a constant -- a register copy (or reinterpret) when the storage is the same, else shifts, ORs
and narrowing casts of 32-bit words (64-bit ones when a side has 64 bits and neither is packed) that
nvcc turns into register moves (``mov.b32`` of ``float16`` pairs, ``prmt``, ``shf``).

``AllocateRegister`` with ``init``: each slot's value converted by ``cast``'s rules into a code,
codes packed into words. ``ConvertLayout``: through shared memory, one byte per element (the code),
like the plain conversion: owners write, everyone reads back and packs.
"""
from __future__ import annotations

from tvm import tirx
from tvm.script.ir_builder import tirx as Tb

from tilus_tvm import dtypes
from tilus_tvm.backend.context import CodegenContext, row_major_linear, sync_threads
from tilus_tvm.errors import CompileError, LayoutError
from tilus_tvm.instructions.elementwise import set_layout
from tilus_tvm.instructions.packed import WORD_BITS, bits_of, pack_words, u32
from tilus_tvm.instructions.registry import register
from tilus_tvm.ir import inst as ir
from tilus_tvm.ir.scalar import expr_dtype
from tilus_tvm.ir.tensor_ops import check_register_view
from tilus_tvm.ir.values import is_scalar
from tilus_tvm.layout.register_ops import merge_local, split_local
from tilus_tvm.lowp import encode_scalar, is_packed


# ---- bit streams ------------------------------------------------------------------------------------------
def stream_words(ctx: CodegenContext, tensor, word_bits: int = WORD_BITS) -> list:
    """The thread's bits of ``tensor`` as ``uint{word_bits}`` word expressions, slot 0 in the low bits
    of word 0 (a last word it does not fill is zero above). Packed tensors are their 32-bit words;
    64-bit words are for other types only (a 64-bit view then joins or splits no 32-bit halves)."""
    buffer = ctx.reg(tensor)
    length = int(buffer.shape[0])
    if is_packed(tensor.dtype):
        return [buffer[i] for i in range(length)]
    nbits, word = tensor.dtype.nbits, f"uint{word_bits}"
    as_bits = [tirx.reinterpret(f"uint{nbits}", buffer[i]) for i in range(length)]
    if nbits > word_bits:  # 64-bit slots in 32-bit words
        return [w for value in as_bits for w in (tirx.Cast(word, value),
                                                 tirx.Cast(word, value >> tirx.const(32, "uint64")))]
    if nbits == word_bits:
        return as_bits
    per_word, words = word_bits // nbits, []
    for first in range(0, length, per_word):
        value = None
        for t, code in enumerate(as_bits[first:first + per_word]):
            piece = tirx.Cast(word, code)
            if t:
                piece = piece << tirx.const(t * nbits, word)
            value = piece if value is None else value | piece
        words.append(value)
    return words


def store_stream(ctx: CodegenContext, tensor, words: list, word_bits: int = WORD_BITS) -> None:
    """Fill ``tensor``'s register storage from the bit stream ``words`` (``uint{word_bits}`` expressions)."""
    buffer = ctx.reg(tensor)
    length = int(buffer.shape[0])
    if is_packed(tensor.dtype):
        for i in range(length):
            Tb.buffer_store(buffer, words[i], [i])
        return
    nbits, dtype = tensor.dtype.nbits, buffer.dtype
    for i in range(length):
        if nbits > word_bits:  # a 64-bit slot from two 32-bit words
            value = tirx.Cast("uint64", words[2 * i]) | (tirx.Cast("uint64", words[2 * i + 1]) << tirx.const(32, "uint64"))
        elif nbits == word_bits:
            value = words[i]
        else:  # inside one word: the narrowing cast drops the bits above
            index, shift = divmod(i * nbits, word_bits)
            bits = words[index] if shift == 0 else words[index] >> tirx.const(shift, f"uint{word_bits}")
            value = tirx.Cast(f"uint{nbits}", bits)
        Tb.buffer_store(buffer, tirx.reinterpret(dtype, value) if dtype != f"uint{nbits}" else value, [i])


# ---- per-thread views ------------------------------------------------------------------------------------
def copy_bits(ctx: CodegenContext, x, out) -> None:
    """``out``'s register storage filled with the thread's bits of ``x`` (as many in both), slot 0 lowest."""
    src, dst = ctx.reg(x), ctx.reg(out)
    if src.same_as(dst):
        return
    if out.dtype == x.dtype or (not is_packed(out.dtype) and not is_packed(x.dtype)
                                and out.dtype.nbits == x.dtype.nbits):
        for i in range(int(dst.shape[0])):
            value = src[i] if out.dtype == x.dtype else tirx.reinterpret(dst.dtype, src[i])
            Tb.buffer_store(dst, value, [i])
        return
    # 64-bit words when a side is 64 bits and neither is packed: nvcc then sees whole 64-bit values
    word_bits = 64 if 64 in (x.dtype.nbits, out.dtype.nbits) and not is_packed(x.dtype) and not is_packed(out.dtype) \
        else WORD_BITS
    store_stream(ctx, out, stream_words(ctx, x, word_bits), word_bits)


def _input_layout(inst: ir.RegisterView):
    """The layout of ``x`` that gives each thread the bits ``output``'s layout gives it (None: none of x's shape)."""
    x, out = inst.x, inst.output
    x_bits, out_bits = x.dtype.nbits, out.dtype.nbits
    try:
        if x_bits == out_bits:
            layout = out.layout
        elif out_bits % x_bits == 0:
            layout = split_local(out.layout, out_bits // x_bits)
        elif x_bits % out_bits == 0:
            layout = merge_local(out.layout, x_bits // out_bits)
        else:
            return None
    except LayoutError:
        return None
    return layout if tuple(layout.shape) == tuple(x.shape) else None


def propagate_view(inst: ir.RegisterView) -> bool:
    x, out = inst.x, inst.output
    if out.layout is None and x.layout is not None:  # no layout was given
        same = out.dtype.nbits == x.dtype.nbits and tuple(out.shape) == tuple(x.shape)
        return same and set_layout(out, x.layout)
    if x.layout is None and out.layout is not None:
        layout = _input_layout(inst)
        return layout is not None and set_layout(x, layout)
    return False


def emit_view(ctx: CodegenContext, inst: ir.RegisterView) -> None:
    check_register_view(inst.x, inst.output.layout, inst.output.dtype, CompileError)
    copy_bits(ctx, inst.x, inst.output)


# ---- AllocateRegister / ConvertLayout of packed tensors -------------------------------------------------------
def emit_packed_allocate(ctx: CodegenContext, inst: ir.AllocateRegister) -> None:
    """``init`` (a number or a function of the indices) converted to codes by ``cast``'s rules."""
    from tilus_tvm.instructions.cast import convert

    out = inst.output
    codes = []
    for slot in range(out.layout.local_size):
        value = inst.init if is_scalar(inst.init) else inst.init(*ctx.logical(out.layout, slot))
        if isinstance(value, (bool, int, float)):
            codes.append(u32(encode_scalar(value, out.dtype)))
        else:
            codes.append(convert(value, dtypes.as_dtype(expr_dtype(value)), out.dtype))
    store_codes(ctx, out, codes)


def store_codes(ctx: CodegenContext, tensor, codes: list) -> None:
    """The packed ``tensor``'s words, made of one code (a uint32 expression) per slot."""
    buffer = ctx.reg(tensor)
    for index, word in enumerate(pack_words(codes, tensor.dtype.nbits)):
        Tb.buffer_store(buffer, word, [index])


def convert_scratch_bytes(inst: ir.ConvertLayout) -> int:
    """Scratch of a packed layout conversion: one byte (the code) per element."""
    return inst.x.size


def emit_packed_convert_layout(ctx: CodegenContext, inst: ir.ConvertLayout) -> None:
    scratch = ctx.shared_view(ctx.plan.offset_of(inst), dtypes.uint8, inst.x.size, f"{inst.output.name}_scratch")
    gather_codes(ctx, inst.x, inst.output, scratch)


def gather_codes(ctx: CodegenContext, src, out, scratch, source=None) -> None:
    """``out``'s packed codes through ``scratch`` (shared, a byte a code of ``src``): the owners of ``src``'s
    elements write their codes at row-major positions, then every thread packs the codes of its ``out``
    slots, each read where the ``src`` element it shows lies (``source``: an ``out`` index to that ``src``
    index; None: the same index). Between barriers: the scratch may overlap memory others still read."""
    nbits, words = src.dtype.nbits, stream_words(ctx, src)
    sync_threads()
    with ctx.guarded(ctx.owner_condition(src.layout)):
        for slot in range(src.layout.local_size):
            position = row_major_linear(ctx.logical(src.layout, slot), src.shape)
            Tb.buffer_store(scratch, tirx.Cast("uint8", bits_of(words, slot * nbits, nbits)), [position])
    sync_threads()
    where = (lambda index: list(index)) if source is None else (lambda index: source(list(index)))
    store_codes(ctx, out, [u32(scratch[row_major_linear(where(ctx.logical(out.layout, slot)), src.shape)])
                           for slot in range(out.layout.local_size)])
    sync_threads()


register(ir.RegisterView, emit=emit_view, propagate=propagate_view)
