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
