"""Building and timing candidates with MetaSchedule's builder and runner.

A candidate is one configuration lowered to its destination-passing ``IRModule`` (the function
renamed ``main``, run-time scalars that no tensor shape gives fixed to the call's values, the
configuration's JSON in the function attribute ``tilus.config`` so a builder or runner can tell
candidates apart). MetaSchedule builds it with :func:`build_candidate` (``tvm.compile`` with the
``tirx`` pipeline; MetaSchedule's default build function would first import
``tvm.s_tir.tensor_intrin``, which takes longer than its time limit) and times it on tensors of the
call's shapes (:func:`args_info`).

The builder also compiles the candidate's CUDA code (:func:`export_candidate`: a shared library
whose CUDA module holds a fatbin or cubin for the target, as ``tilus_tvm.runtime.export`` writes
it), in its worker processes. MetaSchedule's default export would keep CUDA *source*, which the
runner -- one process, one candidate after another -- then compiles with NVRTC as it loads each one.

Defaults (docs/tuning.md has the H100 figures behind them):

- :class:`PoolBuilder`: a MetaSchedule builder on the process pool that lowered the candidates
  (:func:`tilus_tvm.tune.lowering.pool`; the ``parallel_workers`` option's workers, by default one
  per core this process may use, :func:`available_cores`: its CPU affinity and cgroup quota, not the
  host's count). MetaSchedule's ``LocalBuilder`` starts a fresh pool at every ``build`` call, whose
  workers each import torch, TVM and the package again: about 10 s of every call on the H100 host's
  16 cores. The pool needs ``cloudpickle`` and ``psutil`` (the ``tune`` extra); without them
  :class:`SerialBuilder`, the same build in this process.
- ``ms.runner.LocalRunner`` on GPU 0, its tensors allocated by :func:`reuse_arguments`: MetaSchedule's
  random fill once for all the candidates of one workload, not once per candidate (the fill runs on
  the host; with it, timing 32 ``Matmul`` candidates at 4096^3 went from 22 s to 8 s). Each candidate
  is timed from a flushed L2, as ``benchmark_func`` times kernels (:func:`flushed_run_evaluator`).

``tracker="host:port:key"`` makes an ``ms.runner.RPCRunner`` with one worker per server the tracker
has for ``key`` (with MetaSchedule's own argument allocation).
"""
from __future__ import annotations

import importlib.util
from typing import Any, Optional

import tvm
import tvm_ffi
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms

from tilus_tvm.tune.errors import TuningError
from tilus_tvm.utils.cores import available_cores  # noqa: F401 - re-exported (tune_tir's search threads)

CONFIG_ATTR = "tilus.config"
ENTRY = "main"
# Each configuration: 1 warm-up, then 3 repeats of at least 40 ms each (enough for a stable
# median of kernels that run for tens of microseconds to milliseconds). A repeat starts at one run
# and TVM's time_evaluator raises the count until it lasts 40 ms, so a slow candidate (tune_tir's
# random schedules take up to tens of ms) costs 3 runs, not 3 x 5.
EVALUATOR = dict(number=1, repeat=3, min_repeat_ms=40, enable_cpu_cache_flush=False)
# On a CUDA device (the local runner): single calls, each after an L2 flush (flushed_run_evaluator)
COLD_RUNS = 20
FLUSH_L2 = "tilus.tune.flush_l2"  # time_evaluator's f_preproc there


def _built_for(runtime_module, target: tvm.target.Target):
    """``runtime_module``, marked with the architecture it was built for (what :func:`export_candidate`
    compiles for; ``export_library`` reads the same attribute)."""
    from tilus_tvm.target import resolve_arch

    runtime_module.tilus_archs = [resolve_arch(target)]
    return runtime_module


def build_candidate(mod: tvm.IRModule, target: tvm.target.Target, _params: Optional[dict] = None):
    """MetaSchedule build function: the runtime module of a candidate (TVM's ``tirx`` pipeline)."""
    return _built_for(tvm.compile(mod, target=target, tir_pipeline="tirx").mod, target)


def build_scheduled(mod: tvm.IRModule, target: tvm.target.Target, _params: Optional[dict] = None):
    """MetaSchedule build function for schedules of TIR workloads (``tune_tir``): ``tune.tir.build``, the
    ``s_tir`` pipeline (which lowers the scheduled blocks and the tensorized intrinsics) with
    ``cp.async`` for the pipeline's asynchronous copies."""
    from tilus_tvm.tune import tir

    return _built_for(tir.build(mod, target).mod, target)


def has_device_compiler() -> bool:
    """Whether CUDA code can be compiled here: nvcc, or NVRTC through ``cuda.bindings``."""
    from tilus_tvm.runtime import export

    return export.nvcc_path() is not None or importlib.util.find_spec("cuda.bindings") is not None


ARTIFACT_PREFIX = "tilus_candidate_"  # the temporary directory of each artifact export_candidate writes


def export_candidate(runtime_module, compile_timeout_sec: Optional[float] = None) -> str:
    """MetaSchedule export function: the path of ``runtime_module`` written as a shared library holding
    compiled GPU code for the architecture :func:`build_candidate` marked (so loading it in the
    runner compiles nothing). Where neither nvcc nor NVRTC is available, a tar of CUDA source, as
    MetaSchedule's default export writes it (the runner compiles it as it loads it). Each artifact
    has a directory of its own (:func:`remove_artifact`). A compiler error, or nvcc running longer
    than ``compile_timeout_sec``, is the candidate's build error."""
    import os
    import tempfile

    from tvm.support.tar import tar

    from tilus_tvm.runtime import export

    directory = tempfile.mkdtemp(prefix=ARTIFACT_PREFIX)
    archs = getattr(runtime_module, "tilus_archs", None)
    if not archs or not has_device_compiler():
        path = os.path.join(directory, "candidate." + tar.output_format)
        runtime_module.export_library(path, fcompile=tar)
        return path
    return export.export_library(runtime_module, os.path.join(directory, "candidate.so"), archs=archs,
                                 compile_timeout_sec=compile_timeout_sec)


def remove_artifact(path) -> None:
    """Delete an artifact :func:`export_candidate` wrote, with its directory, once it has been timed
    (MetaSchedule's own task scheduler does the same for its builds); anything else is left alone."""
    import os
    import shutil

    directory = os.path.dirname(str(path or ""))
    if os.path.basename(directory).startswith(ARTIFACT_PREFIX):
        shutil.rmtree(directory, ignore_errors=True)


def is_scalar_param(param) -> bool:
    """Whether a PrimFunc parameter is a scalar. In TVM 0.27 a buffer parameter is a ``Var`` of
    ``BufferType``, and ``isinstance(v, tvm.tirx.Buffer)`` holds for *every* ``Var``, so the type is
    what tells them apart."""
    return isinstance(param.ty, tvm.ir.PrimType)


def candidate_module(prim_func, scalar_values: dict[str, Any], config_json: str) -> tvm.IRModule:
    """The module MetaSchedule builds for one configuration (see the module docstring)."""
    fixed = {}
    for param in prim_func.params:
        if is_scalar_param(param) and param.name in scalar_values:
            fixed[param] = tvm.tirx.const(scalar_values[param.name], str(param.ty))
    func = prim_func.specialize(fixed) if fixed else prim_func
    func = func.with_attr("global_symbol", ENTRY).with_attr(CONFIG_ATTR, config_json)
    return tvm.IRModule({ENTRY: func})


def args_info(prim_func, scalar_values: dict[str, Any], tensor_bytes: Optional[dict[str, int]] = None) -> list:
    """``ms.arg_info.TensorInfo`` of each tensor parameter, its shape evaluated at the call's scalars.

    A parameter the kernel reads as a flat buffer of any length (a ``~void`` or ``~T`` pointer it
    never gives a shape) takes the size of the call's tensor: ``tensor_bytes`` (by parameter name,
    :func:`call_tensor_bytes`) in the buffer's elements."""
    import tvm.sym

    infos = []
    for param in prim_func.params:
        if is_scalar_param(param):
            continue
        shape = []
        for dim in param.shape:
            analyzer = tvm.sym.Analyzer()
            for var in tvm.tirx.analysis.undefined_vars(dim):
                if var.name in scalar_values:
                    analyzer.bind(var, tvm.tirx.const(scalar_values[var.name], str(var.ty)))
            value = analyzer.simplify(dim)
            if isinstance(value, tvm.tirx.IntImm):
                shape.append(int(value))
            elif len(param.shape) == 1 and tensor_bytes and param.name in tensor_bytes:
                element_bytes = max(1, tvm.DataType(str(param.dtype)).bits // 8)
                shape.append(max(1, -(-tensor_bytes[param.name] // element_bytes)))
            else:
                raise TuningError(f"args_info: dimension {dim} of {param.name} does not follow from the "
                                  f"call's scalars {scalar_values}")
        infos.append(ms.arg_info.TensorInfo(str(param.dtype), shape))
    return infos


def call_tensor_bytes(cls: type, args: tuple) -> dict[str, int]:
    """Bytes from the first element to the last of each tensor the call passes to ``cls``, by the
    kernel parameter's name (what :func:`args_info` sizes flat buffers with)."""
    import torch

    from tilus_tvm.lang.arguments import _span
    from tilus_tvm.lowp import PackedTensor
    from tilus_tvm.pipeline import signature
    from tilus_tvm.ir.scalar import c_identifier

    sizes = {}
    for spec, value in zip(signature(cls), args):
        tensor = value.storage if isinstance(value, PackedTensor) else value
        if spec.kind == "pointer" and isinstance(tensor, torch.Tensor):
            sizes[c_identifier(spec.name)] = _span(tensor) * tensor.element_size()
    return sizes


def _build_and_export(f_build, f_export, mod, target) -> tuple[Optional[str], Optional[str]]:
    """In a worker: ``(artifact path, None)`` or ``(None, error)``."""
    try:
        return f_export(f_build(mod, target)), None
    except Exception as exc:  # noqa: BLE001 - MetaSchedule reports the failure, the candidate is skipped
        return None, f"{type(exc).__name__}: {exc}"


@derived_object
class SerialBuilder(ms.builder.PyBuilder):
    """A MetaSchedule builder that builds in this process, one candidate after another (for machines
    without ``cloudpickle``/``psutil``, which the worker pools need)."""

    def __init__(self, f_build=build_candidate, f_export=export_candidate):
        super().__init__()
        self.f_build, self.f_export = f_build, f_export

    def build(self, build_inputs):
        return [ms.builder.BuilderResult(*_build_and_export(self.f_build, self.f_export, b.mod, b.target))
                for b in build_inputs]


@derived_object
class PoolBuilder(ms.builder.PyBuilder):
    """A MetaSchedule builder on a process pool that outlives its ``build`` calls: the tuning's lowering
    pool (:func:`tilus_tvm.tune.lowering.pool`), whose workers have TVM, torch and the package
    imported already and are recycled after ``lowering.MAX_USES`` jobs (the leak that makes
    ``LocalBuilder`` restart its pool every call). ``max_workers`` builds at once, each within the
    pool's time limit (``lowering.TIMEOUT_SEC``); where the pool cannot start, this process builds."""

    def __init__(self, max_workers: int, f_build=build_candidate, f_export=export_candidate):
        super().__init__()
        self.max_workers, self.f_build, self.f_export = max_workers, f_build, f_export

    def build(self, build_inputs):
        from tilus_tvm.tune import lowering

        try:
            executor = lowering.pool(self.max_workers)
            futures = [executor.submit(_build_and_export, self.f_build, self.f_export, b.mod, b.target)
                       for b in build_inputs]
        except Exception:  # noqa: BLE001 - no pool: build here
            return SerialBuilder(self.f_build, self.f_export).build(build_inputs)
        results = []
        for future in futures:
            try:
                results.append(ms.builder.BuilderResult(*future.result()))
            except TimeoutError:
                results.append(ms.builder.BuilderResult(
                    None, f"PoolBuilder: timeout, killed after {lowering.TIMEOUT_SEC} seconds"))
            except Exception as exc:  # noqa: BLE001 - a worker that died
                results.append(ms.builder.BuilderResult(None, f"PoolBuilder: {type(exc).__name__}: {exc}"))
        return results


def has_worker_pool() -> bool:
    """Whether the process pools (TVM's ``PopenPoolExecutor``) can run here: ``cloudpickle`` and
    ``psutil`` are installed."""
    return all(importlib.util.find_spec(name) is not None for name in ("cloudpickle", "psutil"))


def default_builder(max_workers: Optional[int] = None, f_build=build_candidate, f_export=export_candidate):
    """:class:`PoolBuilder` with ``f_build`` and ``f_export`` on ``max_workers`` processes (default: the
    ``parallel_workers`` option, which defaults to :func:`~tilus_tvm.utils.cores.available_cores`)
    -- :class:`SerialBuilder` without the worker pool's packages."""
    from tilus_tvm import option

    if not has_worker_pool():
        return SerialBuilder(f_build, f_export)
    return PoolBuilder(max_workers or option.get_option("parallel_workers"), f_build, f_export)


# In the runner's worker process: (the workload's argument description, its tensors)
_ARGUMENTS: list = []


def reuse_arguments(device, args_info, alloc_repeat: int):
    """``LocalRunner``'s ``f_alloc_argument``: MetaSchedule's own allocation (random-filled tensors),
    made once and handed to every later candidate with the same ``args_info`` on the same device.
    Candidates of one workload share their shapes; a kernel writes only its outputs, so the inputs
    stay as filled. Only the last workload's tensors are kept."""
    from tvm.s_tir.meta_schedule.runner.local_runner import default_alloc_argument

    key = (str(device), repr(args_info), alloc_repeat)
    if not _ARGUMENTS or _ARGUMENTS[0][0] != key:
        _ARGUMENTS.clear()  # free the last workload's tensors before allocating this one's
        _ARGUMENTS.append((key, default_alloc_argument(device, args_info, alloc_repeat)))
    return _ARGUMENTS[0][1]


_FLUSH: list = []  # in the runner's worker process: benchmark_func's L2 flush, made at its first use


def _flush_l2(*_args) -> None:
    """``time_evaluator``'s ``f_preproc`` (called before each timed call, with the call's arguments): the L2
    flush, queued on torch's current stream -- the legacy default stream, which TVM's launches and timing
    events use too -- so that the GPU is still flushing when the timed call's events and launch are queued
    behind it: the host's launch time is not counted (a synchronisation here would count it)."""
    import torch

    from tilus_tvm.utils.benchmark import l2_flush

    if not _FLUSH:
        _FLUSH.append(l2_flush(torch))
    _FLUSH[0]()


tvm_ffi.register_global_func(FLUSH_L2, _flush_l2, override=True)


def flushed_run_evaluator(rt_mod, device, evaluator_config, repeated_args) -> list[float]:
    """``LocalRunner``'s ``f_run_evaluator``: on a CUDA device, ``COLD_RUNS`` single calls of the candidate,
    each after benchmark_func's L2 flush (``_flush_l2``), and of their times the middle half (a single call
    now and then takes a launch hiccup). MetaSchedule's own evaluation -- repeats of at least 40 ms of calls
    back to back -- times every call after the first with the L2 holding what the call before left there: the
    whole weight of a decode matmul (23 MB at 1x4096x11008 u4 in the H100's 50 MB), so tuning ranked
    configurations by how they run from a warm L2, where the package's benchmarks and a model's layers run them
    from a cold one. Where torch sees no CUDA device, MetaSchedule's evaluation as configured."""
    from tvm.s_tir.meta_schedule.runner.utils import run_evaluator_common

    from tilus_tvm.lang import arguments

    if device.dlpack_device_type() != tvm.cuda(0).dlpack_device_type() or not arguments.cuda_available():
        return run_evaluator_common(rt_mod, device, evaluator_config, repeated_args)
    evaluator = rt_mod.time_evaluator(rt_mod.entry_name, device, number=1, repeat=COLD_RUNS, min_repeat_ms=0,
                                      f_preproc=FLUSH_L2)
    costs = []
    for args in repeated_args:
        device.sync()
        costs.extend(float(cost) for cost in evaluator(*args).results)
    costs.sort()
    quarter = len(costs) // 4
    return costs[quarter:len(costs) - quarter]


def evaluator_config():
    return ms.runner.EvaluatorConfig(**EVALUATOR)


def default_runner():
    return ms.runner.LocalRunner(timeout_sec=60, evaluator_config=evaluator_config(), f_alloc_argument=reuse_arguments,
                                 f_run_evaluator=flushed_run_evaluator)


def parse_tracker(tracker: str) -> tuple[str, int, str]:
    """``"host:port:key"`` -> ``(host, port, key)``."""
    parts = tracker.rsplit(":", 2) if isinstance(tracker, str) else []
    if len(parts) != 3 or not parts[1].isdigit() or not parts[0] or not parts[2]:
        raise TuningError(f"tracker must be 'host:port:key' (e.g. '127.0.0.1:9190:h100'), got {tracker!r}")
    return parts[0], int(parts[1]), parts[2]


def tracker_runner(tracker: str, session_timeout_sec: int = 60):
    """An ``RPCRunner`` timing candidates on every server registered with the tracker under the key."""
    host, port, key = parse_tracker(tracker)
    config = ms.runner.RPCConfig(tracker_host=host, tracker_port=port, tracker_key=key,
                                 session_timeout_sec=session_timeout_sec)
    servers = config.count_num_servers(allow_missing=False)
    return ms.runner.RPCRunner(rpc_config=config, evaluator_config=evaluator_config(), max_workers=servers)


def runner_for(runner: Any = None, tracker: Optional[str] = None):
    if runner is not None and tracker is not None:
        raise TuningError("give a runner or a tracker, not both")
    if runner is not None:
        return runner
    if tracker is not None:
        return tracker_runner(tracker)
    return default_runner()


def first_line(text: Any, limit: int = 300) -> str:
    """The most telling line of an error message, shortened: TVM's and nvcc's messages end with the
    reason, after a traceback."""
    lines = [line.strip() for line in str(text).strip().splitlines() if line.strip()]
    if not lines:
        return "unknown error"
    reason = next((line for line in reversed(lines) if "Error" in line or "error" in line), lines[-1])
    return reason if len(reason) <= limit else reason[:limit - 3] + "..."
