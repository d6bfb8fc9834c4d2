"""Options: a small registry of named settings with defaults, Tilus's option functions, and IR dumps.

    from tilus_tvm import option
    option.cache_dir("./cache")                # compiled kernels (and tuning records) go there
    option.debug.dump_ir()                     # dump the program after each pass, under <cache_dir>/ir
    option.dump_ir("/tmp/ir")                  # ... or into a directory of your choice (None: back to off)
    option.set_option("debug.verify", False)   # skip the verifier between passes
    option.get_option("cache_dir")             # PosixPath('/home/me/.cache/tilus_tvm')

The functions Tilus programs call (``tilus.option.cache_dir``, ``tilus.option.parallel_workers``,
``tilus.option.debug.dump_ir``, ``tilus.option.debug.launch_blocking``) work unchanged with
``import tilus_tvm as tilus``; ``get_option`` takes Tilus's option names.

The options:

- ``cache_dir``: where compiled kernels are kept (the disk cache of :mod:`tilus_tvm.runtime.cache`
  and the tuning database). Default: ``TILUS_TVM_CACHE_DIR``, else ``~/.cache/tilus_tvm``.
- ``dump_ir``: a directory (``pathlib.Path``) or None. When set, the pipeline writes the tile program
  after each pass, and the final TIR, to ``<dir>/<kernel>/NN_<pass>.txt`` (see :func:`write_dump`).
  Default: ``TILUS_TVM_DUMP_IR`` from the environment, else None (off).
- ``debug.dump_ir``: Tilus's switch. True dumps as ``dump_ir`` does, into ``<cache_dir>/ir`` unless
  ``dump_ir`` names a directory. Default: False.
- ``debug.verify``: run the tile-IR verifier (:mod:`tilus_tvm.ir.verifier`) after every pass.
  Default: True.
- ``debug.launch_blocking``: wait for every kernel launched from Python to finish (a CUDA error then
  surfaces at the launch that caused it). Default: False.
- ``parallel_workers``: processes that lower and build tuning candidates in parallel (the tuning
  builder, ``tilus_tvm.tune.measure.PoolBuilder``, a MetaSchedule builder). Default: the cores this
  process may use (CPU affinity and cgroup quota).

Defaults that come from the environment are read each time an option is read, so a variable set
after import still counts. Setting an option to None gives it back its default. This module imports
neither TVM nor torch.
"""
from __future__ import annotations

import os
import pathlib
import re
from dataclasses import dataclass
from typing import Any, Callable, Optional

from tilus_tvm.errors import TilusError

DUMP_IR_ENV = "TILUS_TVM_DUMP_IR"
CACHE_DIR_ENV = "TILUS_TVM_CACHE_DIR"


class OptionError(TilusError, ValueError):
    """An unknown option name, or a value an option does not accept."""


@dataclass(frozen=True)
class Option:
    """A named setting: ``default()`` is computed when the option is read and was not set;
    ``convert(value)`` checks and normalises a value given to :func:`set_option`."""

    name: str
    default: Callable[[], Any]
    convert: Callable[[Any], Any]
    doc: str


def _path(name: str) -> Callable[[Any], pathlib.Path]:
    def convert(value: Any) -> pathlib.Path:
        if not isinstance(value, (str, os.PathLike)) or str(value) == "":
            raise OptionError(f"option {name!r} expects a directory (str or os.PathLike), got {value!r}")
        return pathlib.Path(value).expanduser()

    return convert


def _bool(name: str) -> Callable[[Any], bool]:
    def convert(value: Any) -> bool:
        if not isinstance(value, bool):
            raise OptionError(f"option {name!r} expects True or False, got {value!r}")
        return value

    return convert


def _positive_int(name: str) -> Callable[[Any], int]:
    def convert(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise OptionError(f"option {name!r} expects a positive int, got {value!r}")
        return value

    return convert


def _env_path(variable: str, fallback: Optional[pathlib.Path] = None) -> Callable[[], Optional[pathlib.Path]]:
    def default() -> Optional[pathlib.Path]:
        value = os.environ.get(variable)
        return pathlib.Path(value).expanduser() if value else fallback

    return default


def _default_cache_dir() -> pathlib.Path:
    return _env_path(CACHE_DIR_ENV, pathlib.Path.home() / ".cache" / "tilus_tvm")()


_OPTIONS: dict[str, Option] = {option.name: option for option in (
    Option("dump_ir", _env_path(DUMP_IR_ENV), _path("dump_ir"),
           f"directory for the program after each pass (default: ${DUMP_IR_ENV}, else off)"),
    Option("cache_dir", _default_cache_dir, _path("cache_dir"),
           f"directory of compiled kernels (default: ${CACHE_DIR_ENV}, else ~/.cache/tilus_tvm)"),
    Option("debug.dump_ir", lambda: False, _bool("debug.dump_ir"),
           "dump the program after each pass into <cache_dir>/ir unless dump_ir names a directory "
           "(default: False)"),
    Option("debug.verify", lambda: True, _bool("debug.verify"),
           "run the tile-IR verifier after every pass (default: True)"),
    Option("debug.launch_blocking", lambda: False, _bool("debug.launch_blocking"),
           "wait for each kernel launch to finish (default: False)"),
    Option("parallel_workers", lambda: _available_cores(), _positive_int("parallel_workers"),
           "processes that build tuning candidates in parallel (default: the cores this process may use)"),
)}

def _available_cores() -> int:
    from tilus_tvm.utils.cores import available_cores

    return available_cores()


_values: dict[str, Any] = {}  # options set explicitly; the others take their default when read


def _lookup(name: str) -> Option:
    option = _OPTIONS.get(name)
    if option is None:
        raise OptionError(f"unknown option {name!r}; the options are: {', '.join(sorted(_OPTIONS))}")
    return option


def get_option(name: str) -> Any:
    """The value of option ``name``: the one set with :func:`set_option`, else its default."""
    option = _lookup(name)
    return _values[name] if name in _values else option.default()


def set_option(name: str, value: Any) -> None:
    """Set option ``name`` to ``value``; None gives it back its default (environment included)."""
    option = _lookup(name)
    if value is None:
        _values.pop(name, None)
    else:
        _values[name] = option.convert(value)


def option_names() -> list[str]:
    """The names of every option, sorted."""
    return sorted(_OPTIONS)


# ---- Tilus's option functions -----------------------------------------------------------------
def cache_dir(dir_path: str | os.PathLike) -> None:
    """Keep compiled kernels (and tuning records) under ``dir_path`` from now on (Tilus's
    ``tilus.option.cache_dir``); kernels compiled before stay where they are.

    >>> option.cache_dir("./cache")  # doctest: +SKIP
    """
    if dir_path is None:
        raise OptionError("cache_dir: expects a directory (str or os.PathLike), got None; "
                          "set_option('cache_dir', None) goes back to the default")
    set_option("cache_dir", dir_path)


def parallel_workers(n: int) -> None:
    """Lower and build up to ``n`` tuning candidates in parallel (Tilus's
    ``tilus.option.parallel_workers``); read at each tuning that is not given ``workers=``."""
    set_option("parallel_workers", n)


def launch_blocking_enabled() -> bool:
    """Whether launches wait for the kernel (``debug.launch_blocking``); cheap: read at every launch."""
    return _values.get("debug.launch_blocking", False)


class debug:  # noqa: N801 - Tilus's spelling: tilus.option.debug.dump_ir()
    """Debugging switches, as Tilus spells them: ``option.debug.dump_ir()``."""

    @staticmethod
    def dump_ir(enable: bool = True) -> None:
        """Dump the tile program after each pass and the final TIR of every kernel compiled from now
        on, into ``<cache_dir>/ir/<kernel>/`` (or the :func:`dump_ir` directory, when one is set).
        Kernels found in the disk cache are not recompiled, so they are not dumped."""
        set_option("debug.dump_ir", enable)

    @staticmethod
    def launch_blocking(enabled: bool = True) -> None:
        """Make every launch from Python wait until the kernel finished (``torch.cuda.synchronize``),
        so that a failing kernel raises at its own launch."""
        set_option("debug.launch_blocking", enabled)

    @staticmethod
    def verify(enabled: bool = True) -> None:
        """Run the tile-IR verifier between passes (on by default)."""
        set_option("debug.verify", enabled)

    @staticmethod
    def disable_ptxas_opt(enabled: bool = True) -> None:
        """Tilus compiles with ``ptxas -O0`` when asked; here kernels are compiled by TVM's CUDA
        pipeline (NVRTC on the GPU host), which has no such switch, so asking for it is an error
        rather than a silent no-op. ``enabled=False`` (the default state) is accepted."""
        if not isinstance(enabled, bool):
            raise OptionError(f"debug.disable_ptxas_opt: expects True or False, got {enabled!r}")
        if enabled:
            raise OptionError("debug.disable_ptxas_opt: not supported by tilus-tvm (kernels are compiled through "
                              "TVM's CUDA pipeline, which does not pass ptxas options); inspect the PTX with "
                              "kernel.compile(...).ptx instead")


# Tilus options with no counterpart here: a clear message instead of a bare AttributeError
_UNSUPPORTED = {
    "bench_warmup": "tuning times candidates with MetaSchedule's evaluator (tilus_tvm/tune/measure.py), "
                    "which has no separate warm-up count",
    "bench_repeat": "tuning times candidates with MetaSchedule's evaluator (tilus_tvm/tune/measure.py), "
                    "whose repeats are fixed there",
}


def __getattr__(name: str) -> Any:
    if name in _UNSUPPORTED:
        raise AttributeError(f"tilus_tvm.option.{name} is not supported: {_UNSUPPORTED[name]}")
    raise AttributeError(f"module 'tilus_tvm.option' has no attribute {name!r}")


# ---- IR dumps ---------------------------------------------------------------------------------
def dump_ir(directory: Optional[str | os.PathLike]) -> None:
    """Write the tile program after each pass to ``directory`` (None: back to the default, which is
    off unless ``TILUS_TVM_DUMP_IR`` names a directory)."""
    set_option("dump_ir", directory)


def dump_directory() -> Optional[pathlib.Path]:
    """Where IR dumps go now, or None when they are off: the ``dump_ir`` directory when one is set
    (in code or by ``TILUS_TVM_DUMP_IR``), else ``<cache_dir>/ir`` when ``debug.dump_ir`` is on."""
    directory = get_option("dump_ir")
    if directory is None and get_option("debug.dump_ir"):
        directory = get_option("cache_dir") / "ir"
    return directory


def _file_name_part(text: str) -> str:
    # kernel and pass names become path components: keep them to one harmless component
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text).lstrip(".") or "_"


def write_dump(kernel_name: str, index: int, pass_name: str, text: str, suffix: str = ".txt") -> pathlib.Path:
    """Write ``text`` to ``<dump dir>/<kernel_name>/<NN>_<pass_name><suffix>`` and return the path.

    ``index`` numbers the passes of one kernel (``NN`` is two digits, zero-padded), so the files
    sort in pipeline order: ``00_transpile.txt``, ``01_layout_inference.txt``, ..., ``04_tir.py``.

    >>> dump_ir("/tmp/ir"); write_dump("matmul", 1, "layout_inference", "...")  # doctest: +SKIP
    PosixPath('/tmp/ir/matmul/01_layout_inference.txt')
    """
    directory = dump_directory()
    if directory is None:
        raise OptionError("write_dump: IR dumps are off; turn them on with option.dump_ir(directory), "
                          f"option.debug.dump_ir() or the environment variable {DUMP_IR_ENV}")
    if not isinstance(index, int) or index < 0:
        raise OptionError(f"write_dump: index must be a non-negative int, got {index!r}")
    folder = directory / _file_name_part(kernel_name)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{index:02d}_{_file_name_part(pass_name)}{suffix}"
    path.write_text(text)
    return path
