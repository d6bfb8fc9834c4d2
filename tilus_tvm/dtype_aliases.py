"""Tilus's short names of the standard data types (``from tilus import f16, f32, i32, void_p``), bound to
the entries of the one dtype table (:mod:`tilus_tvm.dtypes`): ``f16 is float16``.

``void_p`` is ``~void``: a pointer parameter that takes a tensor of any dtype (the dtype becomes part
of the kernel's specialisation, and ``global_view(ptr, dtype=...)`` names it).
"""
from tilus_tvm.dtypes import (bfloat16, float16, float32, float64, int8, int16, int32, int64, uint8, uint16, uint32,
                              uint64, void)

bf16, f16, f32, f64 = bfloat16, float16, float32, float64
i8, i16, i32, i64 = int8, int16, int32, int64
u8, u16, u32, u64 = uint8, uint16, uint32, uint64
void_p = ~void

__all__ = ["bf16", "f16", "f32", "f64", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "void_p"]
