"""GPU: tuning through TVM's RPC -- a local tracker and one server (``python -m tvm.exec.rpc_tracker`` /
``rpc_server``) started here; ``tracker="host:port:key"`` times the candidates on the server, the
records land in the database, and the chosen kernel computes the right result."""
import json

import pytest

import tilus_tvm as tilus
from tilus_tvm.target import tvm_target
from tilus_tvm.tune import records

from tests.tune.fakes import TunedAddOne
from tests.tune.rpc import local_tracker

pytestmark = pytest.mark.gpu


@pytest.fixture
def tracker():
    with local_tracker() as address:
        yield address


def test_tuning_times_candidates_on_the_tracker_server(tracker, tmp_path):
    import torch
    from tvm.s_tir import meta_schedule as ms

    n = 100_000
    a = torch.rand(n, device="cuda")
    b = torch.full_like(a, float("nan"))
    database = tmp_path / "db"
    result = tilus.tune(TunedAddOne(warps=4), n, a, b, tracker=tracker, database=str(database), progress=False)
    assert result.tuned and sum(t.ok for t in result.trials) == 4, result.table()
    assert all(t.seconds > 0 for t in result.trials)
    # the record is plain MetaSchedule, read back from the files
    stored = ms.database.JSONDatabase(work_dir=str(database))
    marker = records.marker_module(TunedAddOne.kernel_name(), "tests.tune.fakes:TunedAddOne", result.key.json)
    best = stored.query_tuning_record(marker, tvm_target(result.key.arch), "main")
    assert best is not None and len(stored.get_all_tuning_records()) == 4
    assert json.loads(records.trace_annotations(best.trace)["tilus.config"]) == result.config
    assert min(float(s) for s in best.run_secs) > 0
    result.instantiate()(n, a, b)
    torch.testing.assert_close(b, a + 1.0)
