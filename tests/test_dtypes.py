"""The dtype table (tilus_tvm/dtypes.py) checked against TVM, torch and numpy themselves.

Every registered entry must agree with the libraries it names: bit widths, signedness, kinds,
and every spelling must lead back to the same entry.
"""
import copy
import doctest
import math
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest
import torch
import tvm

import tilus_tvm
from tilus_tvm import dtypes
from tilus_tvm.dtypes import (DataType, PointerType, as_dtype, bfloat16, boolean, float16, float32, float64,
                              float_type, int8, int16, int32, int64, int_type, register, registered_dtypes, uint8,
                              uint16, uint32, uint64)
from tilus_tvm.errors import ScriptError

# independent expectations: name -> (nbits, signed, kind, exponent bits, mantissa bits)
EXPECTED = {
    "bool": (8, False, "bool", None, None),
    "int8": (8, True, "int", None, None),
    "int16": (16, True, "int", None, None),
    "int32": (32, True, "int", None, None),
    "int64": (64, True, "int", None, None),
    "uint8": (8, False, "uint", None, None),
    "uint16": (16, False, "uint", None, None),
    "uint32": (32, False, "uint", None, None),
    "uint64": (64, False, "uint", None, None),
    "float16": (16, True, "float", 5, 10),
    "bfloat16": (16, True, "float", 8, 7),
    "float32": (32, True, "float", 8, 23),
    "float64": (64, True, "float", 11, 52),
}
# the built-in rows; sub-byte rows are registered on first use (tests below, or other modules)
TABLE = [as_dtype(name) for name in EXPECTED]
WITH_TORCH = [t for t in TABLE if t.torch_name is not None]
WITH_NUMPY = [t for t in TABLE if t.numpy_name is not None]
INTEGERS = [t for t in TABLE if t.is_integer]
TVM_KIND = {"int": tvm.DataTypeCode.INT, "uint": tvm.DataTypeCode.UINT, "bool": tvm.DataTypeCode.BOOL}
NUMPY_KIND = {"int": "i", "uint": "u", "float": "f", "bool": "b"}


def ids(types):
    return [t.name for t in types]


def test_doctests():
    assert doctest.testmod(dtypes).failed == 0


def test_table_holds_the_builtin_types():
    assert set(EXPECTED) <= set(ids(registered_dtypes()))
    builtins = [boolean, int8, int16, int32, int64, uint8, uint16, uint32, uint64, float16, bfloat16, float32, float64]
    assert [t.name for t in builtins] == list(EXPECTED)
    assert all(t is as_dtype(t.name) for t in builtins)
    assert tilus_tvm.float16 is float16


def test_every_registered_entry_is_consistent():
    """Whatever is in the table now (built-ins and sub-byte types registered so far) agrees with itself."""
    int_type(3), float_type(2, 1)  # at least one of each sub-byte family
    for dtype in registered_dtypes():
        assert as_dtype(dtype.name) is dtype
        assert dtype.name in EXPECTED or dtype.nbits < 8 or dtype.name.startswith("float8_")
        if dtype.tvm_name is not None:
            assert (tvm.DataType(dtype.tvm_name).bits, tvm.DataType(dtype.tvm_name).lanes) == (dtype.nbits, 1)
            assert as_dtype(dtype.tvm_name) is dtype
        if dtype.is_float:
            assert int(dtype.signed) + dtype.exponent_bits + dtype.mantissa_bits == dtype.nbits


@pytest.mark.parametrize("dtype", TABLE, ids=ids(TABLE))
def test_bits_signedness_and_format(dtype):
    nbits, signed, kind, exponent_bits, mantissa_bits = EXPECTED[dtype.name]
    assert (dtype.nbits, dtype.signed, dtype.kind) == (nbits, signed, kind)
    assert (dtype.exponent_bits, dtype.mantissa_bits) == (exponent_bits, mantissa_bits)
    assert dtype.is_float == (kind == "float")
    assert dtype.is_integer == (kind in ("int", "uint"))


@pytest.mark.parametrize("dtype", TABLE, ids=ids(TABLE))
def test_tvm_name_round_trip(dtype):
    tvm_dtype = tvm.DataType(dtype.tvm_name)
    assert (tvm_dtype.bits, tvm_dtype.lanes) == (dtype.nbits, 1)
    assert str(tvm_dtype) == dtype.tvm_name
    if dtype.kind in TVM_KIND:
        assert tvm_dtype.type_code == TVM_KIND[dtype.kind]
    assert as_dtype(tvm_dtype) is dtype
    assert as_dtype(dtype.tvm_name) is dtype


@pytest.mark.parametrize("dtype", WITH_TORCH, ids=ids(WITH_TORCH))
def test_torch_dtype_agrees(dtype):
    torch_dtype = dtype.torch_dtype
    assert torch.tensor([], dtype=torch_dtype).element_size() * 8 == dtype.nbits
    assert torch_dtype.is_floating_point == dtype.is_float
    assert torch_dtype.is_signed == dtype.signed
    assert as_dtype(torch_dtype) is dtype
    assert as_dtype(str(torch_dtype)) is dtype  # "torch.float16"


def test_torch_aliases_and_missing_ones():
    assert as_dtype(torch.half) is float16 and as_dtype(torch.float) is float32 and as_dtype(torch.long) is int64
    assert set(ids(WITH_TORCH)) == set(EXPECTED)
    with pytest.raises(ScriptError, match="uint4b has no counterpart as a torch dtype"):
        _ = int_type(4, signed=False).torch_dtype


@pytest.mark.parametrize("dtype", WITH_NUMPY, ids=ids(WITH_NUMPY))
def test_numpy_dtype_agrees(dtype):
    numpy_dtype = dtype.numpy_dtype
    assert numpy_dtype.itemsize * 8 == dtype.nbits
    assert numpy_dtype.kind == NUMPY_KIND[dtype.kind]
    assert as_dtype(numpy_dtype) is dtype
    assert as_dtype(numpy_dtype.type) is dtype  # the scalar type, e.g. np.float16


def test_numpy_has_no_bfloat16():
    assert set(ids(WITH_NUMPY)) == set(EXPECTED) - {"bfloat16"}
    assert as_dtype(np.bool_) is boolean and as_dtype(np.dtype(bool)) is boolean
    with pytest.raises(ScriptError, match="bfloat16 has no counterpart as a numpy dtype"):
        _ = bfloat16.numpy_dtype


@pytest.mark.parametrize("dtype", INTEGERS, ids=ids(INTEGERS))
def test_integer_range(dtype):
    info = torch.iinfo(dtype.torch_dtype)
    assert (dtype.min_value, dtype.max_value) == (info.min, info.max)
    assert (dtype.min_value, dtype.max_value) == (int(np.iinfo(dtype.numpy_name).min),
                                                  int(np.iinfo(dtype.numpy_name).max))


def test_sub_byte_integer_range():
    assert (int_type(4).min_value, int_type(4).max_value) == (-8, 7)
    assert (int_type(4, signed=False).min_value, int_type(4, signed=False).max_value) == (0, 15)
    assert (int_type(1).min_value, int_type(1).max_value) == (-1, 0)
    assert (int_type(7, signed=False).min_value, int_type(7, signed=False).max_value) == (0, 127)


@pytest.mark.parametrize("dtype", [float16, bfloat16, boolean], ids=str)
def test_range_of_a_non_integer_is_an_error(dtype):
    with pytest.raises(ScriptError, match=f"{dtype.name}.min_value: only integer types"):
        _ = dtype.min_value
    with pytest.raises(ScriptError, match=f"{dtype.name}.max_value"):
        _ = dtype.max_value


# ---- sizes ----------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", TABLE, ids=ids(TABLE))
def test_nbytes_of_byte_sized_types(dtype):
    assert dtype.nbytes == dtype.nbits // 8
    assert dtype.storage_bytes(7) == 7 * dtype.nbytes


@pytest.mark.parametrize("num_elements, nbits, expected", [
    (3, 4, 2), (4, 6, 3), (5, 6, 4), (1, 6, 1), (9, 1, 2), (8, 1, 1), (8, 3, 3), (0, 4, 0), (3, 16, 6), (5, 8, 5),
])
def test_storage_bytes(num_elements, nbits, expected):
    dtype = int_type(nbits) if nbits <= 8 else float16
    assert dtype.nbits == nbits
    assert dtype.storage_bytes(num_elements) == expected


def test_storage_bytes_of_sub_byte_floats():
    float6 = float_type(3, 2)
    assert float6.nbits == 6
    assert float6.storage_bytes(4) == 3 and float6.storage_bytes(3) == 3 and float6.storage_bytes(1) == 1
    assert float_type(2, 1).storage_bytes(3) == 2  # float4_e2m1: 12 bits
    for nbits in range(1, 8):
        for count in range(0, 40):
            assert int_type(nbits).storage_bytes(count) == math.ceil(count * nbits / 8)


def test_storage_bytes_of_an_expression():
    n = tvm.tirx.Var("n", "int32")
    expr = float_type(3, 2).storage_bytes(n)
    for count in (0, 1, 4, 5, 33):
        analyzer = tvm.sym.Analyzer()
        analyzer.bind(n, count)
        assert int(analyzer.simplify(expr)) == math.ceil(count * 6 / 8)


def test_storage_bytes_rejects_a_negative_count():
    with pytest.raises(ScriptError, match="num_elements must be >= 0, got -1"):
        int8.storage_bytes(-1)


@pytest.mark.parametrize("dtype", [int_type(4), int_type(1, signed=False), float_type(3, 2), float_type(2, 1)],
                         ids=str)
def test_nbytes_of_a_sub_byte_type_is_an_error(dtype):
    with pytest.raises(ScriptError, match=rf"{dtype.name} is {dtype.nbits} bits.*{dtype.name}.storage_bytes"):
        _ = dtype.nbytes


# ---- constructors, registration, look-up ----------------------------------------------------
def test_constructors_return_the_table_entry():
    assert float_type(5, 10) is float16 and float_type(8, 7) is bfloat16
    assert float_type(8, 23) is float32 and float_type(11, 52) is float64
    assert int_type(8) is int8 and int_type(64) is int64 and int_type(16, signed=False) is uint16
    assert float_type(3, 2) is float_type(3, 2) is as_dtype("float6_e3m2")
    assert int_type(4) is as_dtype("int4b") and int_type(4, signed=False) is as_dtype("uint4b")


@pytest.mark.parametrize("name, exponent_bits, mantissa_bits, signed", [
    ("float8_e4m3", 4, 3, True), ("float8_e5m2", 5, 2, True), ("float7_e5m1", 5, 1, True),
    ("float7_e4m2", 4, 2, True), ("float7_e3m3", 3, 3, True), ("float7_e2m4", 2, 4, True),
    ("float6_e4m1", 4, 1, True), ("float6_e3m2", 3, 2, True), ("float6_e2m3", 2, 3, True),
    ("float5_e3m1", 3, 1, True), ("float5_e2m2", 2, 2, True), ("float4_e2m1", 2, 1, True),
    ("float3_e1m1", 1, 1, True), ("float8_e8m0", 8, 0, False),
])
def test_low_precision_floats_take_tilus_names(name, exponent_bits, mantissa_bits, signed):
    """Tilus's float types, each also an attribute of the package under its name (``tilus.float3_e1m1``)."""
    import tilus_tvm

    dtype = as_dtype(name)
    assert getattr(tilus_tvm, name) is dtype
    assert dtype is float_type(exponent_bits, mantissa_bits, signed)
    assert (dtype.name, dtype.kind, dtype.signed) == (name, "float", signed)
    assert dtype.nbits == int(signed) + exponent_bits + mantissa_bits
    assert (dtype.exponent_bits, dtype.mantissa_bits) == (exponent_bits, mantissa_bits)


@pytest.mark.parametrize("nbits", range(1, 8))
@pytest.mark.parametrize("signed", [True, False])
def test_low_precision_integers_take_tilus_names(nbits, signed):
    dtype = int_type(nbits, signed)
    assert dtype.name == f"{'' if signed else 'u'}int{nbits}b" and dtype.short == f"{'i' if signed else 'u'}{nbits}"
    import tilus_tvm

    assert getattr(tilus_tvm, dtype.name) is dtype  # (tilus.int3b, tilus.uint7b, ...)
    assert (dtype.nbits, dtype.signed, dtype.kind) == (nbits, signed, "int" if signed else "uint")
    tvm_dtype = tvm.DataType(dtype.tvm_name)
    assert (tvm_dtype.bits, tvm_dtype.lanes, tvm_dtype.type_code) == (nbits, 1, TVM_KIND[dtype.kind])
    assert as_dtype(dtype.name) is dtype
    assert dtype in registered_dtypes()


def test_constructor_arguments_are_checked():
    with pytest.raises(ScriptError, match="int_type: nbits must be 1..7, 8, 16, 32 or 64, got 12"):
        int_type(12)
    with pytest.raises(ScriptError, match="float_type: exponent_bits must be an int >= 1, got 0"):
        float_type(0, 3)
    with pytest.raises(ScriptError, match="float_type: mantissa_bits must be an int >= 0, got -1"):
        float_type(4, -1)
    with pytest.raises(ScriptError, match=r"float_type: e11m53 \(signed=True\) is wider than 64 bits"):
        float_type(11, 53)


def test_register():
    assert register(DataType("float16", 16, "float", "f16", True, tvm_name="float16", torch_name="float16",
                             numpy_name="float16", ptx="f16", ptx_mma="fp16", exponent_bits=5,
                             mantissa_bits=10)) is float16
    message = r"'float16' is already registered with other facts: short='h' \(registered: 'f16'\), tvm_name=None"
    with pytest.raises(ScriptError, match=message):
        register(DataType("float16", 16, "float", "h", True, exponent_bits=5, mantissa_bits=10))
    with pytest.raises(ScriptError, match="TVM dtype 'int32' already belongs to int32"):
        register(DataType("my_int", 32, "int", "mi", True, tvm_name="int32"))
    with pytest.raises(ScriptError, match="float format .* already belongs to bfloat16"):
        register(DataType("brain16", 16, "float", "b16", True, exponent_bits=8, mantissa_bits=7))
    assert "my_int" not in ids(registered_dtypes()) and "brain16" not in ids(registered_dtypes())


@pytest.mark.parametrize("fields, message", [
    (("f5", 5, "float", "f5", True), "a float needs exponent_bits and mantissa_bits"),
    (("f5", 5, "float", "f5", True, None, None, None, None, None, 2, 1), r"sign 1 \+ exponent 2 \+ mantissa 1"),
    (("i5", 5, "int", "i5", False), "kind 'int' contradicts signed=False"),
    (("i5", 5, "integer", "i5", True), "kind must be one of int, uint, float, bool"),
    (("i0", 0, "int", "i0", True), "nbits must be a positive int"),
    (("u5", 5, "uint", "u5", False, None, None, None, None, None, 2, 3), "only floats have exponent/mantissa"),
])
def test_malformed_rows_are_rejected(fields, message):
    with pytest.raises(ScriptError, match=message):
        DataType(*fields)


@pytest.mark.parametrize("value", ["float", "f16", "float16x4", "torch.complex64", float, torch.complex64,
                                   np.dtype("complex64"), "float9_e4m3", "int8b"], ids=repr)
def test_unknown_spellings_are_errors(value):
    with pytest.raises(ScriptError, match=r"unknown data type .*expected a DataType, one of bool, int8"):
        as_dtype(value)


# ---- values ---------------------------------------------------------------------------------
def test_mma_ptx_names():
    expected = {"float16": ("f16", "fp16"), "bfloat16": ("bf16", "bf16"), "float32": ("f32", "fp32"),
                "float64": ("f64", "fp64"), "int8": ("s8", "int8"), "uint8": ("u8", "uint8"),
                "int32": ("s32", "int32"), "uint32": ("u32", "uint32"), "bool": (None, None)}
    for name, (ptx, ptx_mma) in expected.items():
        assert (as_dtype(name).ptx, as_dtype(name).ptx_mma) == (ptx, ptx_mma)


def test_identity_survives_copy_and_pickle():
    for dtype in (float16, boolean, int_type(4), float_type(3, 2)):
        assert copy.deepcopy(dtype) is dtype and copy.copy(dtype) is dtype
        assert pickle.loads(pickle.dumps(dtype)) is dtype
        assert pickle.loads(pickle.dumps(~dtype)).dtype is dtype


def test_hashable_and_pointer_types():
    table = {float16: "half", int_type(4): "nibble"}
    assert table[as_dtype("float16")] == "half" and table[as_dtype("int4b")] == "nibble"
    assert ~float16 == PointerType(float16) and repr(~float16) == "~float16" and repr(float16) == "float16"
    assert len({~float16, ~as_dtype(torch.float16)}) == 1


def test_call_makes_tvm_constants_and_casts():
    assert (str(float16(1.5).ty), float16(1.5).value) == ("float16", 1.5)
    assert (str(int32(3).ty), int32(3).value) == ("int32", 3)
    assert str(bfloat16(tvm.tirx.Var("n", "int32")).ty) == "bfloat16"
    with pytest.raises(ScriptError, match="float6_e3m2 has no counterpart as a TVM dtype"):
        float_type(3, 2)(1.0)


# ---- import hygiene ---------------------------------------------------------------------------
def test_dtypes_module_imports_no_tvm_torch_or_numpy():
    """``tilus_tvm/dtypes.py`` alone, in a fresh interpreter.

    The package's ``__init__`` pulls in TVM through other modules, so this stubs the package and loads
    only dtypes.py (and errors.py). The package-level check (``import tilus_tvm.layout`` loads no TVM
    and no torch) lives with the layout tests, not here.
    """
    package_dir = os.path.dirname(tilus_tvm.__file__)
    script = (
        "import sys, types\n"
        "package = types.ModuleType('tilus_tvm')\n"
        f"package.__path__ = [{package_dir!r}]\n"
        "sys.modules['tilus_tvm'] = package\n"
        "import tilus_tvm.dtypes as d\n"
        "assert d.float16.storage_bytes(3) == 6 and d.as_dtype('int4b').nbits == 4\n"
        "loaded = sorted(m for m in ('tvm', 'tvm_ffi', 'torch', 'numpy') if m in sys.modules)\n"
        "print(','.join(loaded) or 'none')\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "none"


def test_tilus_short_names_are_the_table_entries():
    """Tilus's short names (``f16``, ``i4``, ``u2``, ``f6e3m2``, ...) are package attributes bound to the table's entries,
    each the entry's ``short`` name."""
    import tilus_tvm
    from tilus_tvm import dtype_aliases

    for name in dtype_aliases.__all__:
        value = getattr(tilus_tvm, name)
        assert value is getattr(dtype_aliases, name)
        if name != "void_p":
            assert value.short == name and as_dtype(value.name) is value
    assert tilus_tvm.i4 is tilus_tvm.int4b and tilus_tvm.u7 is as_dtype("uint7b")
    assert tilus_tvm.f6e3m2 is float_type(3, 2) and tilus_tvm.f3e1m1 is float_type(1, 1)
    assert len([n for n in dtype_aliases.__all__ if n[0] in "iu" and n[1:].isdigit() and int(n[1:]) < 8]) == 14
