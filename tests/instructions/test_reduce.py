"""``Reduce`` across threads: the shuffle / one-shared-round plan, simulated thread by thread on the CPU
(the plan's index functions are the ones the emitter evaluates on ``threadIdx.x``), and the code it
lowers to (shuffles, one shared store per warp, vector loads of the warps' partials)."""
import random
import re

import pytest
import torch

import tilus_tvm as tilus
from tilus_tvm import float32
from tilus_tvm.instructions.reduce import WARP_SIZE, _reduce_groups, thread_reduction
from tilus_tvm.layout import local, register_layout, spatial
from tilus_tvm.layout.register_ops import reduce

LAYOUTS = [
    (spatial(1, 256).local(1, 8), 1),  # one row over 8 warps (a norm's row)
    (local(1, 2).spatial(1, 512).local(1, 8), 1),  # one row over 16 warps, two vectors per thread
    (local(1, 2).spatial(4, 64).local(1, 8), 1),  # four rows, two warps per row
    (spatial(8, 32).local(1, 4), 1),  # a warp per row: shuffles only
    (spatial(32, 8), 1),  # four rows per warp: shuffles over 3 lane bits
    (spatial(16, 16), 0),  # columns: lane bit 4 and warp bits 5..7
    (spatial(4, 64).local(2, 1), 0),  # columns over the warps, no lane bits
    (register_layout([4, 64], [4, 64], [0, -2, 1], []), 1),  # replicated over 2 threads
    (spatial(2, 3, 32), 2),  # the reduced digits are a power of two even if other digits are not
    (spatial(8, 32).local(1, 4), 0),  # columns over 8 warps, four outputs per thread
    (local(4, 1).spatial(8, 16).local(1, 8), 0),  # lane bit 4 and warp bits, eight outputs per thread
]


def simulate(layout, dim, seed=0):
    """Run the plan thread by thread: per-thread combine, xor shuffles, one partial per warp group written
    to scratch, every thread combining the partials. Returns (results per thread and slot, expected)."""
    rng = random.Random(seed)
    values = {idx: rng.randint(-1000, 1000) for idx in _indices(layout.shape)}
    plan = thread_reduction(layout, dim)
    out_layout = reduce(layout, [dim], keepdims=True)
    groups, num_out = _reduce_groups(layout, dim)
    threads = range(layout.num_threads)
    acc = {t: [sum(values[layout.logical(t, i)] for i in slots) for slots in groups] for t in threads}
    for mask in plan.lane_masks:
        acc = {t: [acc[t][j] + acc[t ^ mask][j] for j in range(num_out)] for t in threads}
    if plan.warp_pieces:
        scratch = {}
        for t in threads:
            if plan.is_writer(t) and layout.replica_of(t) == 0:
                for j in range(num_out):
                    position = _ravel(out_layout.logical(t, j), out_layout.shape)
                    key = plan.scratch_index(position, plan.partial_index(t), out_layout.size)
                    assert key not in scratch or scratch[key] == acc[t][j], "two writers disagree"
                    scratch[key] = acc[t][j]
        assert sorted(scratch) == list(range(plan.partials * out_layout.size)), "scratch not filled exactly"
        acc = {t: [sum(scratch[plan.scratch_index(_ravel(out_layout.logical(t, j), out_layout.shape), p,
                                                  out_layout.size)]
                       for p in range(plan.partials)) for j in range(num_out)] for t in threads}
    expected = {}
    for idx, v in values.items():
        key = tuple(0 if d == dim else i for d, i in enumerate(idx))
        expected[key] = expected.get(key, 0) + v
    got = {t: {out_layout.logical(t, j): acc[t][j] for j in range(num_out)} for t in threads}
    return got, expected


def _indices(shape):
    if not shape:
        yield ()
        return
    for i in range(shape[0]):
        for rest in _indices(shape[1:]):
            yield (i,) + rest


def _ravel(index, shape):
    linear = 0
    for i, s in zip(index, shape):
        linear = linear * s + i
    return linear


@pytest.mark.parametrize("layout,dim", LAYOUTS)
def test_thread_reduction_plan_reduces_every_row(layout, dim):
    got, expected = simulate(layout, dim)
    for t, slots in got.items():
        for index, value in slots.items():
            assert value == expected[index], f"thread {t} slot {index}: {value} != {expected[index]}"


def test_thread_reduction_splits_lane_and_warp_bits():
    plan = thread_reduction(spatial(1, 512).local(1, 8), 1)
    assert plan.lane_masks == (1, 2, 4, 8, 16) and plan.warp_pieces == ((WARP_SIZE, 16),) and plan.partials == 16
    plan = thread_reduction(spatial(16, 16), 0)
    assert plan.lane_masks == (16,) and plan.warp_pieces == ((32, 8),)
    assert thread_reduction(spatial(8, 32), 1).warp_pieces == ()
    assert thread_reduction(spatial(8, 32).local(1, 4), 0).outputs_per_thread == 4
    assert thread_reduction(spatial(3, 64), 0) is None  # a digit of size 3: every thread's partial via shared


class RowSums(tilus.Script):
    """Sums and maxima of the rows of a [rows, n] tile spread over ``warps`` warps per row."""

    def __init__(self, rows: int, n: int, warps: int):
        super().__init__()
        self.rows, self.n, self.warps = rows, n, warps

    def __call__(self, x_ptr: ~float32, out_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = self.warps * self.rows
        gx = self.global_view(x_ptr, dtype=float32, shape=[self.rows, self.n])
        go = self.global_view(out_ptr, dtype=float32, shape=[self.rows, 2])
        layout = spatial(self.rows, 32 * self.warps).local(1, 4)
        x = self.load_global(gx, offsets=[0, 0], shape=[self.rows, self.n], layout=layout)
        total = self.sum(x, dim=1, keepdim=True)
        top = self.max(x, dim=1, keepdim=True)
        self.store_global(go, total, offsets=[0, 0])
        self.store_global(go, top, offsets=[0, 1])


@pytest.mark.parametrize("rows,warps", [(1, 8), (2, 4), (4, 1)])
def test_reduce_lowers_to_shuffles_and_one_shared_round(rows, warps):
    n = 128 * warps
    x, out = torch.empty(rows, n), torch.empty(rows, 2)
    compiled = RowSums(rows, n, warps).compile(x, out, target="sm_90")
    ptx = compiled.ptx
    assert len(re.findall(r"shfl\.sync\.bfly", ptx)) == 2 * 5  # five lane bits, two reductions
    stores = re.findall(r"st\.shared\.f32", ptx)
    if warps == 1:
        assert not stores and "bar.sync" not in ptx  # one warp per row: no shared memory at all
    else:
        assert len(stores) == 2  # one partial per warp and reduction
        assert re.search(r"ld\.shared\.v4\.f32", ptx)  # the warps' partials read as vectors


@pytest.mark.gpu
@pytest.mark.parametrize("rows,warps", [(1, 8), (2, 4), (4, 1), (1, 32)])
def test_row_reductions_match_torch(rows, warps):
    n = 128 * warps
    x = torch.randn(rows, n, device="cuda")
    out = torch.full((rows, 2), float("nan"), device="cuda")
    RowSums(rows, n, warps)(x, out)
    torch.testing.assert_close(out[:, 0], x.sum(1), rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(out[:, 1], x.amax(1))
