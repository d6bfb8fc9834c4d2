"""The on-disk kernel cache: ``<cache dir>/<key>/`` holds the exported library and its sources.

The key hashes everything a kernel depends on: the package's own source, the kernel class's
source, its hyper-parameters, the compile-time arguments, pointer alignment and the target.
The directory is ``~/.cache/tilus_tvm`` unless ``TILUS_TVM_CACHE_DIR`` or :func:`set_cache_dir`
says otherwise.
"""
from __future__ import annotations

import functools
import hashlib
import inspect
import json
import os
import pathlib
import shutil
import tempfile
import warnings
from typing import Any, Optional

import tilus_tvm

_cache_dir: Optional[pathlib.Path] = None

LIBRARY = "kernel.so"
TIR = "kernel.tir.py"
CUDA = "kernel.cu"
META = "meta.json"


def set_cache_dir(path: Optional[str | os.PathLike]) -> None:
    """Keep compiled kernels under ``path`` (None: back to the default)."""
    global _cache_dir
    _cache_dir = pathlib.Path(path) if path is not None else None


def cache_dir() -> pathlib.Path:
    if _cache_dir is not None:
        return _cache_dir
    env = os.environ.get("TILUS_TVM_CACHE_DIR")
    return pathlib.Path(env) if env else pathlib.Path.home() / ".cache" / "tilus_tvm"


@functools.cache
def package_fingerprint() -> str:
    """A hash of the package's source: a new compiler never reuses an old compiler's kernels."""
    root = pathlib.Path(tilus_tvm.__file__).parent
    digest = hashlib.sha256(tilus_tvm.__version__.encode())
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _value_fingerprint(value: Any) -> str:
    """What a kernel sees of a name it uses: modules and functions by name (and source), values by repr."""
    if inspect.ismodule(value):
        return f"module {value.__name__}"
    if inspect.isfunction(value) or inspect.isclass(value):
        try:
            return f"{value.__module__}.{value.__qualname__}:{inspect.getsource(value)}"
        except Exception:  # noqa: BLE001 - builtins and classes without source
            return f"{getattr(value, '__module__', '')}.{getattr(value, '__qualname__', repr(value))}"
    return repr(value)


def closure_fingerprint(fn: Any) -> list[tuple[str, str]]:
    """The values of the free names a kernel body uses: closure variables and referenced globals.
    Two kernels with the same source but different closure values (a class made in a factory
    function) must not share a cache entry."""
    try:
        names = inspect.getclosurevars(fn)
    except (TypeError, ValueError):
        return []
    values = {**names.globals, **names.nonlocals}
    return sorted((name, _value_fingerprint(value)) for name, value in values.items())


def kernel_key(script_cls: type, hyper_parameters: dict[str, Any], specialization: tuple, arch: str) -> str:
    try:
        source = inspect.getsource(script_cls)
    except Exception:  # noqa: BLE001 - no source (REPL, exec): the key falls back to the class name
        source = script_cls.__qualname__
    text = json.dumps({
        "package": package_fingerprint(),
        "class": f"{script_cls.__module__}.{script_cls.__qualname__}",
        "source": source,
        "closure": closure_fingerprint(script_cls._kernel_fn),
        "hyper": sorted((k, repr(v)) for k, v in hyper_parameters.items()),
        "specialization": repr(specialization),
        "arch": arch,
    })
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def entry_dir(key: str) -> pathlib.Path:
    return cache_dir() / key


def load_entry(key: str) -> Optional[dict[str, Any]]:
    """The files of a cached kernel, or None when it is not (completely) there."""
    directory = entry_dir(key)
    meta_path = directory / META
    if not meta_path.exists():
        return None
    try:
        meta = json.loads(meta_path.read_text())
        return {
            "meta": meta,
            "library": str(directory / LIBRARY),
            "tir": (directory / TIR).read_text(),
            "cuda": (directory / CUDA).read_text(),
        }
    except (OSError, ValueError):
        return None


def store_entry(key: str, executable: Any, tir_text: str, cuda_source: str, meta: dict[str, Any]) -> Optional[str]:
    """Write a kernel to the cache atomically (a directory renamed into place). Returns the library path,
    or None when the cache cannot be written (the kernel still works from memory)."""
    target = entry_dir(key)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = pathlib.Path(tempfile.mkdtemp(prefix=f".{key}-", dir=target.parent))
        executable.export_library(str(staging / LIBRARY))
        (staging / TIR).write_text(tir_text)
        (staging / CUDA).write_text(cuda_source)
        (staging / META).write_text(json.dumps(meta))  # written last: its presence marks a complete entry
        try:
            staging.rename(target)
        except OSError:  # another process stored the same kernel first
            shutil.rmtree(staging, ignore_errors=True)
        return str(target / LIBRARY)
    except Exception as exc:  # noqa: BLE001 - a read-only or full disk must not break compilation
        warnings.warn(f"tilus_tvm: could not write kernel cache entry {target}: {exc}", stacklevel=3)
        return None
