"""How the library functions (``matmul()``, ``flash_attention()``, ``softmax()``, ``layer_norm()``,
``rms_norm()``) choose between their hand-picked tables and tuned configurations (no TVM, no torch).

Each library kernel class carries an ``@autotune(..., opt_in=True)`` space that contains its
hand-picked configurations; ``Matmul()`` is still the default configuration. A function called with
``tune=True`` -- or with ``tune=None`` (the default) after ``tilus_tvm.tune.configure(library=True)``
or with ``TILUS_TVM_TUNE_LIBRARY=1`` -- launches the tunable instance of its kernel instead: the
configuration recorded in the tuning database for the call's key, tuned at the first call of a key
that has none (MetaSchedule's builder and runner, as any ``@autotune`` launch), and the same kernel
at once for later calls.

    from tilus_tvm.schedules import matmul, rms_norm
    y = matmul(x, w.t(), tune=True)           # this call: the tuned choice
    tilus_tvm.tune.configure(library=True)    # every library call in this process
"""
from __future__ import annotations

from typing import Any, Optional

from tilus_tvm.errors import LaunchError
from tilus_tvm.tune.options import defaults

_TUNABLES: dict = {}  # (class, fixed arguments) -> its tunable instance (whose launch table is reused)


def use_tuned(tune: Optional[bool], function: str) -> bool:
    """Whether ``function`` launches the tuned configuration: ``tune`` if given, else the process default."""
    if tune is None:
        return defaults().library
    if not isinstance(tune, bool):
        raise LaunchError(f"{function}: tune must be True, False or None (the process default), got {tune!r}")
    return tune


def tuned_kernel(cls: type, **fixed: Any):
    """The tunable instance of the ``@autotune`` class ``cls`` with the untuned ``__init__`` arguments
    ``fixed`` (one per class and arguments, so its per-shape launch cache lives as long as the process)."""
    from tilus_tvm.tune.decorator import tunable

    key = (cls, tuple(sorted((name, repr(value)) for name, value in fixed.items())))
    kernel = _TUNABLES.get(key)
    if kernel is None:
        kernel = _TUNABLES[key] = tunable(cls, **fixed)
    return kernel
