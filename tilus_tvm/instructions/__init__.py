"""Instructions by family: each module registers, per target family, an instruction's layout rule,
its scratch requirement and its emitter (see :mod:`tilus_tvm.instructions.registry`).

    allocate.py        AllocateRegister, AllocateShared, FreeShared, GlobalView, GlobalSubview
    elementwise.py     Unary, Binary, Where, Assign
    cast.py            Cast (the low-precision conversion rules of cast_rules.py, fast paths)
    packed_memory.py   loads and stores of packed low-precision tiles (for global_memory / shared_memory)
    global_memory.py   LoadGlobal, StoreGlobal
    shared_memory.py   LoadShared (ldmatrix when the layouts allow), StoreShared
    async_copy.py      CopyAsync (cp.async), CopyAsyncCommitGroup, CopyAsyncWaitGroup, CopyAsyncWaitAll
    reduce.py          Reduce
    dot.py             Dot (mma.sync atoms, CUDA cores)
    convert_layout.py  ConvertLayout
    misc.py            Sync, Printf
    print_tensor.py    PrintTensor
    views.py           ReshapeRegister, PermuteRegister, SliceRegister, ViewRegister, SliceAssignRegister,
                       TensorItemPtr
    register_bits.py   RegisterView (every per-thread bit view, free ViewRegisters too), AllocateRegister
                       and ConvertLayout of packed tensors
    scan.py            Scan
    wgmma.py           Wgmma (Hopper's wgmma.mma_async), WgmmaFence, WgmmaCommitGroup, WgmmaWaitGroup,
                       FenceProxyAsync (sm_90)
    tma.py             TmaLoad (cp.async.bulk.tensor, tensor maps encoded on the host), MbarrierInit,
                       MbarrierWait, MbarrierArrive (sm_90)
    grid_dependency.py GridDependencyWait, LaunchDependents (programmatic dependent launch, sm_90)

Importing this package registers all of them.
"""
from tilus_tvm.instructions import (allocate, async_copy, cast, convert_layout, dot, elementwise,  # noqa: F401
                                    global_memory, misc, reduce, shared_memory)
from tilus_tvm.instructions import print_tensor  # noqa: F401
from tilus_tvm.instructions import grid_dependency, scan, tma, views, wgmma  # noqa: F401
from tilus_tvm.instructions.registry import InstructionImpl, lookup, register, registered  # noqa: F401
