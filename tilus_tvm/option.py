"""Options: a small registry of named settings with defaults, and the IR dumps.

    from tilus_tvm import option
    option.dump_ir("/tmp/ir")                  # write the program after each pass (None: back to off)
    option.set_option("debug.verify", False)   # skip the verifier between passes
    option.get_option("cache_dir")             # PosixPath('/home/me/.cache/tilus_tvm')

The options:

- ``dump_ir``: a directory (``pathlib.Path``) or None. When set, the pipeline writes the tile program
  after each pass, and the final TIR, to ``<dir>/<kernel>/NN_<pass>.txt`` (see :func:`write_dump`).
  Default: ``TILUS_TVM_DUMP_IR`` from the environment, else None (off).
- ``cache_dir``: where compiled kernels are kept. Default: ``TILUS_TVM_CACHE_DIR``, else
  ``~/.cache/tilus_tvm``.
- ``debug.verify``: run the tile-IR verifier (:mod:`tilus_tvm.ir.verifier`) after every pass.
  Default: True.

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
    Option("debug.verify", lambda: True, _bool("debug.verify"),
           "run the tile-IR verifier after every pass (default: True)"),
)}

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


# ---- IR dumps ---------------------------------------------------------------------------------
def dump_ir(directory: Optional[str | os.PathLike]) -> None:
    """Write the tile program after each pass to ``directory`` (None: back to the default, which is
    off unless ``TILUS_TVM_DUMP_IR`` names a directory)."""
    set_option("dump_ir", directory)


def dump_directory() -> Optional[pathlib.Path]:
    """Where IR dumps go now, or None when they are off."""
    return get_option("dump_ir")


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
        raise OptionError("write_dump: IR dumps are off; turn them on with option.dump_ir(directory) or "
                          f"the environment variable {DUMP_IR_ENV}")
    if not isinstance(index, int) or index < 0:
        raise OptionError(f"write_dump: index must be a non-negative int, got {index!r}")
    folder = directory / _file_name_part(kernel_name)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{index:02d}_{_file_name_part(pass_name)}{suffix}"
    path.write_text(text)
    return path
