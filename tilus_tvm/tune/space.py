"""Tuning spaces: what ``@autotune`` declares, as plain data (no TVM, no torch).

A space is the product of its axes. One ``@autotune("block_m, block_n", [(64, 128), (128, 128)])``
is one axis whose choices bind ``block_m`` and ``block_n`` together; stacked decorators multiply:

    axes  [("block_m", "block_n") x 2 choices], [("stages",) x 2 choices]
    space {block_m: 64, block_n: 128, stages: 3}, {64, 128, 4}, {128, 128, 3}, {128, 128, 4}

The top decorator's axis varies slowest, so configurations come out in source order.
A configuration is a dict from ``__init__`` parameter names to values; every configuration is a
different ``__init__`` binding of the kernel class.

The tuning key buckets the run-time integer scalars (``m_size: int32``): ``bucket={"m_size": "pow2"}``
tunes once per power of two, ``"exact"`` (the default) once per value, an int ``s`` once per
multiple of ``s`` (rounded up), a callable maps the value itself, and None leaves the scalar out of
the key.
"""
from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, Sequence, Union

from tilus_tvm.errors import ScriptError

Bucket = Union[str, int, Callable[[int], int], None]
BUCKET_NAMES = ("exact", "pow2")


@dataclass(frozen=True)
class Axis:
    """One ``@autotune``: ``names`` bound together, one tuple of values per choice."""

    names: tuple[str, ...]
    choices: tuple[tuple[Any, ...], ...]


@dataclass(frozen=True)
class TuningSpace:
    """The product of the axes, and the tuning settings given with them.

    ``buckets``: run-time scalar name -> :data:`Bucket`; ``max_trials``: configurations measured
    at most when the kernel tunes itself at a launch (``tune(max_trials=...)`` overrides it);
    ``opt_in``: tuned parameters left out of ``__init__`` take their defaults, and only
    ``tilus_tvm.tune.tunable(...)`` / ``tilus_tvm.tune(...)`` tune (the library kernels' choice).
    """

    axes: tuple[Axis, ...] = ()
    buckets: Mapping[str, Bucket] = field(default_factory=dict)
    max_trials: Optional[int] = None
    opt_in: bool = False

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for axis in self.axes for name in axis.names)

    def __len__(self) -> int:
        return math.prod(len(axis.choices) for axis in self.axes)

    def configs(self, pinned: Optional[Mapping[str, Any]] = None) -> list[dict[str, Any]]:
        """Every configuration, in source order. ``pinned`` values replace the choices of their names
        (duplicates that leaves are dropped), as when ``Matmul(block_m=64)`` fixes one of them.

        >>> space = TuningSpace((Axis(("a", "b"), ((1, 2), (3, 4))), Axis(("c",), ((5,), (6,)))))
        >>> space.configs({"a": 1})
        [{'a': 1, 'b': 2, 'c': 5}, {'a': 1, 'b': 2, 'c': 6}, {'a': 1, 'b': 4, 'c': 5}, {'a': 1, 'b': 4, 'c': 6}]
        """
        pinned = dict(pinned or {})
        per_axis = []
        for axis in self.axes:
            choices = []
            for choice in axis.choices:
                choice = tuple(pinned.get(name, value) for name, value in zip(axis.names, choice))
                if choice not in choices:
                    choices.append(choice)
            per_axis.append([dict(zip(axis.names, choice)) for choice in choices])
        return [{k: v for part in parts for k, v in part.items()} for parts in itertools.product(*per_axis)]

    def with_axis(self, axis: Axis, buckets: Optional[Mapping[str, Bucket]], max_trials: Optional[int],
                  owner: str, opt_in: Optional[bool] = None) -> "TuningSpace":
        """This space with ``axis`` in front (decorators apply bottom-up) and the settings merged."""
        repeated = set(axis.names) & set(self.names)
        if repeated:
            raise ScriptError(f"autotune: {owner} tunes {', '.join(sorted(repeated))} in more than one @autotune")
        merged = dict(self.buckets)
        for name, bucket in (buckets or {}).items():
            check_bucket(name, bucket)
            if name in merged and merged[name] != bucket:
                raise ScriptError(f"autotune: {owner} gives two buckets for {name!r}: {merged[name]!r} and {bucket!r}")
            merged[name] = bucket
        if max_trials is not None and self.max_trials is not None and max_trials != self.max_trials:
            raise ScriptError(f"autotune: {owner} gives max_trials twice ({self.max_trials} and {max_trials})")
        if opt_in is not None and not isinstance(opt_in, bool):
            raise ScriptError(f"autotune: opt_in must be True or False, got {opt_in!r}")
        return TuningSpace((axis,) + self.axes, merged, self.max_trials if max_trials is None else max_trials,
                           self.opt_in or bool(opt_in))


def parse_axis(names: str, values: Sequence[Any], owner: str = "autotune") -> Axis:
    """An :class:`Axis` from ``@autotune``'s arguments, checked.

    ``names`` is one name or several separated by commas; with one name each value is a choice as
    it is, with several each value is a sequence giving one value per name.

    >>> parse_axis("block_m, block_n", [(64, 128), (128, 128)])
    Axis(names=('block_m', 'block_n'), choices=((64, 128), (128, 128)))
    """
    if not isinstance(names, str):
        raise ScriptError(f"{owner}: the names must be a string like 'block_m' or 'block_m, block_n', got {names!r}")
    parsed = tuple(name.strip() for name in names.split(","))
    if not all(name.isidentifier() for name in parsed):
        raise ScriptError(f"{owner}: {names!r} must be parameter names separated by commas")
    if len(set(parsed)) != len(parsed):
        raise ScriptError(f"{owner}: {names!r} names a parameter twice")
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) and not hasattr(values, "__iter__"):
        raise ScriptError(f"{owner}({names!r}): the values must be a list of choices, got {values!r}")
    values = list(values)
    if not values:
        raise ScriptError(f"{owner}({names!r}): no choices given")
    choices = []
    for value in values:
        if len(parsed) == 1:
            choice = (value,)
        else:
            if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or len(value) != len(parsed):
                raise ScriptError(f"{owner}({names!r}): each choice must give {len(parsed)} values "
                                  f"({', '.join(parsed)}), got {value!r}")
            choice = tuple(value)
        if choice in choices:
            raise ScriptError(f"{owner}({names!r}): the choice {value!r} is given twice")
        choices.append(choice)
    return Axis(parsed, tuple(choices))


def check_bucket(name: str, bucket: Bucket) -> None:
    if bucket is None or callable(bucket) or bucket in BUCKET_NAMES:
        return
    if isinstance(bucket, int) and not isinstance(bucket, bool) and bucket > 0:
        return
    raise ScriptError(f"autotune: bucket for {name!r} must be 'exact', 'pow2', a positive int, a callable or None, "
                      f"got {bucket!r}")


def bucket_value(bucket: Bucket, value: int) -> Optional[int]:
    """The value that stands for ``value`` in the tuning key (None: left out of it).

    >>> [bucket_value("pow2", v) for v in (1, 5, 64, 65)], bucket_value(128, 200), bucket_value("exact", 7)
    ([1, 8, 64, 128], 256, 7)
    """
    if bucket is None:
        return None
    if bucket == "exact":
        return value
    if bucket == "pow2":
        return 1 if value <= 1 else 1 << (int(value) - 1).bit_length()
    if callable(bucket):
        return int(bucket(value))
    return -(-value // bucket) * bucket


# ---- values in keys and records ---------------------------------------------------------------
def encode_value(value: Any) -> Any:
    """A JSON value standing for a hyper-parameter: JSON scalars as they are, dtypes by name, tuples as
    lists, anything else by ``repr``."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [encode_value(v) for v in value]
    name = getattr(value, "name", None)
    if isinstance(name, str) and type(value).__name__ == "DataType":
        return name
    return repr(value)


def encode_config(config: Mapping[str, Any]) -> str:
    """The JSON text a configuration is recorded as (``{"block_m": 128, "block_n": 256}``)."""
    return json.dumps({name: encode_value(value) for name, value in config.items()})


def describe_config(config: Mapping[str, Any]) -> str:
    """``block_m=128, block_n=256``."""
    return ", ".join(f"{name}={encode_value(value)!r}" if isinstance(encode_value(value), str) else
                     f"{name}={encode_value(value)}" for name, value in config.items())
