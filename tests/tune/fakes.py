"""Tuned kernels and MetaSchedule stand-ins for the CPU tests of tilus_tvm.tune.

``ConfigRunner`` is a MetaSchedule runner whose "time" is a function of the configuration (read
from the candidate module's ``tilus.config`` attribute, which the builder stand-ins pass on), so
the search, the database and the cost model can be checked without a GPU. ``FakeBuilder`` skips
compiling; ``RecordingBuilder`` compiles for real with MetaSchedule's ``LocalBuilder`` and
remembers which artifact is which configuration.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
import time

from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms

import tilus_tvm as tilus
from tilus_tvm import float32, int32
from tilus_tvm.errors import ScriptError
from tilus_tvm.tune import measure
from tilus_tvm.utils import cdiv


@tilus.autotune("block_n", [64, 128, 256, 512])
@tilus.autotune("warps", [1, 2, 4])
class TunedAddOne(tilus.Script):
    """b = a + 1 over [n] with a tuned tile; block_n=512 on 1 warp is refused by __init__."""

    def __init__(self, block_n: int, warps: int, offset: float = 1.0):
        super().__init__()
        if block_n == 512 and warps == 1:
            raise ScriptError("TunedAddOne: block_n=512 needs more than one warp")
        self.block_n, self.warps, self.offset = block_n, warps, offset

    def __call__(self, n: int32, a_ptr: ~float32, b_ptr: ~float32):
        self.attrs.blocks = cdiv(n, self.block_n)
        self.attrs.warps = self.warps
        ga = self.global_view(a_ptr, dtype=float32, shape=[n])
        gb = self.global_view(b_ptr, dtype=float32, shape=[n])
        a = self.load_global(ga, offsets=[self.blockIdx.x * self.block_n], shape=[self.block_n])
        self.store_global(gb, a + self.offset, offsets=[self.blockIdx.x * self.block_n])


# A few hundred configurations (6 x 5 x 3 x 3 = 270): the tile shape, warps and how many tiles a
# block handles; the cost-model test searches it with a budget of a fraction of that.
@tilus.autotune("rows", [1, 2, 4, 8, 16, 32])
@tilus.autotune("cols", [32, 64, 128, 256, 512])
@tilus.autotune("warps", [1, 2, 4])
@tilus.autotune("repeat", [1, 2, 4])
class TunedScale(tilus.Script):
    """y = 2 x over [m, 1024], each block ``repeat`` tiles of [rows, cols] down the rows."""

    def __init__(self, rows: int, cols: int, warps: int, repeat: int):
        super().__init__()
        self.rows, self.cols, self.warps, self.repeat = rows, cols, warps, repeat

    def __call__(self, m: int32, x_ptr: ~float32, y_ptr: ~float32):
        self.attrs.blocks = [cdiv(m, self.rows * self.repeat), 1024 // self.cols]
        self.attrs.warps = self.warps
        gx = self.global_view(x_ptr, dtype=float32, shape=[m, 1024])
        gy = self.global_view(y_ptr, dtype=float32, shape=[m, 1024])
        for r in range(self.repeat):
            row = (self.blockIdx.x * self.repeat + r) * self.rows
            x = self.load_global(gx, offsets=[row, self.blockIdx.y * self.cols], shape=[self.rows, self.cols])
            self.store_global(gy, x * 2.0, offsets=[row, self.blockIdx.y * self.cols])


def add_one_seconds(config: dict) -> float:
    """TunedAddOne's fake time: fastest at block_n=256 with 4 warps."""
    return 1e-3 * (1 + abs(math.log2(config["block_n"]) - 8) + 0.5 * abs(math.log2(config["warps"]) - 2))


def scale_seconds(config: dict) -> float:
    """TunedScale's fake time: a smooth bowl over the log of each parameter; fastest at rows=8,
    cols=128, warps=4, repeat=2 (one configuration of 270)."""
    cost = ((math.log2(config["rows"]) - 3) ** 2 + (math.log2(config["cols"]) - 7) ** 2
            + 0.7 * (math.log2(config["warps"]) - 2) ** 2 + 0.5 * (math.log2(config["repeat"]) - 1) ** 2)
    return 1e-4 * (1 + cost)


def _slowed(stand_in, work, inputs):
    """``work(inputs)`` after ``stand_in.delay`` seconds; the call's (start, end) go to ``stand_in.calls``."""
    start = time.perf_counter()
    time.sleep(stand_in.delay)
    result = work(inputs)
    stand_in.calls.append((start, time.perf_counter()))
    return result


def _config_of(mod) -> str:
    return str(next(iter(mod.functions.values())).attrs[measure.CONFIG_ATTR])


@derived_object
class FakeBuilder(ms.builder.PyBuilder):
    """Builds nothing: each artifact is a file holding the candidate's configuration. ``delay``:
    seconds each ``build`` call takes; ``calls``: the (start, end) of each call; ``own_directory``:
    each file in a directory of its own, named as ``measure.export_candidate`` names them."""

    def __init__(self, fail=lambda config: None, delay=0.0, own_directory=False):
        super().__init__()
        self.fail = fail
        self.max_workers = 4
        self.built = []
        self.delay = delay
        self.calls = []
        self.own_directory = own_directory

    def build(self, build_inputs):
        return _slowed(self, self._build, build_inputs)

    def _build(self, build_inputs):
        results = []
        for build_input in build_inputs:
            config_json = _config_of(build_input.mod)
            self.built.append(json.loads(config_json))
            error = self.fail(json.loads(config_json))
            if error:
                results.append(ms.builder.BuilderResult(None, error))
                continue
            if self.own_directory:
                path = os.path.join(tempfile.mkdtemp(prefix=measure.ARTIFACT_PREFIX), "candidate.config")
                handle = os.open(path, os.O_WRONLY | os.O_CREAT)
            else:
                handle, path = tempfile.mkstemp(suffix=".config")
            with os.fdopen(handle, "w") as f:
                f.write(config_json)
            results.append(ms.builder.BuilderResult(path, None))
        return results


@derived_object
class RecordingBuilder(ms.builder.PyBuilder):
    """MetaSchedule's LocalBuilder (real CUDA compilation), writing each artifact's configuration
    beside it as ``<artifact>.config``."""

    def __init__(self, max_workers=2):
        super().__init__()
        self.inner = ms.builder.LocalBuilder(max_workers=max_workers, timeout_sec=300, f_build=measure.build_candidate)
        self.max_workers = max_workers

    def build(self, build_inputs):
        results = self.inner.build(build_inputs)
        for build_input, result in zip(build_inputs, results):
            if result.error_msg is None:
                with open(result.artifact_path + ".config", "w") as f:
                    f.write(_config_of(build_input.mod))
        return results


@derived_object
class ConfigRunner(ms.runner.PyRunner):
    """Times nothing: a candidate's ``run_secs`` are ``seconds(config)`` (None: "launch failed").
    ``delay``: seconds each ``run`` call takes; ``calls``: the (start, end) of each call."""

    def __init__(self, seconds, delay=0.0):
        super().__init__()
        self.seconds = seconds
        self.runs = []
        self.delay = delay
        self.calls = []

    def run(self, runner_inputs):
        return _slowed(self, self._run, runner_inputs)

    def _run(self, runner_inputs):
        futures = []
        for runner_input in runner_inputs:
            path = runner_input.artifact_path
            config_path = path if path.endswith(".config") else path + ".config"
            with open(config_path) as f:
                config = json.load(f)
            self.runs.append(config)
            secs = self.seconds(config)
            result = (ms.runner.RunnerResult(None, "CUDA error: too many resources requested for launch")
                      if secs is None else ms.runner.RunnerResult([secs, secs], None))
            futures.append(ms.runner.RunnerFuture(f_done=lambda: True, f_result=lambda result=result: result))
            os.remove(config_path)
            if path != config_path:
                shutil.rmtree(os.path.dirname(path), ignore_errors=True)
        return futures


def add_one_runner():
    """``--runner`` factory for the command-line test."""
    return ConfigRunner(add_one_seconds)
