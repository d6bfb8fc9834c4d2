"""Tuning on the GPU host: issue 13's figures, in parts that print their rows as they go.

    python scripts/bench_tuning.py                              # every part, within --budget-s (510 s)
    python scripts/bench_tuning.py --part matmul,warm,launch    # or: costmodel,tir
    python scripts/bench_tuning.py --shapes 4096x4096x4096 --part matmul
    python scripts/bench_tuning.py --tracker host:9190:h100     # time candidates on the tracker's GPUs

Parts (``--part``, comma-separated, or ``all``):

- ``matmul``: per shape (4096^3, 8192^3, three LLM shapes), cuBLAS, the hand table (``matmul()``'s
  choice) and ``Matmul``'s 32-configuration space tuned from an empty database: the wall time of
  the whole tuning (lowering and building in parallel on the cores this process may use,
  MetaSchedule's LocalRunner) and of its phases, the tuned kernel, and the runner's times of the
  best hand-picked configuration and of the tuned one (the same measurement for both). cuBLAS, the
  hand table and the tuned kernel are timed (CUDA events) after the tuning, in three alternating
  rounds.
- ``warm``: a second process runs ``matmul(a, b, tune=True)`` at the first shape with this run's
  database and kernel cache, ``tvm.compile``, MetaSchedule's builder and runners and the search
  refused: the choice comes from the database, the kernel from the disk cache.
- ``launch``: microseconds per launch of an explicitly configured ``Matmul(...)`` (Script's plain
  launch: ``@autotune`` adds nothing to it), of a tunable instance after its choice, of
  ``matmul()`` and of ``torch.matmul``, at 128^3.
- ``costmodel``: ``WideMatmul`` (216 configurations, scripts/bench_tuning_spaces.py) at 4096^3 with
  ``max_trials=48``: MetaSchedule's XGBModel over PerStoreFeature ranks the untried
  configurations after each batch; the table gives each batch's mean and best time.
- ``tir``: ``tilus.tune_tir`` (MetaSchedule with the tilus.* intrinsics) at 4096^3 beside TVM's
  dlight default schedule, our hand ``Matmul`` and cuBLAS.

Every run uses a fresh cache directory (``--cache-dir`` to choose one), so the tuning database
starts empty and every kernel is compiled in this run. A part or shape that would not finish
before ``--budget-s`` is skipped with a note; an error in one is printed and the others go on.
Goals: tuned >= the best hand-picked configuration at every shape; tune_tir >= 0.5x cuBLAS and
> 6x dlight at 4096^3; 32 configurations tuned in < 60 s.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time
import traceback

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SHAPES = "4096x4096x4096,8192x8192x8192,16x14336x4096,128x4096x14336,1024x28672x4096"
PARTS = ("matmul", "warm", "launch", "costmodel", "tir")
# (block_m, block_n, block_k, warps, stages): bench_matmul.py's hand-picked configurations (all in Matmul's space)
HAND_PICKED = ((128, 256, 64, 8, 3), (128, 256, 64, 8, 4), (128, 256, 32, 8, 4), (128, 128, 32, 4, 4),
               (64, 128, 64, 4, 4), (16, 128, 64, 4, 4))
NAMES = ("block_m", "block_n", "block_k", "warps", "stages")
# rough seconds a part needs (the budget check); a matmul shape scales with its flops
ESTIMATE = {"warm": 40, "launch": 40, "costmodel": 150, "tir_base": 90, "tir_trial": 3.0, "shape": 60}  # seconds


def say(*args) -> None:
    print(*args, flush=True)


def tflops(m: int, n: int, k: int, ms: float) -> float:
    return 2 * m * n * k / (ms * 1e-3) / 1e12


def parse_shape(text: str) -> tuple[int, int, int]:
    m, n, k = (int(x) for x in text.lower().split("x"))
    return m, n, k


class Run:
    """What the parts share: the deadline, the options, and figures one part gives another."""

    def __init__(self, options):
        self.options = options
        self.started = time.perf_counter()
        self.deadline = self.started + options.budget_s
        self.figures: dict = {}
        self.goals: list[str] = []
        self.intrin_import_s = None

    def left(self) -> float:
        return self.deadline - time.perf_counter()

    def fits(self, what: str, seconds: float) -> bool:
        if self.left() >= seconds:
            return True
        say(f"  {what}: skipped, {self.left():.0f} s of the {self.options.budget_s:.0f} s budget left "
            f"(needs about {seconds:.0f} s; run it with --part)")
        return False

    def tensor_intrin(self) -> None:
        """MetaSchedule's TuneContext (the cost model, tune_tir) and dlight import tvm.s_tir.tensor_intrin,
        which takes long once per process; done here, timed, outside the tuning wall times."""
        if self.intrin_import_s is None:
            started = time.perf_counter()
            importlib.import_module("tvm.s_tir.tensor_intrin")
            self.intrin_import_s = time.perf_counter() - started
            say(f"  (one-time import of tvm.s_tir.tensor_intrin: {self.intrin_import_s:.1f} s, not counted below)")


def operands(m: int, n: int, k: int):
    import torch

    a = (torch.rand(m, k, device="cuda") - 0.5).half()
    b = (torch.rand(k, n, device="cuda") - 0.5).half()
    c = torch.empty(m, n, device="cuda", dtype=torch.float16)
    return a, b, c


def check(c, a, b, atol=0.1) -> None:
    import torch

    torch.testing.assert_close(c.float(), a.float() @ b.float(), rtol=2e-2, atol=atol)


def interleaved(fns, rounds: int = 3) -> list[float]:
    """Milliseconds of each of ``fns``: the median over ``rounds`` rounds, each timing every one of them
    with ``benchmark_func`` in turn."""
    import statistics

    from tilus_tvm.utils import benchmark_func

    times = [[] for _ in fns]
    for _ in range(rounds):
        for fn, samples in zip(fns, times):
            samples.append(benchmark_func(fn))
    return [statistics.median(samples) for samples in times]


# ---- matmul -----------------------------------------------------------------------------------------

def part_matmul(run: Run) -> None:
    import torch

    import tilus_tvm as tilus
    from tilus_tvm.schedules.matmul import Matmul

    matmul_module = importlib.import_module("tilus_tvm.schedules.matmul")
    hopper = torch.cuda.get_device_capability()[0] >= 9
    say("\n## Matmul: hand table vs tuned (32 configurations, empty database) vs cuBLAS, float16, TFLOP/s")
    say("| shape | cuBLAS | hand table | tuned | tuned/hand | tuned/cuBLAS | runner: best hand-picked -> tuned (ms) "
        "| tuned config (bm,bn,bk,warps,stages) | tuning wall |")
    say("|---|---|---|---|---|---|---|---|---|")
    walls = []
    for text in run.options.shapes.split(","):
        m, n, k = parse_shape(text)
        if not run.fits(f"matmul {text}", ESTIMATE["shape"] * max(1.0, m * n * k / 4096 ** 3) ** 0.25):
            continue
        try:
            a, b, c = operands(m, n, k)
            hand_kernel = matmul_module.kernel_for(m, torch.float16, "row", hopper)
            hand_kernel(m, n, k, a, b, c)
            check(c, a, b)
            started = time.perf_counter()
            result = tilus.tune(Matmul(), m, n, k, a, b, c, tracker=run.options.tracker, progress=False)
            wall = time.perf_counter() - started
            tuned_kernel = result.instantiate()
            c.fill_(float("nan"))
            tuned_kernel(m, n, k, a, b, c)
            check(c, a, b)
            # timed after tuning, in alternating rounds, so that the GPU's clock (which drops while it
            # is kept busy) treats the three alike
            cublas, hand, tuned = interleaved([lambda: torch.matmul(a, b, out=c), lambda: hand_kernel(m, n, k, a, b, c),
                                               lambda: tuned_kernel(m, n, k, a, b, c)])
            by_config = {tuple(t.config[name] for name in NAMES): t for t in result.trials}
            hand_trials = [by_config[cfg] for cfg in HAND_PICKED if cfg in by_config and by_config[cfg].ok]
            best_hand = min(hand_trials, key=lambda t: t.seconds, default=None)
            config = tuple(result.config[name] for name in NAMES)
            timed = sum(t.ok for t in result.trials)
            walls.append((text, wall, len(result.trials)))
            runner = (f"{best_hand.seconds * 1e3:.4f} -> {result.best.seconds * 1e3:.4f}" if best_hand else
                      f"- -> {result.best.seconds * 1e3:.4f}")
            say(f"| {text} | {tflops(m, n, k, cublas):.1f} | {tflops(m, n, k, hand):.1f} "
                f"| {tflops(m, n, k, tuned):.1f} | {hand / tuned:.2f}x | {cublas / tuned:.2f}x | {runner} | {','.join(map(str, config))} "
                f"| {wall:.1f} s ({len(result.trials)} configs, {timed} timed; "
                f"{tilus.tune.engine.describe_phases(result.phases)}) |")
            run.figures[text] = dict(hand_ms=hand, tuned_ms=tuned, cublas_ms=cublas, config=config, wall=wall)
            ok = tuned <= hand * 1.02  # within the noise of CUDA-event medians
            run.goals.append(f"tuned >= the hand table at {text} (CUDA events): {'yes' if ok else 'NO'} "
                             f"(tuned {tuned:.4f} ms, hand table {hand:.4f} ms)")
        except Exception:  # noqa: BLE001 - report and go on with the next shape
            say(f"| {text} | failed: {traceback.format_exc(limit=3).strip().splitlines()[-1]} |")
            traceback.print_exc()
    for text, wall, count in walls:
        if count == 32:
            run.goals.append(f"{count} configurations tuned in < 60 s at {text}: {'yes' if wall < 60 else 'NO'} "
                             f"({wall:.1f} s)")
            break


# ---- warm start ---------------------------------------------------------------------------------------

WARM_CHILD = "--warm-child"


def part_warm(run: Run) -> None:
    text = run.options.shapes.split(",")[0]
    say(f"\n## Warm start: a second process, matmul(a, b, tune=True) at {text} (database + kernel cache of this run)")
    if text not in run.figures:
        say("  skipped: the matmul part did not tune this shape in this run")
        return
    if not run.fits("warm", ESTIMATE["warm"]):
        return
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, __file__, WARM_CHILD, text], env=env, capture_output=True, text=True,
                          timeout=max(30, run.left()))
    if done.returncode != 0:
        say(f"  FAILED:\n{done.stderr[-3000:]}")
        run.goals.append("warm start without tuning or compiling: NO (the child failed)")
        return
    report = json.loads(done.stdout.strip().splitlines()[-1])
    expected = list(run.figures[text]["config"])
    same = report["config"] == expected
    which = "the one tuned above" if same else f"NOT the one tuned above: {expected}"
    say(f"  config {report['config']} ({which}), first result {report['first_call_ms']:.1f} ms after imports and "
        f"tensors (total {report['total_ms']:.0f} ms),"
        f" correct: {report['correct']}; tvm.compile, the builder, the runners and the search were refused")
    run.goals.append(f"warm start without tuning or compiling: {'yes' if same and report['correct'] else 'NO'} "
                     f"({report['first_call_ms']:.1f} ms to the first result)")


def warm_child(text: str) -> None:
    started = time.perf_counter()
    import torch
    import tvm
    from tvm.s_tir import meta_schedule as ms

    def refuse(*args, **kwargs):
        raise AssertionError("the warm process tried to compile, build, time or search")

    tvm.compile = refuse
    ms.builder.LocalBuilder.build = refuse
    from tilus_tvm.tune import measure

    measure.PoolBuilder.build = measure.SerialBuilder.build = refuse
    ms.runner.LocalRunner.run = refuse
    ms.runner.RPCRunner.run = refuse
    from tilus_tvm.schedules import matmul
    from tilus_tvm.schedules.matmul import Matmul
    from tilus_tvm.tune import engine, library, tunable_of

    engine._Search = refuse
    m, n, k = parse_shape(text)
    a, b, _ = operands(m, n, k)
    torch.cuda.synchronize()
    ready = time.perf_counter()
    c = matmul(a, b, tune=True)
    torch.cuda.synchronize()
    first = time.perf_counter()
    correct = True
    try:
        check(c, a, b)
    except AssertionError:
        correct = False
    from tilus_tvm import float16

    tunable = tunable_of(library.tuned_kernel(Matmul, b_layout="row", dtype=float16))  # the one matmul() used
    (kernel,) = tunable._kernels.values()
    config = [kernel.hyper_parameters()[name] for name in NAMES]
    print(json.dumps({"first_call_ms": (first - ready) * 1e3, "total_ms": (first - started) * 1e3,
                      "config": config, "correct": correct}))


# ---- launch overhead --------------------------------------------------------------------------------

def launch_us(fn) -> float:
    from tilus_tvm.utils.benchmark import launch_overhead_us

    return launch_overhead_us(fn, count=5000, warmup=100)


def part_launch(run: Run) -> None:
    import torch

    import tilus_tvm as tilus
    from tilus_tvm.schedules import matmul
    from tilus_tvm.schedules.matmul import Matmul

    say("\n## Launch overhead at 128^3 (us per launch, a loop of launches then one synchronize)")
    if not run.fits("launch", ESTIMATE["launch"]):
        return
    m = n = k = 128
    a, b, c = operands(m, n, k)
    config = dict(block_m=16, block_n=128, block_k=64, warps=4, stages=4)
    explicit = Matmul(**config)
    tunable = tilus.tune.tunable(Matmul, **config)  # a one-configuration space: tuned at once, then its launch path
    for kernel in (explicit, tunable):
        kernel(m, n, k, a, b, c)
        check(c, a, b, atol=0.05)
    rows = [("Matmul(...) explicitly configured (Script launch)", launch_us(lambda: explicit(m, n, k, a, b, c))),
            ("tunable Matmul after its choice", launch_us(lambda: tunable(m, n, k, a, b, c))),
            ("matmul(a, b, out=c)", launch_us(lambda: matmul(a, b, out=c))),
            ("torch.matmul(a, b, out=c)", launch_us(lambda: torch.matmul(a, b, out=c)))]
    say("| launch | us |\n|---|---|")
    for name, us in rows:
        say(f"| {name} | {us:.1f} |")


# ---- cost model ---------------------------------------------------------------------------------------

def part_costmodel(run: Run) -> None:
    import tilus_tvm as tilus
    from bench_tuning_spaces import WideMatmul  # scripts/ is sys.path[0]: the lowering workers import it too

    size, budget = 4096, run.options.cost_trials
    say(f"\n## Cost model: WideMatmul ({len(tilus.tune.space_of(WideMatmul))} configurations) at {size}^3, "
        f"max_trials={budget}, XGBModel over PerStoreFeature")
    if not run.fits("costmodel", ESTIMATE["costmodel"]):
        return
    run.tensor_intrin()
    a, b, c = operands(size, size, size)
    started = time.perf_counter()
    result = tilus.tune(WideMatmul(), size, size, size, a, b, c, max_trials=budget, tracker=run.options.tracker,
                        progress=False, database=tempfile.mkdtemp(prefix="bench_costmodel_"))
    wall = time.perf_counter() - started
    batches: dict[int, list] = {}
    for trial in result.trials:
        if trial.batch is not None:
            batches.setdefault(trial.batch, []).append(trial)
    lowering_failures = sum(1 for t in result.trials if t.batch is None and not t.ok)
    say("| batch | chosen by | timed | failed | mean TFLOP/s | best TFLOP/s |\n|---|---|---|---|---|---|")
    for index in sorted(batches):
        ok = [t.seconds for t in batches[index] if t.ok]
        mean = sum(ok) / len(ok) if ok else float("nan")
        best = min(ok) if ok else float("nan")
        say(f"| {index} | {'random' if index == 0 else 'cost model (90%) + random'} | {len(ok)} "
            f"| {len(batches[index]) - len(ok)} | {tflops(size, size, size, mean * 1e3):.1f} "
            f"| {tflops(size, size, size, best * 1e3):.1f} |")
    best_ms = result.best.seconds * 1e3
    library = run.figures.get(f"{size}x{size}x{size}")
    say(f"  best: {result.config} at {tflops(size, size, size, best_ms):.1f} TFLOP/s (runner); "
        f"{lowering_failures} configurations refused at lowering; {wall:.1f} s in all")
    if library:
        say(f"  the library's 32-configuration space tuned above: {tflops(size, size, size, library['tuned_ms']):.1f} "
            f"TFLOP/s (CUDA events)")


# ---- tune_tir ---------------------------------------------------------------------------------------

def part_tir(run: Run) -> None:
    import torch
    import tvm
    from tvm.s_tir import dlight as dl

    import tilus_tvm as tilus
    from tests.intrin.matmul import te_matmul
    from tilus_tvm.tune import tir
    from tilus_tvm.utils import benchmark_func

    size, trials = run.options.tir_size, run.options.tir_trials
    say(f"\n## MetaSchedule with the tilus.* intrinsics ({trials} trials) vs dlight vs Matmul vs cuBLAS at {size}^3")
    tunings = len(str(run.options.tir_stages).split(",")) if not run.options.tir_no_pipeline else 1
    if not run.fits("tir", ESTIMATE["tir_base"] + ESTIMATE["tir_trial"] * trials * tunings):
        return
    run.tensor_intrin()
    func = te_matmul(size, size, size, "float16", "float32")
    target = tir.tuning_target(None)
    a, b, c16 = operands(size, size, size)
    c32 = torch.empty(size, size, device="cuda", dtype=torch.float32)
    cublas = benchmark_func(lambda: torch.matmul(a, b, out=c16))
    rows = [("cuBLAS (torch.matmul, f16 out)", cublas, "")]
    try:
        mod = tvm.IRModule({"main": func.with_attr("global_symbol", "main")})
        with target:
            scheduled = dl.ApplyDefaultSchedule(dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(),
                                                dl.gpu.GeneralReduction(), dl.gpu.Fallback())(mod)
        dlight_fn = tvm.compile(scheduled, target=target, tir_pipeline="s_tir")["main"]
        c32.fill_(float("nan"))
        dlight_fn(a, b, c32)
        check(c32, a, b, atol=5e-2)
        rows.append(("TVM dlight default (f32 out)", benchmark_func(lambda: dlight_fn(a, b, c32)), ""))
    except Exception:  # noqa: BLE001
        say(f"  dlight failed: {traceback.format_exc(limit=2).strip().splitlines()[-1]}")
    hand = run.figures.get(f"{size}x{size}x{size}")
    if hand:
        rows.append(("our Matmul, hand table (f16 out)", hand["hand_ms"], ""))
        rows.append(("our Matmul, tuned (f16 out)", hand["tuned_ms"], "(matmul part)"))
    else:  # the matmul part did not run: the hand table's kernel alone
        hopper = torch.cuda.get_device_capability()[0] >= 9
        hand_kernel = importlib.import_module("tilus_tvm.schedules.matmul").kernel_for(size, torch.float16, "row",
                                                                                      hopper)
        hand_kernel(size, size, size, a, b, c16)
        check(c16, a, b)
        hand_ms = benchmark_func(lambda: hand_kernel(size, size, size, a, b, c16))
        rows.append(("our Matmul, hand table (f16 out)", hand_ms, ""))
    pipeline = not run.options.tir_no_pipeline
    for stages in [int(v) for v in str(run.options.tir_stages).split(",")] if pipeline else [3]:
        started = time.perf_counter()
        database = tilus.tune_tir(func, None, work_dir=tempfile.mkdtemp(prefix="bench_tune_tir_"),
                                  max_trials_global=trials, num_trials_per_iter=min(32, trials), seed=1,
                                  software_pipeline=pipeline, stages=stages)
        wall = time.perf_counter() - started
        best = tir.compile_best(database, func, None)
        name = f"tune_tir, tilus.* intrinsics{f', {stages} cp.async stages' if pipeline else ''}"
        if best is None:
            rows.append((name, float("nan"), f"no valid schedule; {wall:.1f} s"))
            continue
        kernel = tir.build(best, target)["main"]
        c32.fill_(float("nan"))
        kernel(a, b, c32)
        check(c32, a, b, atol=5e-2)
        rows.append((name + " (f32 out)", benchmark_func(lambda: kernel(a, b, c32)),
                     f"{wall:.1f} s tuning, {trials} trials, software pipeline {'on' if pipeline else 'off'}"))
    say("| kernel | ms | TFLOP/s | vs cuBLAS | tuning |\n|---|---|---|---|---|")
    for name, ms, note in rows:
        say(f"| {name} | {ms:.4f} | {tflops(size, size, size, ms):.1f} | {cublas / ms:.2f}x | {note} |")
    found = {name: ms for name, ms, _ in rows}
    ours = min((ms for name, ms in found.items() if name.startswith("tune_tir") and ms == ms), default=float("nan"))
    dlight = next((ms for name, ms in found.items() if name.startswith("TVM dlight")), None)
    run.goals.append(f"tune_tir >= 0.5x cuBLAS at {size}^3: {'yes' if cublas / ours >= 0.5 else 'NO'} "
                     f"({cublas / ours:.2f}x)")
    if dlight:
        run.goals.append(f"tune_tir > 6x dlight at {size}^3: {'yes' if dlight / ours > 6 else 'NO'} "
                         f"({dlight / ours:.1f}x)")


# ---- main -------------------------------------------------------------------------------------------

def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == WARM_CHILD:
        warm_child(sys.argv[2])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", default="all", help=f"comma-separated among {', '.join(PARTS)}, or all")
    parser.add_argument("--shapes", default=SHAPES, help="comma-separated MxNxK for the matmul part (the first "
                                                          "one is also the warm-start shape)")
    parser.add_argument("--tracker", default=None, help="host:port:key of a TVM RPC tracker")
    parser.add_argument("--tir-size", type=int, default=4096)
    parser.add_argument("--tir-trials", type=int, default=128)
    parser.add_argument("--tir-no-pipeline", action="store_true", help="tune_tir without the rule's software pipeline")
    parser.add_argument("--tir-stages", default="4", help="comma-separated cp.async pipeline depths, one tuning each")
    parser.add_argument("--cost-trials", type=int, default=48, help="max_trials of the cost-model part")
    parser.add_argument("--budget-s", type=float, default=510.0, help="skip what would not finish by then")
    parser.add_argument("--cache-dir", default=None, help="default: a fresh temporary directory")
    options = parser.parse_args()
    parts = PARTS if options.part == "all" else tuple(p.strip() for p in options.part.split(","))
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        parser.error(f"unknown part(s) {', '.join(unknown)}; the parts are {', '.join(PARTS)}")
    os.environ["TILUS_TVM_CACHE_DIR"] = options.cache_dir or tempfile.mkdtemp(prefix="bench_tuning_cache_")
    import torch

    from tilus_tvm.tune import measure

    run = Run(options)
    say(f"device: {torch.cuda.get_device_name()}; {measure.available_cores()} cores for lowering and building "
        f"(os.cpu_count() {os.cpu_count()}); cache {os.environ['TILUS_TVM_CACHE_DIR']}; parts {', '.join(parts)}")
    for part in PARTS:
        if part not in parts:
            continue
        try:
            globals()[f"part_{part}"](run)
        except Exception:  # noqa: BLE001 - one part failing leaves the others their figures
            say(f"  part {part} failed: {traceback.format_exc(limit=3).strip().splitlines()[-1]}")
            traceback.print_exc()
    say("\n## Goals")
    for line in run.goals:
        say(f"- {line}")
    say(f"\ntotal {time.perf_counter() - run.started:.0f} s")


if __name__ == "__main__":
    main()
