"""CuTe layouts for tilus-tvm kernel authors: ``import tilus_tvm.cute as cute``.

The implementation lives in :mod:`tilus_tvm.layout.cute`; this module re-exports its public names.

>>> import tilus_tvm.cute as cute
>>> str(cute.complement(cute.Layout(4, 2), 24))
'(2,3):(1,8)'
"""
from tilus_tvm.layout.cute import *  # noqa: F401,F403
from tilus_tvm.layout.cute import __all__  # noqa: F401
