"""``@autotune``: a Script class whose hyper-parameters are chosen by measurement (no TVM, no torch).

    @tilus.autotune("block_m, block_n", [(64, 128), (128, 128), (128, 256)])
    @tilus.autotune("stages", [3, 4])
    class Matmul(tilus.Script):
        def __init__(self, block_m: int, block_n: int, stages: int, block_k: int = 64): ...

    kernel = Matmul()               # the tuned parameters are left out (Tilus semantics)
    kernel(m, n, k, a, b, c)        # first call for this key: tune 6 configurations, then launch
    Matmul(stages=3)                # a tuned parameter given is pinned: 3 configurations left
    Matmul(128, 256, 3)             # every tuned parameter given: an ordinary kernel

The decorator keeps the class a Script subclass and changes what its instances do when created
without every tuned parameter: such an instance (a *tunable*) holds a :class:`Tunable` instead of
hyper-parameters, and its launch, ``compile``, ``lower`` and ``tile_program`` go to the kernel of
the configuration chosen for the arguments' key (:mod:`tilus_tvm.tune.engine`): the one recorded in
the database, or, the first time, the best one measured. A configuration is an ``__init__``
binding: ``Matmul(**fixed, **config)`` builds it.

Decorate the class that defines ``__call__``; a subclass of a tuned class that defines its own
kernel is an ordinary Script again unless decorated itself.
"""
from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Mapping, Optional, Sequence

from tilus_tvm.errors import ScriptError
from tilus_tvm.lang.script import Script
from tilus_tvm.tune.space import Bucket, TuningSpace, encode_config, parse_axis

SPACE_ATTR = "_tilus_autotune_space"  # on the class: its TuningSpace
TUNABLE_ATTR = "_tilus_autotune"  # on a tunable instance: its Tunable (hyper_parameters() skips _tilus*)
ORIGINAL_INIT = "__tilus_original_init__"

# Configurations chosen in this process: (class, tuning key JSON, pinned JSON) -> configuration
_CHOSEN: dict[tuple[type, str, str], dict[str, Any]] = {}


def autotune(names: str, values: Sequence[Any], *, bucket: Optional[Mapping[str, Bucket]] = None,
             max_trials: Optional[int] = None) -> Callable[[type], type]:
    """Declare tuned ``__init__`` parameters of a Script class: ``names`` (one name, or several
    separated by commas) take each of ``values`` (a value, or a sequence of one value per name).

    Stacked decorators multiply: the space is the product of every ``@autotune`` on the class.
    ``bucket`` maps run-time integer scalars of ``__call__`` to how the tuning key rounds them
    (``"exact"``, the default; ``"pow2"``; an int step; a callable; None: not in the key).
    ``max_trials`` bounds the configurations measured when a launch tunes (larger spaces are
    searched with a cost model). Both may be given on any one of the stacked decorators.

    Raises ScriptError for names that are not ``__init__`` parameters, a name tuned twice, choices
    of the wrong length and empty or repeated choices.
    """
    axis = parse_axis(names, values)
    if max_trials is not None and (not isinstance(max_trials, int) or isinstance(max_trials, bool) or max_trials < 1):
        raise ScriptError(f"autotune: max_trials must be a positive int, got {max_trials!r}")

    def decorate(cls: type) -> type:
        if not (isinstance(cls, type) and issubclass(cls, Script)):
            raise ScriptError(f"autotune decorates a tilus_tvm.Script subclass, got {cls!r}")
        parameters = inspect.signature(_original_init(cls)).parameters
        accepts_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
        unknown = [name for name in axis.names if name not in parameters and not accepts_any]
        if unknown:
            known = ", ".join(name for name in list(parameters)[1:]) or "none"
            raise ScriptError(f"autotune: {cls.__name__}.__init__ has no parameter {', '.join(map(repr, unknown))}; "
                              f"its parameters are: {known}")
        space = cls.__dict__.get(SPACE_ATTR, TuningSpace())
        setattr(cls, SPACE_ATTR, space.with_axis(axis, bucket, max_trials, cls.__name__))
        if ORIGINAL_INIT not in cls.__dict__:
            _install(cls)
        return cls

    return decorate


def space_of(cls: type) -> Optional[TuningSpace]:
    """The tuning space of an ``@autotune`` class (None for other classes)."""
    for klass in cls.__mro__:
        if SPACE_ATTR in klass.__dict__:
            return klass.__dict__[SPACE_ATTR]
    return None


def tunable_of(kernel: Any) -> Optional["Tunable"]:
    """The :class:`Tunable` of a tunable instance (None for an ordinary kernel instance)."""
    return getattr(kernel, "__dict__", {}).get(TUNABLE_ATTR)


class Tunable:
    """A tunable instance's state: its class, the space left after pinning, and the fixed arguments.

    ``fixed`` are the ``__init__`` arguments given that are not tuned (part of the tuning key);
    ``pinned`` the tuned ones given (they narrow the space, the key stays the same).
    """

    def __init__(self, cls: type, space: TuningSpace, pinned: dict[str, Any], fixed: dict[str, Any]):
        self.cls, self.space, self.pinned, self.fixed = cls, space, pinned, fixed
        self._launch_kernels: dict[tuple, Script] = {}  # arguments' dtypes, shapes and values -> kernel

    @property
    def kernel_path(self) -> str:
        """``module:QualName`` of the class (how the CLI and the database name it)."""
        return f"{self.cls.__module__}:{self.cls.__qualname__}"

    def configs(self) -> list[dict[str, Any]]:
        return self.space.configs(self.pinned)

    def instantiate(self, config: Mapping[str, Any]) -> Script:
        """The kernel of one configuration: ``cls(**fixed, **config)``."""
        return self.cls(**self.fixed, **config)

    def kernel_for(self, args: tuple, target: Any = None, **options: Any) -> Script:
        """The kernel of the configuration chosen for ``args`` on ``target`` (tuning if no record has it)."""
        from tilus_tvm.tune import engine

        key = engine.tuning_key(self, args, target)
        memo = (self.cls, key.json, encode_config(self.pinned))
        config = _CHOSEN.get(memo)
        if config is None:
            config = engine.choose(self, args, target, key=key, **options).config
            _CHOSEN[memo] = config
        return self.instantiate(config)

    def remember(self, key_json: str, config: Mapping[str, Any]) -> None:
        _CHOSEN[(self.cls, key_json, encode_config(self.pinned))] = dict(config)

    def launch(self, args: tuple) -> None:
        try:
            signature = tuple((a.dtype, a.shape) if hasattr(a, "data_ptr") else (type(a), a) for a in args)
            kernel = self._launch_kernels.get(signature)
        except TypeError:  # an unhashable argument: no fast path
            signature, kernel = None, None
        if kernel is None:
            kernel = self.kernel_for(args)
            if signature is not None:
                self._launch_kernels[signature] = kernel
        kernel(*args)


def _original_init(cls: type) -> Callable:
    init = cls.__init__
    return getattr(init, ORIGINAL_INIT, init)


def _install(cls: type) -> None:
    """Wrap ``__init__`` (tunable instances) and route launches and inspection through the tuner."""
    original = _original_init(cls)
    signature = inspect.signature(original)
    params = list(signature.parameters.values())
    var_keyword = next((p.name for p in params if p.kind is inspect.Parameter.VAR_KEYWORD), None)
    required = [p.name for p in params[1:] if p.default is inspect.Parameter.empty
                and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)]

    @functools.wraps(original)
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        space = space_of(type(self))
        try:
            given = dict(signature.bind_partial(self, *args, **kwargs).arguments)
        except TypeError as exc:
            raise TypeError(f"{type(self).__name__}(): {exc}") from None
        given.pop(params[0].name)
        if var_keyword is not None:
            given.update(given.pop(var_keyword, {}))
        pinned = {name: given.pop(name) for name in space.names if name in given}
        if len(pinned) == len(space.names):
            original(self, *args, **kwargs)
            return
        missing = [name for name in required if name not in given and name not in space.names]
        if missing:
            raise TypeError(f"{type(self).__name__}(): missing argument(s) {', '.join(missing)} (not tuned)")
        object.__setattr__(self, TUNABLE_ATTR, Tunable(type(self), space, pinned, given))

    setattr(__init__, ORIGINAL_INIT, original)
    cls.__init__ = __init__
    cls.__call__ = _launch
    cls.compile = _compile
    cls.lower = _lower
    cls.tile_program = _tile_program


def _launch(self, *args: Any) -> None:
    tunable = tunable_of(self)
    if tunable is None:
        return Script._launch(self, *args)
    return tunable.launch(args)


def _compile(self, *args: Any, target: Any = None):
    tunable = tunable_of(self)
    if tunable is None:
        return Script.compile(self, *args, target=target)
    return tunable.kernel_for(args, target).compile(*args, target=target)


def _inspection_target(target: Any) -> Any:
    """As ``Script.lower``: without a target, the current GPU's, else sm_80 (lowering needs no GPU)."""
    if target is not None:
        return target
    try:
        import torch

        return None if torch.cuda.is_available() else "sm_80"
    except ImportError:
        return "sm_80"


def _lower(self, *args: Any, target: Any = None, dps: bool = False):
    tunable = tunable_of(self)
    if tunable is None:
        return Script.lower(self, *args, target=target, dps=dps)
    target = _inspection_target(target)
    return tunable.kernel_for(args, target).lower(*args, target=target, dps=dps)


def _tile_program(self, *args: Any, target: Any = None):
    tunable = tunable_of(self)
    if tunable is None:
        return Script.tile_program(self, *args, target=target)
    target = _inspection_target(target)
    return tunable.kernel_for(args, target).tile_program(*args, target=target)
