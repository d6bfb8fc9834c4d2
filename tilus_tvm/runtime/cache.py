"""The on-disk kernel cache: ``<cache dir>/<key>/`` holds the exported library and its sources.

The key hashes everything a kernel depends on: the package's own source, the kernel class's
source, its hyper-parameters, the compile-time arguments, pointer alignment and the target.
The directory is ``~/.cache/tilus_tvm`` unless ``TILUS_TVM_CACHE_DIR`` or :func:`set_cache_dir`
says otherwise.

A warm start (a fresh process launching a cached kernel) must not read and hash every source
file: the digests of the package's source and of each kernel class's source are remembered in
``<cache dir>/.memo/``, under the paths, modification times and sizes of the files they were
read from, and recomputed only when one of those changes.
"""
from __future__ import annotations

import functools
import hashlib
import inspect
import json
import os
import pathlib
import shutil
import sys
import tempfile
import warnings
from typing import Any, Callable, Optional

import tilus_tvm
from tilus_tvm import option

LIBRARY = "kernel.so"
TIR = "kernel.tir.py"
CUDA = "kernel.cu"
META = "meta.json"


def set_cache_dir(path: Optional[str | os.PathLike]) -> None:
    """Keep compiled kernels under ``path`` (None: back to the default); the same setting as
    ``tilus_tvm.option.cache_dir(path)``."""
    option.set_option("cache_dir", path)


def cache_dir() -> pathlib.Path:
    """Where compiled kernels are kept now: the ``cache_dir`` option (:mod:`tilus_tvm.option`)."""
    return option.get_option("cache_dir")


MEMO = ".memo"
MEMO_ENTRIES = 512  # per memo file; the oldest go first


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _memo(name: str, stamp: str, compute: Callable[[], str]) -> str:
    """``compute()``, remembered in ``<cache dir>/.memo/<name>.json`` under ``stamp`` (which names the
    files ``compute`` reads, with their modification times and sizes). The memo is an optimisation:
    when it cannot be read or written, ``compute()`` runs."""
    path = cache_dir() / MEMO / f"{name}.json"
    try:
        memo = json.loads(path.read_text())
        if not isinstance(memo, dict):
            memo = {}
    except (OSError, ValueError):
        memo = {}
    stamp = _sha256(stamp)
    value = memo.get(stamp)
    if isinstance(value, str):
        return value
    value = compute()
    memo[stamp] = value
    for old in list(memo)[:-MEMO_ENTRIES]:
        del memo[old]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, staging = tempfile.mkstemp(prefix=f".{name}-", dir=path.parent)
    except OSError:  # a read-only or unusable cache directory
        return value
    try:
        with os.fdopen(handle, "w") as f:
            json.dump(memo, f)
        os.replace(staging, path)  # atomic: a reader sees the old memo or the new one
    except OSError:
        pathlib.Path(staging).unlink(missing_ok=True)
    return value


def _file_stamp(path: str) -> str:
    stat = os.stat(path)
    return f"{path}:{stat.st_mtime_ns}:{stat.st_size}"


def _package_sources() -> list[str]:
    root = os.path.dirname(tilus_tvm.__file__)
    paths = []
    for directory, subdirectories, files in os.walk(root):
        subdirectories[:] = sorted(d for d in subdirectories if d != "__pycache__")
        paths += [os.path.join(directory, f) for f in sorted(files) if f.endswith(".py")]
    return paths


@functools.cache
def package_fingerprint() -> str:
    """A hash of the package's source: a new compiler never reuses an old compiler's kernels."""
    root = pathlib.Path(tilus_tvm.__file__).parent
    paths = _package_sources()

    def digest() -> str:
        hasher = hashlib.sha256(tilus_tvm.__version__.encode())
        for path in paths:
            hasher.update(pathlib.Path(path).relative_to(root).as_posix().encode())
            hasher.update(pathlib.Path(path).read_bytes())
        return hasher.hexdigest()

    stamp = "\n".join([tilus_tvm.__version__] + [_file_stamp(path) for path in paths])
    return _memo("package", stamp, digest)


def source_digest(obj: Any) -> str:
    """A hash of a class's or function's source text (its qualified name when it has no source).

    Remembered under its file's modification time and size: ``inspect.getsource`` of a class parses
    the whole module, which a warm start should not pay for."""
    name = f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', repr(obj))}"
    try:
        path = inspect.getsourcefile(obj)
        stamp = f"{_file_stamp(path)}:{name}" if path else None
    except Exception:  # noqa: BLE001 - builtins, REPL classes; KeyError from TVM's inspect.getfile patch
        stamp = None

    def digest() -> str:
        try:
            return _sha256(inspect.getsource(obj))
        except Exception:  # noqa: BLE001 - no source (REPL, exec, builtins): the name stands for it
            return _sha256(name)

    return digest() if stamp is None else _memo("sources", stamp, digest)


def _value_fingerprint(value: Any) -> str:
    """What a kernel sees of a name it uses: modules by name, functions and classes by name and source
    (the package's own by name: :func:`package_fingerprint` covers them), values by repr."""
    if inspect.ismodule(value):
        return f"module {value.__name__}"
    if inspect.isfunction(value) or inspect.isclass(value):
        name = f"{getattr(value, '__module__', '')}.{getattr(value, '__qualname__', repr(value))}"
        module = getattr(value, "__module__", None) or ""
        if module == "tilus_tvm" or module.startswith("tilus_tvm.") or module in sys.builtin_module_names:
            return name
        return f"{name}:{source_digest(value)}"
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
    text = json.dumps({
        "package": package_fingerprint(),
        "class": f"{script_cls.__module__}.{script_cls.__qualname__}",
        "source": source_digest(script_cls),
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
