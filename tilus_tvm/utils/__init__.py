"""Helpers kernel authors use next to their kernels: ``cdiv`` and ``benchmark_func``."""
from tilus_tvm.utils.benchmark import benchmark_func
from tilus_tvm.utils.arith import cdiv
