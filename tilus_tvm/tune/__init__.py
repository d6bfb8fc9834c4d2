"""Tuning: Tilus's ``@autotune`` on MetaSchedule's builder, runner, database and cost model.

    import tilus_tvm as tilus

    @tilus.autotune("block_m, block_n", [(64, 128), (128, 128), (128, 256)])
    @tilus.autotune("stages", [3, 4])
    class Matmul(tilus.Script): ...

    Matmul()(m, n, k, a, b, c)                        # tunes at the first call of each key, then launches
    result = tilus.tune(Matmul(), m, n, k, a, b, c)   # the same ahead of time: a TuneResult
    print(result.table())                             # every configuration's time, or why it failed
    tilus.tune(Matmul(), ..., tracker="gpu-host:9190:h100", max_trials=64)

    python -m tilus_tvm.tune tilus_tvm.schedules.matmul:Matmul --args 4096 4096 4096 \\
        float16[4096,4096] float16[4096,4096] float16[4096,4096]

    db = tilus.tune_tir(te_matmul_module, "sm_90", work_dir="ms")   # TVM's auto-scheduler, our intrinsics

    kernel = tilus.tune.tunable(LibraryMatmul, b_layout="col")   # an opt_in class: tune when asked
    y = tilus_tvm.schedules.matmul(x, w.t(), tune=True)          # the library functions' switch

``tilus_tvm.tune`` is this package and, called, :func:`tune`. Where things are: ``space``
(the ``@autotune`` space and key buckets), ``decorator`` (``@autotune``, ``tunable`` and tunable
instances), ``engine`` (the search), ``lowering`` (candidates lowered in parallel), ``records``
(how choices are MetaSchedule workloads and tuning records), ``measure`` (builder, runner, RPC,
the cores to use), ``library`` (the library functions' ``tune=``), ``tir`` (``tune_tir``),
``__main__`` (the command line).
``docs/tuning.md`` is the guide. Importing this package imports neither TVM nor torch.
"""
from __future__ import annotations

import sys
import types
from typing import Any, Optional

from tilus_tvm.tune.decorator import autotune, space_of, tunable, tunable_of
from tilus_tvm.tune.errors import TuningError
from tilus_tvm.tune.options import TuneOptions, configure


def tune(kernel: Any, *args: Any, target: Any = None, max_trials: Optional[int] = None, database: Any = None,
         builder: Any = None, runner: Any = None, tracker: Optional[str] = None, cost_model: Any = None,
         progress: Optional[bool] = None, seed: Optional[int] = None):
    """Choose the configuration of ``kernel`` for ``args`` ahead of time; returns a
    :class:`~tilus_tvm.tune.engine.TuneResult` (``.config``, ``.trials``, ``.table()``,
    ``.instantiate()``).

    ``kernel`` is an ``@autotune`` class, a tunable instance of one, or an instance of an
    ``opt_in`` class (``Matmul(b_layout="col")``: the tuned parameters it was not given are tuned;
    see :func:`tunable`). ``args`` are the launch arguments; tensors may be
    ``device="meta"`` (the runner makes its own of the same shapes). ``target``: ``"sm_90"`` etc.,
    None for the current GPU. A key already in the database is read, not measured again, unless
    the budget has grown. The other arguments are :class:`TuneOptions` (None: the defaults set with
    :func:`configure`): ``runner=ms.runner.RPCRunner(...)`` or ``tracker="host:port:key"`` times
    the candidates on other machines; ``database`` is a MetaSchedule database or a directory.
    The result's ``phases`` give the wall time of lowering, building, timing and the cost model.

    Later launches of any instance of the class with arguments of the same key use the choice.
    """
    from tilus_tvm.tune import engine

    tunable = _tunable(kernel)
    return engine.choose(tunable, args, target, max_trials=max_trials, database=database, builder=builder,
                         runner=runner, tracker=tracker, cost_model=cost_model, progress=progress, seed=seed)


def tune_tir(mod: Any, target: Any, **kwargs: Any):
    """Auto-schedule a TIR/TE ``mod`` with MetaSchedule onto tensor cores through the ``tilus.*``
    intrinsics; see :func:`tilus_tvm.tune.tir.tune_tir`."""
    from tilus_tvm.tune.tir import tune_tir as run

    return run(mod, target, **kwargs)


def _tunable(kernel: Any):
    return tunable_of(tunable(kernel))


class _CallableModule(types.ModuleType):
    """``tilus_tvm.tune(kernel, *args)`` calls :func:`tune`; ``tilus_tvm.tune.autotune`` etc. stay reachable."""

    def __call__(self, kernel: Any, *args: Any, **options: Any):
        return tune(kernel, *args, **options)


sys.modules[__name__].__class__ = _CallableModule

__all__ = ["autotune", "configure", "tunable", "tune", "tune_tir", "TuneOptions", "TuningError"]
