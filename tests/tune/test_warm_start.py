"""A second process reuses the database: no tuning, no building, no compiling (MetaSchedule's
LocalBuilder and a fake runner in the first; tvm.compile and the builder refused in the second)."""
import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

FIRST = textwrap.dedent("""
    import json, torch
    import tilus_tvm as tilus
    from tests.tune.fakes import ConfigRunner, RecordingBuilder, TunedAddOne, add_one_seconds

    a = torch.empty(5000, dtype=torch.float32, device="meta")
    result = tilus.tune(TunedAddOne(), 5000, a, a, target="sm_90", builder=RecordingBuilder(),
                        runner=ConfigRunner(add_one_seconds), progress=False)
    kernel = TunedAddOne().compile(5000, a, a, target="sm_90")   # the choice, compiled into the disk cache
    print(json.dumps({"config": result.config, "tuned": result.tuned, "threads": kernel.num_threads}))
""")

SECOND = textwrap.dedent("""
    import json, torch, tvm
    from tvm.s_tir import meta_schedule as ms

    def refuse(*args, **kwargs):
        raise AssertionError("the second process compiled or built something")

    tvm.compile = refuse
    ms.builder.LocalBuilder.build = refuse
    from tilus_tvm.tune import measure
    measure.PoolBuilder.build = measure.SerialBuilder.build = refuse
    import tilus_tvm as tilus
    from tests.tune.fakes import TunedAddOne

    a = torch.empty(5000, dtype=torch.float32, device="meta")
    kernel = TunedAddOne().compile(5000, a, a, target="sm_90")   # database + disk cache only
    result = tilus.tune(TunedAddOne(), 5000, a, a, target="sm_90", builder=object(), runner=object())
    print(json.dumps({"config": result.config, "tuned": result.tuned, "threads": kernel.num_threads,
                      "from_cache": kernel.from_cache}))
""")


def run(code: str, cache: pathlib.Path) -> dict:
    env = dict(os.environ, TILUS_TVM_CACHE_DIR=str(cache), PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_second_process_reads_the_database(tmp_path):
    pytest.importorskip("cloudpickle")
    pytest.importorskip("psutil")
    first = run(FIRST, tmp_path)
    assert first == {"config": {"block_n": 256, "warps": 4}, "tuned": True, "threads": 128}
    second = run(SECOND, tmp_path)
    assert second == {"config": {"block_n": 256, "warps": 4}, "tuned": False, "threads": 128, "from_cache": True}
