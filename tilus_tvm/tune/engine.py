"""The tuner: choose the configuration of an ``@autotune`` kernel for one key, by database or measurement.

For a tunable kernel and its call's arguments:

1. **Key.** The kernel (``module:Class``), its untuned ``__init__`` arguments (defaults included),
   the compile-time arguments, the tensors' dtypes, the target arch and the run-time integer
   scalars, bucketed (:func:`tuning_key`). The key names a MetaSchedule workload (:mod:`tilus_tvm.tune.records`).
2. **Database.** Every configuration of the space measured before for the workload is read from
   the database (a ``JSONDatabase`` in ``<cache_dir>/tuning`` unless given). When as many were
   measured as the budget allows and one of them worked, the fastest is the choice: nothing is
   lowered, built or timed.
3. **Search.** Otherwise the configurations not measured yet are lowered to their destination-passing
   ``IRModule`` (a ``ScriptError`` or a shared-memory plan that does not fit skips one, with its
   reason logged), built by MetaSchedule's builder in parallel and timed by its runner on tensors
   of the call's shapes, in batches, under a progress bar. When more configurations are left than
   the budget (``max_trials``), MetaSchedule's cost model (``XGBModel`` over ``PerStoreFeature``
   features of the lowered kernels) ranks the ones not tried; each batch's times train it for the next.
   The first batch is a random sample. Every measurement, and every failure with its reason, is a
   tuning record.
4. **Choice.** The fastest configuration that worked; when none did, :class:`TuningError` lists
   every configuration and why it failed.
"""
from __future__ import annotations

import json
import logging
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Optional

from tilus_tvm.errors import ScriptError
from tilus_tvm.tune.errors import TuningError
from tilus_tvm.tune.options import TuneOptions, defaults
from tilus_tvm.tune.space import bucket_value, describe_config, encode_config, encode_value

logger = logging.getLogger("tilus_tvm.tune")

MIN_BATCH = 8
LOWERING = "lowering"  # the stage named in the reason of a configuration that failed to lower
EXPLORE_FRACTION = 0.1  # of each cost-model batch, chosen at random rather than by the model
PHASES = ("lowering", "building", "timing", "cost model")


@dataclass(frozen=True)
class TuningKey:
    """What one choice of configuration is for (see the module docstring); ``json`` is canonical."""

    fields: dict
    json: str
    arch: str
    scalars: dict  # run-time scalar values of this call (not bucketed): what the runner times with


@dataclass
class Trial:
    """One configuration: its mean time in seconds, or why it has none."""

    config: dict
    seconds: Optional[float] = None
    error: Optional[str] = None
    measured_now: bool = True  # False: read from the database
    batch: Optional[int] = None  # which batch of this search measured it (0: the first); None: not measured now

    @property
    def ok(self) -> bool:
        return self.seconds is not None


@dataclass
class TuneResult:
    """The outcome of tuning one key: every trial, the best one, and whether anything was measured now."""

    kernel: str  # module:Class
    key: TuningKey
    trials: list[Trial]
    best: Trial
    tuned: bool
    elapsed: float
    _tunable: Any = field(default=None, repr=False)
    # wall seconds of the search's phases (lowering, building, timing, cost model); empty when
    # nothing was measured now
    phases: dict = field(default_factory=dict)

    @property
    def config(self) -> dict:
        return self.best.config

    def instantiate(self):
        """The kernel of the best configuration."""
        return self._tunable.instantiate(self.config)

    def table(self) -> str:
        """The trials as a text table, fastest first, failures last with their reasons."""
        names = list(self.best.config)
        rows = sorted(self.trials, key=lambda t: (t.seconds is None, t.seconds or 0.0))
        header = names + ["time (ms)", "vs best", "note"]
        body = []
        for trial in rows:
            cells = [str(encode_value(trial.config.get(name))) for name in names]
            if trial.ok:
                cells += [f"{trial.seconds * 1e3:.4f}", f"{trial.seconds / self.best.seconds:.2f}x",
                          "best" if trial is self.best else ("" if trial.measured_now else "database")]
            else:
                cells += ["-", "-", f"skipped: {trial.error}"]
            body.append(cells)
        widths = [max(len(row[i]) for row in [header] + body) for i in range(len(header) - 1)]
        lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[-1]
                 for row in [header] + body]
        return "\n".join(line.rstrip() for line in lines)


def tuning_key(tunable, args: tuple, target: Any) -> TuningKey:
    """The key of ``args`` on ``target`` for ``tunable`` (checks the arguments as a launch would)."""
    from tilus_tvm.lang.arguments import bind
    from tilus_tvm.pipeline import signature
    from tilus_tvm.target import resolve_arch

    cls = tunable.cls
    specs = signature(cls)
    bound = bind(specs, args, cls.__name__, require_cuda=False)
    scalar_specs = [s for s in specs if s.kind == "scalar"]
    scalars = {s.name: v for s, v in zip(scalar_specs, bound.scalars)}
    unknown = sorted(set(tunable.space.buckets) - set(scalars))
    if unknown:
        raise ScriptError(f"autotune: {cls.__name__} buckets {', '.join(unknown)}, which are not run-time scalar "
                          f"parameters of its __call__ ({', '.join(scalars) or 'it has none'})")
    bucketed = {}
    for name, value in scalars.items():
        if isinstance(value, int) and not isinstance(value, bool):
            stand_in = bucket_value(tunable.space.buckets.get(name, "exact"), value)
            if stand_in is not None:
                bucketed[name] = stand_in
    arch = resolve_arch(target)
    fields = {
        "kernel": tunable.kernel_path,
        "init": {name: encode_value(value) for name, value in sorted(tunable.key_arguments.items())},
        "const": {name: encode_value(value) for name, value in bound.const_values.items()},
        "dtypes": {name: dtype.name for name, dtype in sorted(bound.pointer_dtypes.items())},
        "arch": arch,
        "scalars": bucketed,
    }
    return TuningKey(fields, json.dumps(fields, sort_keys=True), arch, scalars)


def choose(tunable, args: tuple, target: Any = None, *, key: Optional[TuningKey] = None, **overrides: Any) -> TuneResult:
    """The configuration for ``args``: from the database, else by measuring (see the module docstring).

    ``overrides`` are :class:`~tilus_tvm.tune.options.TuneOptions` fields for this call.
    """
    from tilus_tvm.tune import records

    started = time.perf_counter()
    options = defaults().merged(**overrides)
    key = key or tuning_key(tunable, args, target)
    name = tunable.cls.__name__
    marker = records.marker_module(tunable.cls.kernel_name(), tunable.kernel_path, key.json)
    database = records.open_database(options.database)
    configs = tunable.configs()
    by_json = {encode_config(config): config for config in configs}
    stored = [t for t in records.workload_trials(database, marker) if t.config_json in by_json]
    budget = _budget(options.max_trials if options.max_trials is not None else tunable.space.max_trials, len(configs))
    seen = {t.config_json for t in stored}
    # configurations that did not even lower were never built: they do not use up the budget
    measured = {t.config_json for t in stored if not (t.error or "").startswith(LOWERING + ":")}
    trials = {t.config_json: Trial(by_json[t.config_json], t.seconds, t.error, measured_now=False) for t in stored}
    worked = any(t.ok for t in trials.values())
    phases = {}
    if not (worked and len(measured) >= budget):
        untried = [c for j, c in by_json.items() if j not in seen] if worked else configs
        search = _Search(tunable, args, key, marker, database, options, name)
        for trial in search.run(untried, budget - len(measured) if worked else budget):
            trials[encode_config(trial.config)] = trial
        phases = search.phases
    ordered = [trials[j] for j in by_json if j in trials]
    best = min((t for t in ordered if t.ok), key=lambda t: t.seconds, default=None)
    if best is None:
        reasons = "\n".join(f"  {describe_config(t.config)}: {t.error}" for t in ordered)
        raise TuningError(f"{name}: no configuration could be built and timed for {key.json}:\n{reasons}")
    tuned = any(t.measured_now for t in ordered)
    result = TuneResult(tunable.kernel_path, key, ordered, best, tuned, time.perf_counter() - started, tunable,
                        phases=dict(phases) if tuned else {})
    if tuned:
        logger.info("%s: chose %s (%.4f ms) among %d configurations in %.1f s (%s)", name,
                    describe_config(best.config), best.seconds * 1e3, len(ordered), result.elapsed,
                    describe_phases(phases))
    tunable.remember(key.json, best.config)
    return result


def describe_phases(phases: dict) -> str:
    """``"lowering 3.1 s, building 20.4 s, timing 12.0 s"`` (phases that did not run left out)."""
    return ", ".join(f"{name} {seconds:.1f} s" for name, seconds in phases.items() if seconds > 0) or "nothing measured"


def _budget(max_trials: Optional[int], space_size: int) -> int:
    if max_trials is None:
        return space_size
    if not isinstance(max_trials, int) or isinstance(max_trials, bool) or max_trials < 1:
        raise TuningError(f"max_trials must be a positive int, got {max_trials!r}")
    return min(max_trials, space_size)


@dataclass
class _Candidate:
    config: dict
    config_json: str
    mod: Any = None  # the IRModule MetaSchedule builds
    _schedule: Any = None

    @property
    def schedule(self):
        """A Schedule of ``mod``: what the cost model's feature extractor reads."""
        if self._schedule is None:
            import tvm

            self._schedule = tvm.s_tir.Schedule(self.mod)
        return self._schedule


class _Search:
    """Measure up to ``budget`` of the given configurations (see the module docstring, step 3)."""

    def __init__(self, tunable, args: tuple, key: TuningKey, marker, database, options: TuneOptions, name: str):
        from tilus_tvm import option
        from tilus_tvm.target import tvm_target
        from tilus_tvm.tune import measure

        self.tunable, self.args, self.key, self.marker, self.database, self.name = (tunable, args, key, marker,
                                                                                    database, name)
        self.options = options
        self.target = tvm_target(key.arch)
        self.workers = options.workers or option.get_option("parallel_workers")  # default: the cores we may use
        self.builder = options.builder if options.builder is not None else _default_builder(self.workers)
        self._runner, self._runner_future = None, None
        if options.runner is not None or options.tracker is not None:
            self._runner = measure.runner_for(options.runner, options.tracker)
        else:  # made in a thread: its worker process imports TVM while the candidates lower
            self._runner_future = _default_runner_soon()
        self.workload = database.commit_workload(marker)
        self.args_info = None  # from the first configuration that lowers
        self.rng = random.Random(options.seed)
        self.cost_model = None
        self.context = None
        # wall seconds of each phase of the search
        self.phases = dict.fromkeys(PHASES, 0.0)

    @property
    def runner(self):
        if self._runner_future is not None:
            self._runner, self._runner_future = self._runner_future.result(), None
        return self._runner

    # -- one configuration ----------------------------------------------------------------------
    def lower(self, config: dict):
        """The destination-passing module of ``config`` lowered in this process; raises what lowering raised."""
        kernel = self.tunable.instantiate(config)
        return kernel.lower(*self.args, target=self.key.arch, dps=True)

    def candidate(self, config: dict, mod) -> _Candidate:
        """The candidate MetaSchedule builds for ``config``, from its lowered module."""
        from tilus_tvm.tune import measure

        config_json = encode_config(config)
        prim_func = next(iter(mod.functions.values()))
        if self.args_info is None:
            self.args_info = measure.args_info(prim_func, self.key.scalars,
                                               measure.call_tensor_bytes(self.tunable.cls, self.args))
        return _Candidate(config, config_json, measure.candidate_module(prim_func, self.key.scalars, config_json))

    def fail(self, config: dict, stage: str, error: Any) -> Trial:
        from tilus_tvm.tune import measure, records

        reason = f"{stage}: {measure.first_line(error)}"
        logger.info("%s: skipped %s -- %s", self.name, describe_config(config), reason)
        records.commit_trial(self.database, self.workload, self.marker, encode_config(config), None, reason,
                             self.target, self.args_info)
        return Trial(dict(config), None, reason)

    # -- the loop ---------------------------------------------------------------------------------
    def run(self, configs: list[dict], budget: int) -> list[Trial]:
        from tqdm import tqdm

        from tilus_tvm.tune import measure

        started = time.perf_counter()
        lowered, trials = self._lower_all(configs)
        self.phases["lowering"] += time.perf_counter() - started
        ranked = len(lowered) > budget
        if ranked:
            self._start_cost_model()
        batch_size = max(MIN_BATCH, 2 * _parallelism(self.builder))
        if ranked:  # several batches, so the cost model trained on the first ones chooses the later ones
            batch_size = max(MIN_BATCH, min(batch_size, budget // 5))
        measured = batches = 0
        with tqdm(total=min(budget, len(lowered)), desc=f"[Tuning] {self.name}", disable=not self.options.progress,
                  leave=False) as progress:
            while measured < budget and lowered:
                size = min(batch_size, budget - measured)
                if ranked:
                    batch = self._pick(lowered, size)
                else:
                    batch, lowered = lowered[:size], lowered[size:]
                built = self._build(batch)
                results = self._record(batch, built, self._time(batch, built))
                for build in built:  # timed: the artifacts are no longer needed
                    measure.remove_artifact(build.artifact_path)
                for trial in results:
                    trial.batch = batches
                batches += 1
                trials += results
                measured += len(batch)
                progress.update(len(batch))
                times = [t.seconds for t in trials if t.ok]
                if times:
                    progress.set_postfix_str(f"best {min(times) * 1e3:.4f} ms")
        return trials

    def _lower_all(self, configs: list[dict]) -> tuple[list[_Candidate], list[Trial]]:
        """Every configuration lowered (in parallel where it can be, :mod:`tilus_tvm.tune.lowering`):
        the candidates, and a trial for each that failed."""
        from tqdm import tqdm

        from tilus_tvm.tune import lowering

        lowered, failed = [], []
        with tqdm(total=len(configs), desc=f"[Lowering] {self.name}", disable=not self.options.progress,
                  leave=False) as progress:
            results = lowering.lower_configs(self.tunable, configs, self.args, self.key.arch, self.workers,
                                             self.lower, progress=lambda: progress.update(1))
        for config, (status, value) in zip(configs, results):
            if status == lowering.OK:
                try:
                    lowered.append(self.candidate(config, value))
                    continue
                except Exception as exc:  # noqa: BLE001 - e.g. shapes that do not follow from the scalars
                    value = _message(exc)
            failed.append(self.fail(config, LOWERING, value))
        return lowered, failed

    def _start_cost_model(self) -> None:
        from tvm.s_tir import meta_schedule as ms

        from tilus_tvm.tune.tensor_intrin import import_tensor_intrin

        import_tensor_intrin()  # what TuneContext imports first, fast (see tilus_tvm.tune.tensor_intrin)
        model = self.options.cost_model
        if isinstance(model, str):
            if model == "xgb":
                model = ms.cost_model.XGBModel(extractor=ms.feature_extractor.PerStoreFeature(), num_warmup_samples=0,
                                               num_tuning_cores=self.workers, adaptive_training=False)
            elif model == "random":
                model = ms.cost_model.RandomModel(seed=self.options.seed)
            else:
                raise TuningError(f"cost_model must be 'xgb', 'random' or a MetaSchedule CostModel, got {model!r}")
        self.cost_model = model
        self.context = ms.TuneContext(mod=self.marker, target=self.target, task_name=self.name, num_threads=1)
        self.trained = False

    def _pick(self, lowered: list[_Candidate], size: int) -> list[_Candidate]:
        """Take ``size`` candidates out of ``lowered``: the cost model's best (and a few at random), or
        a random sample before any measurement trained it."""
        from tvm.s_tir import meta_schedule as ms

        if not self.trained:
            chosen = self.rng.sample(range(len(lowered)), min(size, len(lowered)))
        else:
            started = time.perf_counter()
            scores = self.cost_model.predict(self.context, [ms.MeasureCandidate(c.schedule, self.args_info)
                                                            for c in lowered])
            self.phases["cost model"] += time.perf_counter() - started
            order = sorted(range(len(lowered)), key=lambda i: -float(scores[i]))
            explore = int(size * EXPLORE_FRACTION)
            chosen = order[:size - explore]
            rest = order[size - explore:]
            chosen += self.rng.sample(rest, min(explore, len(rest)))
        picked = [lowered[i] for i in chosen]
        for i in sorted(chosen, reverse=True):
            lowered.pop(i)
        return picked

    def _build(self, batch: list[_Candidate]) -> list:
        """MetaSchedule's ``BuilderResult`` of each candidate (built in parallel by the builder)."""
        from tvm.s_tir import meta_schedule as ms

        started = time.perf_counter()
        built = self.builder.build([ms.builder.BuilderInput(c.mod, self.target) for c in batch])
        self.phases["building"] += time.perf_counter() - started
        return built

    def _time(self, batch: list[_Candidate], built: list) -> dict:
        """The runner's ``RunnerResult`` of each candidate that built, by ``id`` of the candidate."""
        from tvm.s_tir import meta_schedule as ms

        started = time.perf_counter()
        to_run = [(c, b) for c, b in zip(batch, built) if b.error_msg is None]
        futures = self.runner.run([ms.runner.RunnerInput(b.artifact_path, "cuda", self.args_info)
                                   for _, b in to_run]) if to_run else []
        ran = {id(c): f.result() for (c, _), f in zip(to_run, futures)}
        self.phases["timing"] += time.perf_counter() - started
        return ran

    def _record(self, batch: list[_Candidate], built: list, ran: dict) -> list[Trial]:
        """Every candidate of ``batch`` as a trial and a database record; the cost model trained on them."""
        from tvm.s_tir import meta_schedule as ms

        from tilus_tvm.tune import records

        trials, results = [], []
        for candidate, build in zip(batch, built):
            if build.error_msg is not None:
                trials.append(self.fail(candidate.config, "build", build.error_msg))
                results.append(ms.runner.RunnerResult(None, build.error_msg))
                continue
            result = ran[id(candidate)]
            results.append(result)
            if result.error_msg is not None or not result.run_secs:
                trials.append(self.fail(candidate.config, "run", result.error_msg or "no time measured"))
                continue
            run_secs = [float(s) for s in result.run_secs]
            records.commit_trial(self.database, self.workload, self.marker, candidate.config_json, run_secs, None,
                                 self.target, self.args_info)
            trials.append(Trial(dict(candidate.config), sum(run_secs) / len(run_secs)))
        if self.cost_model is not None:
            started = time.perf_counter()
            self.cost_model.update(self.context, [ms.MeasureCandidate(c.schedule, self.args_info) for c in batch],
                                   results)
            self.trained = True
            self.phases["cost model"] += time.perf_counter() - started
        return trials


def _message(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _parallelism(builder: Any) -> int:
    return int(getattr(builder, "max_workers", 0) or 1)


_BUILDERS: dict = {}
_RUNNER = None
_RUNNER_LOCK = threading.Lock()


def _default_builder(workers: int):
    """One default builder per process and worker count."""
    if workers not in _BUILDERS:
        from tilus_tvm.tune import measure

        _BUILDERS[workers] = measure.default_builder(max_workers=workers)
    return _BUILDERS[workers]


def _default_runner():
    """The process's ``LocalRunner`` (made once: starting one starts its worker process)."""
    global _RUNNER
    with _RUNNER_LOCK:
        if _RUNNER is None:
            from tilus_tvm.tune import measure

            _RUNNER = measure.default_runner()
        return _RUNNER


def _default_runner_soon():
    """A future of :func:`_default_runner`, made in a thread."""
    import concurrent.futures

    if _RUNNER is not None:
        done = concurrent.futures.Future()
        done.set_result(_RUNNER)
        return done
    executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="tilus-tune-runner")
    future = executor.submit(_default_runner)
    executor.shutdown(wait=False)
    return future
