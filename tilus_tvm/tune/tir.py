"""``tune_tir``: MetaSchedule auto-schedules a TIR/TE matmul onto tensor cores with the ``tilus.*`` intrinsics.

MetaSchedule's ``MultiLevelTilingTensorCore`` rule decides the tiling (blocks, warps, fragments,
shared-memory staging) by *matching* the intrinsics of a group against the workload: it needs
descriptions written on logical tile coordinates (``C[i, j] += A[i, k] * B[k, j]``) in its own
fragment scopes (``wmma.matrix_a``, ``wmma.matrix_b``, ``wmma.accumulator``). The ``tilus.*``
intrinsics describe the registers themselves instead -- ``"warp"`` buffers ``[32 lanes, slots]``
indexed through the ``tilus_tvm.layout.atoms`` layouts -- which is what makes them exact, and what
the rule's matcher cannot invert. So the group handed to the rule is made of *shapes*: one
``tilus.ms.*`` intrinsic per ``tilus.*`` one, with the same operands on logical coordinates
(registered here, never emitted), and a postprocessor, :class:`TilusFragments`, placed just before
MetaSchedule's ``RewriteTensorize``, turns each sketch into one on the real intrinsics: every
fragment buffer gets its atom's register layout (``transform_layout`` by the layout's index map)
and the ``"warp"`` scope, and every ``meta_schedule.auto_tensorize`` annotation is renamed from the
shape to the ``tilus.*`` intrinsic. ``RewriteTensorize`` then tensorizes with ``tilus.mma_*``,
``tilus.ldmatrix_*``, ``tilus.mma_fill_*`` and ``tilus.mma_store_*`` -- the instructions the Script
backend emits, one implementation each.

    import tilus_tvm as tilus
    database = tilus.tune_tir(mod, "sm_90", work_dir="ms_work", max_trials_global=64)
    scheduled = tilus.tune.tir.compile_best(database, mod, "sm_90")   # tvm.IRModule, or None

Groups: float16 x float16 -> float32 and bfloat16 x bfloat16 -> float32 (``m16n8k16``), A row-major
``[m, k]``, B row-major ``[k, n]`` (``ldmatrix.x4`` for A, ``ldmatrix.x2.trans`` for B).

Staging and pipeline. Tiles are staged in dynamic shared memory (``shared.dyn``: TVM merges the
buffers into one and its CUDA runtime raises the launch limit past 48 KB, up to the architecture's
limit, which :func:`tuning_target` gives ``VerifyGPUCode``). The rule pipelines the k loop only
through registers for intrinsic groups other than TVM's own ``mma_sync_*`` ones (each copy loads
global memory into registers one step ahead, then stores them to shared memory): its ``cp.async``
form is tied to that group's fragment scopes. :class:`AsyncPipeline` gives our schedules that form
after the fact: the copies go straight from global to shared memory as ``cp.async`` (TVM's
``InjectSoftwarePipeline`` with async stages, lowered by ``InjectPTXAsyncCopy``), ``stages - 1``
k-steps ahead of the mma. Such schedules are compiled under :data:`PASS_CONFIG` (:func:`build`),
whose pipeline ends with :func:`refill_after_wait` (one barrier a k-step instead of TVM's two).

Search. :class:`TilingLimits`, the first postprocessor, keeps the tilings a hand-written kernel would
use (4-8 warps, 64x32 to 64x64 warp tiles, k tiles of 32 or 64); :func:`fixed_schedule` builds one
given point of the space.
"""
from __future__ import annotations

import contextlib
import functools
import logging
import math

from typing import Any, Optional

import tvm
from tvm import tirx
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.script.ir_builder import tirx as Tb

import tilus_tvm.intrin as intrin
from tilus_tvm.intrin.builder import Operand, intrin_func, named
from tilus_tvm.intrin.fragment import fragment_indices
from tilus_tvm.layout.atoms import get_mma_atom
from tilus_tvm.target import resolve_arch, shared_memory_limit
from tilus_tvm.tune import measure

SHAPE_PREFIX = "tilus.ms."
AUTO_TENSORIZE = "meta_schedule.auto_tensorize"
FRAGMENT_SCOPES = {"wmma.matrix_a": "a", "wmma.matrix_b": "b", "wmma.accumulator": "c"}
STAGING = "shared.dyn"
DTYPES = ("float16", "bfloat16")
PASS_CONFIG = {"tirx.use_async_copy": True}  # the async stages' copies become cp.async
LOCAL_STAGE = "tirx.manifest_shared_memory_local_stage"
SYNC_STAGES = (0, 0, 0, 0, 0, 1, 1)  # the rule's register-staged pipeline of the outer k loop
# The unroll steps the space offers. The tensorized loops are unrolled by the intrinsics already; steps of
# 128 and more only multiplied the code (nvcc ran past the 30 s compile limit, up to 5 minutes) and the
# fastest points measured unrolled 0 or 16 (H200, 4096^3: 0.52x and 0.51x cuBLAS).
UNROLL_STEPS = (0, 16, 64)
VECTOR_LENS = (4, 8)  # elements a thread's copy moves (see schedule_rules)


def _shape_intrinsics(in_dtype: str) -> dict[str, tuple[str, str]]:
    """``{role: (shape intrinsic, tilus intrinsic)}`` for one input dtype, registering the shapes."""
    atom = get_mma_atom(in_dtype, in_dtype, "float32", k=16)
    m, n, k = atom.m, atom.n, atom.k
    real = {"init": intrin.mma_fill_name(atom), "load_a": intrin.ldmatrix_name(4, False, in_dtype, STAGING),
            "load_b": intrin.ldmatrix_name(2, True, in_dtype, STAGING), "compute": intrin.mma_name(atom),
            "store": intrin.mma_store_name(atom, STAGING)}
    a = Operand("A", (m, k), in_dtype, "wmma.matrix_a", "r")
    b = Operand("B", (k, n), in_dtype, "wmma.matrix_b", "r")
    c = Operand("C", (m, n), "float32", "wmma.accumulator", "rw")

    def copy(source: Operand, target: Operand):
        def body(src, dst):
            with Tb.grid(*source.shape) as loops:
                i, j = named("i j", loops)
                with Tb.sblock("copy"):
                    vi, vj = named("vi vj", Tb.axis.remap("SS", [i, j]))
                    Tb.buffer_store(dst, src[vi, vj], [vi, vj])
        return intrin_func("desc", [source, target], body)

    def fill(C):
        with Tb.grid(m, n) as loops:
            i, j = named("i j", loops)
            with Tb.sblock("fill"):
                vi, vj = named("vi vj", Tb.axis.remap("SS", [i, j]))
                Tb.buffer_store(C, tirx.const(0, "float32"), [vi, vj])

    def compute(A, B, C):
        with Tb.grid(m, n, k) as loops:
            i, j, kk = named("i j k", loops)
            with Tb.sblock("mma"):
                vi, vj, vk = named("vi vj vk", Tb.axis.remap("SSR", [i, j, kk]))
                product = tirx.Cast("float32", A[vi, vk]) * tirx.Cast("float32", B[vk, vj])
                Tb.buffer_store(C, C[vi, vj] + product, [vi, vj])

    descs = {
        "init": intrin_func("desc", [Operand("C", (m, n), "float32", "wmma.accumulator", "w")], fill),
        "load_a": copy(Operand("S", (m, k), in_dtype, STAGING, "r"), Operand("W", (m, k), in_dtype, "wmma.matrix_a", "w")),
        "load_b": copy(Operand("S", (k, n), in_dtype, STAGING, "r"), Operand("W", (k, n), in_dtype, "wmma.matrix_b", "w")),
        "compute": intrin_func("desc", [a, b, c], compute, read_order=("C", "A", "B")),
        "store": copy(Operand("C", (m, n), "float32", "wmma.accumulator", "r"), Operand("D", (m, n), "float32", STAGING, "w")),
    }
    group = {}
    for role, desc in descs.items():
        name = SHAPE_PREFIX + real[role][len("tilus."):]
        if tvm.s_tir.TensorIntrin.get(name, allow_missing=True) is None:
            tvm.s_tir.TensorIntrin.register(name, desc, desc)  # a shape for matching only: never emitted
        group[role] = (name, real[role])
    return group


def intrin_group(in_dtype: str = "float16") -> dict[str, str]:
    """The group given to ``MultiLevelTilingTensorCore`` (the ``tilus.ms.*`` shapes) for ``in_dtype``."""
    return {role: names[0] for role, names in _shape_intrinsics(in_dtype).items()}


def real_names() -> dict[str, str]:
    """``{tilus.ms.* shape: tilus.* intrinsic}`` for every group."""
    return {shape: real for dtype in DTYPES for shape, real in _shape_intrinsics(dtype).values()}


def tuning_target(target: Any) -> tvm.target.Target:
    """The CUDA target with the limits MetaSchedule's rules and ``VerifyGPUCode`` read (shared memory:
    the architecture's limit a block, since the schedules stage through ``"shared.dyn"``)."""
    if isinstance(target, tvm.target.Target):
        return target
    arch = resolve_arch(target)
    return tvm.target.Target({"kind": "cuda", "arch": arch, "max_threads_per_block": 1024, "thread_warp_size": 32,
                              "max_shared_memory_per_block": shared_memory_limit(arch),
                              "registers_per_block": 65536, "max_num_threads": 1024}, host="llvm")


def build(mod: tvm.IRModule, target: Any, refill_after_wait: bool = True):
    """``tvm.compile`` of a schedule from this space under :data:`PASS_CONFIG`: the ``s_tir`` pipeline,
    followed by :func:`refill_after_wait` unless ``refill_after_wait=False``."""
    with tvm.transform.PassContext(opt_level=3, config=PASS_CONFIG):
        return tvm.compile(mod, target=tuning_target(target), tir_pipeline=PIPELINE if refill_after_wait else "s_tir")


COMMIT, WAIT, INFLIGHT = "async_commit_queue_scope", "async_wait_queue_scope", "async_wait_inflight_count"
SYNC = "tirx.tvm_storage_sync"


def _call_name(stmt) -> Optional[str]:
    return stmt.value.op.name if isinstance(stmt, tirx.Evaluate) and isinstance(stmt.value, tvm.ir.Call) else None


def _statements(stmt) -> list:
    return list(stmt.seq) if isinstance(stmt, tirx.SeqStmt) else [stmt]


def _only_copies(stmt) -> bool:
    """Whether ``stmt`` is made of ``cp.async`` calls only (in loops, with ``Bind``s of index expressions)."""
    if isinstance(stmt, tirx.For):
        return _only_copies(stmt.body)
    if isinstance(stmt, tirx.SeqStmt):
        return all(_only_copies(child) for child in stmt.seq)
    name = _call_name(stmt)
    return isinstance(stmt, tirx.Bind) or (name is not None and "cp_async" in name)


def _refill_loop(loop):
    """One pipelined k loop rewritten by :func:`refill_after_wait` (``loop`` itself when it is not of that form)."""
    body = _statements(loop.body)
    if len(body) < 2:
        return loop
    commit, wait = body[0], body[1]
    if not (isinstance(commit, tirx.AttrStmt) and commit.attr_key == COMMIT and isinstance(wait, tirx.AttrStmt)
            and wait.attr_key == WAIT and isinstance(wait.body, tirx.AttrStmt) and wait.body.attr_key == INFLIGHT
            and isinstance(wait.body.value, tirx.IntImm) and int(wait.body.value.value) >= 2):
        return loop
    inflight = wait.body
    copies = _statements(commit.body)
    names = [_call_name(stmt) for stmt in copies]
    syncs = [i for i, name in enumerate(names) if name == SYNC]
    transfers = [i for i, stmt in enumerate(copies) if not isinstance(stmt, tirx.Bind) and names[i] != SYNC]
    consumers = _statements(inflight.body)
    if (len(syncs) != 1 or not transfers or syncs[0] > transfers[0] or _call_name(consumers[0]) != SYNC
            or not all(_only_copies(copies[i]) for i in transfers)):
        return loop
    refill = tirx.AttrStmt(commit.node, COMMIT, commit.value,
                           tirx.SeqStmt([stmt for i, stmt in enumerate(copies) if i != syncs[0]]))
    count = tirx.IntImm("int32", int(inflight.value.value) - 1)
    waited = tirx.AttrStmt(wait.node, WAIT, wait.value, tirx.AttrStmt(
        inflight.node, INFLIGHT, count, tirx.SeqStmt([consumers[0], refill, *consumers[1:]])))
    return tirx.For(loop.loop_var, loop.min, loop.extent, loop.kind, tirx.SeqStmt([waited, *body[2:]]),
                    loop.thread_binding, loop.annotations, loop.step)


@tirx.transform.prim_func_pass(opt_level=0, name="tilus.RefillAfterWait")
def refill_after_wait(func, _mod, _ctx):
    """One ``__syncthreads`` a k-step instead of two in the ``cp.async`` pipelines :class:`AsyncPipeline` makes.

    After TVM's ``InjectSoftwarePipeline`` and ``ThreadSync`` each step of such a loop reads::

        __syncthreads(); cp.async (tile k + s - 1 into ring slot (k - 1) % s); commit;
        wait_group(n); __syncthreads(); ldmatrix / mma on the slots of tiles k and k + 1 ...

    The first barrier keeps the copies from overwriting the slot the last step read. ``ThreadSync``
    cannot tell the ring's slots apart (their index is ``(k + c) % s``), so it cannot see that the
    second barrier, placed before the copies, does the same job. This pass moves the copies after it::

        wait_group(n - 1); __syncthreads(); cp.async ...; commit; ldmatrix / mma ...

    ``wait_group(n)`` after a commit and ``wait_group(n - 1)`` before it complete the same groups, so
    every read still sees its tile, and the copies now write only after every thread has passed the
    step that last read their slot. Only loops of exactly this form (a commit scope holding one barrier
    then the copies, a wait scope starting with a barrier) are rewritten, and only with 4 stages or
    more (a wait count of 2 or more): with 3 the moved wait would have to drain every copy in flight
    before the step's mma, which measured slower than the second barrier (H200, 4096^3, six points of the
    space: 0.40-0.48x cuBLAS against 0.43-0.46x; with 4 stages 0.49-0.52x against 0.43-0.47x for all
    but the 128x128 point). TVM has no
    Python statement mutator in 0.27; ``tvm_ffi.structural_map`` walks the loops."""
    import tvm_ffi

    return func.with_body(tvm_ffi.structural_map(func.body, [(tirx.For, _refill_loop)]))


def _pipeline():
    s_tir, finalize_host, finalize_device = tvm.s_tir.pipeline.default_s_tir_pipeline()
    return tvm.transform.Sequential([s_tir, refill_after_wait]), finalize_host, finalize_device


PIPELINE = "tilus_s_tir"  # TVM's s_tir pipeline, then refill_after_wait
tvm.tirx.compilation_pipeline.register_tir_pipeline(PIPELINE, _pipeline)


def _fragment_map(layout, shape) -> tirx.IndexMap:
    """``(..., i, j) -> (..., i // tm, j // tn, lane, slot)`` for a buffer of ``shape`` tiled by ``layout``'s
    ``[tm, tn]``; ``(..., i, j) -> (..., lane, slot)`` when the last two extents are the tile itself."""
    tile_m, tile_n = layout.shape
    index_dtype = str(shape[0].dtype) if hasattr(shape[0], "dtype") else "int32"
    whole = [int(shape[-2]), int(shape[-1])] == [tile_m, tile_n]
    variables = [tirx.Var(f"i{d}", index_dtype) for d in range(len(shape))]
    *outer, i, j = variables
    if whole:
        return tirx.IndexMap(variables, [*outer, *fragment_indices(layout, [i, j])], None)
    lane, slot = fragment_indices(layout, [i % tile_m, j % tile_n])
    return tirx.IndexMap(variables, [*outer, i // tile_m, j // tile_n, lane, slot], None)


def _blocks(sch, block=None) -> list:
    block = block if block is not None else sch.get_sblock("root")
    found = []
    for child in sch.get_child_blocks(block):
        found.append(child)
        found += _blocks(sch, child)
    return found


@derived_object
class TilusFragments(ms.postproc.PyPostproc):
    """Before ``RewriteTensorize``: fragment buffers to ``"warp"`` scope in the atoms' register layouts,
    and the shape intrinsics' annotations to the ``tilus.*`` names (see the module docstring)."""

    def __init__(self):
        super().__init__()
        self.names = real_names()

    def _initialize_with_tune_context(self, context) -> None:
        pass

    def apply(self, sch) -> bool:
        done = set()
        for block in _blocks(sch):
            for index, region in enumerate(sch.get(block).writes):
                buffer = region.source  # (TVM 0.27: a region names its buffer "source")
                role = FRAGMENT_SCOPES.get(buffer.scope())
                if role is None or buffer.name in done:
                    continue
                layout = self._layout(role, buffer)
                # the map is a bijection by construction (lane and slot enumerate the tile); TVM's
                # iterator analysis cannot prove it through the layout's floordiv/floormod digits
                sch.transform_layout(block, ("write", index), _fragment_map(layout, buffer.shape),
                                     assume_injective_transform=True)
                sch.set_scope(block, index, "warp")
                done.add(buffer.name)
        for block in _blocks(sch):
            name = sch.get(block).annotations.get(AUTO_TENSORIZE)
            if name is not None and str(name) in self.names:
                sch.unannotate(block, AUTO_TENSORIZE)
                sch.annotate(block, AUTO_TENSORIZE, self.names[str(name)])
        return True

    @staticmethod
    def _layout(role: str, buffer):
        in_dtype = str(buffer.dtype)
        if role == "c":  # the accumulator is float32 for every group; its layout does not depend on the inputs
            in_dtype = "float16"
        atom = get_mma_atom(in_dtype, in_dtype, "float32", k=16)
        return {"a": atom.a_layout, "b": atom.b_layout, "c": atom.c_layout}[role]

    def clone(self):
        return TilusFragments()


@derived_object
class AsyncPipeline(ms.postproc.PyPostproc):
    """The rule's register-staged pipeline of the k loop made a ``cp.async`` one of ``stages`` buffers.

    The rule annotates the shared-memory copies with a local (register) stage and double buffering,
    and the outer k loop with stages ``(0, 0, 0, 0, 0, 1, 1)`` over its seven statements (each copy's
    global->register and register->shared halves, then the inner loop's prologue, body and epilogue,
    itself pipelined one fragment ahead). Here the copies lose their local stage and the outer loop
    gets five statements' stages ``(0, 0, s - 2, s - 1, s - 1)`` with stage 0 asynchronous: tile
    ``k + s - 1`` is in flight while the mma works on tile ``k``, in ``s`` shared buffers. A k loop of
    fewer than ``s`` steps keeps the rule's form (TVM's pipeline would wait on a count it cannot fold)."""

    def __init__(self, stages: int = 4):
        super().__init__()
        if int(stages) < 3:
            raise ValueError(f"AsyncPipeline: stages must be at least 3 (copies two k-steps ahead), got {stages!r}")
        self.stages = int(stages)

    def _initialize_with_tune_context(self, context) -> None:
        pass

    def apply(self, sch) -> bool:
        copies = [block for block in _blocks(sch) if LOCAL_STAGE in sch.get(block).annotations]
        if not copies:
            return True  # software_pipeline=False: nothing to do
        loops = [loop for loop in sch.get_loops(copies[0])  # both copies sit in the outer k loop
                 if tuple(int(v) for v in sch.get(loop).annotations.get("software_pipeline_stage", ())) == SYNC_STAGES]
        if len(loops) != 1 or int(sch.get(loops[0]).extent) < self.stages:
            return True  # not the rule's pipelined form, or fewer k-steps than buffers: left as it is
        for block in copies:
            sch.unannotate(block, LOCAL_STAGE)
            sch.unannotate(block, "double_buffer_scope")
        (loop,) = loops
        last = self.stages - 1
        sch.unannotate(loop, "software_pipeline_stage")
        sch.unannotate(loop, "software_pipeline_order")
        sch.annotate(loop, "software_pipeline_stage", [0, 0, last - 1, last, last])
        sch.annotate(loop, "software_pipeline_order", [0, 1, 3, 2, 4])
        sch.annotate(loop, "software_pipeline_async_stages", [0])
        return True

    def clone(self):
        return AsyncPipeline(self.stages)


@derived_object
class TilingLimits(ms.postproc.PyPostproc):
    """Rejects the rule's tilings no hand-written tensor-core matmul would use, before anything else runs.

    ``MultiLevelTilingTensorCore`` samples the i, j and k tiles freely: in a random sample of its
    4096^3 sketch, about 1 in 200 has a shape a CUTLASS-style kernel would choose; the others have 1 or 2
    warps, warp tiles of one mma atom (each ``ldmatrix`` feeding one ``mma``), warp tiles of 1024 rows
    (thousands of accumulator registers) or k tiles of 256 and more (a shared-memory stage larger
    than the pipeline's). A short search spends most of its trials on them. Here a schedule is kept when
    - each warp's tile holds at most 128 float32 accumulators a thread (64x64; more spill registers);
    - a warp tile spans at least 32 rows and 32 columns, and 64x32 elements in all (each ``ldmatrix``
      feeds two ``mma`` or more), or what the extents allow where they are smaller;
    - a block has 4 to 8 warps, or as many as the extents allow with such warp tiles;
    - the shared k tile is 32 or 64 deep (or the whole extent where it is smaller).
    The tiles are read from the trace: the rule samples i and j in five levels (``blockIdx.y``,
    ``blockIdx.x``, ``threadIdx.y``, per warp, innermost; in mma atoms of 16 rows and 8 columns) and
    k in three (outer, shared, fragment; 16-deep atoms). Traces of another form are left alone."""

    def _initialize_with_tune_context(self, context) -> None:
        pass

    def apply(self, sch) -> bool:
        trace = sch.trace
        samples = tile_samples(trace)
        if samples is None:
            return True
        return tiling_allowed(*([int(v) for v in trace.decisions[inst]] for inst in samples))

    def clone(self):
        return TilingLimits()


def tile_samples(trace) -> Optional[tuple]:
    """The ``SamplePerfectTile`` instructions of the i, j and k tiles in a trace of the rule's sketch (the
    last two of five levels and the last of three), or None when the trace has no such tiles."""
    tiles = [inst for inst in trace.insts if inst.kind.name == "SamplePerfectTile"]
    spatial = [inst for inst in tiles if int(inst.attrs[0]) == 5]
    reduction = [inst for inst in tiles if int(inst.attrs[0]) == 3]
    if len(spatial) < 2 or not reduction:
        return None
    return spatial[-2], spatial[-1], reduction[-1]


def tiling_allowed(ti: list, tj: list, tk: list, atom=(16, 8, 16)) -> bool:
    """:class:`TilingLimits`' test of one tiling (five levels of i and j, three of k, in mma atoms)."""
    m, n, k = (math.prod(t) * a for t, a in zip((ti, tj, tk), atom))
    warp_m, warp_n = ti[3] * ti[4] * atom[0], tj[3] * tj[4] * atom[1]
    warps, depth = ti[2] * tj[2], tk[1] * tk[2] * atom[2]
    if warp_m * warp_n > 128 * 32 or warp_m < min(32, m) or warp_n < min(32, n):
        return False
    # where the extents hold 4 of them, warp tiles of 64x32 or more: an ldmatrix feeds 2 mma or more
    # (32x32: 6 ldmatrix for 8 mma), which is what keeps the shared-memory pipe from throttling
    smallest = 64 * 32 if m * n >= 4 * 64 * 32 else min(32, m) * min(32, n)
    if warp_m * warp_n < smallest:
        return False
    fit = max(1, m * n // smallest)  # warps of the smallest tile the extents hold
    return min(4, fit) <= warps <= 8 and min(32, k) <= depth <= 64


def fixed_schedule(context: "ms.TuneContext", i_tiles: list, j_tiles: list, k_tiles: list, *, seed: int = 1,
                   vector: Optional[int] = None, unroll: Optional[int] = None) -> Optional[tvm.IRModule]:
    """The schedule of ``context``'s sketch (a :func:`space` of a matmul) with the tiles decided, after the
    postprocessors (None when they reject it): ``i_tiles``/``j_tiles`` five levels each and ``k_tiles``
    three, in mma atoms (see :class:`TilingLimits`); ``vector``, elements a thread's copies move (4 or
    8), and ``unroll``, the unroll step, when given; the other decisions sampled with ``seed``. For
    tests and diagnostics (``scripts/diag_tune_tir.py``) that need a given point of the space."""
    (sketch,) = context.generate_design_space()
    trace = sketch.trace.simplified(remove_postproc=True)
    samples = tile_samples(trace)
    if samples is None:
        raise ValueError("fixed_schedule: the context's sketch has no i, j and k tiles of the tensor-core rule")
    decisions = {}
    for name, inst, factors in zip(("i_tiles", "j_tiles", "k_tiles"), samples, (i_tiles, j_tiles, k_tiles)):
        sampled = [int(v) for v in trace.decisions[inst]]
        factors = [int(f) for f in factors]
        if len(factors) != len(sampled) or math.prod(factors) != math.prod(sampled):
            raise ValueError(f"fixed_schedule: {name} must be {len(sampled)} factors whose product is "
                             f"{math.prod(sampled)} (the loop's extent in mma atoms), got {factors}")
        decisions[inst] = factors
    for inst in (inst for inst in trace.insts if inst.kind.name == "SampleCategorical"):
        candidates = tuple(int(c) for c in inst.attrs[0])
        chosen = vector if candidates == VECTOR_LENS else unroll if candidates == UNROLL_STEPS else None
        if chosen is not None:
            decisions[inst] = candidates.index(chosen)
    sch = tvm.s_tir.Schedule(context.mod, seed=seed)
    tvm.s_tir.Trace(trace.insts, decisions).apply_to_schedule(sch, remove_postproc=True)
    return sch.mod if all(postproc.apply(sch) for postproc in context.space_generator.postprocs) else None


def schedule_rules(in_dtypes=DTYPES, software_pipeline: bool = True) -> list:
    """MetaSchedule's CUDA rules with ``MultiLevelTilingTensorCore`` over the ``tilus`` groups first;
    ``software_pipeline``: the rule's pipeline of the k loop (made a ``cp.async`` one by
    :class:`AsyncPipeline`). Copies move 4 or 8 16-bit elements a thread (``cp.async`` of 8 or 16 bytes; its
    4-byte form, 2 elements, would quadruple the copy instructions: left out of the space). The unroll step
    is one of :data:`UNROLL_STEPS` (MetaSchedule's CUDA default offers 0 to 1024)."""
    tensor_core = ms.schedule_rule.MultiLevelTilingTensorCore(
        intrin_groups=[intrin_group(dtype) for dtype in in_dtypes],
        structure="SSSRRSRS",
        tile_binds=["blockIdx.y", "blockIdx.x", "threadIdx.y"],
        max_innermost_factor=4,
        vector_load_lens=list(VECTOR_LENS),
        reuse_read=ms.schedule_rule.ReuseType(req="must", levels=[4], scope=STAGING),
        reuse_write=ms.schedule_rule.ReuseType(req="must", levels=[2], scope=STAGING),
        use_software_pipeline=software_pipeline,
    )
    rules = []
    for rule in list(ms.schedule_rule.ScheduleRule.create("cuda"))[1:]:
        if isinstance(rule, ms.schedule_rule.ParallelizeVectorizeUnroll):
            rule = ms.schedule_rule.ParallelizeVectorizeUnroll(
                max_jobs_per_core=-1, max_vectorize_extent=-1, unroll_max_steps=list(UNROLL_STEPS), unroll_explicit=True)
        rules.append(rule)
    return [tensor_core] + rules


def postprocs(stages: int = 4) -> list:
    """MetaSchedule's CUDA tensor-core postprocessors with :class:`TilusFragments` before ``RewriteTensorize``
    and :class:`AsyncPipeline` (``stages`` buffers) before ``VerifyGPUCode``, which counts them."""
    return [
        TilingLimits(),
        ms.postproc.DisallowDynamicLoop(),
        ms.postproc.RewriteCooperativeFetch(),
        ms.postproc.RewriteUnboundBlock(),
        ms.postproc.RewriteParallelVectorizeUnroll(),
        ms.postproc.RewriteReductionBlock(),
        TilusFragments(),
        ms.postproc.RewriteTensorize(),
        AsyncPipeline(stages),
        ms.postproc.VerifyGPUCode(),
    ]


def space(in_dtypes=DTYPES, software_pipeline: bool = True, stages: int = 4):
    """The design space: post-order application of :func:`schedule_rules`, :func:`postprocs`.

    Imports ``tvm.s_tir.tensor_intrin`` first, which the ``TuneContext`` that uses the space would
    import, quickly (:mod:`tilus_tvm.tune.tensor_intrin`)."""
    from tilus_tvm.tune.tensor_intrin import import_tensor_intrin

    import_tensor_intrin()
    return ms.space_generator.PostOrderApply(sch_rules=schedule_rules(in_dtypes, software_pipeline),
                                             postprocs=postprocs(stages), mutator_probs="cuda")


def tune_tir(mod: Any, target: Any, work_dir: Optional[str] = None, max_trials_global: int = 64, *,
             num_trials_per_iter: int = 32, builder: Any = None, runner: Any = None, database: Any = None,
             cost_model: Any = "xgb", seed: Optional[int] = None, software_pipeline: bool = True, stages: int = 4,
             compile_timeout_sec: Optional[float] = 30.0, **kwargs: Any):
    """``ms.tune_tir`` on ``mod`` (an ``IRModule`` or ``PrimFunc``) for ``target`` (``"sm_90"``, a
    ``tvm.target.Target``, None: the current GPU) over :func:`space`; returns the database.

    Builder and runner default to :mod:`tilus_tvm.tune.measure`'s (``PoolBuilder`` with
    ``build_scheduled``, the ``s_tir`` pipeline, failing a candidate whose nvcc runs longer than
    ``compile_timeout_sec``, as MetaSchedule's ``LocalBuilder`` fails one after 30 s: heavily unrolled
    schedules can take minutes; ``LocalRunner``),
    the database to a ``JSONDatabase`` in ``work_dir`` (a temporary directory when None).
    ``software_pipeline``: see :func:`schedule_rules`; ``stages``: the ``cp.async`` pipeline's shared
    buffers (:class:`AsyncPipeline`). ``kwargs`` go to ``ms.tune_tir``
    (``strategy``, ``task_scheduler``, ...).
    """
    import os
    import tempfile

    target = tuning_target(target)
    if isinstance(mod, tirx.PrimFunc):
        mod = tvm.IRModule({"main": mod.with_attr("global_symbol", "main")})
    work_dir = work_dir or tempfile.mkdtemp(prefix="tilus_tune_tir_")
    os.makedirs(work_dir, exist_ok=True)
    with _meta_schedule_logging():
        if builder is None:
            builder = measure.default_builder(f_build=measure.build_scheduled, f_export=functools.partial(
                measure.export_candidate, compile_timeout_sec=compile_timeout_sec))
        return _tune(mod, target, work_dir, max_trials_global, num_trials_per_iter, builder, runner, database,
                     cost_model, seed, space(software_pipeline=software_pipeline, stages=stages), kwargs)


@contextlib.contextmanager
def _meta_schedule_logging():
    """Detach handlers MetaSchedule did not make from its logger while it tunes.

    TVM 0.27's ``create_loggers`` rebuilds its logging config from the names of the handlers on the
    ``tvm.s_tir.meta_schedule`` logger; a handler without a name (one a test harness or user added)
    makes it fail with ``'NoneType' object has no attribute 'format'``, which is what a second
    ``tune_tir`` in one process hit on the GPU host. They are put back afterwards.
    """
    logger = logging.getLogger("tvm.s_tir.meta_schedule")
    foreign = [handler for handler in logger.handlers if handler.get_name() is None]
    for handler in foreign:
        logger.removeHandler(handler)
    try:
        yield
    finally:
        for handler in foreign:
            logger.addHandler(handler)


def _tune(mod, target, work_dir, max_trials_global, num_trials_per_iter, builder, runner, database, cost_model,
          seed, design_space, kwargs):
    cores = measure.available_cores()

    return ms.tune_tir(
        mod=mod, target=target, work_dir=work_dir, max_trials_global=max_trials_global,
        num_trials_per_iter=num_trials_per_iter,
        builder=builder,
        runner=runner if runner is not None else measure.default_runner(),
        database=database if database is not None else ms.database.JSONDatabase(work_dir=work_dir),
        cost_model=cost_model if not isinstance(cost_model, str) or cost_model != "xgb" else ms.cost_model.XGBModel(
            extractor=ms.feature_extractor.PerStoreFeature(), num_tuning_cores=cores),
        space=design_space, seed=seed, num_tuning_cores=cores, **kwargs)


def compile_best(database, mod: Any, target: Any):
    """The best schedule of ``mod`` in ``database`` as a scheduled ``IRModule`` (None if none worked);
    compile it with :func:`build`."""
    target = tuning_target(target)
    if isinstance(mod, tirx.PrimFunc):
        mod = tvm.IRModule({"main": mod.with_attr("global_symbol", "main")})
    schedule = ms.tir_integration.compile_tir(database, mod, target)
    return None if schedule is None else schedule.mod
