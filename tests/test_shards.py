"""TILUS_TEST_SHARD=i/n (tests/conftest.py), which scripts/gpu_check.sh uses to run a long group of GPU tests as
shards at once: the shards of a file split its tests, disjoint and complete; a malformed value is refused."""
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
TARGET = "tests/utils/test_arith.py"


def collect(shard=None):
    env = {**os.environ, "TILUS_TEST_SHARD": shard or ""}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "--collect-only", "-p", "no:cacheprovider", TARGET],
                         cwd=ROOT, env=env, capture_output=True, text=True)
    return run.returncode, [line for line in run.stdout.splitlines() if "::" in line], run.stdout + run.stderr


def test_shards_split_a_file():
    code, everything, _ = collect()
    assert code == 0 and len(everything) >= 3
    shards = [collect(f"{i}/3")[1] for i in range(3)]
    assert sorted(sum(shards, [])) == sorted(everything)
    assert all(shards) and len(set(sum(shards, []))) == len(everything)


def test_a_malformed_shard_is_refused():
    for bad in ("3/3", "one/2", "1"):
        code, _, text = collect(bad)
        assert code != 0 and "must be 'i/n' with 0 <= i < n" in text, text
