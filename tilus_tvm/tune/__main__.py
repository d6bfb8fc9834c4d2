"""``python -m tilus_tvm.tune``: tune an ``@autotune`` kernel from the shell and print its table.

    python -m tilus_tvm.tune tilus_tvm.schedules.matmul:Matmul \\
        --args 4096 4096 4096 float16[4096,4096] float16[4096,4096] float16[4096,4096] \\
        --init b_layout=row --max-trials 32 --tracker gpu-host:9190:h100

``--args`` are the launch arguments: integers, floats, ``true``/``false``, and tensors written
``dtype[d0,d1,...]`` (made on the ``meta`` device: only their dtype and shape matter, the runner
allocates its own). ``--init name=value`` gives untuned ``__init__`` arguments. ``--builder`` and
``--runner`` take ``module:factory`` (a callable returning a MetaSchedule builder or runner).
The result is recorded in the tuning database like any other tuning, so later launches use it.
"""
from __future__ import annotations

import argparse
import importlib
import re
import sys
from typing import Any, Optional, Sequence

TENSOR = re.compile(r"^(\w+)\[([\d,\s]*)\]$")


def parse_value(text: str) -> Any:
    """``4096`` -> 4096, ``0.5`` -> 0.5, ``true`` -> True, anything else stays text."""
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            pass
    return text


def parse_argument(text: str) -> Any:
    """A launch argument: a number, a boolean or ``dtype[shape]`` (a meta tensor)."""
    match = TENSOR.match(text.strip())
    if match is None:
        value = parse_value(text)
        if isinstance(value, str):
            raise SystemExit(f"--args: {text!r} is neither a number, true/false, nor a tensor like float16[64,64]")
        return value
    import torch

    from tilus_tvm.dtypes import as_dtype

    try:
        dtype = getattr(torch, as_dtype(match.group(1)).name)
    except Exception:  # noqa: BLE001 - the message names the text
        raise SystemExit(f"--args: unknown dtype {match.group(1)!r} in {text!r}") from None
    shape = [int(d) for d in match.group(2).replace(" ", "").split(",") if d]
    return torch.empty(shape, dtype=dtype, device="meta")


def load_object(path: str) -> Any:
    """``package.module:Name`` -> the object (``Name`` may be dotted)."""
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise SystemExit(f"expected module:Name, got {path!r}")
    obj = importlib.import_module(module_name)
    for part in attribute.split("."):
        obj = getattr(obj, part)
    return obj


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tilus_tvm.tune", description=__doc__.split("\n\n")[0])
    parser.add_argument("kernel", help="the @autotune class, as module:Class")
    parser.add_argument("--args", nargs="+", required=True, metavar="ARG", help="launch arguments (see above)")
    parser.add_argument("--init", nargs="*", default=[], metavar="NAME=VALUE", help="untuned __init__ arguments")
    parser.add_argument("--target", default=None, help="sm_80, sm_90, ... (default: the current GPU)")
    parser.add_argument("--max-trials", type=int, default=None, help="configurations measured at most")
    parser.add_argument("--tracker", default=None, help="host:port:key of a TVM RPC tracker")
    parser.add_argument("--database", default=None, help="tuning database directory (default: <cache_dir>/tuning)")
    parser.add_argument("--builder", default=None, metavar="MODULE:FACTORY", help="MetaSchedule builder factory")
    parser.add_argument("--runner", default=None, metavar="MODULE:FACTORY", help="MetaSchedule runner factory")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    options = parser.parse_args(argv)

    from tilus_tvm.tune import tune

    cls = load_object(options.kernel)
    init = {}
    for item in options.init:
        name, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--init: expected NAME=VALUE, got {item!r}")
        init[name] = parse_value(value)
    args = [parse_argument(text) for text in options.args]
    builder = load_object(options.builder)() if options.builder else None
    runner = load_object(options.runner)() if options.runner else None
    result = tune(cls(**init), *args, target=options.target, max_trials=options.max_trials,
                  database=options.database, builder=builder, runner=runner, tracker=options.tracker,
                  progress=not options.no_progress)
    print(f"{options.kernel}  {result.key.json}")
    print(result.table())
    from tilus_tvm.tune.engine import describe_phases

    how = (f"measured in {result.elapsed:.1f} s: {describe_phases(result.phases)}" if result.tuned
           else "from the database")
    best = ", ".join(f"{k}={v!r}" for k, v in result.config.items())
    print(f"best: {best} ({result.best.seconds * 1e3:.4f} ms, {how})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
