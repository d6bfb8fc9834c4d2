"""The docstring examples of the CuTe package, the ThunderKittens layouts and the bridges run."""
import doctest
import importlib

import pytest

MODULES = [
    "tilus_tvm.cute",
    "tilus_tvm.layout.cute.int_tuple",
    "tilus_tvm.layout.cute.layout",
    "tilus_tvm.layout.cute.algebra",
    "tilus_tvm.layout.cute.tiling",
    "tilus_tvm.layout.cute.composed",
    "tilus_tvm.layout.cute.printing",
    "tilus_tvm.layout.thunderkittens",
    "tilus_tvm.layout.bridges",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    # print_layout's example table ends its column-number line with a space
    results = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert results.failed == 0
    assert results.attempted > 0 or name == "tilus_tvm.layout.cute.int_tuple"
