"""How tuning results live in a MetaSchedule database.

One **workload** per kernel and tuning key: a marker ``IRModule`` with one empty PrimFunc whose
attributes name the kernel and the key, and whose one block, ``tilus_config``, is what traces annotate::

    @T.prim_func(s_tir=True)
    def main():
        T.func_attr({"global_symbol": "matmul", "tilus.kernel": "tilus_tvm.schedules.matmul:Matmul",
                     "tilus.key": '{"arch": "sm_90", "const": {"k_size": 4096, ...}, ...}'})
        with T.sblock("tilus_config"):
            T.evaluate(0)

MetaSchedule tells workloads apart by structural hash and equality, attributes included, so each
(kernel, key) is its own workload, and looking one up needs no lowering: the marker is built from
the key alone.

One **tuning record** per measured configuration. Its trace is the MetaSchedule schedule that
annotates the marker's block with the configuration (and, for a failure, the reason)::

    b0 = sch.get_sblock(name="tilus_config", func_name="main")
    sch.annotate(block_or_loop=b0, ann_key="tilus.config", ann_val='{"block_m": 128, "block_n": 256}')

``run_secs`` are the runner's times (None when the configuration failed), ``args_info`` the tensors
it was timed on, ``target`` the CUDA target. So ``ms.database.JSONDatabase(work_dir=...)
.query_tuning_record(marker, target, "main")`` returns the best configuration's record, and its
trace shows the configuration. The workload stores the key, the trace the binding; the lowered
kernel of a configuration is not stored (it is rebuilt from the class when launched).
"""
from __future__ import annotations

import json
import os
import pathlib
from dataclasses import dataclass
from typing import Any, Optional

import tvm
import tvm_ffi
from tvm.s_tir import meta_schedule as ms
from tvm.script import tirx as T

CONFIG_BLOCK = "tilus_config"
CONFIG_ANNOTATION = "tilus.config"
ERROR_ANNOTATION = "tilus.error"
KERNEL_ATTR = "tilus.kernel"
KEY_ATTR = "tilus.key"
WORKLOAD_NAME = "main"
DATABASE_FOLDER = "tuning"
FAILED = None  # run_secs of a record whose configuration failed


@T.prim_func(s_tir=True)
def _marker():
    with T.sblock(CONFIG_BLOCK):
        T.evaluate(0)


def marker_module(kernel_name: str, kernel_path: str, key_json: str) -> tvm.IRModule:
    """The workload of ``kernel_path`` (``module:Class``) for the tuning key ``key_json``."""
    func = (_marker.with_attr("global_symbol", kernel_name).with_attr(KERNEL_ATTR, kernel_path)
            .with_attr(KEY_ATTR, key_json))
    return tvm.IRModule({WORKLOAD_NAME: func})


def config_trace(marker: tvm.IRModule, config_json: str, error: Optional[str] = None):
    """The trace recording one configuration (and why it failed, if it did)."""
    sch = tvm.s_tir.Schedule(marker)
    block = sch.get_sblock(CONFIG_BLOCK, func_name=WORKLOAD_NAME)
    sch.annotate(block, CONFIG_ANNOTATION, config_json)
    if error is not None:
        sch.annotate(block, ERROR_ANNOTATION, error)
    return sch.trace


def trace_annotations(trace) -> dict[str, str]:
    """``{annotation key: value}`` of the ``Annotate`` instructions of ``trace``."""
    found = {}
    for inst in trace.insts:
        if inst.kind.name == "Annotate":
            found[str(inst.attrs[0])] = str(inst.inputs[1])
    return found


@dataclass(frozen=True)
class StoredTrial:
    """One record of a workload: the configuration's JSON, its mean time (None: failed) and why."""

    config_json: str
    seconds: Optional[float]
    error: Optional[str]


def read_record(record) -> Optional[StoredTrial]:
    """The trial a record holds, or None when it is not one of ours."""
    annotations = trace_annotations(record.trace)
    if CONFIG_ANNOTATION not in annotations:
        return None
    seconds = None
    if record.run_secs is not None and len(record.run_secs):
        values = [float(s) for s in record.run_secs]
        if all(v < 1e9 for v in values):
            seconds = sum(values) / len(values)
    error = annotations.get(ERROR_ANNOTATION)
    if seconds is None and error is None:
        error = "no valid time recorded"
    return StoredTrial(annotations[CONFIG_ANNOTATION], seconds, error)


def workload_trials(database, marker: tvm.IRModule) -> list[StoredTrial]:
    """Every trial recorded for ``marker``'s workload, oldest first."""
    if not database.has_workload(marker):
        return []
    found = []
    for record in database.get_all_tuning_records():
        if tvm_ffi.structural_equal(record.workload.mod, marker):
            trial = read_record(record)
            if trial is not None:
                found.append(trial)
    return found


def commit_trial(database, workload, marker: tvm.IRModule, config_json: str, run_secs: Optional[list[float]],
                 error: Optional[str], target, args_info) -> None:
    """Record one measured (or failed) configuration."""
    trace = config_trace(marker, config_json, error)
    record = ms.database.TuningRecord(trace, workload, None if run_secs is None else [float(s) for s in run_secs],
                                      target, args_info)
    database.commit_tuning_record(record)


_OPEN: dict[str, Any] = {}  # JSON databases opened in this process, by directory


def default_database_dir() -> pathlib.Path:
    """``<cache_dir>/tuning``: where tuning records go unless told otherwise."""
    from tilus_tvm import option

    return pathlib.Path(option.get_option("cache_dir")) / DATABASE_FOLDER


def open_database(database: Any = None):
    """A MetaSchedule database: ``database`` itself, a ``JSONDatabase`` in the directory it names, or
    the one in ``<cache_dir>/tuning`` (one per directory and process)."""
    if database is not None and not isinstance(database, (str, os.PathLike)):
        return database
    directory = pathlib.Path(database) if database is not None else default_database_dir()
    directory = directory.expanduser().resolve()
    opened = _OPEN.get(str(directory))
    if opened is None:
        directory.mkdir(parents=True, exist_ok=True)
        opened = _OPEN[str(directory)] = ms.database.JSONDatabase(work_dir=str(directory))
    return opened


def forget_open_databases() -> None:
    """Read the JSON files again at the next :func:`open_database` (another process may have written them)."""
    _OPEN.clear()


def key_json(key: dict) -> str:
    return json.dumps(key, sort_keys=True)
