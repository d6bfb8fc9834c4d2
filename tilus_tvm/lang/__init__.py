"""The kernel language: the ``Script`` base class, its instructions, and the frontend."""
from tilus_tvm.lang.script import Attributes, Dim3, Script
