"""The kernel library, written in the language: each module has a documented Script and a
torch-like function over it.

    from tilus_tvm.schedules import matmul
"""
from tilus_tvm.schedules.matmul import Matmul, matmul  # noqa: F401
