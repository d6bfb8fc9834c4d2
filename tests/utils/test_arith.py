"""tilus_tvm/utils/arith.py: Tilus's integer helpers, checked against Python's math on many values."""
import doctest
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

import tilus_tvm
from tilus_tvm.errors import ScriptError
from tilus_tvm.utils import arith, cdiv, floor_log2, gcd, idiv, is_power_of_two, lcm, nbytes_from_nbits, prod


def test_doctests():
    assert doctest.testmod(arith).failed == 0


def test_the_names_tilus_programs_import_are_there():
    from tilus_tvm.utils import benchmark_func, cdiv, dtype_to_torch, gcd  # noqa: F401  (Tilus's matmul_a16wx)

    assert tilus_tvm.utils.cdiv is cdiv


@given(st.integers(0, 10**6), st.integers(1, 10**4))
def test_cdiv_is_the_ceiling_of_the_quotient(a, b):
    assert cdiv(a, b) == -(-a // b) and (cdiv(a, b) - 1) * b < a <= cdiv(a, b) * b or a == 0


def test_cdiv_builds_expressions_on_run_time_scalars():
    import tvm.sym
    from tvm import tirx

    n = tirx.Var("n", "int32")
    blocks = cdiv(n, 128)
    assert isinstance(blocks, tvm.ir.expr.Expr)
    analyzer = tvm.sym.Analyzer()
    analyzer.bind(n, tirx.const(1000, "int32"))
    assert int(analyzer.simplify(blocks)) == 8


@given(st.integers(0, 10**6), st.integers(1, 10**3))
def test_idiv_divides_exactly_or_says_why(a, b):
    if a % b == 0:
        assert idiv(a, b) * b == a
    else:
        with pytest.raises(ScriptError, match=f"idiv: {b} does not divide {a}"):
            idiv(a, b)


@given(st.lists(st.integers(0, 10**5), min_size=2, max_size=5))
def test_gcd_of_several_values(values):
    assert gcd(*values) == math.gcd(*values)


@given(st.lists(st.integers(1, 10**3), min_size=2, max_size=4))
def test_lcm_of_several_values(values):
    assert lcm(*values) == math.lcm(*values)


def test_prod_and_powers_of_two():
    assert prod([3, 5, 7]) == 105 and prod(()) == 1 and prod([2.5, 2]) == 5.0
    assert [n for n in range(-2, 70) if is_power_of_two(n)] == [1, 2, 4, 8, 16, 32, 64]
    assert [floor_log2(n) for n in (1, 2, 3, 4, 1023, 1024)] == [0, 1, 1, 2, 9, 10]
    assert nbytes_from_nbits(24) == 3


@pytest.mark.parametrize("call, message", [
    (lambda: gcd(4, 2.0), r"gcd: argument 1 must be an int, got 2.0 \(float\)"),
    (lambda: gcd(4, -2), r"gcd: argument 1 must be at least 0, got -2"),
    (lambda: lcm(0, 3), r"lcm: argument 0 must be at least 1, got 0"),
    (lambda: idiv(8, 0), r"idiv: b must be at least 1, got 0"),
    (lambda: floor_log2(0), r"floor_log2: n must be at least 1, got 0"),
    (lambda: nbytes_from_nbits(12), r"nbytes_from_nbits: 12 bits is not a whole number of bytes"),
    (lambda: is_power_of_two(True), r"is_power_of_two: n must be an int, got True"),
])
def test_bad_arguments_are_named(call, message):
    with pytest.raises(ScriptError, match=message):
        call()
