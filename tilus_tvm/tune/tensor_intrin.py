"""Importing ``tvm.s_tir.tensor_intrin`` in seconds rather than minutes.

MetaSchedule's ``TuneContext`` imports ``tvm.s_tir.tensor_intrin`` when the first one is made (the
tuner's cost model needs one; ``tune_tir`` makes them). That module defines about 250 TVMScript
functions, and each ``T.prim_func`` decorator calls ``inspect.stack()``, which looks up the module
of every frame on the stack. Frames of frozen modules -- the import machinery (file
``<frozen importlib._bootstrap>``), ``runpy`` under ``python -m`` -- map to no module's ``__file__``,
so each of their look-ups misses ``inspect``'s cache and rescans ``sys.modules``: some 20,000 scans
of 2,000 modules in a process that has imported torch, 70 to 100 seconds on a 2-core machine.

:func:`import_tensor_intrin` maps the pseudo-file of every frozen module loaded to that module in
``inspect``'s cache (``inspect.modulesbyfile``) for the duration of the import, which then takes a
few seconds. The look-ups that were misses find the module the frame runs in; a frozen module has
no source for ``inspect`` to read there, so the frame information TVMScript gets is what it got
before.
"""
from __future__ import annotations

import contextlib
import importlib
import inspect
import sys
from typing import Iterator

MODULE = "tvm.s_tir.tensor_intrin"


def _frozen_modules() -> dict[str, str]:
    """``{pseudo-file: module name}`` of the frozen modules loaded (their code's file is
    ``<frozen NAME>``, NAME the module's own ``__name__``, e.g. ``importlib._bootstrap``)."""
    frozen = {}
    for module in list(sys.modules.values()):
        spec = getattr(module, "__spec__", None)
        name = getattr(module, "__name__", None)
        if getattr(spec, "origin", None) == "frozen" and isinstance(name, str) and sys.modules.get(name) is module:
            frozen[f"<frozen {name}>"] = name
    return frozen


@contextlib.contextmanager
def frozen_frames_known() -> Iterator[None]:
    """Within the block, ``inspect.getmodule`` finds the module of a frozen module's frame in its
    cache; afterwards the cache is as it was (entries ``inspect`` added meanwhile stay)."""
    cache = getattr(inspect, "modulesbyfile", None)
    if not isinstance(cache, dict):  # another Python's inspect: only slower
        yield
        return
    added = []
    for filename, name in _frozen_modules().items():
        if filename not in cache:
            cache[filename] = name
            added.append(filename)
    try:
        yield
    finally:
        for filename in added:
            cache.pop(filename, None)


def import_tensor_intrin() -> None:
    """Import ``tvm.s_tir.tensor_intrin`` (a no-op when it is imported already); see the module docstring."""
    if MODULE in sys.modules:
        return
    with frozen_frames_known():
        importlib.import_module(MODULE)
