"""Scalar and pointer types of the language.

``float16``, ``int32``, ... annotate run-time scalar parameters and name tensor element types;
``~float16`` is the pointer type of a parameter that receives a tensor. Each type knows its TVM
name and its torch counterpart.

>>> float16.name, float16.nbits, (~float16).dtype is float16
('float16', 16, True)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tilus_tvm.errors import ScriptError


@dataclass(frozen=True)
class DataType:
    """A scalar type: ``name`` is also its TVM dtype string."""

    name: str
    nbits: int
    kind: str  # "float", "int", "uint" or "bool"
    short: str  # short name used in kernel names and messages, e.g. "f16"

    def __invert__(self) -> PointerType:
        return PointerType(self)

    def __repr__(self) -> str:
        return self.name

    def __call__(self, value: Any):
        """A constant (or a cast of a scalar expression) of this type."""
        from tvm import tirx

        if isinstance(value, (bool, int, float)):
            return tirx.const(value, self.name)
        return tirx.Cast(self.name, value)

    @property
    def nbytes(self) -> int:
        return max(1, self.nbits // 8)

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_integer(self) -> bool:
        return self.kind in ("int", "uint")

    @property
    def torch_dtype(self):
        import torch

        return getattr(torch, _TORCH_NAMES.get(self.name, self.name))


@dataclass(frozen=True)
class PointerType:
    """``~dtype``: a parameter that receives a tensor (its data pointer) of element type ``dtype``."""

    dtype: DataType

    def __repr__(self) -> str:
        return f"~{self.dtype.name}"


boolean = DataType("bool", 8, "bool", "b")
int8 = DataType("int8", 8, "int", "i8")
int16 = DataType("int16", 16, "int", "i16")
int32 = DataType("int32", 32, "int", "i32")
int64 = DataType("int64", 64, "int", "i64")
uint8 = DataType("uint8", 8, "uint", "u8")
uint16 = DataType("uint16", 16, "uint", "u16")
uint32 = DataType("uint32", 32, "uint", "u32")
uint64 = DataType("uint64", 64, "uint", "u64")
float16 = DataType("float16", 16, "float", "f16")
bfloat16 = DataType("bfloat16", 16, "float", "bf16")
float32 = DataType("float32", 32, "float", "f32")
float64 = DataType("float64", 64, "float", "f64")

ALL_TYPES = (boolean, int8, int16, int32, int64, uint8, uint16, uint32, uint64, float16, bfloat16, float32,
             float64)
_BY_NAME = {t.name: t for t in ALL_TYPES}
_TORCH_NAMES = {"bool": "bool"}


def as_dtype(value: Any) -> DataType:
    """A DataType from a DataType, its name, or a torch dtype."""
    if isinstance(value, DataType):
        return value
    if isinstance(value, str) and value in _BY_NAME:
        return _BY_NAME[value]
    text = str(value)
    if text.startswith("torch."):
        name = text[len("torch."):]
        if name in _BY_NAME:
            return _BY_NAME[name]
    raise ScriptError(f"unknown data type {value!r}; expected one of {', '.join(_BY_NAME)}")
