"""Copies and shared loads spread among the mma instructions of the dot after them
(tilus_tvm/backend/interleave.py): which runs may move, how they are spread, and what the Matmul's
CUDA source looks like with them."""
import re

import torch

import tilus_tvm as tilus
from tilus_tvm import float16, float32, int32
from tilus_tvm.backend.interleave import merge, window_end
from tilus_tvm.ir import inst as ir
from tilus_tvm.ir.stmt import InstStmt, SeqStmt, instructions
from tilus_tvm.pipeline import lower_specialized, specialize
from tilus_tvm.schedules.matmul import Matmul


def test_merge_spreads_work_evenly_and_keeps_both_orders():
    work = [f"w{i}" for i in range(3)]
    mma = [f"m{i}" for i in range(8)]
    merged = merge(work, mma)
    assert [s for s in merged if s[0] == "w"] == work and [s for s in merged if s[0] == "m"] == mma
    assert merged[0] == "w0"  # the first piece leads
    gaps = [merged.index(f"w{i + 1}") - merged.index(f"w{i}") for i in range(2)]
    assert min(gaps) >= 3  # 8 mma over 3 pieces: at least two mma between consecutive pieces
    assert merge(["w"] * 5, ["m"]) == ["w"] * 5 + ["m"]  # more pieces than mma: all lead


class Pipelined(tilus.Script):
    """A two-step k loop: the next fragments load while the current ones multiply; with ``reuse`` the
    dot reads the tensor the load just wrote (nothing may move then)."""

    def __init__(self, reuse: bool = False):
        super().__init__()
        self.reuse = reuse

    def __call__(self, a_ptr: ~float16, b_ptr: ~float16, c_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 4
        ga = self.global_view(a_ptr, dtype=float16, shape=[64, 64])
        gb = self.global_view(b_ptr, dtype=float16, shape=[64, 64])
        gc = self.global_view(c_ptr, dtype=float32, shape=[64, 64])
        sa = self.shared_tensor(dtype=float16, shape=[64, 64])
        sb = self.shared_tensor(dtype=float16, shape=[64, 64])
        self.copy_async(src=ga, dst=sa, offsets=[0, 0])
        self.copy_async(src=gb, dst=sb, offsets=[0, 0])
        self.copy_async_wait_all()
        self.sync()
        acc = self.register_tensor(dtype=float32, shape=[64, 64], init=0.0)
        a = self.load_shared(sa, offsets=[0, 0], shape=[64, 32])
        b = self.load_shared(sb, offsets=[0, 0], shape=[32, 64])
        a_next = self.load_shared(sa, offsets=[0, 32], shape=[64, 32])
        b_next = self.load_shared(sb, offsets=[32, 0], shape=[32, 64])
        if self.reuse:
            self.dot(a_next, b_next, acc, out=acc)
        else:
            self.dot(a, b, acc, out=acc)
        self.dot(a_next if not self.reuse else a, b_next if not self.reuse else b, acc, out=acc)
        self.store_global(gc, acc, offsets=[0, 0])


def _lowered(kernel):
    h = torch.empty(64, 64, dtype=torch.float16, device="meta")
    f = torch.empty(64, 64, dtype=torch.float32, device="meta")
    specs, spec = specialize(kernel, (h, h, f), "sm_90")
    return lower_specialized(kernel, specs, spec)


def _top_level(func):
    return [s for s in func.body.stmts if isinstance(s, InstStmt)]


def test_independent_loads_before_a_dot_form_a_window():
    stmts = _top_level(_lowered(Pipelined()).func)
    first_dot = next(i for i, s in enumerate(stmts) if isinstance(s.inst, ir.Dot))
    start = first_dot - 4  # a, b, a_next, b_next: the dot reads a and b, which are loaded in the window
    assert window_end(stmts, start) is None
    assert window_end(stmts, first_dot - 2) == first_dot  # a_next, b_next move into the first dot


def test_a_dot_reading_a_moved_register_closes_no_window():
    stmts = _top_level(_lowered(Pipelined(reuse=True)).func)
    first_dot = next(i for i, s in enumerate(stmts) if isinstance(s.inst, ir.Dot))
    assert window_end(stmts, first_dot - 2) is None


def _mma_runs(source: str) -> list[int]:
    """Lengths of the runs of consecutive mma statements in a kernel's CUDA source."""
    kinds = re.findall(r"(mma\.sync|cp_async_cg|ldmatrix\.sync)", source)
    runs, run = [], 0
    for kind in kinds:
        if kind == "mma.sync":
            run += 1
        else:
            if run:
                runs.append(run)
            run = 0
    return runs + ([run] if run else [])


def test_matmul_copies_and_ldmatrix_sit_between_mma_instructions():
    z = torch.empty(4096, 4096, dtype=torch.float16, device="meta")
    source = Matmul(128, 256, 64, 8, 3).compile(4096, 4096, 4096, z, z, z, target="sm_90").cuda_source
    # a warp tile of 4 x 8 mma per k step; without interleaving each step is one run of 32
    assert max(_mma_runs(source)) < 8
    # the refill loop stops before k's end, so with a static k its copies carry no k mask: b's
    # copies (n in bounds) move a constant 16 bytes, a's depend only on the m edge
    steady = source[re.search(r"for \(int \w+ = 0; \w+ < 62;", source).start():]  # 64 tiles, 3 stages
    steady = steady[:steady.index("cp_async_wait_group")]
    sizes = re.findall(r"cp_async_cg_src_size_async_cg_shared_global_16\(.*\), (\(\(uint\).*|\(uint\)16)\);", steady)
    assert len(sizes) == 12
    assert sizes.count("(uint)16") == 8 and all("m_size" in s for s in sizes if s != "(uint)16")
