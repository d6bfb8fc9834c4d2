"""python -m tilus_tvm.tune: tuning from the shell prints the table of configurations and times."""
import os
import pathlib
import subprocess
import sys

import pytest

from tilus_tvm.tune.__main__ import parse_argument, parse_value

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_argument_parsing():
    assert parse_value("4096") == 4096 and parse_value("0.5") == 0.5 and parse_value("true") is True
    assert parse_value("col") == "col"
    tensor = parse_argument("float16[64, 32]")
    assert str(tensor.dtype) == "torch.float16" and list(tensor.shape) == [64, 32] and tensor.device.type == "meta"
    with pytest.raises(SystemExit, match="neither a number"):
        parse_argument("abc")
    with pytest.raises(SystemExit, match="unknown dtype"):
        parse_argument("float17[4]")


def test_command_line_prints_the_table(tmp_path):
    command = [sys.executable, "-m", "tilus_tvm.tune", "tests.tune.fakes:TunedAddOne",
               "--args", "5000", "float32[5000]", "float32[5000]", "--init", "offset=2.0", "--target", "sm_90",
               "--builder", "tests.tune.fakes:FakeBuilder", "--runner", "tests.tune.fakes:add_one_runner",
               "--database", str(tmp_path / "db"), "--no-progress"]
    env = dict(os.environ, PYTHONPATH=str(ROOT), TILUS_TVM_CACHE_DIR=str(tmp_path / "cache"))
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert lines[0].startswith('tests.tune.fakes:TunedAddOne  {"arch": "sm_90"') and '"init": {"offset": 2.0}' in lines[0]
    assert lines[1].split() == ["block_n", "warps", "time", "(ms)", "vs", "best", "note"]
    assert lines[2].split() == ["256", "4", "1.0000", "1.00x", "best"]
    assert "skipped: lowering: ScriptError: TunedAddOne: block_n=512 needs more than one warp" in lines[-2]
    assert lines[-1].startswith("best: block_n=256, warps=4 (1.0000 ms, measured in ")
    assert "s: " in lines[-1] and "timing" in lines[-1]  # the phases (the fake runner's take a moment or less)
    again = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert again.stdout.strip().splitlines()[-1] == "best: block_n=256, warps=4 (1.0000 ms, from the database)"


@pytest.mark.slow
def test_command_line_tunes_the_library_matmul(tmp_path):
    """The library Matmul is opt_in: Matmul(b_layout="col") from --init is tuned over its 32 configurations."""
    command = [sys.executable, "-m", "tilus_tvm.tune", "tilus_tvm.schedules.matmul:Matmul",
               "--args", "256", "512", "512", "float16[256,512]", "float16[512,512]", "float16[256,512]",
               "--init", "b_layout=col", "--target", "sm_90", "--builder", "tests.tune.fakes:FakeBuilder",
               "--runner", "tests.tune.fakes:add_one_runner", "--database", str(tmp_path / "db"), "--no-progress"]
    env = dict(os.environ, PYTHONPATH=str(ROOT), TILUS_TVM_CACHE_DIR=str(tmp_path / "cache"))
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert '"init": {"b_layout": "col", "dtype": "float16", "min_blocks": 1}' in lines[0]
    assert lines[1].split()[:5] == ["block_m", "block_n", "warps", "block_k", "stages"]
    assert len(lines) == 2 + 32 + 1
    # add_one_seconds over Matmul's tiles: block_n=256 on 8 warps is fastest (1.5 ms); (64, 256, 8) comes first
    assert lines[-1].startswith("best: block_m=64, block_n=256, warps=8, block_k=32, stages=3 (1.5000 ms, measured in")
