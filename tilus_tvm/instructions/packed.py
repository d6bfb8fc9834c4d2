"""How tensors of the packed low-precision types are stored inside a kernel, and the bit arithmetic on them.

A type is *packed* when it is a low-precision type (:mod:`tilus_tvm.lowp`) other than ``int8`` and
``uint8``: the sub-byte integers and floats (``uint4b``, ``int3b``, ``float6_e3m2``, ...) and the
8-bit floats (``float8_e4m3``, ``float8_e5m2``, ``float8_e8m0``). A packed tensor holds *codes*
(the bit patterns of :mod:`tilus_tvm.lowp`), densely, with no padding between elements:

- **global memory**: the tensor's bytes as :mod:`tilus_tvm.lowp` packs them (element ``i`` of the
  flat view at bits ``[i*N, (i+1)*N)`` of the little-endian byte stream). The pointer parameter is a
  ``uint8`` buffer of bytes (the 8-bit floats keep their TVM type, so torch's ``float8_e4m3fn``
  tensors pass TVM's argument checks), read and written through ``uint8`` / ``uint32`` aliases;
- **shared memory**: the same stream at the tensor's place in the pool; element ``(i, j, ...)``
  starts at bit ``offset * N``, ``offset`` being its shared layout's element offset;
- **registers**: a thread's ``local_size`` slots as one bit stream in ``uint32`` words, slot ``s``
  at bits ``[s*N, (s+1)*N)`` (an element may straddle two words when ``N`` does not divide 32).

Every index into the register words is a Python int when a kernel is generated (the emitters loop
in Python), so CUDA keeps the words in registers and the bit arithmetic folds into ``shf``,
``lop3``, ``bfe`` and ``prmt``. This module holds the expression builders every packed emitter
uses: codes from words and words from codes (:func:`unpack_words`, :func:`pack_words`).
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

from tilus_tvm.lowp import WORD_BITS, is_packed, pointer_storage_dtype, register_storage, storage_words  # noqa: F401


# ---- expressions ---------------------------------------------------------------------------------
def u32(value: Any):
    """``value`` as a ``uint32`` expression (Python ints become constants)."""
    from tvm import tirx

    from tilus_tvm.ir.scalar import expr_dtype

    if isinstance(value, int):
        return tirx.const(value & 0xFFFFFFFF, "uint32")
    return value if expr_dtype(value) == "uint32" else tirx.Cast("uint32", value)


def low_mask(nbits: int) -> int:
    return (1 << nbits) - 1


def shift_right(value: Any, amount: int):
    return value if amount == 0 else value >> u32(amount)


def shift_left(value: Any, amount: int):
    return value if amount == 0 else value << u32(amount)


def bits_of(words: Sequence[Any], first_bit: int, nbits: int):
    """Bits ``[first_bit, first_bit + nbits)`` of the little-endian stream ``words`` (uint32
    expressions), as a ``uint32`` expression with the field in its low bits (``nbits <= 32``)."""
    word, shift = divmod(first_bit, WORD_BITS)
    value = shift_right(words[word], shift)
    if shift + nbits > WORD_BITS:
        value = value | shift_left(words[word + 1], WORD_BITS - shift)
    if shift + nbits != WORD_BITS:  # a field ending at the word's top is clear above after the shift
        value = value & u32(low_mask(nbits))
    return value


def unpack_words(words: Sequence[Any], nbits: int, count: int) -> list:
    """The ``count`` codes of ``nbits`` bits held in ``words``, each a uint32 expression."""
    return [bits_of(words, slot * nbits, nbits) for slot in range(count)]


def pack_words(codes: Sequence[Optional[Any]], nbits: int) -> list:
    """The words holding ``codes`` (uint32 expressions with no bits above ``nbits``; None for a slot
    left 0), slot ``s`` at bits ``[s*nbits, (s+1)*nbits)``."""
    num_words = max(1, -(-len(codes) * nbits // WORD_BITS))
    pieces: list[list] = [[] for _ in range(num_words)]
    for slot, code in enumerate(codes):
        if code is None:
            continue
        add_piece(pieces, slot * nbits, nbits, code)
    return [join_pieces(p) for p in pieces]


def add_piece(pieces: list[list], first_bit: int, nbits: int, value: Any) -> None:
    """Record that bits ``[first_bit, first_bit + nbits)`` of the word stream hold ``value``'s low bits."""
    word, shift = divmod(first_bit, WORD_BITS)
    pieces[word].append(shift_left(value, shift))
    if shift + nbits > WORD_BITS:
        pieces[word + 1].append(shift_right(value, WORD_BITS - shift))


def join_pieces(pieces: Sequence[Any]):
    """The OR of disjoint bit fields (0 when there are none)."""
    if not pieces:
        return u32(0)
    value = pieces[0]
    for piece in pieces[1:]:
        value = value | piece
    return value
