"""Scalar and pointer types of the language, and the one table of what each type is.

``float16``, ``int32``, ... annotate run-time scalar parameters and name tensor element types;
``~float16`` is the pointer type of a parameter that receives a tensor. Every fact about a type --
its bit width, signedness, TVM / torch / numpy / PTX spellings, float format, integer range --
lives in its :class:`DataType` entry, registered once in the table below; every other module asks
the entry instead of keeping its own dictionary.

Sizes come from bit widths: ``n`` elements of a ``b``-bit type occupy ``ceil(n * b / 8)`` bytes
(:meth:`DataType.storage_bytes`), which also covers the sub-byte types (``int4b``, ``float6_e3m2``,
...) that :func:`int_type` and :func:`float_type` make and register on first use.

This module imports neither TVM nor torch nor numpy: the methods that return their objects import
them when called, so the layout algebra can use the table without loading them.

>>> float16.name, float16.nbits, (~float16).dtype is float16
('float16', 16, True)
>>> float_type(5, 10) is float16, as_dtype("float16").ptx, int8.max_value
(True, 'f16', 127)
"""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass, fields
from typing import Any, Optional

from tilus_tvm.errors import ScriptError

KINDS = ("int", "uint", "float", "bool")


@dataclass(frozen=True)
class DataType:
    """A scalar type: one row of the dtype table.

    ``nbits`` is the storage width of one element (``bool`` is stored in a byte, as in TVM, torch
    and numpy). ``tvm_name``, ``torch_name`` and ``numpy_name`` are the type's names there (``None``
    where the library has no such type); ``ptx`` is the PTX type suffix without the dot (``"f16"``,
    ``"s8"``) and ``ptx_mma`` the operand spelling of TVM's ``T.ptx_legacy.mma`` (``"fp16"``,
    ``"int8"``). Floats record their format: ``signed + exponent_bits + mantissa_bits == nbits``.

    Entries are made once and registered (:func:`register`, :func:`int_type`, :func:`float_type`),
    so types may be compared with ``is``.
    """

    name: str
    nbits: int
    kind: str  # "int", "uint", "float" or "bool"
    short: str  # short name used in kernel names and messages, e.g. "f16"
    signed: bool
    tvm_name: Optional[str] = None
    torch_name: Optional[str] = None
    numpy_name: Optional[str] = None
    ptx: Optional[str] = None
    ptx_mma: Optional[str] = None
    exponent_bits: Optional[int] = None
    mantissa_bits: Optional[int] = None

    def __post_init__(self) -> None:
        def bad(reason: str) -> ScriptError:
            return ScriptError(f"DataType {self.name!r}: {reason}")

        if self.kind not in KINDS:
            raise bad(f"kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if not isinstance(self.nbits, int) or self.nbits < 1:
            raise bad(f"nbits must be a positive int, got {self.nbits!r}")
        if self.kind in ("int", "uint") and self.signed != (self.kind == "int"):
            raise bad(f"kind {self.kind!r} contradicts signed={self.signed}")
        is_float_format = self.exponent_bits is not None or self.mantissa_bits is not None
        if self.kind == "float":
            if self.exponent_bits is None or self.mantissa_bits is None:
                raise bad("a float needs exponent_bits and mantissa_bits")
            if int(self.signed) + self.exponent_bits + self.mantissa_bits != self.nbits:
                raise bad(f"sign {int(self.signed)} + exponent {self.exponent_bits} + mantissa "
                          f"{self.mantissa_bits} bits != nbits {self.nbits}")
        elif is_float_format:
            raise bad(f"only floats have exponent/mantissa bits (kind {self.kind!r})")

    def __invert__(self) -> PointerType:
        return PointerType(self)

    def __repr__(self) -> str:
        return self.name

    def __reduce__(self):
        # pickling and deepcopy give back the registered entry, so ``is`` comparisons survive them
        return _registered, tuple(getattr(self, f.name) for f in fields(self))

    def __call__(self, value: Any):
        """A TVM constant (or a cast of a scalar expression) of this type."""
        from tvm import tirx

        tvm_name = self._require("tvm_name", "a TVM dtype")
        if isinstance(value, (bool, int, float)):
            return tirx.const(value, tvm_name)
        return tirx.Cast(tvm_name, value)

    # ---- sizes --------------------------------------------------------------------------------
    def storage_bytes(self, num_elements: Any) -> Any:
        """Bytes that ``num_elements`` densely packed elements occupy: ``ceil(num_elements * nbits / 8)``.

        Generic over ints and TIR expressions.

        >>> float16.storage_bytes(3), float_type(2, 1).storage_bytes(3)
        (6, 2)
        """
        if isinstance(num_elements, int) and num_elements < 0:
            raise ScriptError(f"{self.name}.storage_bytes: num_elements must be >= 0, got {num_elements}")
        return (num_elements * self.nbits + 7) // 8

    @property
    def nbytes(self) -> int:
        """Bytes of one element; only for types whose width is a whole number of bytes."""
        if self.nbits % 8:
            raise ScriptError(f"{self.name} is {self.nbits} bits, not a whole number of bytes, so one element has "
                              f"no byte size; use {self.name}.storage_bytes(num_elements) for the bytes of a "
                              f"packed array")
        return self.nbits // 8

    # ---- classification ---------------------------------------------------------------------
    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_integer(self) -> bool:
        return self.kind in ("int", "uint")

    @property
    def min_value(self) -> int:
        """Smallest value of an integer type: ``-2**(nbits-1)`` signed, ``0`` unsigned."""
        self._require_integer("min_value")
        return -(2 ** (self.nbits - 1)) if self.signed else 0

    @property
    def max_value(self) -> int:
        """Largest value of an integer type: ``2**(nbits-1) - 1`` signed, ``2**nbits - 1`` unsigned."""
        self._require_integer("max_value")
        return 2 ** (self.nbits - 1) - 1 if self.signed else 2**self.nbits - 1

    # ---- other libraries' objects -------------------------------------------------------------
    @property
    def torch_dtype(self):
        """The ``torch.dtype`` (imports torch)."""
        import torch

        return getattr(torch, self._require("torch_name", "a torch dtype"))

    @property
    def numpy_dtype(self):
        """The ``numpy.dtype`` (imports numpy)."""
        import numpy

        return numpy.dtype(self._require("numpy_name", "a numpy dtype"))

    def _require(self, field_name: str, what: str) -> str:
        value = getattr(self, field_name)
        if value is None:
            raise ScriptError(f"{self.name} has no counterpart as {what} ({field_name} is None)")
        return value

    def _require_integer(self, op: str) -> None:
        if not self.is_integer:
            raise ScriptError(f"{self.name}.{op}: only integer types have a range, {self.name} is a {self.kind}")


@dataclass(frozen=True)
class PointerType:
    """``~dtype``: a parameter that receives a tensor (its data pointer) of element type ``dtype``."""

    dtype: DataType

    def __repr__(self) -> str:
        return f"~{self.dtype.name}"


class VoidType:
    """``void``: ``~void`` annotates a pointer parameter that takes a tensor of any dtype in the table.

    The tensor's dtype becomes part of the kernel's specialisation (one compiled kernel per dtype),
    and ``self.global_view(ptr, dtype=...)`` inside the kernel must name it.
    """

    name = "void"

    def __invert__(self) -> PointerType:
        return PointerType(self)

    def __repr__(self) -> str:
        return "void"

    def __reduce__(self):
        return "void"


void = VoidType()


# ---- the table ------------------------------------------------------------------------------
_BY_NAME: dict[str, DataType] = {}
# other spellings of registered types: TVM dtype strings, torch and numpy dtype names
_BY_TVM: dict[str, DataType] = {}
_BY_TORCH: dict[str, DataType] = {}
_BY_NUMPY: dict[str, DataType] = {}
_FLOAT_FORMATS: dict[tuple[int, int, bool], DataType] = {}


def register(dtype: DataType) -> DataType:
    """Add ``dtype`` to the table and return the table's entry.

    Registering an equal entry again returns the first one; a different type under a name (or a TVM,
    torch or numpy spelling, or float format) already taken is an error.
    """
    existing = _BY_NAME.get(dtype.name)
    if existing is not None:
        if existing != dtype:
            differences = ", ".join(f"{f.name}={getattr(dtype, f.name)!r} (registered: {getattr(existing, f.name)!r})"
                                    for f in fields(DataType) if getattr(dtype, f.name) != getattr(existing, f.name))
            raise ScriptError(f"register: data type {dtype.name!r} is already registered with other facts: "
                              f"{differences}")
        return existing
    float_format = (dtype.exponent_bits, dtype.mantissa_bits, dtype.signed) if dtype.is_float else None
    keys = [(_BY_TVM, dtype.tvm_name, "TVM dtype"), (_BY_TORCH, dtype.torch_name, "torch dtype"),
            (_BY_NUMPY, dtype.numpy_name, "numpy dtype"), (_FLOAT_FORMATS, float_format, "float format")]
    keys = [(index, key, what) for index, key, what in keys if key is not None]
    for index, key, what in keys:
        if key in index:
            raise ScriptError(f"register: {dtype.name}'s {what} {key!r} already belongs to {index[key].name}")
    _BY_NAME[dtype.name] = dtype
    for index, key, _ in keys:
        index[key] = dtype
    return dtype


def registered_dtypes() -> tuple[DataType, ...]:
    """Every entry of the table, in registration order."""
    return tuple(_BY_NAME.values())


def _registered(*field_values: Any) -> DataType:
    return register(DataType(*field_values))


def _integer_name(nbits: int, signed: bool) -> str:
    """``int32``, ``uint8``; widths under a byte take Tilus's names (``int4b``, ``uint2b``)."""
    return ("int" if signed else "uint") + str(nbits) + ("b" if nbits < 8 else "")


def _integer(nbits: int, signed: bool, **facts: Any) -> DataType:
    """An integer row named by :func:`_integer_name`, with TVM name ``int{nbits}`` / ``uint{nbits}``."""
    kind = "int" if signed else "uint"
    return DataType(_integer_name(nbits, signed), nbits, kind, f"{kind[0]}{nbits}", signed,
                    tvm_name=f"{kind}{nbits}", **facts)


def _floating(exponent_bits: int, mantissa_bits: int, signed: bool = True, **facts: Any) -> DataType:
    """A float row; without a ``name`` it takes Tilus's ``float{nbits}_e{exponent}m{mantissa}``."""
    nbits = int(signed) + exponent_bits + mantissa_bits
    facts.setdefault("name", f"float{nbits}_e{exponent_bits}m{mantissa_bits}")
    facts.setdefault("short", f"f{nbits}e{exponent_bits}m{mantissa_bits}")
    return DataType(nbits=nbits, kind="float", signed=signed, exponent_bits=exponent_bits,
                    mantissa_bits=mantissa_bits, **facts)


boolean = register(DataType("bool", 8, "bool", "b", False, tvm_name="bool", torch_name="bool", numpy_name="bool"))
int8 = register(_integer(8, True, torch_name="int8", numpy_name="int8", ptx="s8", ptx_mma="int8"))
int16 = register(_integer(16, True, torch_name="int16", numpy_name="int16", ptx="s16", ptx_mma="int16"))
int32 = register(_integer(32, True, torch_name="int32", numpy_name="int32", ptx="s32", ptx_mma="int32"))
int64 = register(_integer(64, True, torch_name="int64", numpy_name="int64", ptx="s64", ptx_mma="int64"))
uint8 = register(_integer(8, False, torch_name="uint8", numpy_name="uint8", ptx="u8", ptx_mma="uint8"))
uint16 = register(_integer(16, False, torch_name="uint16", numpy_name="uint16", ptx="u16", ptx_mma="uint16"))
uint32 = register(_integer(32, False, torch_name="uint32", numpy_name="uint32", ptx="u32", ptx_mma="uint32"))
uint64 = register(_integer(64, False, torch_name="uint64", numpy_name="uint64", ptx="u64", ptx_mma="uint64"))
float16 = register(_floating(5, 10, name="float16", short="f16", tvm_name="float16", torch_name="float16",
                             numpy_name="float16", ptx="f16", ptx_mma="fp16"))
bfloat16 = register(_floating(8, 7, name="bfloat16", short="bf16", tvm_name="bfloat16", torch_name="bfloat16",
                              ptx="bf16", ptx_mma="bf16"))
float32 = register(_floating(8, 23, name="float32", short="f32", tvm_name="float32", torch_name="float32",
                             numpy_name="float32", ptx="f32", ptx_mma="fp32"))
float64 = register(_floating(11, 52, name="float64", short="f64", tvm_name="float64", torch_name="float64",
                             numpy_name="float64", ptx="f64", ptx_mma="fp64"))


# ---- constructors and look-up -------------------------------------------------------------------
def int_type(nbits: int, signed: bool = True) -> DataType:
    """The table's integer type of ``nbits`` bits.

    ``int8``..``int64`` / ``uint8``..``uint64``; a width of 1 to 7 bits is Tilus's ``int{nbits}b`` /
    ``uint{nbits}b``, registered on first use (TVM name ``int{nbits}``, no torch, numpy or PTX type).

    >>> int_type(32) is int32, int_type(4, signed=False).name
    (True, 'uint4b')
    """
    if isinstance(nbits, bool) or not isinstance(nbits, int) or not (1 <= nbits <= 7 or nbits in (8, 16, 32, 64)):
        raise ScriptError(f"int_type: nbits must be 1..7, 8, 16, 32 or 64, got {nbits!r}")
    found = _BY_NAME.get(_integer_name(nbits, bool(signed)))
    return found if found is not None else register(_integer(nbits, bool(signed)))


def float_type(exponent_bits: int, mantissa_bits: int, signed: bool = True) -> DataType:
    """The table's float type with this format (``signed`` means one sign bit).

    A format not yet in the table is registered under Tilus's name ``float{nbits}_e{exponent}m{mantissa}``
    with no TVM, torch, numpy or PTX counterpart (register a full row first to give it some).

    >>> float_type(8, 7) is bfloat16, float_type(3, 2).name, float_type(3, 2).nbits
    (True, 'float6_e3m2', 6)
    """
    for what, bits, low in (("exponent_bits", exponent_bits, 1), ("mantissa_bits", mantissa_bits, 0)):
        if isinstance(bits, bool) or not isinstance(bits, int) or bits < low:
            raise ScriptError(f"float_type: {what} must be an int >= {low}, got {bits!r}")
    if int(bool(signed)) + exponent_bits + mantissa_bits > 64:
        raise ScriptError(f"float_type: e{exponent_bits}m{mantissa_bits} (signed={bool(signed)}) is wider than 64 bits")
    found = _FLOAT_FORMATS.get((exponent_bits, mantissa_bits, bool(signed)))
    return found if found is not None else register(_floating(exponent_bits, mantissa_bits, bool(signed)))


# Tilus's names of low-precision types, so that as_dtype (and a reloaded kernel) finds them before
# anything registered them in this process
_TILUS_INT = re.compile(r"(u?)int([1-7])b")
_TILUS_FLOAT = re.compile(r"float([3-8])_e(\d+)m(\d+)")


def _from_tilus_name(name: str) -> Optional[DataType]:
    match = _TILUS_INT.fullmatch(name)
    if match:
        return int_type(int(match[2]), signed=not match[1])
    match = _TILUS_FLOAT.fullmatch(name)
    if match:
        nbits, exponent_bits, mantissa_bits = (int(g) for g in match.groups())
        sign_bits = nbits - exponent_bits - mantissa_bits
        if exponent_bits >= 1 and sign_bits in (0, 1):
            return float_type(exponent_bits, mantissa_bits, signed=bool(sign_bits))
    return None


def _numpy_name(value: Any) -> Optional[str]:
    """The numpy dtype name of a numpy dtype or scalar type; None for anything else."""
    numpy = sys.modules.get("numpy")  # a numpy object means numpy is loaded already
    if numpy is None:
        return None
    if isinstance(value, numpy.dtype):
        return value.name
    if isinstance(value, type) and issubclass(value, numpy.generic):
        return numpy.dtype(value).name
    return None


def as_dtype(value: Any) -> DataType:
    """The table's entry for ``value``: a DataType, a name (``"float16"``, ``"int4b"``), a TVM dtype
    string or ``tvm.DataType``, a torch dtype (or its text ``"torch.float16"``), or a numpy dtype.

    >>> as_dtype("float32") is float32, as_dtype("torch.bool") is boolean
    (True, True)
    """
    if isinstance(value, DataType):
        return value
    found: Optional[DataType] = None
    numpy_name = None if isinstance(value, str) else _numpy_name(value)
    if numpy_name is not None:
        found = _BY_NUMPY.get(numpy_name)
    else:
        text = str(value)  # torch.float16 prints as "torch.float16", tvm.DataType as "float16"
        if text.startswith("torch."):
            found = _BY_TORCH.get(text[len("torch."):])
        else:
            found = _BY_NAME.get(text) or _BY_TVM.get(text) or _from_tilus_name(text)
    if found is None:
        raise ScriptError(f"unknown data type {value!r}; expected a DataType, one of {', '.join(_BY_NAME)}, "
                          f"a TVM dtype string, or a torch or numpy dtype")
    return found


# ---- low-precision types (issue 12) ---------------------------------------------------------------
# Tilus's names, registered at import so that their other spellings (``float8_e4m3fn``, torch's
# ``torch.float8_e5m2``, ...) lead to them. What each code means, how values round into these types and
# how sub-byte elements are packed is tilus_tvm/lowp.py's job, documented there. TVM and torch names are
# given where those libraries have the same format (TVM's float6_e3m2fn / float6_e2m3fn exist too, but
# the float6 rows keep no TVM name: nothing in tilus-tvm lowers them yet, and a TVM constant of them
# stays an error). PTX names are the ISA's type suffixes (``cvt.rn.satfinite.e4m3x2.f32``).
float8_e4m3 = register(_floating(4, 3, tvm_name="float8_e4m3fn", torch_name="float8_e4m3fn", ptx="e4m3"))
float8_e5m2 = register(_floating(5, 2, tvm_name="float8_e5m2", torch_name="float8_e5m2", ptx="e5m2"))
float8_e8m0 = register(_floating(8, 0, signed=False, tvm_name="float8_e8m0fnu", torch_name="float8_e8m0fnu",
                                 ptx="ue8m0"))
float6_e3m2 = register(_floating(3, 2, ptx="e3m2"))
float6_e2m3 = register(_floating(2, 3, ptx="e2m3"))
float4_e2m1 = register(_floating(2, 1, tvm_name="float4_e2m1fn", ptx="e2m1"))
# the rest of Tilus's sub-byte floats (``tilus.float7_e5m1`` ... ``tilus.float3_e1m1``), signed, with no TVM, torch or
# PTX counterpart; float_type makes any other split (``float_type(1, 5)``: float7_e1m5)
float7_e5m1, float7_e4m2, float7_e3m3, float7_e2m4 = (float_type(e, 6 - e) for e in (5, 4, 3, 2))
float6_e4m1 = float_type(4, 1)
float5_e3m1, float5_e2m2 = float_type(3, 1), float_type(2, 2)
float3_e1m1 = float_type(1, 1)
int1b, int2b, int3b, int4b, int5b, int6b, int7b = (int_type(nbits) for nbits in range(1, 8))
uint1b, uint2b, uint3b, uint4b, uint5b, uint6b, uint7b = (int_type(nbits, signed=False) for nbits in range(1, 8))
