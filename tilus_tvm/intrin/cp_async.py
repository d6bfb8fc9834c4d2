"""``cp.async`` tensor intrinsics (one vector, global -> shared) and the commit/wait group helpers.

``tilus.cp_async_{bytes}B_{cache}_{dtype}`` copies ``bytes / sizeof(dtype)`` contiguous elements
from a ``global`` buffer into a ``shared`` one with ``cp.async.{cache}.shared.global [dst], [src],
bytes``: ``ca`` (cache at all levels) for 4, 8 and 16 bytes, ``cg`` (L2 only) for 16 bytes, the
only size the PTX ISA allows with ``.cg``. Both addresses must be aligned to ``bytes``.

The copy is asynchronous: a thread sees the data after it commits the copies into a group
(:func:`emit_cp_async_commit_group`) and waits until at most ``n`` of its groups are pending
(:func:`emit_cp_async_wait_group`), or for all its copies (:func:`emit_cp_async_wait_all`); other
threads see it after a barrier on top of that.

Zero fill: :func:`emit_cp_async` takes ``src_size``, the PTX ``src-size`` operand (bytes read from
``src``; the rest of the destination is zero-filled), which TVM 0.27's ``T.ptx`` table spells as a
fourth operand. The registered intrinsics copy whole vectors only: a ``TensorIntrin`` sees nothing
but its buffers, so it cannot express the bound that decides how many bytes are in range.
"""
from __future__ import annotations

from typing import Any, Optional

from tvm import tirx
from tvm.script import tirx as T
from tvm.script.ir_builder import tirx as Tb

from tilus_tvm.dtypes import as_dtype
from tilus_tvm.intrin.builder import Operand, intrin_func, named
from tilus_tvm.intrin.fragment import element_pointer
from tilus_tvm.intrin.registry import PREFIX, IntrinError, IntrinSpec, register

DST_SCOPE = "shared"
SRC_SCOPE = "global"
VARIANTS = ((4, "ca"), (8, "ca"), (16, "ca"), (16, "cg"))  # (bytes, cache operator) the PTX ISA allows
DTYPES = ("float16", "bfloat16", "float32", "int8")


def cp_async_name(nbytes: int, cache: str, dtype: str) -> str:
    """``tilus.cp_async_16B_cg_f16``."""
    return f"{PREFIX}cp_async_{nbytes}B_{cache}_{as_dtype(dtype).ptx}"


def _check_variant(op: str, nbytes: int, cache: str) -> None:
    if (nbytes, cache) not in VARIANTS:
        allowed = ", ".join(f"{b} bytes .{c}" for b, c in VARIANTS)
        raise IntrinError(f"{op}: cp.async.{cache} of {nbytes} bytes does not exist; the PTX ISA allows {allowed}")


def emit_cp_async(nbytes: int, dst_buf: tirx.Buffer, dst_offset: Any, src_buf: tirx.Buffer, src_offset: Any,
                  cache: str = "ca", src_size: Optional[Any] = None, pointers: str = "access_ptr") -> tirx.Expr:
    """This thread's ``cp.async.{cache}.shared.global [dst], [src], nbytes{, src_size}``.

    Copies ``nbytes`` bytes from element ``src_offset`` of ``src_buf`` (global) to element
    ``dst_offset`` of ``dst_buf`` (shared); offsets in elements of each buffer, from its first
    element. With ``src_size`` (a PrimExpr or int, in bytes, at most ``nbytes``) only that many bytes
    are read and the rest of the destination is zero-filled: ``0`` fills the whole vector with zeros
    without touching ``src``. ``pointers`` is how both buffers are addressed
    (``fragment.element_pointer``): ``"address_of"`` for 1-D views, such as typed views of a byte
    pool. Returns the call (``T.ptx.cp.async``); wrap it in ``T.evaluate``.

    >>> s, g = tirx.decl_buffer((64,), "float16", scope="shared"), tirx.decl_buffer((64,), "float16")
    >>> emit_cp_async(16, s, 8, g, 8, cache="cg", src_size=0).op.name
    'tirx.ptx.cp_async_cg_src_size'
    """
    _check_variant("emit_cp_async", nbytes, cache)
    if str(dst_buf.dtype) != str(src_buf.dtype):
        raise IntrinError(f"emit_cp_async: dst_buf {dst_buf.name!r} holds {dst_buf.dtype} but src_buf "
                          f"{src_buf.name!r} holds {src_buf.dtype}; cp.async copies bytes of one type")
    instruction = getattr(T.ptx.cp.async_, cache).shared.global_
    operands = [element_pointer("emit_cp_async", dst_buf, dst_offset, "w", pointers),
                element_pointer("emit_cp_async", src_buf, src_offset, "r", pointers), nbytes]
    if src_size is not None:
        operands.append(tirx.const(src_size, "uint32") if isinstance(src_size, int) else src_size.astype("uint32"))
    return instruction(*operands)


def emit_cp_async_commit_group() -> tirx.Expr:
    """``cp.async.commit_group``: this thread's uncommitted copies form one group."""
    return T.ptx.cp.async_.commit_group()


def emit_cp_async_wait_group(n: int) -> tirx.Expr:
    """``cp.async.wait_group n``: wait until at most ``n`` of this thread's groups are pending.

    ``n`` is an immediate (a Python int >= 0).
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise IntrinError(f"emit_cp_async_wait_group: n must be a non-negative Python int, got {n!r}")
    return T.ptx.cp.async_.wait_group(n)


def emit_cp_async_wait_all() -> tirx.Expr:
    """``cp.async.wait_all``: wait until all of this thread's copies, committed or not, are complete."""
    return T.ptx.cp.async_.wait_all()


def cp_async_intrin(nbytes: int, cache: str, dtype: str) -> tuple[tirx.PrimFunc, tirx.PrimFunc]:
    """Description and implementation of ``tilus.cp_async_{bytes}B_{cache}_{dtype}`` (buffers D, S)."""
    _check_variant("cp_async_intrin", nbytes, cache)
    lanes = nbytes * 8 // as_dtype(dtype).nbits
    operands = [Operand("D", (lanes,), dtype, DST_SCOPE, "w"), Operand("S", (lanes,), dtype, SRC_SCOPE, "r")]

    def desc(D, S):
        with Tb.serial(0, lanes) as i:
            named("i", i)
            with Tb.sblock("copy"):
                vi = named("vi", Tb.axis.remap("S", [i]))
                Tb.buffer_store(D, S[vi], [vi])

    def impl(D, S):
        Tb.evaluate(emit_cp_async(nbytes, D, 0, S, 0, cache=cache))

    return intrin_func("desc", operands, desc), intrin_func("impl", operands, impl)


def register_all() -> None:
    """Register every ``tilus.cp_async_*`` intrinsic."""
    for dtype in DTYPES:
        for nbytes, cache in VARIANTS:
            register(IntrinSpec(cp_async_name(nbytes, cache, dtype), f"cp.async.{cache}.shared.global ({nbytes} B)",
                                "none (one contiguous vector per thread)", *cp_async_intrin(nbytes, cache, dtype)))
