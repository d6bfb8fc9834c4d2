"""Between tilus-tvm data types and torch dtypes, through the one dtype table (:mod:`tilus_tvm.dtypes`)."""
from __future__ import annotations

from typing import Any, Optional

from tilus_tvm.dtypes import DataType, as_dtype
from tilus_tvm.errors import ScriptError


def dtype_to_torch(dtype: Any):
    """The ``torch.dtype`` of a data type (a :class:`~tilus_tvm.dtypes.DataType` or its name).

    Raises :class:`~tilus_tvm.errors.ScriptError` for types torch has no dtype for (``int4b``,
    ``float6_e3m2``, ...): keep those packed, see :func:`tilus_tvm.from_torch`.

    >>> import torch
    >>> from tilus_tvm import bfloat16
    >>> dtype_to_torch(bfloat16) is torch.bfloat16
    True
    """
    resolved = as_dtype(dtype)
    if resolved.torch_name is None:
        raise ScriptError(f"dtype_to_torch: {resolved.name} has no torch dtype; sub-byte and 6-bit types are kept "
                          f"packed in uint8 tensors (tilus_tvm.from_torch)")
    return resolved.torch_dtype


def dtype_from_torch(torch_dtype: Any) -> Optional[DataType]:
    """The data type of a ``torch.dtype`` (also accepts a name such as ``"float16"``, or a DataType,
    returned as it is); None for None.

    >>> import torch
    >>> dtype_from_torch(torch.float16).name
    'float16'
    """
    if torch_dtype is None:
        return None
    if isinstance(torch_dtype, str) and not torch_dtype.startswith("torch."):
        torch_dtype = "torch." + torch_dtype
    return as_dtype(torch_dtype)
