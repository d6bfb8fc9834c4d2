"""``@autotune``: a Script class whose hyper-parameters are chosen by measurement (no TVM, no torch).

    @tilus.autotune("block_m, block_n", [(64, 128), (128, 128), (128, 256)])
    @tilus.autotune("stages", [3, 4])
    class Matmul(tilus.Script):
        def __init__(self, block_m: int, block_n: int, stages: int, block_k: int = 64): ...

    kernel = Matmul()               # the tuned parameters are left out (Tilus semantics)
    kernel(m, n, k, a, b, c)        # first call for this key: tune 6 configurations, then launch
    Matmul(stages=3)                # a tuned parameter given is pinned: 3 configurations left
    Matmul(128, 256, 3)             # every tuned parameter given: an ordinary kernel

The decorator keeps the class a Script subclass and changes only what ``__init__`` makes when a
tuned parameter is left out: an instance of a *tunable* subclass (same name; ``isinstance`` of the
class) holding a :class:`Tunable` instead of hyper-parameters, whose launch, ``compile``, ``lower``
and ``tile_program`` go to the kernel of the configuration chosen for the arguments' key
(:mod:`tilus_tvm.tune.engine`): the one recorded in the database, or, the first time, the best one
measured. A configuration is an ``__init__`` binding: ``Matmul(**fixed, **config)`` builds it.
An instance given every tuned parameter is an instance of the class itself, launched by the plain
``Script`` launch: the decorator adds nothing to that path.

``@autotune(..., opt_in=True)`` (what the library kernels use): tuned parameters left out take
their ``__init__`` defaults, so ``Matmul()`` stays the default configuration, and tuning is asked
for: ``tilus_tvm.tune.tunable(Matmul, b_layout="col")`` (a tunable instance) or
``tilus_tvm.tune(Matmul(b_layout="col"), *args)`` (ahead of time: the parameters given explicitly
are kept, the tuned ones left to their defaults are tuned).

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
GIVEN_ATTR = "_tilus_autotune_given"  # on an instance of an opt-in class: (pinned, fixed) given explicitly
TUNABLE_CLASS_ATTR = "_tilus_tunable_class"  # on a decorated class: the class of its tunable instances
TUNABLE_OF_ATTR = "_tilus_tunable_of"  # on that class: the decorated class
ORIGINAL_INIT = "__tilus_original_init__"
SPLIT_ATTR = "_tilus_split"  # on the __init__ wrapper: (args, kwargs) -> (pinned, fixed, missing untuned)

# Configurations chosen in this process: (class, tuning key JSON, pinned JSON) -> configuration
_CHOSEN: dict[tuple[type, str, str], dict[str, Any]] = {}


def autotune(names: str, values: Sequence[Any], *, bucket: Optional[Mapping[str, Bucket]] = None,
             max_trials: Optional[int] = None, opt_in: Optional[bool] = None) -> Callable[[type], type]:
    """Declare tuned ``__init__`` parameters of a Script class: ``names`` (one name, or several
    separated by commas) take each of ``values`` (a value, or a sequence of one value per name).

    Stacked decorators multiply: the space is the product of every ``@autotune`` on the class.
    ``bucket`` maps run-time integer scalars of ``__call__`` to how the tuning key rounds them
    (``"exact"``, the default; ``"pow2"``; an int step; a callable; None: not in the key).
    ``max_trials`` bounds the configurations measured when a launch tunes (larger spaces are
    searched with a cost model). ``opt_in=True``: tuned parameters left out take their ``__init__``
    defaults and instances tune only when asked (:func:`tunable`, ``tilus_tvm.tune(...)``). These
    settings may be given on any one of the stacked decorators.

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
        setattr(cls, SPACE_ATTR, space.with_axis(axis, bucket, max_trials, cls.__name__, opt_in))
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


def tunable(kernel: Any, *args: Any, **kwargs: Any) -> Script:
    """A tunable instance of an ``@autotune`` class, whether or not it is ``opt_in``.

    ``tunable(Matmul, b_layout="col")``: the tuned parameters given are pinned, the others are tuned
    (their ``__init__`` defaults are not used), the untuned arguments are fixed. ``tunable(kernel)``
    of an instance: the instance itself when it is tunable; for an instance of an ``opt_in`` class,
    the tunable made of the arguments it was created with (``tunable(Matmul(b_layout="col"))`` is
    the same as above). The first launch for a key tunes (or reads the database); later launches
    go to the chosen kernel.

        kernel = tilus.tune.tunable(Matmul, b_layout="col")
        kernel(m, n, k, a, w, c)            # tunes at the first call of each key

    Raises ScriptError for a class without ``@autotune`` and for an instance created with every
    tuned parameter given; TypeError for ``__init__`` arguments it does not take.
    """
    if isinstance(kernel, type):
        cls = kernel.__dict__.get(TUNABLE_OF_ATTR, kernel)
        split = getattr(cls.__init__, SPLIT_ATTR, None)
        if space_of(cls) is None or split is None:
            raise ScriptError(f"tunable: {kernel.__name__} has no @autotune parameters"
                              + ("" if space_of(cls) is None else " of its own __init__ (decorate it itself)"))
        pinned, fixed, missing = split(args, kwargs)
        if missing:
            raise TypeError(f"{cls.__name__}(): missing argument(s) {', '.join(missing)} (not tuned)")
        return _new_tunable(cls, pinned, fixed)
    if args or kwargs:
        raise TypeError(f"tunable: arguments go with a class (tunable(Matmul, b_layout='col')), got an instance of "
                        f"{type(kernel).__name__} and arguments")
    if tunable_of(kernel) is not None:
        return kernel
    cls = type(kernel)
    given = getattr(kernel, "__dict__", {}).get(GIVEN_ATTR)
    if given is None:
        if space_of(cls) is None:
            raise ScriptError(f"tune: {cls.__name__} has no @autotune parameters")
        raise ScriptError(f"tune: this {cls.__name__} was created with every tuned parameter given "
                          f"({', '.join(space_of(cls).names)}); create it without them, e.g. {cls.__name__}()")
    pinned, fixed = given
    return _new_tunable(cls, dict(pinned), dict(fixed))


class Tunable:
    """A tunable instance's state: its class, the space left after pinning, and the fixed arguments.

    ``fixed`` are the ``__init__`` arguments given that are not tuned; with the defaults of the
    untuned ones not given they are ``key_arguments``, part of the tuning key (``Matmul()`` and
    ``Matmul(b_layout="row")`` share their records). ``pinned`` are the tuned ones given (they
    narrow the space, the key stays the same).
    """

    def __init__(self, cls: type, space: TuningSpace, pinned: dict[str, Any], fixed: dict[str, Any]):
        self.cls, self.space, self.pinned, self.fixed = cls, space, pinned, fixed
        parameters = list(inspect.signature(_original_init(cls)).parameters.values())[1:]
        self.key_arguments = {p.name: p.default for p in parameters if p.default is not inspect.Parameter.empty
                              and p.name not in space.names and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                                         inspect.Parameter.KEYWORD_ONLY)}
        self.key_arguments.update(fixed)
        self._launch_kernels: dict[tuple, Script] = {}  # arguments' dtypes, shapes and values -> kernel
        self._kernels: dict[str, Script] = {}  # configuration JSON -> its kernel (compiled once per key)

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
        config_json = encode_config(config)
        kernel = self._kernels.get(config_json)
        if kernel is None:
            kernel = self._kernels[config_json] = self.instantiate(config)
        return kernel

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
    """Wrap ``__init__``: an instance missing a tuned parameter becomes tunable (unless ``opt_in``)."""
    original = _original_init(cls)
    signature = inspect.signature(original)
    params = list(signature.parameters.values())
    var_keyword = next((p.name for p in params if p.kind is inspect.Parameter.VAR_KEYWORD), None)
    required = [p.name for p in params[1:] if p.default is inspect.Parameter.empty
                and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)]

    def split(owner: type, args: tuple, kwargs: dict) -> tuple[dict, dict, list]:
        """(pinned: tuned arguments given, fixed: untuned ones given, untuned required ones missing)."""
        try:
            given = dict(signature.bind_partial(None, *args, **kwargs).arguments)
        except TypeError as exc:
            raise TypeError(f"{owner.__name__}(): {exc}") from None
        given.pop(params[0].name)
        if var_keyword is not None:
            given.update(given.pop(var_keyword, {}))
        names = space_of(owner).names
        pinned = {name: given.pop(name) for name in names if name in given}
        missing = [name for name in required if name not in given and name not in names]
        return pinned, given, missing

    @functools.wraps(original)
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        owner = type(self)
        space = space_of(owner)
        pinned, fixed, missing = split(owner, args, kwargs)
        if len(pinned) == len(space.names):
            original(self, *args, **kwargs)
            return
        if space.opt_in:
            original(self, *args, **kwargs)  # the defaults (or the TypeError of a missing argument)
            object.__setattr__(self, GIVEN_ATTR, (pinned, fixed))
            return
        if missing:
            raise TypeError(f"{owner.__name__}(): missing argument(s) {', '.join(missing)} (not tuned)")
        base = owner.__dict__.get(TUNABLE_OF_ATTR, owner)
        object.__setattr__(self, "__class__", _tunable_class(base))
        object.__setattr__(self, TUNABLE_ATTR, Tunable(base, space, pinned, fixed))

    setattr(__init__, ORIGINAL_INIT, original)
    setattr(__init__, SPLIT_ATTR, lambda args, kwargs, owner=cls: split(owner, args, kwargs))
    cls.__init__ = __init__


def _new_tunable(cls: type, pinned: dict, fixed: dict) -> Script:
    kernel = _tunable_class(cls).__new__(_tunable_class(cls))
    object.__setattr__(kernel, TUNABLE_ATTR, Tunable(cls, space_of(cls), pinned, fixed))
    return kernel


def _tunable_class(cls: type) -> type:
    """The class of ``cls``'s tunable instances: a subclass whose launch and inspection go through the
    tuner. Made once per class; the decorated class itself keeps ``Script``'s own methods."""
    made = cls.__dict__.get(TUNABLE_CLASS_ATTR)
    if made is None:
        # No __call__ in the namespace: Script.__init_subclass__ must keep the class's kernel function.
        made = type(cls.__name__, (cls,), {"__module__": cls.__module__, "__qualname__": cls.__qualname__,
                                           "__doc__": cls.__doc__, TUNABLE_OF_ATTR: cls})
        made.__call__ = _launch
        made.compile = _compile
        made.lower = _lower
        made.tile_program = _tile_program
        setattr(cls, TUNABLE_CLASS_ATTR, made)
    return made


def _launch(self, *args: Any) -> None:
    tunable = tunable_of(self)
    if tunable is None:  # type(kernel)(...) with every tuned parameter: an ordinary kernel after all
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
