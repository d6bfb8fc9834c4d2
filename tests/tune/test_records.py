"""tilus_tvm.tune.records: choices are plain MetaSchedule workloads and tuning records."""
import json

import torch
import tvm_ffi
from tvm.s_tir import meta_schedule as ms

import tilus_tvm as tilus
from tilus_tvm.target import tvm_target
from tilus_tvm.tune import records

from tests.tune.fakes import ConfigRunner, FakeBuilder, TunedAddOne, add_one_seconds


def test_marker_workloads_differ_by_key_only():
    a = records.marker_module("k", "m:K", '{"n": 1}')
    b = records.marker_module("k", "m:K", '{"n": 2}')
    again = records.marker_module("k", "m:K", '{"n": 1}')
    assert tvm_ffi.structural_hash(a) == tvm_ffi.structural_hash(again)
    assert tvm_ffi.structural_equal(a, again) and not tvm_ffi.structural_equal(a, b)


def test_trace_round_trip():
    marker = records.marker_module("k", "m:K", "{}")
    trace = records.config_trace(marker, '{"block_m": 64}', "build: ptxas error")
    assert records.trace_annotations(trace) == {"tilus.config": '{"block_m": 64}', "tilus.error": "build: ptxas error"}
    assert 'ann_key="tilus.config"' in str(trace)


def test_database_is_plain_metaschedule(fresh_cache):
    a = torch.empty(5000, dtype=torch.float32, device="meta")
    result = tilus.tune(TunedAddOne(), 5000, a, a, target="sm_90", builder=FakeBuilder(),
                        runner=ConfigRunner(add_one_seconds), progress=False)
    assert result.config == {"block_n": 256, "warps": 4}
    directory = fresh_cache / "tuning"
    assert sorted(p.name for p in directory.iterdir()) == ["database_tuning_record.json", "database_workload.json"]
    # A fresh MetaSchedule database on the same files, no tilus_tvm involved past the marker:
    database = ms.database.JSONDatabase(work_dir=str(directory))
    marker = records.marker_module("tuned_add_one", "tests.tune.fakes:TunedAddOne", result.key.json)
    best = database.query_tuning_record(marker, tvm_target("sm_90"), "main")
    assert best is not None
    assert json.loads(records.trace_annotations(best.trace)["tilus.config"]) == {"block_n": 256, "warps": 4}
    assert [float(s) for s in best.run_secs] == [add_one_seconds(result.config)] * 2
    assert [(str(i.dtype), list(i.shape)) for i in best.args_info] == [("float32", [5000]), ("float32", [5000])]
    all_records = database.get_all_tuning_records()
    assert len(all_records) == 12  # 11 measured, 1 failed with its reason
    failed = [records.read_record(r) for r in all_records if r.run_secs is None]
    assert [(json.loads(f.config_json), f.error) for f in failed] == [
        ({"block_n": 512, "warps": 1}, "lowering: ScriptError: TunedAddOne: block_n=512 needs more than one warp")]
    key = json.loads(result.key.json)
    assert key == {"arch": "sm_90", "const": {}, "dtypes": {}, "init": {"offset": 1.0}, "kernel": "tests.tune.fakes:TunedAddOne",
                   "scalars": {"n": 5000}}
