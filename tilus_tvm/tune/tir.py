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
"""
from __future__ import annotations

import contextlib
import logging

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
from tilus_tvm.target import resolve_arch

SHAPE_PREFIX = "tilus.ms."
AUTO_TENSORIZE = "meta_schedule.auto_tensorize"
FRAGMENT_SCOPES = {"wmma.matrix_a": "a", "wmma.matrix_b": "b", "wmma.accumulator": "c"}
STAGING = "shared"
DTYPES = ("float16", "bfloat16")


def _shape_intrinsics(in_dtype: str) -> dict[str, tuple[str, str]]:
    """``{role: (shape intrinsic, tilus intrinsic)}`` for one input dtype, registering the shapes."""
    atom = get_mma_atom(in_dtype, in_dtype, "float32", k=16)
    m, n, k = atom.m, atom.n, atom.k
    real = {"init": intrin.mma_fill_name(atom), "load_a": intrin.ldmatrix_name(4, False, in_dtype),
            "load_b": intrin.ldmatrix_name(2, True, in_dtype), "compute": intrin.mma_name(atom),
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
    """The CUDA target with the limits MetaSchedule's rules and ``VerifyGPUCode`` read (static shared
    memory: the schedules stage through ``"shared"``, at most 48 KB a block)."""
    if isinstance(target, tvm.target.Target):
        return target
    arch = resolve_arch(target)
    return tvm.target.Target({"kind": "cuda", "arch": arch, "max_threads_per_block": 1024, "thread_warp_size": 32,
                              "max_shared_memory_per_block": 49152, "registers_per_block": 65536,
                              "max_num_threads": 1024}, host="llvm")


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


def schedule_rules(in_dtypes=DTYPES, software_pipeline: bool = True) -> list:
    """MetaSchedule's CUDA rules with ``MultiLevelTilingTensorCore`` over the ``tilus`` groups first;
    ``software_pipeline``: the rule's pipeline of the k loop (shared-memory copies one step ahead of
    the fragment loads and mma, double-buffered by TVM's ``InjectSoftwarePipeline``)."""
    tensor_core = ms.schedule_rule.MultiLevelTilingTensorCore(
        intrin_groups=[intrin_group(dtype) for dtype in in_dtypes],
        structure="SSSRRSRS",
        tile_binds=["blockIdx.y", "blockIdx.x", "threadIdx.y"],
        max_innermost_factor=4,
        vector_load_lens=[1, 2, 4, 8],
        reuse_read=ms.schedule_rule.ReuseType(req="must", levels=[4], scope=STAGING),
        reuse_write=ms.schedule_rule.ReuseType(req="must", levels=[2], scope=STAGING),
        use_software_pipeline=software_pipeline,
    )
    return [tensor_core] + list(ms.schedule_rule.ScheduleRule.create("cuda"))[1:]


def postprocs() -> list:
    """MetaSchedule's CUDA tensor-core postprocessors with :class:`TilusFragments` before ``RewriteTensorize``."""
    return [
        ms.postproc.DisallowDynamicLoop(),
        ms.postproc.RewriteCooperativeFetch(),
        ms.postproc.RewriteUnboundBlock(),
        ms.postproc.RewriteParallelVectorizeUnroll(),
        ms.postproc.RewriteReductionBlock(),
        TilusFragments(),
        ms.postproc.RewriteTensorize(),
        ms.postproc.VerifyGPUCode(),
    ]


def space(in_dtypes=DTYPES, software_pipeline: bool = True):
    """The design space: post-order application of :func:`schedule_rules`, :func:`postprocs`.

    Imports ``tvm.s_tir.tensor_intrin`` first, which the ``TuneContext`` that uses the space would
    import, quickly (:mod:`tilus_tvm.tune.tensor_intrin`)."""
    from tilus_tvm.tune.tensor_intrin import import_tensor_intrin

    import_tensor_intrin()
    return ms.space_generator.PostOrderApply(sch_rules=schedule_rules(in_dtypes, software_pipeline),
                                             postprocs=postprocs(), mutator_probs="cuda")


def tune_tir(mod: Any, target: Any, work_dir: Optional[str] = None, max_trials_global: int = 64, *,
             num_trials_per_iter: int = 32, builder: Any = None, runner: Any = None, database: Any = None,
             cost_model: Any = "xgb", seed: Optional[int] = None, software_pipeline: bool = True, **kwargs: Any):
    """``ms.tune_tir`` on ``mod`` (an ``IRModule`` or ``PrimFunc``) for ``target`` (``"sm_90"``, a
    ``tvm.target.Target``, None: the current GPU) over :func:`space`; returns the database.

    Builder and runner default to :mod:`tilus_tvm.tune.measure`'s (``PoolBuilder`` with
    ``build_scheduled``, the ``s_tir`` pipeline; ``LocalRunner``),
    the database to a ``JSONDatabase`` in ``work_dir`` (a temporary directory when None).
    ``software_pipeline``: see :func:`schedule_rules`. ``kwargs`` go to ``ms.tune_tir``
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
        return _tune(mod, target, work_dir, max_trials_global, num_trials_per_iter, builder, runner, database,
                     cost_model, seed, space(software_pipeline=software_pipeline), kwargs)


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
    from tilus_tvm.tune import measure

    cores = measure.available_cores()

    return ms.tune_tir(
        mod=mod, target=target, work_dir=work_dir, max_trials_global=max_trials_global,
        num_trials_per_iter=num_trials_per_iter,
        builder=builder if builder is not None else measure.default_builder(f_build=measure.build_scheduled),
        runner=runner if runner is not None else measure.default_runner(),
        database=database if database is not None else ms.database.JSONDatabase(work_dir=work_dir),
        cost_model=cost_model if not isinstance(cost_model, str) or cost_model != "xgb" else ms.cost_model.XGBModel(
            extractor=ms.feature_extractor.PerStoreFeature(), num_tuning_cores=cores),
        space=design_space, seed=seed, num_tuning_cores=cores, **kwargs)


def compile_best(database, mod: Any, target: Any):
    """The best schedule of ``mod`` in ``database`` as a scheduled ``IRModule`` (None if none worked)."""
    target = tuning_target(target)
    if isinstance(mod, tirx.PrimFunc):
        mod = tvm.IRModule({"main": mod.with_attr("global_symbol", "main")})
    schedule = ms.tir_integration.compile_tir(database, mod, target)
    return None if schedule is None else schedule.mod
