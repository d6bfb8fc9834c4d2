"""tilus-tvm: a tile-level GPU kernel language on Apache TVM."""
from setuptools import find_packages, setup

setup(
    name="tilus-tvm",
    version="0.1.0",
    description="Tilus-style tile programming for NVIDIA GPUs, lowered to TVM TIR",
    packages=find_packages(include=["tilus_tvm", "tilus_tvm.*"]),
    python_requires=">=3.10",
    install_requires=[
        "apache-tvm==0.27.0.post1",
        # 0.1.15.x crashes TVM 0.27's s_tir tensorize; keep the FFI pinned with TVM.
        "apache-tvm-ffi==0.1.14.post0",
        "numpy",
        "tqdm",
    ],
    extras_require={
        # torch: install `torch==2.13.0` first (CPU wheel); an unpinned torch pulls CUDA wheels.
        # xgboost-cpu provides the `xgboost` module MetaSchedule needs, without the NCCL download.
        # pytest-xdist: the README's and CI's `pytest -n auto` (one worker per core).
        "test": ["torch", "xgboost-cpu", "pytest", "pytest-xdist", "hypothesis", "pandas", "nvidia-cutlass", "cloudpickle",
                 "psutil", "tornado"],
        "tune": ["xgboost", "cloudpickle", "psutil", "tornado"],
        "viz": ["matplotlib"],
    },
)
