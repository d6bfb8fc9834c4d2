"""Programs written the way Tilus programs are written -- ``import tilus_tvm as tilus``, layouts from
``self.cuda`` and ``tilus_tvm.ir.layout.ops``, helpers from ``tilus_tvm.utils`` -- used by the CPU
compile tests (test_tilus_programs.py) and the GPU tests (test_tilus_programs_gpu.py)."""
import math

import tilus_tvm as tilus
from tilus_tvm import bfloat16, f16, f32, float16, float32, int8, int32
from tilus_tvm.ir.layout.ops import reduce, shared_row_major_swizzle
from tilus_tvm.utils import cdiv


class SwizzledMatmul(tilus.Script):
    """``c = alpha * (a @ b)`` in float16 (a [m, k], b [k, n]): tiles staged through swizzled shared
    memory, fragments loaded in the layouts ``resolve_dot_config`` picked."""

    def __init__(self, block_m: int = 64, block_n: int = 64, block_k: int = 32, num_warps: int = 4):
        super().__init__()
        self.mma = self.cuda.resolve_dot_config(float16, float32, m=block_m, n=block_n, k=block_k,
                                                num_warps=num_warps)
        self.layout_sa = shared_row_major_swizzle(shape=[block_m, block_k], dtype_nbytes=float16.nbytes)
        self.layout_sb = shared_row_major_swizzle(shape=[block_k, block_n], dtype_nbytes=float16.nbytes)

    def __call__(self, m_size: int32, n_size: int, k_size: int, alpha: float32, a_ptr: ~float16, b_ptr: ~float16,
                 c_ptr: ~float16):
        self.attrs.blocks = [cdiv(m_size, self.mma.m), cdiv(n_size, self.mma.n)]
        self.attrs.warps = self.mma.num_warps
        offset_m: int32 = self.blockIdx.x * self.mma.m
        offset_n: int32 = self.blockIdx.y * self.mma.n

        ga = self.global_view(a_ptr, dtype=float16, shape=[m_size, k_size])
        gb = self.global_view(b_ptr, dtype=float16, shape=[k_size, n_size])
        sa = self.shared_tensor(dtype=float16, shape=[self.mma.m, self.mma.k], layout=self.layout_sa)
        sb = self.shared_tensor(dtype=float16, shape=[self.mma.k, self.mma.n], layout=self.layout_sb)
        acc = self.register_tensor(dtype=float32, shape=[self.mma.m, self.mma.n], layout=self.mma.lc, init=0.0)
        for offset_k in range(0, k_size, self.mma.k):
            self.store_shared(sa, self.load_global(ga, offsets=[offset_m, offset_k], shape=[self.mma.m, self.mma.k]))
            self.store_shared(sb, self.load_global(gb, offsets=[offset_k, offset_n], shape=[self.mma.k, self.mma.n]))
            self.sync()
            a = self.load_shared(sa, layout=self.mma.la)
            b = self.load_shared(sb, layout=self.mma.lb)
            self.dot(a, b, acc, out=acc)
            self.sync()
        self.free_shared(sa)
        self.free_shared(sb)
        gc = self.global_view(c_ptr, dtype=float16, shape=[m_size, n_size])
        self.store_global(gc, self.cast(acc * alpha, dtype=float16), offsets=[offset_m, offset_n])


class PipelinedBf16Matmul(tilus.Script):
    """``c = a @ b`` in bfloat16 with a ``stages``-deep ``cp.async`` pipeline: the block tile comes from
    ``mma_dot_config`` (warps and repeats given), shared layouts from ``self.cuda``."""

    def __init__(self, warp_spatial=(2, 2), warp_repeat=(2, 4, 2), stages: int = 3):
        super().__init__()
        self.mma = self.cuda.mma_dot_config(self.cuda.atomic_mma_configs.m16n8k16_bf16_f32,
                                            warp_spatial=warp_spatial, warp_repeat=warp_repeat)
        self.stages = stages
        self.layout_sa = self.cuda.swizzled_shared_layout(bfloat16, shape=[stages, self.mma.m, self.mma.k])
        self.layout_sb = self.cuda.swizzled_shared_layout(bfloat16, shape=[stages, self.mma.k, self.mma.n])
        self.layout_sc = self.cuda.shared_layout(shape=[self.mma.m, self.mma.n])

    def __call__(self, m_size: int32, n_size: int32, k_size: int32, a_ptr: ~bfloat16, b_ptr: ~bfloat16,
                 c_ptr: ~bfloat16):
        self.attrs.blocks = [self.utils.ceil_div(m_size, self.mma.m), self.utils.ceil_div(n_size, self.mma.n)]
        self.attrs.warps = self.mma.num_warps
        bm, bn, bk, stages = self.mma.m, self.mma.n, self.mma.k, self.stages
        offset_m: int32 = self.blockIdx.x * bm
        offset_n: int32 = self.blockIdx.y * bn

        ga = self.global_view(a_ptr, dtype=bfloat16, shape=[m_size, k_size])
        gb = self.global_view(b_ptr, dtype=bfloat16, shape=[k_size, n_size])
        sa = self.shared_tensor(dtype=bfloat16, shape=[stages, bm, bk], layout=self.layout_sa)
        sb = self.shared_tensor(dtype=bfloat16, shape=[stages, bk, bn], layout=self.layout_sb)
        acc = self.register_tensor(dtype=float32, shape=[bm, bn], init=0.0)
        self.annotate_layout(acc, self.mma.lc)

        num_k = self.utils.ceil_div(k_size, bk)
        for s in list(range(stages - 1)):
            self.copy_async(src=ga, dst=sa[s], offsets=[offset_m, s * bk])
            self.copy_async(src=gb, dst=sb[s], offsets=[s * bk, offset_n])
            self.copy_async_commit_group()
        for k in range(num_k):
            ahead = k + stages - 1
            self.copy_async(src=ga, dst=sa[ahead % stages], offsets=[offset_m, ahead * bk])
            self.copy_async(src=gb, dst=sb[ahead % stages], offsets=[ahead * bk, offset_n])
            self.copy_async_commit_group()
            self.copy_async_wait_group(stages - 1)
            self.sync()
            a = self.load_shared(sa[k % stages], layout=self.mma.la)
            b = self.load_shared(sb[k % stages], layout=self.mma.lb)
            self.dot(a, b, acc, out=acc)
            self.sync()
        self.copy_async_wait_all()
        self.sync()
        self.free_shared(sa)
        self.free_shared(sb)
        sc = self.shared_tensor(dtype=bfloat16, shape=[bm, bn], layout=self.layout_sc)
        self.store_shared(sc, self.cast(acc, dtype=bfloat16))
        self.sync()
        gc = self.global_view(c_ptr, dtype=bfloat16, shape=[m_size, n_size])
        self.store_global(gc, self.load_shared(sc), offsets=[offset_m, offset_n])


class Int8Gemm(tilus.Script):
    """``c = a @ b`` with int8 operands and int32 results, fragments loaded from global memory straight
    into the layouts of an ``m16n8k32`` configuration (no shared memory)."""

    def __init__(self, block_m: int = 32, block_n: int = 32, block_k: int = 64):
        super().__init__()
        self.mma = self.cuda.resolve_dot_config(int8, int32, m=block_m, n=block_n, k=block_k, warp_m=2, warp_n=2)

    def __call__(self, m_size: int32, n_size: int32, k_size: int32, a_ptr: ~int8, b_ptr: ~int8, c_ptr: ~int32):
        self.attrs.blocks = [cdiv(m_size, self.mma.m), cdiv(n_size, self.mma.n)]
        self.attrs.warps = self.mma.num_warps
        offset_m: int32 = self.blockIdx.x * self.mma.m
        offset_n: int32 = self.blockIdx.y * self.mma.n
        ga = self.global_view(a_ptr, dtype=int8, shape=[m_size, k_size])
        gb = self.global_view(b_ptr, dtype=int8, shape=[k_size, n_size])
        acc = self.register_tensor(dtype=int32, shape=[self.mma.m, self.mma.n], layout=self.mma.lc, init=0)
        for offset_k in range(0, k_size, self.mma.k):
            a = self.load_global(ga, offsets=[offset_m, offset_k], shape=[self.mma.m, self.mma.k], layout=self.mma.la)
            b = self.load_global(gb, offsets=[offset_k, offset_n], shape=[self.mma.k, self.mma.n], layout=self.mma.lb)
            self.dot(a, b, acc, out=acc)
        gc = self.global_view(c_ptr, dtype=int32, shape=[m_size, n_size])
        self.store_global(gc, acc, offsets=[offset_m, offset_n])


class TileAttention(tilus.Script):
    """``o = softmax(q @ k^T * scale) @ v`` for one head, f16 in and out (q [n_q, d], k and v
    [n_kv, d], ``n_kv`` a multiple of ``block_kv``): online softmax over key/value tiles. Two
    ``resolve_dot_config`` with the warps along m (``warp_m=num_warps, warp_n=1``) make the scores'
    accumulator layout the probabilities' operand layout, so ``p`` feeds the second product as it is."""

    def __init__(self, head_size: int = 64, block_q: int = 64, block_kv: int = 32, num_warps: int = 4):
        super().__init__()
        self.head_size, self.block_q, self.block_kv = head_size, block_q, block_kv
        self.scale = 1.0 / math.sqrt(head_size)
        self.qk = self.cuda.resolve_dot_config(f16, f32, m=block_q, n=block_kv, k=head_size, warp_m=num_warps,
                                               warp_n=1)
        self.pv = self.cuda.resolve_dot_config(f16, f32, m=block_q, n=head_size, k=block_kv, warp_m=num_warps,
                                               warp_n=1)
        assert self.qk.lc == self.pv.la

    def __call__(self, n_q: int32, n_kv: int32, q_ptr: ~float16, k_ptr: ~float16, v_ptr: ~float16,
                 o_ptr: ~float16):
        self.attrs.blocks = cdiv(n_q, self.block_q)
        self.attrs.warps = self.qk.num_warps
        d, bq, bkv = self.head_size, self.block_q, self.block_kv
        q0: int32 = self.blockIdx.x * bq
        gq = self.global_view(q_ptr, dtype=float16, shape=[n_q, d])
        gk = self.global_view(k_ptr, dtype=float16, shape=[n_kv, d])
        gv = self.global_view(v_ptr, dtype=float16, shape=[n_kv, d])
        go = self.global_view(o_ptr, dtype=float16, shape=[n_q, d])
        sk = self.shared_tensor(dtype=float16, shape=[bkv, d])
        sv = self.shared_tensor(dtype=float16, shape=[bkv, d])

        q = self.load_global(gq, offsets=[q0, 0], shape=[bq, d], layout=self.qk.la)
        row_max = self.register_tensor(dtype=float32, shape=[bq, 1], init=-1.0e30)
        row_sum = self.register_tensor(dtype=float32, shape=[bq, 1], init=0.0)
        acc = self.register_tensor(dtype=float32, shape=[bq, d], layout=self.pv.lc, init=0.0)
        for kv0 in range(0, n_kv, bkv):
            self.store_shared(sk, self.load_global(gk, offsets=[kv0, 0], shape=[bkv, d]))
            self.store_shared(sv, self.load_global(gv, offsets=[kv0, 0], shape=[bkv, d]))
            self.sync()
            kt = self.load_shared(sk.transpose(), layout=self.qk.lb)
            score = self.dot(q, kt, acc_dtype=float32)
            self.annotate_layout(score, self.qk.lc)
            score = score * self.scale
            new_max = self.maximum(row_max, self.max(score, dim=1, keepdim=True))
            p = self.exp(score - new_max)
            correction = self.exp(row_max - new_max)
            row_sum = row_sum * correction + self.sum(p, dim=1, keepdim=True)
            row_max = new_max
            v = self.load_shared(sv, layout=self.pv.lb)
            acc = self.dot(self.cast(p, dtype=float16), v, acc * correction)
            self.sync()
        self.store_global(go, self.cast(acc / row_sum, dtype=float16), offsets=[q0, 0])


class RowScale(tilus.Script):
    """``y = x * w / (sum(|x|, dim=1) + eps)`` for float32 x [m, n] and w [1, n]: x is loaded in
    ``self.cuda.default_register_layout``, w in the layout ``reduce`` derives from it for one row, so
    the broadcast needs no conversion."""

    def __init__(self, n: int = 256, block_m: int = 8, num_warps: int = 4, eps: float = 1e-6):
        super().__init__()
        self.n, self.block_m, self.num_warps, self.eps = n, block_m, num_warps, eps
        self.layout_x = self.cuda.default_register_layout(num_warps=num_warps, dtype=float32, shape=[block_m, n])
        self.layout_w = reduce(self.layout_x, dims=[0], keepdims=True)

    def __call__(self, m_size: int32, x_ptr: ~float32, w_ptr: ~float32, y_ptr: ~float32):
        self.attrs.blocks = cdiv(m_size, self.block_m)
        self.attrs.warps = self.num_warps
        row: int32 = self.blockIdx.x * self.block_m
        gx = self.global_view(x_ptr, dtype=float32, shape=[m_size, self.n])
        gw = self.global_view(w_ptr, dtype=float32, shape=[1, self.n])
        gy = self.global_view(y_ptr, dtype=float32, shape=[m_size, self.n])
        x = self.load_global(gx, offsets=[row, 0], shape=[self.block_m, self.n], layout=self.layout_x)
        w = self.load_global(gw, offsets=[0, 0], shape=[1, self.n], layout=self.layout_w)
        norm = self.sum(self.abs(x), dim=1, keepdim=True) + self.eps
        self.store_global(gy, x * w / norm, offsets=[row, 0])
