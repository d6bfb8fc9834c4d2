"""One implementation of each hardware instruction: the Script backend emits mma, ldmatrix and
cp.async (with its commit/wait group instructions) through the ``tilus_tvm.intrin`` emitters that the
tensor intrinsics use, and no instruction module builds a PTX call of its own."""
from pathlib import Path

import pytest
import torch
from tvm import tirx

import tilus_tvm as tilus
import tilus_tvm.intrin as intrin
from tests.instructions.test_async_copy import Stage
from tilus_tvm.intrin import IntrinError
from tilus_tvm.schedules.matmul import Matmul

EMITTERS = ("emit_mma", "emit_ldmatrix", "emit_cp_async", "emit_cp_async_commit_group", "emit_cp_async_wait_group",
            "emit_cp_async_wait_all")
# how the calls those emitters return print in TVMScript (cp.async and its group instructions: T.ptx.cp)
PRINTED_CALLS = ("T.ptx_legacy.mma(", "T.ptx_legacy.ldmatrix(", "T.ptx.cp(")


@pytest.fixture
def emitted(monkeypatch):
    """The calls each ``tilus_tvm.intrin`` emitter returns while the test runs, by emitter name."""
    calls = {name: [] for name in EMITTERS}
    for name in EMITTERS:
        def recording(*args, _name=name, _emit=getattr(intrin, name), **kwargs):
            call = _emit(*args, **kwargs)
            calls[_name].append(call)
            return call

        monkeypatch.setattr(intrin, name, recording)
    return calls


def meta(*shape, dtype=torch.float16):
    return torch.empty(*shape, dtype=dtype, device="meta")


def assert_from_emitters(mod, emitted) -> None:
    """Every instruction call in ``mod``'s TIR is one an intrin emitter returned (loops are not
    unrolled before TVM's passes, so each call site is one emitter call)."""
    text = mod.script()
    sites = sum(text.count(printed) for printed in PRINTED_CALLS)
    assert sites > 0
    assert sites == sum(len(calls) for calls in emitted.values())


@pytest.mark.parametrize("b_layout", ["row", "col"])
def test_matmul_instructions_come_from_the_intrin_emitters(emitted, b_layout):
    n = 4096
    mod = Matmul(b_layout=b_layout).lower(n, n, n, meta(n, n), meta(n, n), meta(n, n), target="sm_90")
    for name in ("emit_mma", "emit_ldmatrix", "emit_cp_async", "emit_cp_async_commit_group",
                 "emit_cp_async_wait_group"):
        assert emitted[name], name
    assert_from_emitters(mod, emitted)


@pytest.mark.parametrize("free_early", [False, True], ids=["wait_group", "wait_all"])
def test_copy_async_instructions_come_from_the_intrin_emitters(emitted, free_early):
    mod = Stage(32, 32, free_early).lower(64, 62, meta(64, 62), meta(32, 64), target="sm_90")  # 4-byte .ca
    assert emitted["emit_cp_async"] and emitted["emit_cp_async_commit_group"]
    assert emitted["emit_cp_async_wait_all" if free_early else "emit_cp_async_wait_group"]
    assert_from_emitters(mod, emitted)


def test_instruction_modules_build_no_ptx_call_of_their_own():
    root = Path(tilus.__file__).parent
    for path in sorted((root / "instructions").glob("*.py")) + sorted((root / "backend").glob("*.py")):
        text = path.read_text()
        for needle in ("ptx_legacy", "Tb.ptx", "T.ptx", ".ptx["):
            assert needle not in text, f"{path.relative_to(root)} uses {needle}: emit it through tilus_tvm.intrin"


def test_address_of_pointers_address_typed_views_of_a_byte_pool():
    # The Script backend's shared tensors: float16 views of one uint8 pool (tvm_access_ptr rejects them).
    pool = tirx.decl_buffer((256,), "uint8", name="pool", scope="shared.dyn")
    view = tirx.decl_buffer((64,), "float16", name="view", data=pool.data, elem_offset=32, scope="shared.dyn")
    frag = tirx.decl_buffer((8,), "float16", name="frag", scope="local")
    call = intrin.emit_ldmatrix(4, True, frag, 4, view, 8, pointers="address_of")
    assert str(call.args[5]) == "T.address_of(view[8])" and int(call.args[6]) == 0  # no second offset
    src = tirx.decl_buffer((1024,), "float16", name="src")
    call = intrin.emit_cp_async(16, view, 8, src, 40, cache="cg", src_size=0, pointers="address_of")
    assert [str(a) for a in call.args[:2]] == ["T.cuda.cvta_generic_to_shared(T.address_of(view[8]))",
                                               "T.address_of(src[40])"]
    with pytest.raises(IntrinError, match="emit_ldmatrix: pointers must be 'access_ptr' or 'address_of', got 'raw'"):
        intrin.emit_ldmatrix(4, False, frag, 0, view, 0, pointers="raw")
    tile = tirx.decl_buffer((16, 16), "float16", name="tile", scope="shared")
    with pytest.raises(IntrinError, match=r"emit_ldmatrix: pointers='address_of' takes 1-D buffers .* 'tile'"):
        intrin.emit_ldmatrix(4, False, frag, 0, tile, 0, pointers="address_of")


@pytest.fixture
def private_cache(tmp_path):
    tilus.set_cache_dir(tmp_path)
    yield
    tilus.set_cache_dir(None)


def test_matmul_ptx_has_the_intrin_instructions(private_cache):
    n = 4096
    args = [torch.zeros(n, n, dtype=torch.float16) for _ in range(3)]
    ptx = Matmul().compile(n, n, n, *args, target="sm_90").ptx
    for needle in ("cp.async.cg.shared.global", "cp.async.commit_group", "cp.async.wait_group",
                   "ldmatrix.sync.aligned.m8n8.x4.shared.b16", "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16",
                   "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"):
        assert needle in ptx, needle
