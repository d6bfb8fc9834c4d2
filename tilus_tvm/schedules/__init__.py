"""The kernel library, written in the language: each module has a documented Script and a
torch-like function over it.

    from tilus_tvm.schedules import matmul, softmax, layer_norm, rms_norm, flash_attention, decode_attention
    from tilus_tvm.schedules import quantized_matmul, pack_weight, quantize_weight

Where torch is installed, ``quantized_matmul`` is also a torch custom operator (``quantized_op``), so that
``torch.compile`` traces its calls.
"""
import importlib.util as _importlib_util
from tilus_tvm.schedules.matmul import Matmul, matmul  # noqa: F401
from tilus_tvm.schedules.matmul_splitk import MatmulSplitK  # noqa: F401
from tilus_tvm.schedules.attention import FlashAttention, flash_attention  # noqa: F401
from tilus_tvm.schedules.decode_attention import DecodeAttention, DecodeCombine, decode_attention  # noqa: F401
from tilus_tvm.schedules.norms import LayerNorm, RMSNorm, layer_norm, rms_norm  # noqa: F401
from tilus_tvm.schedules.softmax import OnlineSoftmax, Softmax, softmax  # noqa: F401
from tilus_tvm.schedules.quantized_matmul import (QuantizedMatmul, pack_weight, quantize_weight,  # noqa: F401
                                                  quantized_matmul)

if _importlib_util.find_spec("torch") is not None:  # (torch is optional; the operators need it)
    from tilus_tvm.schedules import quantized_op  # noqa: F401
