"""Tilus's short names of the data types (``from tilus import f16, f32, i32, void_p``; ``i4``, ``u2``, ``f6e3m2``
for the low-precision ones), bound to the entries of the one dtype table (:mod:`tilus_tvm.dtypes`): ``f16 is
float16``, ``i4 is int4b``; each is the entry's ``short`` name.

``void_p`` is ``~void``: a pointer parameter that takes a tensor of any dtype (the dtype becomes part
of the kernel's specialisation, and ``global_view(ptr, dtype=...)`` names it).
"""
from tilus_tvm.dtypes import (bfloat16, float3_e1m1, float4_e2m1, float5_e2m2, float5_e3m1, float6_e2m3, float6_e3m2,
                              float6_e4m1, float7_e2m4, float7_e3m3, float7_e4m2, float7_e5m1, float8_e4m3, float8_e5m2,
                              float16, float32, float64, int1b, int2b, int3b, int4b, int5b, int6b, int7b, int8, int16,
                              int32, int64, uint1b, uint2b, uint3b, uint4b, uint5b, uint6b, uint7b, uint8, uint16,
                              uint32, uint64, void)

bf16, f16, f32, f64 = bfloat16, float16, float32, float64
i8, i16, i32, i64 = int8, int16, int32, int64
u8, u16, u32, u64 = uint8, uint16, uint32, uint64
i1, i2, i3, i4, i5, i6, i7 = int1b, int2b, int3b, int4b, int5b, int6b, int7b
u1, u2, u3, u4, u5, u6, u7 = uint1b, uint2b, uint3b, uint4b, uint5b, uint6b, uint7b
f8e4m3, f8e5m2 = float8_e4m3, float8_e5m2
f7e5m1, f7e4m2, f7e3m3, f7e2m4 = float7_e5m1, float7_e4m2, float7_e3m3, float7_e2m4
f6e4m1, f6e3m2, f6e2m3, f5e3m1, f5e2m2 = float6_e4m1, float6_e3m2, float6_e2m3, float5_e3m1, float5_e2m2
f4e2m1, f3e1m1 = float4_e2m1, float3_e1m1
void_p = ~void

__all__ = ["bf16", "f16", "f32", "f64", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "void_p",
           "i1", "i2", "i3", "i4", "i5", "i6", "i7", "u1", "u2", "u3", "u4", "u5", "u6", "u7",
           "f8e4m3", "f8e5m2", "f7e5m1", "f7e4m2", "f7e3m3", "f7e2m4", "f6e4m1", "f6e3m2", "f6e2m3", "f5e3m1", "f5e2m2",
           "f4e2m1", "f3e1m1"]
