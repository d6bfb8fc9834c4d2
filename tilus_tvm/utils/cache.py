"""Emptying the kernel cache (Tilus's ``tilus.utils.clear_cache``)."""
from __future__ import annotations

import pathlib
import shutil

from tilus_tvm import option
from tilus_tvm.errors import TilusError


def clear_cache(*items: str) -> pathlib.Path:
    """Delete everything under ``<cache_dir>/<items...>`` (the whole cache without ``items``) and
    return that directory, which is left in place, empty. Kernels compiled afterwards are rebuilt.

    ``items`` are path components below the cache directory (``clear_cache("ir")`` empties the IR
    dumps); a component that would leave the cache directory (``..``, an absolute path) is refused.

    >>> tilus_tvm.utils.clear_cache()  # doctest: +SKIP
    PosixPath('/home/me/.cache/tilus_tvm')
    """
    root = pathlib.Path(option.get_option("cache_dir")).resolve()
    for item in items:
        if not isinstance(item, str) or not item or pathlib.Path(item).is_absolute() or ".." in pathlib.Path(item).parts:
            raise TilusError(f"clear_cache: each item must be a relative path component inside the cache "
                             f"directory {root}, got {item!r}")
    target = root.joinpath(*items)
    target.mkdir(parents=True, exist_ok=True)
    for entry in target.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    return target
