"""Kernels the intrin tests build: an ordinary TE matmul scheduled onto the ``tilus.*`` intrinsics,
and a one-warp kernel written with the emitters alone (the way a code generator uses them)."""
from __future__ import annotations

import tvm
from tvm import te, tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as Tb
from tvm.support import nvcc

import tilus_tvm.intrin as intrin
from tilus_tvm.dtypes import as_dtype
from tilus_tvm.layout.atoms import get_ldmatrix_atom, get_mma_atom

# (input dtype, accumulator dtype) the schedule covers; int8 loads B without ldmatrix (see below)
MATMUL_DTYPES = [("float16", "float32"), ("bfloat16", "float32"), ("float16", "float16"), ("int8", "int32")]
WARPS = 4  # 2 x 2 warps per block, each computing 64 x 32 of a 128 x 64 block tile


def target(arch: str = "sm_90") -> tvm.target.Target:
    return tvm.target.Target({"kind": "cuda", "arch": arch}, host="llvm")


def te_matmul(m: int, n: int, k: int, in_dtype: str, out_dtype: str, store_dtype: str = None) -> tirx.PrimFunc:
    """``C[m, n] = sum_k A[m, k] * B[k, n]`` with ``te.compute``, products in ``out_dtype``; with
    ``store_dtype``, the output is ``D = C.astype(store_dtype)`` (float32 sums stored as float16)."""
    a = te.placeholder((m, k), in_dtype, name="A")
    b = te.placeholder((k, n), in_dtype, name="B")
    r = te.reduce_axis((0, k), name="k")

    def widen(x):
        return x if in_dtype == out_dtype else x.astype(out_dtype)

    c = te.compute((m, n), lambda i, j: te.sum(widen(a[i, r]) * widen(b[r, j]), axis=r), name="C")
    if store_dtype is None:
        return te.create_prim_func([a, b, c])
    d = te.compute((m, n), lambda i, j: c[i, j].astype(store_dtype), name="D")
    return te.create_prim_func([a, b, d])


def schedule_matmul(func: tirx.PrimFunc, in_dtype: str, out_dtype: str, cp_async: bool = False) -> tvm.IRModule:
    """Tensorize ``te_matmul`` (primer section 5's recipe, with the tilus.* names).

    Per block 128 x 64 of C, 4 warps of 4 x 4 mma atoms each, k in steps of 2 atoms. A and B go to
    shared memory by 16-byte vectors (``cp_async``: ``tilus.cp_async_16B_cg_*`` in a two-stage
    software pipeline, whose async stage makes TVM emit commit_group/wait_group), then to warp
    fragments by ``tilus.ldmatrix_x4_*`` (A) and ``tilus.ldmatrix_x2_trans_*`` (B), mma, fill and
    store to global. int8: ldmatrix cannot transpose bytes, so lanes load their B elements.
    """
    atom = get_mma_atom(in_dtype, in_dtype, out_dtype)
    elem_bytes = as_dtype(in_dtype).nbits // 8
    vector = 16 // elem_bytes
    sch = tvm.s_tir.Schedule(func)
    block = sch.get_sblock("C")
    i, j, k = sch.get_loops(block)
    i, i_atom = sch.split(i, factors=[None, atom.m])
    j, j_atom = sch.split(j, factors=[None, atom.n])
    k, k_atom = sch.split(k, factors=[None, atom.k])
    sch.reorder(i, j, k, i_atom, j_atom, k_atom)
    block_outer = sch.blockize(i_atom)
    i0, i1, i2, i3, i4 = sch.split(i, factors=[None, 1, 2, 4, 1])
    j0, j1, j2, j3, j4 = sch.split(j, factors=[None, 1, 2, 1, 4])
    k0, k1, k2 = sch.split(k, factors=[None, 2, 1])
    sch.reorder(i0, j0, i1, j1, j2, i2, k0, k1, i3, j3, k2, i4, j4)
    sch.bind(sch.fuse(i0, j0), "blockIdx.x")
    sch.bind(sch.fuse(i1, j1), "blockIdx.y")
    warp = sch.fuse(j2, i2)
    sch.bind(warp, "threadIdx.y")

    def fetch_to_shared(index: int) -> None:
        cache = sch.cache_read(block_outer, index, "shared")
        name = sch.get(cache).name_hint
        sch.compute_at(cache, k0)
        row, col = sch.get_loops(cache)[-2:]
        col, vec = sch.split(col, factors=[None, vector])
        if cp_async:
            # Tensorize before fusing: blockize cannot split the bindings of a fused-then-split loop.
            sch.tensorize(vec, intrin.cp_async_name(16, "cg", in_dtype))
            cache = sch.get_sblock(name + "_o")
            row, col = sch.get_loops(cache)[-2:]
        else:
            sch.vectorize(vec)
        _, warp_of, lane = sch.split(sch.fuse(row, col), factors=[None, WARPS, 32])
        sch.bind(lane, "threadIdx.x")
        sch.bind(warp_of, "threadIdx.y")
        sch.storage_align(cache, 0, axis=-2, factor=32, offset=vector)  # rows 16 B apart from the banks' period

    fetch_to_shared(0)
    fetch_to_shared(1)
    a_warp = sch.cache_read(block_outer, 0, "warp")
    b_warp = sch.cache_read(block_outer, 1, "warp")
    sch.compute_at(a_warp, k1)
    sch.compute_at(b_warp, k1)
    c_warp = sch.cache_write(block_outer, 0, "warp")
    sch.reverse_compute_at(c_warp, warp)
    sch.decompose_reduction(block_outer, sch.get_loops(block_outer)[3])
    init = sch.get_sblock("C_init")

    def tile(blk, rows: int, cols: int):
        r, c = sch.get_loops(blk)[-2:]
        r0, r1 = sch.split(r, factors=[None, rows])
        c0, c1 = sch.split(c, factors=[None, cols])
        sch.reorder(r0, c0, r1, c1)
        return r1

    loop_a = tile(a_warp, atom.m, atom.k)
    loop_b = tile(b_warp, atom.k, atom.n)
    loop_c = tile(c_warp, atom.m, atom.n)
    sch.transform_layout(a_warp, ("write", 0), intrin.fragment_index_map(atom.a_layout))
    sch.transform_layout(b_warp, ("write", 0), intrin.fragment_index_map(atom.b_layout))
    sch.transform_layout(c_warp, ("read", 0), intrin.fragment_index_map(atom.c_layout))
    sch.tensorize(loop_a, intrin.ldmatrix_name(4, False, in_dtype))
    if elem_bytes == 2:
        sch.tensorize(loop_b, intrin.ldmatrix_name(2, True, in_dtype))
    else:
        # In the [32, 8] int8 B tile, lane n * 4 + (k % 16) // 4 holds slot (k // 16) * 4 + k % 4
        # (atom.b_layout): iterate (lane, slot) and bind the lane to threadIdx.x.
        k_in, n_in = sch.get_loops(b_warp)[-2:]
        k_hi, k_lane, k_lo = sch.split(k_in, factors=[2, 4, 4])
        sch.reorder(n_in, k_lane, k_hi, k_lo)
        sch.bind(sch.fuse(n_in, k_lane), "threadIdx.x")
    sch.tensorize(sch.get_loops(block)[-3], intrin.mma_name(atom))
    sch.tensorize(sch.get_loops(init)[-2], intrin.mma_fill_name(atom))
    sch.tensorize(loop_c, intrin.mma_store_name(atom, "global"))
    if cp_async:
        # copies of step k+1 (stage 0, asynchronous) overlap the mma of step k (stage 1)
        sch.annotate(k0, "software_pipeline_stage", [0, 0, 1])
        sch.annotate(k0, "software_pipeline_order", [0, 1, 2])
        sch.annotate(k0, "software_pipeline_async_stages", [0])
    return sch.mod


def warp_mma_kernel() -> tirx.PrimFunc:
    """One warp: ``C[16, 16] = A[16, 16] @ B'[16, 16]`` in f16 -> f32, from the emitters only.

    ``B'`` is B with rows ``>= k_valid`` zeroed by the cp.async zero fill. A arrives by 16-byte
    ``cp.async.ca``, B by ``cp.async.cg`` with ``src-size``; one commit, ``wait_group 0``; A by
    ``ldmatrix.x4``, B by ``ldmatrix.x4.trans`` (both n halves at once); two ``m16n8k16`` mmas.
    """
    atom = get_mma_atom("float16", "float16", "float32")
    with IRBuilder() as builder:
        with Tb.prim_func():
            Tb.func_name("warp_mma")
            a_global = Tb.arg("A", Tb.buffer((16, 16), "float16"))
            b_global = Tb.arg("B", Tb.buffer((16, 16), "float16"))
            c_global = Tb.arg("C", Tb.buffer((16, 16), "float32"))
            k_valid = Tb.arg("k_valid", tirx.Var("k_valid", "int32"))
            block_x = IRBuilder.name("bx", Tb.env_thread("blockIdx.x"))
            lane = IRBuilder.name("lane", Tb.env_thread("threadIdx.x"))
            with Tb.launch_thread(block_x, 1):
                with Tb.launch_thread(lane, 32):
                    a_shared = IRBuilder.name("A_shared", Tb.alloc_shared((16, 16), "float16"))
                    b_shared = IRBuilder.name("B_shared", Tb.alloc_shared((16, 16), "float16"))
                    a_frag = IRBuilder.name("a", Tb.alloc_local((8,), "float16"))
                    b_frag = IRBuilder.name("b", Tb.alloc_local((8,), "float16"))
                    acc = IRBuilder.name("acc", Tb.alloc_local((8,), "float32"))
                    row, chunk = lane // 2, lane % 2 * 8  # 16 bytes per lane: row lane // 2, half a row
                    Tb.evaluate(intrin.emit_cp_async(16, a_shared, row * 16 + chunk, a_global, row * 16 + chunk))
                    in_range = tirx.if_then_else(row < k_valid, tirx.const(16, "uint32"), tirx.const(0, "uint32"))
                    Tb.evaluate(intrin.emit_cp_async(16, b_shared, row * 16 + chunk, b_global, row * 16 + chunk,
                                                     cache="cg", src_size=in_range))
                    Tb.evaluate(intrin.emit_cp_async_commit_group())
                    Tb.evaluate(intrin.emit_cp_async_wait_group(0))
                    Tb.evaluate(Tb.tvm_storage_sync("shared"))
                    for half in range(2):
                        Tb.evaluate(intrin.emit_mma_fill(atom, acc, half * 4))
                    x4 = get_ldmatrix_atom(4)
                    x4_trans = get_ldmatrix_atom(4, trans=True)
                    Tb.evaluate(intrin.emit_ldmatrix(4, False, a_frag, 0, a_shared,
                                                     intrin.ldmatrix_lane_offset(x4, lane, 16)))
                    Tb.evaluate(intrin.emit_ldmatrix(4, True, b_frag, 0, b_shared,
                                                     intrin.ldmatrix_lane_offset(x4_trans, lane, 16)))
                    for half in range(2):  # columns 8 * half .. 8 * half + 7: B registers 2 * half, + 1
                        Tb.evaluate(intrin.emit_mma(atom, a_frag, 0, b_frag, half * 4, acc, half * 4))
                        Tb.add_to_parent(intrin.emit_mma_store(atom, lane, acc, [half * 4], c_global, [0, half * 8]))
    return builder.get()


def cuda_source(mod, arch: str = "sm_90", **compile_kwargs) -> str:
    return tvm.compile(mod, target=target(arch), **compile_kwargs).mod.imports[0].inspect_source()


def nvcc_compile(source: str, arch: str = "sm_90", target_format: str = "ptx"):
    with target(arch):  # compile_cuda reads Target.current()
        out = nvcc.compile_cuda(source, target_format=target_format, arch=arch, compiler="nvcc")
    return out.decode() if target_format == "ptx" else out
