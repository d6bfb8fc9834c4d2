"""tilus_tvm/utils/torch_dtypes.py: dtype_to_torch / dtype_from_torch through the one dtype table."""
import doctest

import pytest
import torch

import tilus_tvm as tilus
from tilus_tvm.dtypes import registered_dtypes
from tilus_tvm.errors import ScriptError
from tilus_tvm.utils import dtype_from_torch, dtype_to_torch, torch_dtypes


def test_doctests():
    assert doctest.testmod(torch_dtypes).failed == 0


@pytest.mark.parametrize("dtype", [d for d in registered_dtypes() if d.torch_name is not None], ids=str)
def test_round_trip_for_every_type_torch_has(dtype):
    torch_dtype = dtype_to_torch(dtype)
    assert isinstance(torch_dtype, torch.dtype) and str(torch_dtype) == f"torch.{dtype.torch_name}"
    assert dtype_from_torch(torch_dtype) is dtype
    assert dtype_to_torch(dtype.name) is torch_dtype  # a name works too


def test_tilus_short_names_and_torch_aliases():
    assert dtype_to_torch(tilus.f16) is torch.float16 and dtype_to_torch(tilus.bf16) is torch.bfloat16
    assert dtype_from_torch(torch.half) is tilus.float16 and dtype_from_torch(torch.float) is tilus.float32
    assert dtype_from_torch("bfloat16") is tilus.bfloat16 and dtype_from_torch(None) is None
    assert dtype_from_torch(tilus.int8) is tilus.int8


def test_types_torch_lacks_are_refused_by_name():
    with pytest.raises(ScriptError, match="dtype_to_torch: int4b has no torch dtype"):
        dtype_to_torch(tilus.int4b)
    with pytest.raises(ScriptError, match="unknown data type"):
        dtype_to_torch("float17")
