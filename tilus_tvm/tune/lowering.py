"""Lowering candidates in parallel: TVM's ``PopenPoolExecutor`` runs the Script pipeline of many
configurations at once.

Lowering a configuration (Script -> tile IR -> passes -> TIR) is Python work of a fraction of a
second to a second; a space of 32 configurations, or the few hundred a cost model ranks, would
spend most of its tuning time there if lowered one after another. Each worker process imports the
kernel class by its ``module:Class`` path, builds ``cls(**fixed, **config)``, lowers it for the
call's arguments (tensors rebuilt on the ``meta`` device with the same dtype, shape, strides and
16-byte alignment) and returns the destination-passing ``IRModule`` as TVM JSON.

The first configuration that lowers is lowered in this process, and timed: the others go to the pool only when
that pays (lowering them here would take longer than starting workers, which import torch and TVM,
plus lowering them on ``workers`` processes; at least :data:`MIN_POOL_WORKERS`). Also in process: a
class that a fresh process cannot import (defined in ``__main__`` or inside a function), an argument
that is neither a tensor nor a plain scalar, or a pool that could not start.
"""
from __future__ import annotations

import atexit
import importlib
import logging
import sys
import time
from typing import Any, Callable, Optional

logger = logging.getLogger("tilus_tvm.tune")

TIMEOUT_SEC = 300  # one configuration's lowering, or building
MAX_USES = 64  # a worker is recycled after this many jobs, lowerings or builds (as TVM's pools do, against leaks)
OK, FAILED, UNAVAILABLE = "ok", "failed", "unavailable"
POOL_START_SEC = 5.0  # about what starting the workers costs (each imports torch, TVM and the package)
MIN_POOL_WORKERS = 4

_POOL = None
_POOL_SIZE = 0


def importable(cls: type) -> bool:
    """Whether a fresh process finds ``cls`` at ``cls.__module__:cls.__qualname__``."""
    if cls.__module__ == "__main__" or "<locals>" in cls.__qualname__:
        return False
    try:
        return load_class(f"{cls.__module__}:{cls.__qualname__}") is cls
    except Exception:  # noqa: BLE001 - anything that stops the import means "not importable"
        return False


def load_class(path: str) -> type:
    module, _, qualname = path.partition(":")
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def argument_specs(args: tuple) -> Optional[list]:
    """What a worker needs to rebuild ``args`` (None when one of them cannot travel)."""
    specs = []
    for arg in args:
        if isinstance(arg, (bool, int, float, str)) or arg is None:
            specs.append(("value", arg))
        elif hasattr(arg, "data_ptr") and hasattr(arg, "stride"):
            try:
                residue = arg.data_ptr() % 16
            except RuntimeError:  # a tensor without storage
                return None
            specs.append(("tensor", str(arg.dtype).replace("torch.", ""), tuple(arg.shape), tuple(arg.stride()),
                          residue))
        else:
            return None
    return specs


def rebuild_arguments(specs: list) -> list:
    """The arguments of ``specs``, tensors on the ``meta`` device (nothing allocated)."""
    import torch

    args = []
    for spec in specs:
        if spec[0] == "value":
            args.append(spec[1])
            continue
        _, dtype_name, shape, stride, residue = spec
        dtype = getattr(torch, dtype_name)
        itemsize = torch.empty((), dtype=dtype, device="meta").element_size()
        offset = -(-residue // itemsize)
        span = 1 + sum((extent - 1) * step for extent, step in zip(shape, stride)) if all(shape) else 0
        base = torch.empty(offset + span, dtype=dtype, device="meta")
        args.append(base.as_strided(shape, stride, storage_offset=offset))
    return args


def _initialize(paths: list[str]) -> None:
    """Worker start: the parent's import path (pytest's rootdir, a script's own insertions)."""
    for path in reversed(paths):
        if path not in sys.path:
            sys.path.insert(0, path)


def lower_job(kernel_path: str, fixed: dict, config: dict, specs: list, arch: str) -> tuple[str, str]:
    """In a worker: ``(OK, module JSON)``, ``(FAILED, reason)`` or ``(UNAVAILABLE, reason)`` (the class
    could not be imported here: the parent lowers it itself)."""
    try:
        import tvm

        cls = load_class(kernel_path)
        args = rebuild_arguments(specs)
    except Exception as exc:  # noqa: BLE001
        return UNAVAILABLE, f"{type(exc).__name__}: {exc}"
    try:
        mod = cls(**fixed, **config).lower(*args, target=arch, dps=True)
    except Exception as exc:  # noqa: BLE001 - the configuration is skipped with this reason
        return FAILED, f"{type(exc).__name__}: {exc}"
    return OK, tvm.ir.save_json(mod)


def pool(workers: int):
    """The process pool of ``workers`` workers (started at the first use, kept for the process; the
    tuning builder, :class:`tilus_tvm.tune.measure.PoolBuilder`, uses it too)."""
    global _POOL, _POOL_SIZE
    if _POOL is None or _POOL_SIZE != workers:
        from tvm.support.popen_pool import PopenPoolExecutor

        if _POOL is not None:
            _POOL.shutdown(wait=False)
        _POOL = PopenPoolExecutor(max_workers=workers, timeout=TIMEOUT_SEC, initializer=_initialize,
                                  initargs=(list(sys.path),), maximum_process_uses=MAX_USES)
        _POOL_SIZE = workers
    return _POOL


@atexit.register
def _shutdown() -> None:
    """Stop the workers at exit, before the interpreter tears down what the pool's destructor needs."""
    global _POOL
    if _POOL is not None:
        _POOL.shutdown(wait=False)
        _POOL = None


def lower_configs(tunable, configs: list[dict], args: tuple, arch: str, workers: int,
                  lower_here: Callable[[dict], Any], progress=None,
                  pool_start_sec: float = POOL_START_SEC) -> list[tuple[str, Any]]:
    """``(OK, IRModule)`` or ``(FAILED, reason)`` for each configuration, in order.

    ``lower_here(config)`` lowers one configuration in this process (returning the module, raising
    what lowering raised); used for the first configuration and when the pool does not pay or cannot
    be used (see the module docstring). ``progress`` is called once per configuration done.
    """
    def here(config: dict) -> tuple[str, Any]:
        try:
            result = (OK, lower_here(config))
        except Exception as exc:  # noqa: BLE001
            result = (FAILED, f"{type(exc).__name__}: {exc}")
        if progress is not None:
            progress()
        return result

    results, rest, seconds = [], list(configs), 0.0
    while rest and (not results or results[-1][0] != OK):  # here, up to the first that lowers
        started = time.perf_counter()
        results.append(here(rest.pop(0)))
        seconds = time.perf_counter() - started
    serial = seconds * len(rest)  # what lowering the rest here would take
    pays = workers >= MIN_POOL_WORKERS and serial > pool_start_sec + serial / workers
    specs = argument_specs(args) if pays else None
    if specs is None or not importable(tunable.cls):
        return results + [here(config) for config in rest]
    import tvm

    try:
        executor = pool(workers)  # its threads, and so its processes, start as work arrives
        futures = [executor.submit(lower_job, tunable.kernel_path, dict(tunable.fixed), dict(config), specs, arch)
                   for config in rest]
    except Exception as exc:  # noqa: BLE001 - no pool: lower here
        logger.info("lowering in this process (the worker pool did not start: %s)", exc)
        return results + [here(config) for config in rest]
    for config, future in zip(rest, futures):
        try:
            status, value = future.result()
        except Exception as exc:  # noqa: BLE001 - a worker that died or timed out
            status, value = UNAVAILABLE, f"{type(exc).__name__}: {exc}"
        if status == OK:
            results.append((OK, tvm.ir.load_json(value)))
            if progress is not None:
                progress()
        elif status == FAILED:
            results.append((FAILED, value))
            if progress is not None:
                progress()
        else:
            logger.info("lowering %s in this process (worker: %s)", config, value)
            results.append(here(config))
    return results
