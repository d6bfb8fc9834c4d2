"""Process-wide defaults for tuning that happens at a launch (no TVM, no torch).

    tilus_tvm.tune.configure(tracker="gpu-host:9190:h100")   # time candidates on the tracker's servers
    tilus_tvm.tune.configure(max_trials=64, progress=False)
    tilus_tvm.tune.configure(library=True)                   # matmul(), rms_norm(), ... use tuned choices
    tilus_tvm.tune.configure()                               # back to the defaults

A launch of an ``@autotune`` kernel that finds no record tunes with these; ``tilus_tvm.tune(...)``
arguments override them call by call. From the environment: ``TILUS_TVM_TUNE_TRACKER``
(``host:port:key``) sets the default tracker, ``TILUS_TVM_TUNE_LIBRARY=1`` the library switch.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, fields, replace
from typing import Any, Optional

TRACKER_ENV = "TILUS_TVM_TUNE_TRACKER"
LIBRARY_ENV = "TILUS_TVM_TUNE_LIBRARY"


@dataclass(frozen=True)
class TuneOptions:
    """How to tune: ``builder``/``runner`` (MetaSchedule objects; None: ``measure.PoolBuilder``/``LocalRunner``),
    ``tracker`` (``host:port:key`` of an RPC tracker, instead of a runner), ``database`` (a
    MetaSchedule database or a directory; None: ``<cache_dir>/tuning``), ``max_trials``
    (configurations measured at most; None: all, or the class's ``max_trials``), ``cost_model``
    (``"xgb"``, ``"random"`` or a MetaSchedule ``CostModel``; ranks candidates when the space is
    larger than the trial budget), ``progress`` (show a progress bar), ``seed`` (the search's
    random choices), ``workers`` (processes that lower and build candidates; None: the
    ``parallel_workers`` option, which defaults to the cores this process may use), ``library`` (the library functions -- ``matmul()``, ``flash_attention()``,
    ``softmax()``, ``layer_norm()``, ``rms_norm()`` -- launch tuned configurations instead of
    their hand-picked tables; their ``tune=`` argument overrides it call by call)."""

    builder: Any = None
    runner: Any = None
    tracker: Optional[str] = None
    database: Any = None
    max_trials: Optional[int] = None
    cost_model: Any = "xgb"
    progress: bool = True
    seed: int = 0
    workers: Optional[int] = None
    library: bool = False

    def merged(self, **overrides: Any) -> "TuneOptions":
        """These options with every override that is not None (a runner given replaces the default
        tracker, a tracker given the default runner)."""
        given = {k: v for k, v in overrides.items() if v is not None}
        if "runner" in given:
            given.setdefault("tracker", None)
        if "tracker" in given:
            given.setdefault("runner", None)
        return replace(self, **given)


_defaults = TuneOptions()
NAMES = tuple(f.name for f in fields(TuneOptions))


def configure(**options: Any) -> TuneOptions:
    """Set the defaults of later tuning in this process (see :class:`TuneOptions`); no arguments
    restores the built-in defaults. Returns the defaults now in force."""
    global _defaults
    unknown = sorted(set(options) - set(NAMES))
    if unknown:
        raise TypeError(f"configure: unknown option(s) {', '.join(unknown)}; the options are {', '.join(NAMES)}")
    if "library" in options and not isinstance(options["library"], bool):
        raise TypeError(f"configure: library must be True or False, got {options['library']!r}")
    workers = options.get("workers")
    if workers is not None and (not isinstance(workers, int) or isinstance(workers, bool) or workers < 1):
        raise TypeError(f"configure: workers must be a positive int or None, got {workers!r}")
    _defaults = replace(_defaults, **options) if options else TuneOptions()
    return _defaults


def defaults() -> TuneOptions:
    """The defaults now in force, the environment's tracker and library switch included."""
    options = _defaults
    if options.tracker is None and options.runner is None and os.environ.get(TRACKER_ENV):
        options = replace(options, tracker=os.environ[TRACKER_ENV])
    if not options.library and os.environ.get(LIBRARY_ENV, "").strip().lower() in ("1", "true", "yes", "on"):
        options = replace(options, library=True)
    return options
