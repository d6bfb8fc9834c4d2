"""Loads and stores of packed low-precision tiles: ``LoadGlobal``, ``StoreGlobal``, ``LoadShared``,
``StoreShared`` when the tensor's dtype is packed (:func:`tilus_tvm.lowp.is_packed`).

The entries of these instructions (``global_memory.py``, ``shared_memory.py``) hand packed tensors
to the emitters below; layout rules are theirs (none: a load takes its uses' layout, else the
default one, whose vectors for an ``N``-bit type are ``128 / N`` elements = 16 bytes).

Storage is dense (see :mod:`tilus_tvm.instructions.packed`): element ``e`` of a global view (its
linear index ``sum(index * strides)``) or of a shared tensor (its layout offset) occupies bits
``[e*N, e*N + N)`` of the byte stream. A thread moves whole bytes and words; elements are cut out
of them, and put into its register words, by bit arithmetic.

**Runs.** When the register layout gives a thread ``d`` consecutive slots that are ``d`` consecutive
elements of the memory's unit-stride dimension (the innermost local mode runs along the tile's last
dimension), ``d * N`` is a whole number of bytes and every run starts at a multiple of ``d``
elements (offset, extent along that dimension and the other strides are multiples of ``d``; the
pointer 16-byte aligned; a shared layout that keeps such rows whole), a run is a whole number of
bytes that only this thread touches: it is copied as ``uint32`` vectors of up to 16 bytes when it
is a whole number of words (``uint16`` or ``uint8`` pieces otherwise), with one bounds check per
run. Otherwise every element is read from the one or two bytes that hold it, masked by its own
bounds check.

**Stores** of runs write their bytes. Elements outside runs share bytes with other threads'
elements, so they are written with ``atomicAnd`` / ``atomicOr`` on the 32-bit word(s) holding
them: each element has one owner (the first replica), so no write is lost. That needs a 4-byte
aligned word for every element, so packed global stores outside runs require the pointer to be
16-byte aligned (the launch's alignment specialisation).
"""
from __future__ import annotations

from typing import Any

from tvm import tirx
from tvm.script.ir_builder import tirx as Tb

from tilus_tvm.backend.context import CodegenContext, bounds_condition, place_tile
from tilus_tvm.errors import CompileError
from tilus_tvm.instructions.async_copy import _divisible
from tilus_tvm.instructions.packed import WORD_BITS, add_piece, bits_of, join_pieces, low_mask, u32
from tilus_tvm.ir import inst as ir
from tilus_tvm.ir.tensor import GlobalTensor, SharedTensor
from tilus_tvm.layout.register import RegisterLayout

MAX_VECTOR_WORDS = 4  # 16 bytes

HELPERS = """
__device__ __forceinline__ void tilus_set_bits(unsigned* word, unsigned field_mask, unsigned value) {
  atomicAnd(word, ~field_mask);
  atomicOr(word, value);
}
"""


# ---- where elements live ---------------------------------------------------------------------------
class PackedMemory:
    """The byte stream of a packed global view or shared tensor and the element index of a coordinate."""

    def __init__(self, ctx: CodegenContext, tensor: GlobalTensor | SharedTensor):
        self.ctx, self.tensor, self.nbits = ctx, tensor, tensor.dtype.nbits
        if isinstance(tensor, GlobalTensor):
            self.storage = tensor.pointer.buffer
            self.scope = "global"
        else:
            self.storage = ctx.view(tensor.root)  # the uint8 view of the pool (context.shared_view)
            self.scope = "shared.dyn"
        self.num_bytes = 1
        for extent in self.storage.shape:
            self.num_bytes = self.num_bytes * extent

    def element(self, coords) -> Any:
        """The element index ``e`` of ``coords`` (bits ``[e*N, e*N + N)``)."""
        if isinstance(self.tensor, GlobalTensor):
            return sum((c * s for c, s in zip(coords, self.tensor.strides)), 0)
        return self.ctx.shared_element(self.tensor, coords)[1]

    def alias(self, dtype: str, unit_bytes: int) -> tirx.Buffer:
        """The stream as elements of ``dtype`` (``unit_bytes`` each), declared where it is used."""
        elem_offset = 0 if self.scope == "global" else self.storage.elem_offset // unit_bytes
        length = (self.num_bytes + unit_bytes - 1) // unit_bytes  # the last word may reach past the bytes
        return Tb.decl_buffer((length,), dtype, data=self.storage.data,
                              elem_offset=elem_offset, scope=self.scope)

    def run_byte(self, coords, length: int) -> Any:
        """The first byte of the run of ``length`` elements at ``coords`` (its element index is a multiple
        of ``length``, so this is ``element // length`` runs of whole bytes: affine, hence vectorisable)."""
        return (self.element(coords) // length) * (length * self.nbits // 8)

    def byte_and_shift(self, element: Any) -> tuple[Any, Any]:
        """(byte, bit in that byte) where ``element`` starts; no product ``element * N`` that could
        overflow int32."""
        if self.nbits == 8:
            return element, 0
        group, within = element >> 3, (element & 7) * self.nbits  # 8 elements take N whole bytes
        return group * self.nbits + (within >> 3), within & 7


# ---- runs ------------------------------------------------------------------------------------------
def run_length(layout: RegisterLayout, memory: PackedMemory, offsets, dims, aligned: bool) -> int:
    """Elements per run (module docstring), or 0 when elements must be moved one by one."""
    if not layout.local_modes or not aligned:
        return 0
    last = len(layout.shape) - 1
    inner = layout.local_modes[-1]
    if layout.grouped_modes[last][-1:] != (inner,):
        return 0
    nbits, extent = memory.nbits, layout.mode_shape[inner]
    analyzer = memory.ctx.func.analyzer()
    for length in sorted((d for d in range(1, extent + 1) if extent % d == 0), reverse=True):
        if length * nbits % 8:
            continue
        if _run_fits(memory, offsets, dims, length, analyzer):
            return length
    return 0


def _run_fits(memory: PackedMemory, offsets, dims, length: int, analyzer) -> bool:
    tensor, dim = memory.tensor, dims[-1]
    if isinstance(tensor, GlobalTensor):
        stride = tensor.strides[dim]
        if not (isinstance(stride, int) and stride == 1) and not (isinstance(stride, tirx.IntImm) and stride.value == 1):
            return False
        multiples = [offsets[dim], tensor.shape[dim]] + [s for d, s in enumerate(tensor.strides) if d != dim]
        return all(_divisible(value, length, analyzer) for value in multiples)
    from tilus_tvm.instructions.shared_memory import _rows_fit

    return _rows_fit(tensor, tensor.resolved_layout(), dim, offsets[dim], length, analyzer)


def _units(run_bytes: int) -> tuple[int, str]:
    """(bytes per access, TIR dtype) for a run of ``run_bytes``: uint32 vectors when it is whole words."""
    if run_bytes % 4 == 0:
        words = run_bytes // 4
        vector = max(v for v in (4, 2, 1) if words % v == 0 and v <= MAX_VECTOR_WORDS)
        return 4 * vector, "uint32" if vector == 1 else f"uint32x{vector}"
    return (2, "uint16") if run_bytes % 2 == 0 else (1, "uint8")


def _unit_index(byte: Any, unit: int) -> Any:
    """The index of the ``unit``-byte piece starting at ``byte`` (a multiple of ``unit``)."""
    return byte if unit == 1 else byte // unit


# ---- loads -----------------------------------------------------------------------------------------
def emit_packed_load(ctx: CodegenContext, out, src: GlobalTensor | SharedTensor, offsets, dims) -> None:
    """``out`` (a packed register tensor) = the tile of ``src`` at ``offsets`` (masked for global views)."""
    memory = PackedMemory(ctx, src)
    layout, nbits = out.layout, memory.nbits
    words = ctx.reg(out)
    num_words = words.shape[0]
    aligned = ctx.func.aligned(src.pointer) if isinstance(src, GlobalTensor) else True
    length = run_length(layout, memory, offsets, dims, aligned)
    masked = isinstance(src, GlobalTensor)
    pieces: list[list] = [[] for _ in range(int(num_words))]
    if length:
        run_bytes = length * nbits // 8
        unit, unit_dtype = _units(run_bytes)
        if unit >= 4:
            stream = memory.alias("uint32", 4)
        else:
            stream = memory.alias(unit_dtype, unit)
        for run in range(layout.local_size // length):
            coords = place_tile(offsets, dims, ctx.logical(layout, run * length))
            byte = memory.run_byte(coords, length)
            cond = bounds_condition(coords, src.shape) if masked else None
            for step in range(run_bytes // unit):
                if unit >= 4:
                    lanes = unit // 4
                    first_word = (run * run_bytes + step * unit) // 4
                    index = byte // 4 + step * lanes
                    load = stream[index] if lanes == 1 else stream[tirx.Ramp(index, 1, lanes)]
                    zero = u32(0) if lanes == 1 else tirx.Broadcast(u32(0), lanes)
                    value = load if cond is None else tirx.if_then_else(cond, load, zero)
                    Tb.buffer_store(words, value, [first_word if lanes == 1 else tirx.Ramp(first_word, 1, lanes)])
                else:
                    load = u32(stream[_unit_index(byte, unit) + step])
                    value = load if cond is None else tirx.if_then_else(cond, load, u32(0))
                    add_piece(pieces, (run * run_bytes + step * unit) * 8, unit * 8, value)
        if unit >= 4:
            return
    else:
        stream = memory.alias("uint8", 1)
        for slot in range(layout.local_size):
            coords = place_tile(offsets, dims, ctx.logical(layout, slot))
            code = _read_code(memory, stream, memory.element(coords))
            if masked:
                code = tirx.if_then_else(bounds_condition(coords, src.shape), code, u32(0))
            add_piece(pieces, slot * nbits, nbits, code)
    for index, word_pieces in enumerate(pieces):
        Tb.buffer_store(words, join_pieces(word_pieces), [index])


def _read_code(memory: PackedMemory, stream: tirx.Buffer, element: Any):
    """The code of ``element``, from the one or two bytes holding it."""
    nbits = memory.nbits
    byte, shift = memory.byte_and_shift(element)
    value = u32(stream[byte])
    if nbits == 8:
        return value
    if 8 % nbits:  # the element may reach into the next byte, which then exists
        straddles = (shift + nbits) > 8
        value = value | (tirx.if_then_else(straddles, u32(stream[byte + 1]), u32(0)) << u32(8))
    return (value >> u32(shift)) & u32(low_mask(nbits))


# ---- stores ----------------------------------------------------------------------------------------
def emit_packed_store(ctx: CodegenContext, src, dst: GlobalTensor | SharedTensor, offsets, dims) -> None:
    """Store the packed register tensor ``src`` into the tile of ``dst`` at ``offsets``."""
    memory = PackedMemory(ctx, dst)
    layout, nbits = src.layout, memory.nbits
    registers = ctx.reg(src)
    words = [registers[i] for i in range(int(registers.shape[0]))]
    aligned = ctx.func.aligned(dst.pointer) if isinstance(dst, GlobalTensor) else True
    length = run_length(layout, memory, offsets, dims, aligned)
    masked = isinstance(dst, GlobalTensor)
    with ctx.guarded(ctx.owner_condition(layout)):
        if length:
            run_bytes = length * nbits // 8
            unit, unit_dtype = _units(run_bytes)
            stream = memory.alias("uint32", 4) if unit >= 4 else memory.alias(unit_dtype, unit)
            for run in range(layout.local_size // length):
                coords = place_tile(offsets, dims, ctx.logical(layout, run * length))
                byte = memory.run_byte(coords, length)
                with ctx.guarded(bounds_condition(coords, dst.shape) if masked else tirx.const(True, "bool")):
                    for step in range(run_bytes // unit):
                        first_bit = (run * run_bytes + step * unit) * 8
                        if unit >= 4:
                            lanes = unit // 4
                            index = byte // 4 + step * lanes
                            first_word = first_bit // WORD_BITS
                            value = (registers[first_word] if lanes == 1
                                     else registers[tirx.Ramp(first_word, 1, lanes)])
                            Tb.buffer_store(stream, value, [index if lanes == 1 else tirx.Ramp(index, 1, lanes)])
                        else:
                            value = tirx.Cast(unit_dtype, bits_of(words, first_bit, unit * 8))
                            Tb.buffer_store(stream, value, [_unit_index(byte, unit) + step])
            return
        if isinstance(dst, GlobalTensor) and not aligned:
            raise CompileError(f"store_global into {dst.describe()}: {dst.dtype.name} elements that share bytes "
                               f"with other threads' elements are written with 32-bit atomics, which needs the "
                               f"tensor's data pointer 16-byte aligned (torch allocations are); this launch's "
                               f"pointer is not")
        stream = memory.alias("uint32", 4)
        for slot in range(layout.local_size):
            coords = place_tile(offsets, dims, ctx.logical(layout, slot))
            with ctx.guarded(bounds_condition(coords, dst.shape) if masked else tirx.const(True, "bool")):
                _write_code(memory, stream, memory.element(coords), bits_of(words, slot * nbits, nbits))


def _write_code(memory: PackedMemory, stream: tirx.Buffer, element: Any, code: Any) -> None:
    """Set the bits of ``element`` to ``code`` with atomics on the word(s) holding them."""
    nbits = memory.nbits
    byte, shift = memory.byte_and_shift(element)
    bit = (byte & 3) * 8 + shift  # the element's first bit in its word
    word = byte >> 2
    field = u32(low_mask(nbits))
    _set_bits(stream, word, field << u32(bit), code << u32(bit))
    if WORD_BITS % nbits:  # the element may continue in the next word
        spill = bit + nbits - WORD_BITS
        with Tb.If(spill > 0):
            with Tb.Then():
                rest = u32(WORD_BITS) - u32(bit)
                _set_bits(stream, word + 1, field >> rest, code >> rest)


def _set_bits(stream: tirx.Buffer, word: Any, field_mask: Any, value: Any) -> None:
    Tb.evaluate(Tb.cuda.func_call("tilus_set_bits", tirx.address_of(stream[word]), field_mask, value,
                                  source_code=HELPERS))


# ---- entries (called by the LoadGlobal / StoreGlobal / LoadShared / StoreShared emitters) -------------
def emit_load_global(ctx: CodegenContext, inst: ir.LoadGlobal) -> None:
    emit_packed_load(ctx, inst.output, inst.src, inst.offsets, inst.dims)


def emit_store_global(ctx: CodegenContext, inst: ir.StoreGlobal) -> None:
    emit_packed_store(ctx, inst.src, inst.dst, inst.offsets, inst.dims)


def emit_load_shared(ctx: CodegenContext, inst: ir.LoadShared) -> None:
    emit_packed_load(ctx, inst.output, inst.src, inst.offsets, inst.dims)


def emit_store_shared(ctx: CodegenContext, inst: ir.StoreShared) -> None:
    emit_packed_store(ctx, inst.src, inst.dst, inst.offsets, inst.dims)
