"""``FlashAttention``: prefill attention ``softmax(q @ k^T * scale) @ v`` in float16 or bfloat16.

Layout [batch, heads, seq, head_dim] (contiguous), or with ``heads=H`` [batch, seq, H, head_dim] as a QKV
projection writes it (``packed_qkv``: q, k, v the thirds of one [batch, seq, 3, H, head_dim] tensor);
head_dim 64 or 128; the query and key lengths may differ. Each block owns ``block_q`` query rows of one (batch, head); each of its warps owns
``block_q / warps`` of those rows, so every row of the score tile lives in one warp.

Per key/value tile of ``block_kv`` rows (FlashAttention-2's online softmax, in base 2):

    s     = (q @ k_tile^T) * scale * log2(e)             dot_split, warps along m: mma.sync
    s     = where(key < seq_k and (not causal or key <= query), s, -inf)   only on edge tiles
    m_new = max(m, rowmax(s));  p = exp2(s - m_new);  alpha = exp2(m - m_new)
    l     = l * alpha + rowsum(p);  o = o * alpha + p @ v_tile;  m = m_new

and at the end ``o / l``. ``q`` is read once into registers (``ldmatrix`` fragments, one per 16
columns); k and v tiles stream through a ``stages``-deep ``cp.async`` ring in swizzled shared
memory. ``p`` (cast to the input dtype) is already in the A-fragment layout of the second product,
so it never leaves the registers. Row maxima and sums are 4-lane warp shuffles. The output
accumulator is kept in ``head_dim / out_chunk`` register tiles, each the C tile of one ``P @ v``
product over ``out_chunk`` columns of v (a whole v tile in B fragments would not fit the registers).

Causal masking is torch's ``is_causal=True``: query ``i`` sees keys ``j <= i`` (aligned at the top
left when the lengths differ); a block stops at the last key tile its rows can see.

    kernel = FlashAttention(head_dim=128, causal=True)
    kernel(batch * heads, seq_q, seq_k, scale * LOG2E, q, k, v, o)
    o = flash_attention(q, k, v, causal=True)            # picks a configuration
    o = flash_attention(q, k, v, causal=True, tune=True) # the tuned configuration (docs/tuning.md)

On sm_90a :func:`flash_attention` (and Relax's attention dispatch) take
:class:`~tilus_tvm.schedules.attention_sm90.FlashAttentionWgmma` instead: both products on Hopper's
``wgmma`` (``wgmma=False`` keeps this kernel).

``FlashAttention`` carries an ``opt_in`` ``@autotune`` space of 36 configurations (``block_q`` with
``warps``, ``block_kv``, ``stages``, ``out_chunk``; the lengths and ``batch_heads`` bucketed by
powers of two) holding the hand-picked ones; ``FlashAttention()`` is the default configuration.
"""
from __future__ import annotations

import math
from typing import Any, Optional

import tilus_tvm as tilus
from tilus_tvm import bfloat16, float16, float32, int32, void
from tilus_tvm.dtypes import as_dtype
from tilus_tvm.errors import CompileError, LaunchError, ScriptError
from tilus_tvm.tune.library import tuned_kernel, use_tuned

LOG2E = 1.4426950408889634
NEG_INF = float("-inf")
# The running maximum starts finite: a row whose keys of one tile are all masked gets exp2(-inf - m) = 0
# there, never exp2(-inf - -inf) = NaN.
M_INIT = -1.0e30
HEAD_DIMS = (64, 128)


@tilus.autotune("block_q, warps", [(64, 4), (128, 4), (128, 8)], opt_in=True,
                bucket={"batch_heads": "pow2", "seq_q": "pow2", "seq_k": "pow2"})
@tilus.autotune("block_kv", [32, 64, 128])
@tilus.autotune("stages", [2, 3])
@tilus.autotune("out_chunk", [32, 64])
class FlashAttention(tilus.Script):
    """Prefill attention over [batch * heads, seq, head_dim] tensors (see the module docstring).

    ``head_dim``: 64 or 128; ``block_q``: query rows per block (a multiple of ``16 * warps``);
    ``block_kv``: key rows per tile (a multiple of 16); ``stages``: depth of the k/v ring (>= 2);
    ``out_chunk``: columns of the output accumulator per ``P @ v`` product; ``causal``: mask keys
    after the query (top-left aligned); ``dtype``: float16 or bfloat16 (q, k, v and o);
    ``q_in_registers``: keep q's fragments in registers for the whole kernel (else reload them from
    shared memory for every key tile, which frees registers for taller blocks); ``heads``: 0 for
    [batch * heads, seq, head_dim] tensors, else the head count of [batch, seq, heads, head_dim]
    tensors (torch's ``[B, S, H, D]``, as a QKV projection writes them: no transposes around the
    kernel); ``packed_qkv`` (with ``heads``): q, k and v are the three thirds of one
    [batch, seq, 3, heads, head_dim] tensor, passed three times.
    """

    def __init__(self, head_dim: int = 128, block_q: int = 64, block_kv: int = 64, warps: int = 4,
                 stages: int = 2, out_chunk: int = 32, causal: bool = False, dtype: Any = float16,
                 q_in_registers: bool = True, heads: int = 0, packed_qkv: bool = False):
        super().__init__()
        if isinstance(heads, bool) or not isinstance(heads, int) or heads < 0:
            raise ScriptError(f"FlashAttention: heads must be a non-negative int (0: [batch * heads, seq, head_dim] "
                              f"tensors), got {heads!r}")
        if packed_qkv and not heads:
            raise ScriptError("FlashAttention: packed_qkv reads q, k and v from one [batch, seq, 3, heads, head_dim] "
                              "tensor and needs heads > 0")
        self.heads, self.packed_qkv = heads, bool(packed_qkv)
        dtype = as_dtype(dtype)
        if dtype not in (float16, bfloat16):
            raise ScriptError(f"FlashAttention: dtype must be float16 or bfloat16, got {dtype.name}")
        if head_dim not in HEAD_DIMS:
            raise ScriptError(f"FlashAttention: head_dim must be one of {HEAD_DIMS}, got {head_dim}")
        if block_q % (16 * warps):
            raise ScriptError(f"FlashAttention: block_q={block_q} must be a multiple of 16 * warps = {16 * warps} "
                              f"(each warp owns whole mma rows)")
        if block_kv % 16 or head_dim % out_chunk or out_chunk % 8:
            raise ScriptError(f"FlashAttention: block_kv={block_kv} must be a multiple of 16 and out_chunk="
                              f"{out_chunk} a multiple of 8 dividing head_dim={head_dim}")
        if stages < 2:
            raise ScriptError(f"FlashAttention: stages must be at least 2, got {stages}")
        self.head_dim, self.block_q, self.block_kv, self.warps = head_dim, block_q, block_kv, warps
        self.stages, self.out_chunk, self.causal, self.dtype = stages, out_chunk, bool(causal), dtype
        self.q_in_registers = bool(q_in_registers)

    def qk_fragments(self, sq, sk_stage, q_frags, kc: int):
        """The q and k fragments of columns ``16 kc .. 16 kc + 15`` of the score product (q's from the
        registers when it is kept there, else from shared memory)."""
        q_frag = q_frags[kc] if self.q_in_registers else \
            self.load_shared(sq, offsets=[0, kc * 16], shape=[self.block_q, 16])
        return q_frag, self.load_shared(sk_stage.transpose(), offsets=[kc * 16, 0], shape=[16, self.block_kv])

    def __call__(self, batch_heads: int32, seq_q: int32, seq_k: int32, scale_log2: float32,
                 q_ptr: ~void, k_ptr: ~void, v_ptr: ~void, o_ptr: ~void):
        d, bq, bkv, stages, oc = self.head_dim, self.block_q, self.block_kv, self.stages, self.out_chunk
        dtype, grid = self.dtype, (self.warps, 1)
        self.attrs.blocks = [self.utils.ceil_div(seq_q, bq), batch_heads]
        self.attrs.warps = self.warps
        bh = self.blockIdx.y
        q0: int32 = self.blockIdx.x * bq
        gq, gk, gv, go = self.views(batch_heads, seq_q, seq_k, q_ptr, k_ptr, v_ptr, o_ptr)
        sq = self.shared_tensor(dtype=dtype, shape=[bq, d])
        sk = self.shared_tensor(dtype=dtype, shape=[stages, bkv, d])
        sv = self.shared_tensor(dtype=dtype, shape=[stages, bkv, d])
        num_kv: int32 = self.utils.ceil_div(seq_k, bkv)
        if self.causal:  # the last key a row of this block sees is q0 + bq - 1
            num_kv = min(num_kv, self.utils.ceil_div(q0 + bq, bkv))
        q_at, q_dims = self.tile(bh, 0, q0)
        self.copy_async(src=gq, dst=sq, offsets=q_at, dims=q_dims)
        for s in range(stages - 1):  # prologue: the first stages - 1 k/v tiles in flight (q joins group 0)
            k_first, k_first_dims = self.tile(bh, 1, s * bkv)
            self.copy_async(src=gk, dst=sk[s], offsets=k_first, dims=k_first_dims)
            v_first, v_first_dims = self.tile(bh, 2, s * bkv)
            self.copy_async(src=gv, dst=sv[s], offsets=v_first, dims=v_first_dims)
            self.copy_async_commit_group()
        self.copy_async_wait_group(stages - 2)
        self.sync()
        q_frags = []
        if self.q_in_registers:
            for qc in list(range(d // 16)):
                q_frags.append(self.load_shared(sq, offsets=[0, qc * 16], shape=[bq, 16]))
        m = self.register_tensor(dtype=float32, shape=[bq, 1], init=M_INIT)
        l = self.register_tensor(dtype=float32, shape=[bq, 1], init=0.0)
        acc = []
        for ac in list(range(d // oc)):
            acc.append(self.register_tensor(dtype=float32, shape=[bq, oc], init=0.0))
        key_ids = self.register_tensor(dtype=int32, shape=[1, bkv], init=lambda row, col: col)  # masks at the edges
        query_ids = self.register_tensor(dtype=int32, shape=[bq, 1], init=lambda row, col: row)
        for j in range(num_kv):
            stage = j % stages
            self.copy_async_wait_group(stages - 2)  # tile j has landed (redundant when j = 0) ...
            self.sync()  # ... and every thread is done with tile j - 1's stage
            ahead = j + stages - 1  # refill the stage tile j - 1 used
            k_at, k_dims = self.tile(bh, 1, ahead * bkv)
            self.copy_async(src=gk, dst=sk[ahead % stages], offsets=k_at, dims=k_dims)
            v_at, v_dims = self.tile(bh, 2, ahead * bkv)
            self.copy_async(src=gv, dst=sv[ahead % stages], offsets=v_at, dims=v_dims)
            self.copy_async_commit_group()
            s = self.register_tensor(dtype=float32, shape=[bq, bkv], init=0.0)
            # The fragments of the next 16 columns load before this product (and q's, when it is not
            # kept in registers), so the backend can spread the loads among its mma instructions.
            q_frag, k_frag = self.qk_fragments(sq, sk[stage], q_frags, 0)
            for kc in list(range(d // 16)):
                if kc + 1 < d // 16:
                    q_next, k_next = self.qk_fragments(sq, sk[stage], q_frags, kc + 1)
                self.dot_split(q_frag, k_frag, s, warp_grid=grid, out=s)
                if kc + 1 < d // 16:
                    q_frag, k_frag = q_next, k_next
            s = s * scale_log2
            kv0 = j * bkv
            if self.causal:
                if kv0 + bkv > seq_k or kv0 + bkv - 1 > q0:
                    visible = (key_ids < seq_k - kv0) & (key_ids <= query_ids + (q0 - kv0))
                    s = self.where(visible, s, NEG_INF)
            else:
                if kv0 + bkv > seq_k:
                    s = self.where(key_ids < seq_k - kv0, s, NEG_INF)
            # each step bound to a name: a name materializes its tile, while an unnamed expression
            # would be evaluated again where it is used (alpha after m is overwritten)
            m_new = self.maximum(m, self.max(s, dim=1, keepdim=True))
            p = self.exp2(s - m_new)
            alpha = self.exp2(m - m_new)
            l = l * alpha + self.sum(p, dim=1, keepdim=True)
            m = m_new
            p16 = p.to(dtype)
            for vc in list(range(d // oc)):
                self.assign(acc[vc], acc[vc] * alpha)
                v_frag = self.load_shared(sv[stage], offsets=[0, vc * oc], shape=[bkv, oc])
                self.dot_split(p16, v_frag, acc[vc], warp_grid=grid, out=acc[vc])
        self.copy_async_wait_all()  # the zero-filled copies past the last tile must land before exit
        inv_l = 1.0 / l
        for oc_index in list(range(d // oc)):
            o_at, o_dims = self.tile(bh, 3, q0, oc_index * oc)
            self.store_global(go, (acc[oc_index] * inv_l).to(dtype), offsets=o_at, dims=o_dims)

    def views(self, batch_heads, seq_q, seq_k, q_ptr, k_ptr, v_ptr, o_ptr):
        """Global views of q, k, v and o: [batch * heads, seq, head_dim], or with ``heads``
        [batch, seq, heads, head_dim] (q, k and v [batch, seq, 3 * heads, head_dim] when packed)."""
        d, dtype, heads = self.head_dim, self.dtype, self.heads
        if not heads:
            return [self.global_view(ptr, dtype=dtype, shape=[batch_heads, seq, d])
                    for ptr, seq in ((q_ptr, seq_q), (k_ptr, seq_k), (v_ptr, seq_k), (o_ptr, seq_q))]
        batch = batch_heads // heads
        width = 3 * heads if self.packed_qkv else heads
        return [self.global_view(ptr, dtype=dtype, shape=[batch, seq, w, d])
                for ptr, seq, w in ((q_ptr, seq_q, width), (k_ptr, seq_k, width), (v_ptr, seq_k, width),
                                    (o_ptr, seq_q, heads))]

    def tile(self, bh, operand: int, row, column: int = 0):
        """``(offsets, dims)`` of the [rows, columns] tile of q, k, v or o (``operand`` 0 to 3) of head
        ``bh`` (batch * heads + head) starting at sequence position ``row`` and ``column``."""
        if not self.heads:
            return [bh, row, column], None
        head = bh % self.heads
        if self.packed_qkv and 0 < operand < 3:  # k and v: the second and third thirds of the heads
            head = head + operand * self.heads
        return [bh // self.heads, row, head, column], [1, 3]


def seq_major(t: Any) -> bool:
    """Whether a [batch, heads, seq, head_dim] tensor is the transpose of a contiguous [batch, seq, heads,
    head_dim] one (and not itself contiguous, as with one head or a length of 1)."""
    return not t.is_contiguous() and t.transpose(1, 2).is_contiguous()


def check_attention_inputs(fn: str, q: Any, k: Any, v: Any, names: tuple[str, str, str] = ("q", "k", "v")) -> None:
    """The checks every attention entry point makes before launching (each error names the argument)."""
    import torch

    q_name, k_name, v_name = names
    for name, t in zip(names, (q, k, v)):
        if not isinstance(t, torch.Tensor):
            raise LaunchError(f"{fn}: {name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise LaunchError(f"{fn}: {name} must be 4-D [batch, heads, seq, head_dim], got shape {list(t.shape)}")
        if t.dtype not in (torch.float16, torch.bfloat16):
            raise LaunchError(f"{fn}: {name} must be float16 or bfloat16, got {t.dtype}")
        if not (t.is_contiguous() or t.transpose(1, 2).is_contiguous()):
            raise LaunchError(f"{fn}: {name} must be contiguous [batch, heads, seq, head_dim] or the .transpose(1, 2) "
                              f"of a contiguous [batch, seq, heads, head_dim] tensor, got strides {list(t.stride())} "
                              f"for shape {list(t.shape)}; call .contiguous()")
    for name, t in ((k_name, k), (v_name, v)):
        if t.dtype != q.dtype:
            raise LaunchError(f"{fn}: {name} has dtype {t.dtype}, {q_name} has {q.dtype}; they must match")
        if t.device != q.device:
            raise LaunchError(f"{fn}: {name} is on {t.device}, {q_name} on {q.device}")
    if k.shape != v.shape:
        raise LaunchError(f"{fn}: {k_name} {list(k.shape)} and {v_name} {list(v.shape)} must have the same shape")
    if (q.shape[0], q.shape[1], q.shape[3]) != (k.shape[0], k.shape[1], k.shape[3]):
        raise LaunchError(f"{fn}: {q_name} {list(q.shape)} and {k_name} {list(k.shape)} must agree in batch, heads "
                          f"and head_dim")
    if len({seq_major(t) for t in (q, k, v)}) > 1:
        raise LaunchError(f"{fn}: {q_name}, {k_name} and {v_name} must share one layout: all contiguous "
                          f"[batch, heads, seq, head_dim], or all transposes of [batch, seq, heads, head_dim]")
    if q.shape[3] not in HEAD_DIMS:
        raise LaunchError(f"{fn}: head_dim ({q_name}.shape[3]) must be one of {HEAD_DIMS}, got {q.shape[3]}")
    if 0 in q.shape or k.shape[2] == 0:
        raise LaunchError(f"{fn}: empty tensors: {q_name} {list(q.shape)}, {k_name} {list(k.shape)}")


def flash_attention(q: Any, k: Any, v: Any, causal: bool = False, scale: Optional[float] = None,
                    out: Optional[Any] = None, *, tune: Optional[bool] = None, wgmma: Optional[bool] = None) -> Any:
    """``softmax(q @ k^T * scale [+ causal mask]) @ v`` for CUDA tensors [batch, heads, seq, head_dim].

    Like ``torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)``:
    ``scale`` defaults to ``1 / sqrt(head_dim)``; q and k/v lengths may differ. float16 or bfloat16,
    head_dim 64 or 128, contiguous tensors or ``.transpose(1, 2)`` views of contiguous [batch, seq, heads,
    head_dim] ones (read and written where they are). Raises :class:`LaunchError` naming the bad argument.
    ``tune=True`` (``None``: ``tilus_tvm.tune.configure(library=...)``) launches the configuration
    tuned for the shapes (lengths rounded up to powers of two) instead of the hand-picked one.
    ``wgmma``: Hopper's ``FlashAttentionWgmma`` (default: on an sm_90a GPU, untuned) or ``mma.sync``'s
    ``FlashAttention`` (False; the tuned kernels are these).

        o = flash_attention(q, k, v, causal=True)     # q, k, v [batch, heads, seq, 128] float16
    """
    import torch

    check_attention_inputs("flash_attention", q, k, v)
    batch, heads, seq_q, head_dim = q.shape
    seq_k = k.shape[2]
    scale = 1.0 / math.sqrt(head_dim) if scale is None else float(scale)
    if not scale > 0:
        raise LaunchError(f"flash_attention: scale must be positive, got {scale}")
    transposed = seq_major(q)  # [B, S, H, D] memory: read and written in place, no copies
    if out is None:
        out = torch.empty(batch, seq_q, heads, head_dim, dtype=q.dtype, device=q.device).transpose(1, 2) \
            if transposed else torch.empty_like(q)
    elif out.shape != q.shape or out.dtype != q.dtype or seq_major(out) != transposed or \
            not (out.is_contiguous() or out.transpose(1, 2).is_contiguous()):
        raise LaunchError(f"flash_attention: out must be a {q.dtype} tensor of shape {list(q.shape)} in q's layout, "
                          f"got {out.dtype} {list(out.shape)} with strides {list(out.stride())}")
    layout = {"heads": heads} if transposed else {}
    if use_tuned(tune, "flash_attention"):
        kernel = tuned_kernel(FlashAttention, head_dim=head_dim, causal=bool(causal),
                              dtype=bfloat16 if q.dtype == torch.bfloat16 else float16, **layout)
    else:
        kernel = flash_kernel_for(head_dim, bool(causal), q.dtype, wgmma=wgmma, **layout)
    bh = batch * heads
    if transposed:
        kernel(bh, seq_q, seq_k, scale * LOG2E, *(t.transpose(1, 2) for t in (q, k, v, out)))
    else:
        kernel(bh, seq_q, seq_k, scale * LOG2E, q.view(bh, seq_q, head_dim), k.view(bh, seq_k, head_dim),
               v.view(bh, seq_k, head_dim), out.view(bh, seq_q, head_dim))
    return out


# (block_q, block_kv, warps, stages, out_chunk[, q_in_registers]) by head_dim.
FLASH_CONFIGS = {64: (64, 64, 4, 2, 32), 128: (64, 64, 4, 2, 32)}
# FlashAttentionWgmma's (block_q, block_kv, stages, overlap) by head_dim, on sm_90a. On an H200 at 4x32
# heads x 2K-4K, d 128: (128, 128, 2, False) 413-459 TFLOP/s (343-399 causal); overlapped (128, 128, 3,
# True) 359-402 (289-342); (128, 64, 4, True) 329-375; (128, 64, 3, False) 385-410.
WGMMA_FLASH_CONFIGS = {64: (128, 128, 2, False), 128: (128, 128, 2, False)}
_FLASH_KERNELS: dict = {}


def flash_kernel_for(head_dim: int, causal: bool, dtype: Any, heads: int = 0,
                     packed_qkv: bool = False, wgmma: Optional[bool] = None) -> FlashAttention:
    """The ``FlashAttention`` that :func:`flash_attention` uses (``heads``, ``packed_qkv``: the
    [batch, seq, heads, head_dim] layouts, for Relax's dispatch): on sm_90a (``wgmma``; None: whether
    the current GPU is an sm_90a one) the ``FlashAttentionWgmma`` of :data:`WGMMA_FLASH_CONFIGS`."""
    if wgmma is None:
        from tilus_tvm.target import current_arch

        try:
            wgmma = current_arch() == "sm_90a"
        except CompileError:  # no GPU here: the portable kernel
            wgmma = False
    key = (head_dim, causal, str(dtype), heads, packed_qkv, bool(wgmma))
    dtype = bfloat16 if "bfloat16" in str(dtype) else float16
    if key not in _FLASH_KERNELS and wgmma:
        from tilus_tvm.schedules.attention_sm90 import FlashAttentionWgmma

        bq, bkv, stages, *overlap = WGMMA_FLASH_CONFIGS[head_dim]
        _FLASH_KERNELS[key] = FlashAttentionWgmma(head_dim, bq, bkv, stages, causal, dtype, heads=heads,
                                                  packed_qkv=packed_qkv, overlap=bool(overlap[0]) if overlap else False)
    if key not in _FLASH_KERNELS:
        bq, bkv, warps, stages, oc, *rest = FLASH_CONFIGS[head_dim]
        q_in_registers = rest[0] if rest else True
        _FLASH_KERNELS[key] = FlashAttention(head_dim, bq, bkv, warps, stages, oc, causal, dtype, q_in_registers,
                                             heads=heads, packed_qkv=packed_qkv)
    return _FLASH_KERNELS[key]
