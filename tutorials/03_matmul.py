"""Seed tutorial, program 3: Matmul with 4 warps (unchanged apart from the imports)."""
import math
import torch
import tilus_tvm as tilus
from tilus_tvm import float16, float32, int32
from tilus_tvm.utils import cdiv


class Matmul(tilus.Script):
    def __init__(self):
        super().__init__()
        self.block_m = 64
        self.block_n = 128
        self.block_k = 16

    def __call__(
        self,
        m_size: int32,
        n_size: int,
        k_size: int,
        a_ptr: ~float16,
        b_ptr: ~float16,
        c_ptr: ~float16,
    ):
        self.attrs.blocks = [
            cdiv(m_size, self.block_m),  # the x dimension size of the grid
            cdiv(n_size, self.block_n),  # the y dimension size of the grid
        ]
        self.attrs.warps = 4

        offset_m: int32 = self.block_m * self.blockIdx.x
        offset_n: int32 = self.block_n * self.blockIdx.y

        # create two global tensors `ga` and `gb`
        ga = self.global_view(a_ptr, dtype=float16, shape=[m_size, k_size])
        gb = self.global_view(b_ptr, dtype=float16, shape=[k_size, n_size])

        # create a register tensor `acc` for accumulating the results.
        acc = self.register_tensor(dtype=float32, shape=[self.block_m, self.block_n], init=0.0)

        # iterate over the k dimension in blocks of size `block_k`.
        for k in range(cdiv(k_size, self.block_k)):
            # calculate the offset for the current block in the k dimension
            offset_k = k * self.block_k

            # load a block of matrix A and B into register tensors `a` and `b`.
            a = self.load_global(
                ga, offsets=[offset_m, offset_k], shape=[self.block_m, self.block_k]
            )
            b = self.load_global(
                gb, offsets=[offset_k, offset_n], shape=[self.block_k, self.block_n]
            )

            # perform the dot product: acc = a @ b + acc
            self.dot(a, b, acc, out=acc)

        # after the loop, we cast the accumulated result `acc` to float16 type
        acc_f16 = self.cast(acc, dtype=float16)

        # store it back to the output matrix C.
        gc = self.global_view(c_ptr, dtype=float16, shape=[m_size, n_size])
        self.store_global(gc, acc_f16, offsets=[offset_m, offset_n])


def main():
    kernel = Matmul()

    for k_size, n_size in [(4096, 4096), (4096, 12288)]:
        for m_size in [1, 4, 8, 16]:
            a = torch.randn(m_size, k_size, dtype=torch.float16, device="cuda") / math.sqrt(k_size)
            b = torch.randn(k_size, n_size, dtype=torch.float16, device="cuda") / math.sqrt(k_size)
            c = torch.empty(m_size, n_size, dtype=torch.float16, device="cuda")

            kernel(m_size, n_size, k_size, a, b, c)
            torch.testing.assert_close(c, torch.matmul(a, b), rtol=1e-2, atol=1e-2)


if __name__ == "__main__":
    main()
