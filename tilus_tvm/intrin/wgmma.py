"""Hopper's warpgroup matrix product, ``wgmma.mma_async``, and its fences, as CUDA device functions.

TVM 0.27 has no ``wgmma`` builtin (``T.ptx`` covers ``mma.sync``, ``ldmatrix``, ``cp.async`` and the
bulk copies), so each instruction is a small ``__device__ __forceinline__`` function around inline
PTX, attached to the call that uses it (``T.cuda.func_call(..., source_code=...)``), the way
``tilus_tvm.instructions.cast`` adds ``prmt`` and ``lop3``. They are not ``TensorIntrin``
registrations: a ``wgmma`` reads its operands through shared-memory *descriptors* and leaves its
result in registers later, which a tensorized block cannot describe.

Operands. ``a`` and ``b`` are K-major tiles in shared memory, described by a 64-bit descriptor
(PTX ISA, "Matrix Descriptor Format"):

    bits  0-13  start address >> 4          bits 32-45  stride byte offset >> 4
    bits 16-29  leading byte offset >> 4    bits 62-63  swizzle: 1 = 128 B, 2 = 64 B, 3 = 32 B

For a K-major tile whose rows are ``pitch`` bytes (32, 64 or 128) and swizzled over groups of 8 rows
(CuTe's ``Swizzle<log2(pitch / 16), 4, 3>`` on byte offsets), the stride byte offset is the distance
between 8-row groups, ``8 * pitch``; the leading byte offset is unused (1). The k-th 16-element step of
a tile starts ``32 * k`` bytes after the tile; the hardware applies the swizzle to the address, so the
tile must start on a multiple of the swizzle's period (``8 * pitch`` bytes).

Accumulator. ``wgmma.mma_async.sync.aligned.m64n{N}k16.f32.{f16,bf16}`` leaves the [64, N] float32
product in the warpgroup's registers: warp ``w`` holds rows ``16 w ...``, each lane ``N / 2`` values,
in the order of ``mma.sync``'s m16n8 accumulator repeated over ``N / 8`` column blocks.
"""
from __future__ import annotations

import functools
from typing import Any

from tvm import tirx
from tvm.script.ir_builder import tirx as Tb

from tilus_tvm.intrin.registry import IntrinError

SWIZZLE_MODES = {128: 1, 64: 2, 32: 3}  # row bytes of a K-major tile -> the descriptor's swizzle field
DTYPES = {"float16": "f16", "bfloat16": "bf16"}

_FENCES = {
    "tilus_wgmma_fence": "wgmma.fence.sync.aligned;",
    "tilus_wgmma_commit_group": "wgmma.commit_group.sync.aligned;",
    "tilus_fence_proxy_async": "fence.proxy.async.shared::cta;",
}

DESCRIPTOR_SOURCE = (  # guarded: every wgmma variant's source carries it
    "#ifndef TILUS_WGMMA_DESCRIPTOR\n#define TILUS_WGMMA_DESCRIPTOR\n"
    "__device__ __forceinline__ unsigned long long tilus_wgmma_descriptor(const void* smem, "
    "unsigned long long fixed) {\n"
    "  unsigned address = (unsigned)__cvta_generic_to_shared(smem);\n"
    "  return fixed | (unsigned long long)((address & 0x3FFFF) >> 4);\n"
    "}\n#endif\n")


def descriptor_bits(pitch_bytes: int) -> int:
    """The address-independent bits of a K-major operand's descriptor: swizzle mode and byte offsets.

    >>> hex(descriptor_bits(128))
    '0x4000004000010000'
    """
    if pitch_bytes not in SWIZZLE_MODES:
        raise IntrinError(f"wgmma: K-major rows must be 32, 64 or 128 bytes, got {pitch_bytes}")
    leading, stride = 16, 8 * pitch_bytes
    return (SWIZZLE_MODES[pitch_bytes] << 62) | ((stride >> 4) << 32) | ((leading >> 4) << 16)


def mn_major_bits(chunk_stride_bytes: int) -> int:
    """The address-independent descriptor bits of an MN-major operand stored as 64-element (128-byte)
    chunks of n, each [k, 64] row-major and 128-byte swizzled, ``chunk_stride_bytes`` apart: the stride
    byte offset is between groups of 8 k rows (1024 bytes), the leading byte offset between chunks.

    >>> hex(mn_major_bits(8192))
    '0x4000004002000000'
    """
    return (SWIZZLE_MODES[128] << 62) | ((1024 >> 4) << 32) | ((chunk_stride_bytes >> 4) << 16)


def mma_name(n: int, dtype: str, register_a: bool = False, transpose_b: bool = False) -> str:
    """``tilus_wgmma_m64n256k16_f32_f16`` (``_rs`` with A in registers, ``_tb`` with B MN-major)."""
    return f"tilus_wgmma{'_rs' if register_a else ''}{'_tb' if transpose_b else ''}_m64n{n}k16_f32_{DTYPES[dtype]}"


@functools.lru_cache(maxsize=None)
def mma_source(n: int, dtype: str, register_a: bool = False, transpose_b: bool = False) -> str:
    """The device function of one ``wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{dtype}``: ``d += a @ b``
    with ``d`` this thread's ``n / 2`` accumulator registers and ``b`` K-major in shared memory; ``a``
    K-major in shared memory too, or (``register_a``) this thread's four 32-bit registers of its warp's
    [16, 16] slice (``mma.sync``'s m16n8k16 A fragment); ``transpose_b``: b MN-major instead."""
    if dtype not in DTYPES:
        raise IntrinError(f"wgmma: operands must be float16 or bfloat16, got {dtype}")
    if n % 8 or not 8 <= n <= 256:
        raise IntrinError(f"wgmma: n must be a multiple of 8 from 8 to 256, got {n}")
    regs = n // 2
    outputs = ", ".join(f"%{i}" for i in range(regs))
    if register_a:  # {a0..a3}, b-desc, scale-d, scale-a, scale-b, transpose-b
        a_operand, b_index, transposes = (f"{{%{regs}, %{regs + 1}, %{regs + 2}, %{regs + 3}}}", regs + 4,
                                          f"{int(transpose_b)}")
        a_param, a_setup = "const void* a_regs", "  const unsigned* a = (const unsigned*)a_regs;\n"
        a_inputs = "\"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3])"
    else:  # a-desc, b-desc, scale-d, scale-a, scale-b, transpose-a, transpose-b
        a_operand, b_index, transposes = f"%{regs}", regs + 1, f"0, {int(transpose_b)}"
        a_param = "const void* a, unsigned long long a_bits"
        a_setup = "  unsigned long long da = tilus_wgmma_descriptor(a, a_bits);\n"
        a_inputs = "\"l\"(da)"
    ptx = (f"{{\\n .reg .pred p;\\n setp.ne.b32 p, %{b_index + 1}, 0;\\n"
           f" wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{DTYPES[dtype]}.{DTYPES[dtype]} "
           f"{{{outputs}}}, {a_operand}, %{b_index}, p, 1, 1, {transposes};\\n}}\\n")
    operands = ", ".join(f"\"+f\"(d[{i}])" for i in range(regs))
    return (DESCRIPTOR_SOURCE +
            f"__device__ __forceinline__ void {mma_name(n, dtype, register_a, transpose_b)}(float* d, {a_param}, "
            f"const void* b, "
            f"unsigned long long b_bits) {{\n{a_setup}"
            f"  unsigned long long db = tilus_wgmma_descriptor(b, b_bits);\n"
            f"  asm volatile(\"{ptx}\" : {operands} : {a_inputs}, \"l\"(db), \"r\"(1));\n"
            f"}}\n")


def emit_mma_rs(n: int, dtype: str, acc_ptr: Any, a_ptr: Any, b_ptr: Any, b_bits: int,
                transpose_b: bool = False) -> tirx.Expr:
    """The call of one register-A ``wgmma``: ``acc_ptr``/``a_ptr`` address this thread's accumulator and A
    registers (``tirx.address_of`` of local buffers), ``b_ptr`` the shared B tile."""
    return Tb.cuda.func_call(mma_name(n, dtype, True, transpose_b), acc_ptr, a_ptr, b_ptr,
                             tirx.const(b_bits, "uint64"), source_code=mma_source(n, dtype, True, transpose_b),
                             return_type="void")


def emit_mma(n: int, dtype: str, acc: tirx.Buffer, a_ptr: Any, a_bits: int, b_ptr: Any, b_bits: int,
             transpose_b: bool = False) -> tirx.Expr:
    """The call of one ``wgmma`` on this thread's accumulator ``acc`` (a local float32 buffer of ``n / 2``
    elements) with operands at the shared addresses ``a_ptr``/``b_ptr`` (``tirx.address_of``)."""
    return Tb.cuda.func_call(mma_name(n, dtype, False, transpose_b), acc.data, a_ptr, tirx.const(a_bits, "uint64"),
                             b_ptr, tirx.const(b_bits, "uint64"), source_code=mma_source(n, dtype, False, transpose_b),
                             return_type="void")


def emit_fence(name: str) -> tirx.Expr:
    """``wgmma.fence``, ``wgmma.commit_group`` or ``fence.proxy.async`` (``name``: a key of ``_FENCES``)."""
    source = (f"__device__ __forceinline__ void {name}() {{ asm volatile(\"{_FENCES[name]}\" ::: \"memory\"); }}\n")
    return Tb.cuda.func_call(name, source_code=source, return_type="void")


def emit_wait_group(n: int) -> tirx.Expr:
    """``wgmma.wait_group.sync.aligned n``."""
    name = f"tilus_wgmma_wait_group_{n}"
    source = (f"__device__ __forceinline__ void {name}() {{ asm volatile(\"wgmma.wait_group.sync.aligned {n};\" ::: "
              f"\"memory\"); }}\n")
    return Tb.cuda.func_call(name, source_code=source, return_type="void")


def fence_operand_source(size: int) -> tuple[str, str]:
    """(name, source) of a function that tells the compiler ``size`` accumulator registers change here
    (an empty ``asm volatile`` reading and writing each), so that no read of them moves above a
    ``wgmma.wait_group`` and no write below a ``wgmma``."""
    name = f"tilus_wgmma_fence_operand_{size}"
    body = "".join(f"  asm volatile(\"\" : \"+f\"(d[{i}]) :: \"memory\");\n" for i in range(size))
    return name, f"__device__ __forceinline__ void {name}(float* d) {{\n{body}}}\n"


def emit_fence_operand(acc: tirx.Buffer, size: int) -> tirx.Expr:
    name, source = fence_operand_source(size)
    return Tb.cuda.func_call(name, acc.data, source_code=source, return_type="void")
