"""ldmatrix atoms as the planner uses them: each atom's register layout must be what the instruction
delivers when lanes pass the addresses its ``lane_address`` gives (checked by simulating ldmatrix)."""
import pytest

from tilus_tvm.instructions.shared_memory import ReorderedLdmatrix, _atoms


def delivered(atom, lane: int, register: int, element: int) -> tuple[int, int]:
    """Stored tile index lane ``lane`` receives in ``element`` of 32-bit ``register`` (16-bit data):
    matrix ``register``'s rows are at the addresses lanes ``8 * register + r`` give."""
    def row_start(r):
        return atom.lane_address(8 * register + r)

    if atom.trans:  # element (row 2 * (lane % 4) + element, column lane // 4) of the stored matrix
        r0, c0 = row_start(2 * (lane % 4) + element)
        return r0, c0 + lane // 4
    r0, c0 = row_start(lane // 4)  # row lane // 4, columns 2 * (lane % 4) + element
    return r0, c0 + 2 * (lane % 4) + element


@pytest.mark.parametrize("num", [1, 2, 4])
@pytest.mark.parametrize("trans", [False, True])
def test_atom_layouts_match_the_instruction(num, trans):
    atoms = _atoms(num, trans, 16)
    assert len(atoms) == (2 if num > 1 else 1) and any(isinstance(a, ReorderedLdmatrix) for a in atoms) == (num > 1)
    for atom in atoms:
        for lane in range(32):
            for register in range(num):
                for element in range(2):
                    assert atom.layout.logical(lane, 2 * register + element) == delivered(atom, lane, register, element)


def simulate_plan(inst, plan):
    """Every (thread, register slot) of ``inst``'s output as ``plan``'s ldmatrix instructions fill it, against the
    output layout: the lanes pass the addresses ``plan.tile_index`` gives, and each lane receives what ldmatrix
    delivers (rows of the stored tile; a transposed plan's stored rows run along the tile's second-to-last
    dimension). Returns the number of slots checked."""
    out = inst.output.layout
    atom, lead = plan.atom, plan.lead
    slots = atom.layout.local_size

    def stored(index):
        index = list(index)
        return index[:lead] + index[lead:][::-1] if plan.transposed else index

    checked = 0
    for warp in range(out.num_threads // 32):
        for group in range(plan.outer.local_size):
            for lane in range(32):
                for register in range(atom.num):
                    for element in range(2):
                        if atom.trans:
                            start = stored(plan.tile_index(warp, group, 8 * register + 2 * (lane % 4) + element))
                            start[-1] += lane // 4
                        else:
                            start = stored(plan.tile_index(warp, group, 8 * register + lane // 4))
                            start[-1] += 2 * (lane % 4) + element
                        got = tuple(stored(start))
                        want = out.logical(warp * 32 + lane, group * slots + 2 * register + element)
                        assert got == tuple(want), (warp, group, lane, register, element, got, want)
                        checked += 1
    return checked


@pytest.mark.parametrize("k_groups", [1, 2])
def test_plans_of_batched_tiles_deliver_their_layout(k_groups):
    """The ldmatrix plans of a kernel's shared loads, simulated lane by lane: every register slot receives the
    element its layout says, for 2-D tiles and for a batch of tiles over groups of warps (QuantizedMatmul with
    k_groups and staged activations: [k_groups, kt, block_m] read through a permuted view, one tile a group)."""
    import torch
    from tilus_tvm import dtypes
    from tilus_tvm.instructions.shared_memory import ldmatrix_plan
    from tilus_tvm.ir import inst as ir
    from tilus_tvm.ir.stmt import instructions
    from tilus_tvm.schedules.quantized_matmul import QuantizedMatmul
    from tilus_tvm.schedules.quantized_weight import WeightFormat

    fmt = WeightFormat(dtypes.uint4b, 1024, 512, 128)
    kernel = QuantizedMatmul(fmt, block_m=16, stage_activations=True, stages=2, weight_stages=3,
                             release_barriers=True, fixed_slots=True, k_groups=k_groups)
    meta = lambda *shape, dtype=torch.float16: torch.empty(*shape, dtype=dtype, device="meta")  # noqa: E731
    program = kernel.tile_program(16, meta(16, 1024), meta(*fmt.storage_shape, dtype=torch.int32), meta(8, 512),
                                  meta(8, 512), meta(16, 512), meta(1, dtype=torch.float32), target="sm_90a")
    loads = [inst for inst in instructions(program.body) if isinstance(inst, ir.LoadShared)
             and inst.output.dtype.nbits == 16]
    assert loads and all(len(inst.output.shape) == (3 if k_groups > 1 else 2) for inst in loads)
    for inst in loads:
        plan = ldmatrix_plan(inst)
        assert plan is not None and plan.lead == k_groups // 2
        assert simulate_plan(inst, plan) == inst.output.layout.num_threads * inst.output.layout.local_size
