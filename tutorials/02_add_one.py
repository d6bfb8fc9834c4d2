"""Seed tutorial, program 2: AddOneKernel.

The seed's main() passed CPU tensors to the kernel, and Tilus printed garbage. tilus-tvm refuses
with a LaunchError naming the argument; main() shows that, then runs with tensors on the GPU.
"""
import torch
import tilus_tvm as tilus
from tilus_tvm import float32, int32
from tilus_tvm.utils import cdiv


class AddOneKernel(tilus.Script):
    def __init__(self, block_n, warps):
        super().__init__()
        self.block_n: int = block_n
        self.warps: int = warps

    def __call__(self, n: int32, a_ptr: ~float32, b_ptr: ~float32):
        self.attrs.blocks = cdiv(n, self.block_n)  # define the number of thread blocks
        self.attrs.warps = self.warps  # define the number of warps per block

        # get the offset for the current block
        offset = self.blockIdx.x * self.block_n

        # create two global tensors for input and output, given their pointers
        ga = self.global_view(a_ptr, shape=[n], dtype=float32)
        gb = self.global_view(b_ptr, shape=[n], dtype=float32)

        # load the inputs from global memory into a register tensor
        a = self.load_global(ga, offsets=[offset], shape=[self.block_n])

        # perform the computation: add 1 to each element in the register tensor
        b = a + 1.0

        # store the result back to global memory
        self.store_global(gb, b, offsets=[offset])


def main():
    # define the kernel
    kernel = AddOneKernel(block_n=128, warps=4)

    # create input and output tensors
    n = 16
    a = torch.arange(n, dtype=torch.float32)
    b = torch.empty_like(a)

    try:
        kernel(n, a, b)  # the seed's call: CPU tensors
    except tilus.LaunchError as err:
        print("refused:", err)

    if not torch.cuda.is_available():
        print("no CUDA GPU here: the kernel compiles (kernel.compile(n, a, b, target='sm_90')) but cannot run")
        return
    a, b = a.cuda(), b.cuda()
    kernel(n, a, b)

    print(a)
    print(b)


if __name__ == "__main__":
    main()
