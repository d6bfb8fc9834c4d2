"""tilus-tvm: a tile-level GPU kernel language on Apache TVM.

    import tilus_tvm as tilus
    from tilus_tvm import float16, float32, int32

    class MyKernel(tilus.Script):
        def __call__(self, n: int32, x: ~float32): ...
"""
from tilus_tvm import layout, option, utils
from tilus_tvm.dtypes import (DataType, PointerType, bfloat16, boolean, float16, float32, float64, int8, int16,
                              int32, int64, uint8, uint16, uint32, uint64, void)
from tilus_tvm.dtypes import (float4_e2m1, float6_e2m3, float6_e3m2, float8_e4m3, float8_e5m2, float8_e8m0,
                              float_type, int4b, int_type, uint4b)
from tilus_tvm.dtypes import (float3_e1m1, float5_e2m2, float5_e3m1, float6_e4m1, float7_e2m4, float7_e3m3, float7_e4m2,
                              float7_e5m1)
from tilus_tvm.dtype_aliases import bf16, f16, f32, f64, i8, i16, i32, i64, u8, u16, u32, u64, void_p  # Tilus's names
from tilus_tvm.dtype_aliases import (f3e1m1, f4e2m1, f5e2m2, f5e3m1, f6e2m3, f6e3m2, f6e4m1, f7e2m4, f7e3m3, f7e4m2,
                                     f7e5m1, f8e4m3, f8e5m2, i1, i2, i3, i4, i5, i6, i7, u1, u2, u3, u4, u5, u6, u7)
from tilus_tvm.dtypes import int1b, int2b, int3b, int5b, int6b, int7b, uint1b, uint2b, uint3b, uint5b, uint6b, uint7b
from tilus_tvm.errors import CompileError, LaunchError, LayoutError, ScriptError, SlowLaunchWarning, TilusError
from tilus_tvm.ir.tensor import GlobalTensor, RegisterTensor, SharedTensor
from tilus_tvm.lang.script import Script
from tilus_tvm.layout import RegisterLayout, SharedLayout
from tilus_tvm.lowp import PackedTensor, from_torch
from tilus_tvm.lowp import empty, full, ones, rand, randint, randn, view_torch, zeros  # Tilus's tensor constructors
from tilus_tvm.runtime.cache import set_cache_dir
from tilus_tvm.runtime.kernel import CompiledKernel, load_kernel
from tilus_tvm.runtime.export import load  # an exported kernel or Relax library, nothing recompiled
from tilus_tvm import tune  # callable: tilus_tvm.tune(kernel, *args) tunes ahead of time (tune/__init__.py)
from tilus_tvm.tune import autotune, tune_tir

__version__ = "0.1.0"
