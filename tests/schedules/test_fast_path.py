"""The library's torch-like functions hand every kernel tensors of the shapes its entry check expects,
so their launches take the fast path. A refused argument is still launched correctly -- the careful
path reads a contiguous tensor as the expected shape -- but at the cost of an exception and a relaunch,
hundreds of microseconds a call on the H100 (quantized_matmul's split-K sum did this). Launches are
recorded instead of run, so this runs on the CPU."""
import pytest
import torch

from tilus_tvm import schedules
from tilus_tvm.lang import arguments
from tilus_tvm.pipeline import signature
from tilus_tvm.runtime import jit
from tests.helpers import launches, private_cache  # noqa: F401 - fixtures (private_cache autouse)


def check_shapes(launches):
    assert launches
    for script, args in launches:
        kernel = jit.compile_for(script, args, "sm_90")
        bound = arguments.bind(signature(type(script)), args, type(script).__name__, require_cuda=False)
        for param, value in zip(kernel.abi.params, bound.call_args):
            if param.kind == "tensor" and param.shape is not None:
                assert tuple(value.shape) == kernel.expected_shape(param, bound.scalars), (type(script).__name__,
                                                                                           param.name)


def half(*shape):
    return torch.zeros(*shape, dtype=torch.float16)


def quantized(m):
    from tilus_tvm.schedules.quantized_matmul import pack_weight, quantized_matmul

    packed = pack_weight(torch.randint(0, 16, (4096, 256)).float(), "uint4b", 128)
    return quantized_matmul(half(m, 4096), packed, torch.ones(32, 256, dtype=torch.float16))


CASES = {
    "softmax": lambda: schedules.softmax(half(3, 100, 1000)),
    "layer_norm": lambda: schedules.layer_norm(half(5, 768), half(768), half(768), 1e-5),
    "rms_norm": lambda: schedules.rms_norm(half(2, 3, 4096), half(4096), 1e-6),
    "matmul": lambda: schedules.matmul(half(300, 256), half(256, 512)),
    "matmul_split_k": lambda: schedules.matmul(half(8, 8192), half(8192, 256)),
    "flash_attention": lambda: schedules.flash_attention(half(1, 2, 100, 64), half(1, 2, 100, 64),
                                                         half(1, 2, 100, 64), causal=True),
    "quantized_matmul_split_k": lambda: quantized(3),
    "quantized_matmul_staged": lambda: quantized(100),
    "decode_attention": lambda: schedules.decode_attention(half(2, 4, 1, 128), half(2, 4, 1000, 128),
                                                           half(2, 4, 1000, 128),
                                                           torch.tensor([5, 1000], dtype=torch.int32)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_library_launches_take_the_fast_path(name, launches):
    try:
        CASES[name]()
    except Exception as exc:  # noqa: BLE001 - report which function could not run without a GPU
        pytest.fail(f"{name} on CPU tensors with launches recorded: {type(exc).__name__}: {exc}")
    check_shapes(launches)
