"""Tensor-core and async-copy instructions as TVM tensor intrinsics (``tvm.s_tir.TensorIntrin``).

    import tilus_tvm.intrin                  # registers every tilus.* intrinsic, once per process
    tilus_tvm.intrin.names()                 # ['tilus.cp_async_16B_ca_bf16', ...]
    sch.tensorize(loop, "tilus.mma_m16n8k16_f16f16f32")

``import tilus_tvm`` imports neither this package nor TVM: import it where you schedule.

Names are ``tilus.<op>_<shape>_<dtypes>``, dtypes spelled as in PTX (``f16``, ``bf16``, ``s8``,
``f32``, ``s32``). TVM's tensorize matches buffer dtypes and scopes exactly, so every element type
and scope is its own intrinsic. Fragments are ``"warp"``-scope buffers ``[32 lanes, slots]``
(``fragment.py``); the layout column names the ``tilus_tvm.layout.atoms`` register layout that
places each tile element on a (lane, slot) -- the same layouts the Script backend uses.

Each intrinsic: its name and PTX instruction, then its operands (the desc/impl buffers, in order:
``name[shape] dtype scope``) and the ``tilus_tvm.layout.atoms`` layout of its fragments.

``tilus.mma_m16n8k16_f16f16f32``                         mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32
    A[32, 8] f16, B[32, 4] f16, C[32, 4] f32, all warp   get_mma_atom("float16", "float16", "float32").a/b/c_layout
``tilus.mma_m16n8k16_bf16bf16f32``                       mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
    A[32, 8] bf16, B[32, 4] bf16, C[32, 4] f32, warp     get_mma_atom("bfloat16", "bfloat16", "float32")...
``tilus.mma_m16n8k16_f16f16f16``                         mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16
    A[32, 8] f16, B[32, 4] f16, C[32, 4] f16, warp       get_mma_atom("float16", "float16", "float16")...
``tilus.mma_m16n8k32_s8s8s32``                           mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32
    A[32, 16] s8, B[32, 8] s8, C[32, 4] s32, warp        get_mma_atom("int8", "int8", "int32", k=32)...
``tilus.mma_fill_m16n8_{f32,f16,s32}``                   none: zeroes the accumulator registers
    C[32, 4] warp                                        get_mma_atom(...).c_layout
``tilus.mma_store_m16n8_{f32,f16,s32}_{global,shared,shared_dyn}``  none: plain stores, lane t writing c_layout.logical(t, s)
    C[32, 4] warp, D[16, 8] global, shared, shared.dyn   get_mma_atom(...).c_layout
``tilus.ldmatrix_x{1,2,4}[_trans]_{f16,bf16}[_dyn]``     ldmatrix.sync.aligned.m8n8.x{1,2,4}[.trans].shared.b16
    W[32, 2 * num] warp, S[8, 8] / [16, 8] / [16, 16]    get_ldmatrix_atom(num, trans).layout
    shared (x1 / x2 / x4, indexed as stored; _dyn: S in shared.dyn)
``tilus.ldmatrix_x{1,2,4}_s8[_dyn]``                      the same without .trans, bytes two to a word
    W[32, 4 * num] warp, S[8, 16] / [16, 16] / [16, 32]  get_ldmatrix_atom(num, dtype_bits=8).layout
``tilus.cp_async_{4,8,16}B_ca_{f16,bf16,f32,s8}``        cp.async.ca.shared.global [d], [s], 4 / 8 / 16
    D[n] shared, S[n] global, n = bytes / element size   none: one contiguous vector per thread
``tilus.cp_async_16B_cg_{f16,bf16,f32,s8}``              cp.async.cg.shared.global [d], [s], 16
    D[n] shared, S[n] global                             none

``spec(name)`` gives one row in full (and the desc/impl PrimFuncs). What lines up: ``ldmatrix_x4``
loads mma's A (``m16n8k16``; ``x4_s8``: ``m16n8k32``), ``ldmatrix_x2_trans`` on a row-major ``[k, n]``
tile its B, and the fill/store intrinsics work on mma's C. A schedule gives its warp buffers these
layouts with ``Schedule.transform_layout(block, buffer, fragment_index_map(layout))``.

Emitters -- the TIR of one instruction, used by the implementations above and by the Script
backend (``tilus_tvm.instructions``: ``dot``, ``load_shared``, ``copy_async`` and its group
instructions), so each instruction has one implementation. Offsets in elements, from the buffer's
first element; ``pointers`` (``fragment.element_pointer``) says how shared/global buffers are
addressed: ``"access_ptr"`` (default: the access TVM's passes see) or ``"address_of"`` (1-D typed
views of memory declared elsewhere, as the Script backend's views of its uint8 shared pool):

    emit_mma(atom, a_buf, a_offset, b_buf, b_offset, c_buf, c_offset) -> Call
    emit_mma_fill(atom, c_buf, c_offset) -> Call
    emit_mma_store(atom, lane, c_buf, c_index, dst_buf, dst_index) -> Stmt
    emit_ldmatrix(num, trans, frag_buf, frag_offset, smem_buf, smem_offset, pointers="access_ptr") -> Call
    emit_cp_async(nbytes, dst_buf, dst_offset, src_buf, src_offset, cache="ca", src_size=None,
                  pointers="access_ptr") -> Call
    emit_cp_async_commit_group() -> Call
    emit_cp_async_wait_group(n) -> Call
    emit_cp_async_wait_all() -> Call
    emit_semaphore_wait(observed_buf, address, expected) -> Call        (semaphore.py: one thread's
    emit_semaphore_release(address, value) -> [Call]                     acquire spin / fenced release)

What TVM 0.27 offers and lacks, as used here: ``T.ptx_legacy.mma`` and ``T.cuda.mma_fill_legacy``
take (pointer, offset) pairs, which ``LowerWarpMemory`` rewrites for warp buffers (the ``T.ptx``
table forms want ``uint32`` register elements, which f16 fragments are not), so mma and ldmatrix use
``T.ptx_legacy``. ``T.ptx.cp.async`` has the ``src-size`` zero-fill operand and ``commit_group`` /
``wait_group``, so no inline assembly was needed. Lacking: ``LowerWarpMemory`` does not recognise
``ptx_legacy.ldmatrix`` (operand fragments stay per-thread arrays, see ``fragment.py``);
``mma_store_legacy`` only stores 16x16 tiles (the store here is plain stores); a ``TensorIntrin``
cannot express a bound, so zero fill lives in ``emit_cp_async`` only; ``blockize`` cannot split
a fused-then-split copy loop, so a schedule tensorizes the vector loop before fusing the others;
``tvm_access_ptr`` must name the dtype its memory was allocated with, so typed views of a byte pool
take ``pointers="address_of"``, which TVM's barrier insertion does not see as an access (written
so, a tensorized pipeline's cp.async loses the barrier before it overwrites a stage): the default
stays ``access_ptr``.
"""
from tilus_tvm.intrin import cp_async, ldmatrix, mma
from tilus_tvm.intrin.cp_async import (cp_async_name, emit_cp_async, emit_cp_async_commit_group,
                                       emit_cp_async_wait_all, emit_cp_async_wait_group)
from tilus_tvm.intrin.fragment import fragment_index_map, fragment_indices
from tilus_tvm.intrin.ldmatrix import emit_ldmatrix, ldmatrix_lane_offset, ldmatrix_name
from tilus_tvm.intrin.mma import (emit_mma, emit_mma_fill, emit_mma_store, mma_fill_name, mma_name,
                                  mma_store_name)
from tilus_tvm.intrin.registry import IntrinError, IntrinSpec, names, spec
from tilus_tvm.intrin.semaphore import emit_semaphore_release, emit_semaphore_wait

mma.register_all()
ldmatrix.register_all()
cp_async.register_all()
