"""Helpers kernel authors use next to their kernels, under Tilus's names (``tilus.utils``):

- integers: ``cdiv``, ``idiv``, ``gcd``, ``lcm``, ``prod``, ``is_power_of_two``, ``floor_log2``,
  ``nbytes_from_nbits`` (:mod:`tilus_tvm.utils.arith`);
- timing: ``benchmark_func`` (:mod:`tilus_tvm.utils.benchmark`);
- torch: ``dtype_to_torch``, ``dtype_from_torch`` (:mod:`tilus_tvm.utils.torch_dtypes`);
- the kernel cache: ``clear_cache`` (:mod:`tilus_tvm.utils.cache`);
- dependent launches: ``check_dependent_chain`` (:mod:`tilus_tvm.utils.dependent`).
"""
from tilus_tvm.utils.arith import cdiv, floor_log2, gcd, idiv, is_power_of_two, lcm, nbytes_from_nbits, prod
from tilus_tvm.utils.benchmark import benchmark_func
from tilus_tvm.utils.cache import clear_cache
from tilus_tvm.utils.dependent import check_dependent_chain
from tilus_tvm.utils.torch_dtypes import dtype_from_torch, dtype_to_torch
