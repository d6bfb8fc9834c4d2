"""tilus_tvm.intrin on the CPU: the registry, the emitters, and ordinary TVM schedules tensorized with
the tilus.* intrinsics, compiled to PTX (and, once, to a cubin, which runs ptxas) with nvcc."""
import doctest
import importlib
import itertools
import re
import subprocess
import sys

import pytest
import tvm
import tvm_ffi
from tvm import tirx
from tvm.s_tir import TensorIntrin

import tilus_tvm.intrin as intrin
from tests.intrin.matmul import (MATMUL_DTYPES, cuda_source, nvcc_compile, schedule_matmul, te_matmul,
                                 warp_mma_kernel)
from tilus_tvm.intrin import IntrinError
from tilus_tvm.layout.atoms import get_ldmatrix_atom, get_mma_atom
from tilus_tvm.layout.register import all_indices

F16_F32 = get_mma_atom("float16", "float16", "float32")


# ---- registry ---------------------------------------------------------------------------------
def _expand(pattern: str) -> set[str]:
    """``tilus.x_{a,b}[_t]`` -> {tilus.x_a, tilus.x_b, tilus.x_a_t, tilus.x_b_t}."""
    parts = re.split(r"(\{[^}]*\}|\[[^\]]*\])", pattern)
    choices = [p[1:-1].split(",") if p.startswith("{") else ["", p[1:-1]] if p.startswith("[") else [p]
               for p in parts]
    return {"".join(combo) for combo in itertools.product(*choices)}


def test_names_are_sorted_and_the_documented_set():
    names = intrin.names()
    assert names == sorted(names)
    documented = set()
    for pattern in re.findall(r"``(tilus\.[a-z][^`]*)``", intrin.__doc__):
        documented |= _expand(pattern)
    assert set(names) == documented
    assert len(names) == 4 + 3 + 9 + 30 + 16  # mma, fill, store (3 scopes), ldmatrix (shared, shared.dyn), cp.async
    for name in ["tilus.mma_m16n8k16_f16f16f32", "tilus.mma_m16n8k16_bf16bf16f32", "tilus.mma_m16n8k16_f16f16f16",
                 "tilus.mma_m16n8k32_s8s8s32", "tilus.mma_fill_m16n8_f32", "tilus.mma_store_m16n8_s32_shared",
                 "tilus.ldmatrix_x1_f16", "tilus.ldmatrix_x2_trans_bf16", "tilus.ldmatrix_x4_trans_f16",
                 "tilus.ldmatrix_x4_s8", "tilus.cp_async_4B_ca_f16", "tilus.cp_async_8B_ca_f32",
                 "tilus.cp_async_16B_cg_f16", "tilus.cp_async_16B_ca_s8"]:
        assert name in names


@pytest.mark.parametrize("name", intrin.names())
def test_registered_and_parses(name):
    registered = TensorIntrin.get(name)
    spec = intrin.spec(name)
    assert registered is not None
    assert tvm_ffi.structural_equal(registered.desc, spec.desc)
    assert tvm_ffi.structural_equal(tvm.script.from_source(spec.desc.script()), spec.desc)
    # impl: text round trip (a parsed tvm_access_ptr differs from Buffer.access_ptr's in its call
    # type); TVM 0.27 prints mma_fill_legacy without the dtype its parser requires, so not the fills
    if "mma_fill" not in name:
        assert tvm.script.from_source(spec.impl.script()).script() == spec.impl.script()

    def signature(func):  # in TVM 0.27 a PrimFunc's buffer parameters are the buffers themselves
        return [(b.name, str(b.dtype), b.scope(), [int(s) for s in b.shape]) for b in func.params]

    assert signature(spec.desc) == signature(spec.impl)
    assert spec.operands.count("[") == len(spec.desc.params)


def test_spec_rows():
    mma = intrin.spec("tilus.mma_m16n8k32_s8s8s32")
    assert mma.ptx == "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32"
    assert mma.operands == "A[32, 16] s8 warp, B[32, 8] s8 warp, C[32, 4] s32 warp"
    assert "get_mma_atom('int8', 'int8', 'int32', k=32)" in mma.layout
    ld = intrin.spec("tilus.ldmatrix_x2_trans_f16")
    assert ld.ptx == "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16"
    assert ld.operands == "W[32, 4] f16 warp, S[16, 8] f16 shared"
    assert intrin.spec("tilus.cp_async_8B_ca_f16").operands == "D[4] f16 shared, S[4] f16 global"
    with pytest.raises(IntrinError, match="no tensor intrinsic named 'tilus.mma_m16n8k16_f32'; intrinsics of "
                                          "that family: tilus.mma_fill_m16n8_f16"):
        intrin.spec("tilus.mma_m16n8k16_f32")


def test_reimport_is_idempotent():
    before = {name: TensorIntrin.get(name) for name in intrin.names()}
    importlib.reload(intrin)
    assert intrin.names() == sorted(before)
    assert all(TensorIntrin.get(name).same_as(first) for name, first in before.items())


def test_importing_tilus_tvm_imports_neither_tvm_nor_intrin():
    code = "import sys, tilus_tvm; print(sorted(m for m in ('tvm', 'tilus_tvm.intrin') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("module", ["builder", "cp_async", "fragment", "ldmatrix", "mma"])
def test_docstring_examples(module):
    results = doctest.testmod(importlib.import_module(f"tilus_tvm.intrin.{module}"))
    assert results.attempted >= 1 and results.failed == 0


# ---- fragments --------------------------------------------------------------------------------
@pytest.mark.parametrize("layout", [F16_F32.a_layout, F16_F32.b_layout, F16_F32.c_layout,
                                    get_mma_atom("int8", "int8", "int32").a_layout,
                                    get_mma_atom("int8", "int8", "int32").b_layout,
                                    get_ldmatrix_atom(1).layout, get_ldmatrix_atom(4, trans=True).layout,
                                    get_ldmatrix_atom(2, dtype_bits=8).layout],
                         ids=["A", "B", "C", "A_s8", "B_s8", "x1", "x4_trans", "x2_s8"])
def test_fragment_indices_are_the_atoms_holders(layout):
    for index in all_indices(layout.shape):
        assert [int(x) for x in intrin.fragment_indices(layout, index)] == list(layout.holders(*index)[0])
    tile = [2 * extent + 1 for extent in layout.shape]  # an element of tile (2, 2), at (1, 1) in it
    assert [int(x) for x in intrin.fragment_index_map(layout).map_indices(tile)] == \
           [2, 2, *layout.holders(*[1] * len(tile))[0]]


# ---- emitters ---------------------------------------------------------------------------------
def _buf(shape, dtype, scope="global", name="buf"):
    return tirx.decl_buffer(shape, dtype, name=name, scope=scope)


def test_emit_mma_store_covers_the_tile_once():
    c, d = _buf((4,), "float32", "local"), _buf((16, 8), "float32")
    written = []
    for lane in range(32):
        for store in intrin.emit_mma_store(F16_F32, lane, c, [0], d, [0, 0]):
            written.append(tuple(int(x) for x in store.indices))
    assert sorted(written) == [(i, j) for i in range(16) for j in range(8)]


def test_emitters_add_the_elem_offset():
    call = intrin.emit_mma_fill(get_mma_atom("float16", "float16", "float16"), _buf((8,), "float16"), 4)
    assert call.op.name == "tirx.mma_fill_legacy" and [int(a) for a in (call.args[0], call.args[2])] == [4, 4]
    frag = tirx.decl_buffer((8,), "float16", name="frag", elem_offset=tirx.Var("base", "int32"))
    call = intrin.emit_ldmatrix(4, False, frag, 8, _buf((16, 16), "float16", "shared"), 0)
    assert str(call.args[4]) == "base + 8"


def test_emitter_errors():
    a, b, c = _buf((8,), "float16", name="a"), _buf((4,), "float16", name="b"), _buf((4,), "float16", name="c")
    with pytest.raises(IntrinError, match="emit_mma: c_buf 'c' holds float16, expected float32"):
        intrin.emit_mma(F16_F32, a, 0, b, 0, c, 0)
    with pytest.raises(IntrinError, match="no mma atom named 'm16n8k99_f16f16f32'"):
        intrin.emit_mma("m16n8k99_f16f16f32", a, 0, b, 0, c, 0)
    with pytest.raises(IntrinError, match=r"cp.async.cg of 8 bytes does not exist; the PTX ISA allows 4 bytes .ca"):
        intrin.emit_cp_async(8, _buf((8,), "float16", "shared"), 0, a, 0, cache="cg")
    with pytest.raises(IntrinError, match="dst_buf 'buf' holds float32 but src_buf 'a' holds float16"):
        intrin.emit_cp_async(16, _buf((8,), "float32", "shared"), 0, a, 0)
    with pytest.raises(IntrinError, match="n must be a non-negative Python int, got -1"):
        intrin.emit_cp_async_wait_group(-1)
    with pytest.raises(IntrinError, match=r"holds int8; ldmatrix moves 16-bit words.*\(.trans would split bytes\)"):
        intrin.emit_ldmatrix(4, True, _buf((16,), "int8"), 0, _buf((16, 32), "int8", "shared"), 0)
    with pytest.raises(IntrinError, match="num must be 1, 2 or 4 matrices, got 3"):
        intrin.emit_ldmatrix(3, False, a, 0, _buf((16, 16), "float16", "shared"), 0)
    with pytest.raises(IntrinError, match="ldmatrix_name: scope must be one of shared, shared.dyn, got 'global'"):
        intrin.ldmatrix_name(4, False, "float16", "global")
    with pytest.raises(IntrinError, match="scope must be one of global, shared, shared.dyn, got 'local'"):
        intrin.mma_store_name(F16_F32, "local")


def test_cp_async_zero_fill_operand():
    call = intrin.emit_cp_async(16, _buf((8,), "float16", "shared"), 0, _buf((8,), "float16"), 0, cache="cg",
                                src_size=tirx.Var("valid_bytes", "int32"))
    assert 'T.Cast("uint32", valid_bytes), "async", "cg"' in call.script()


# ---- tensorize an ordinary TE matmul, compile to PTX --------------------------------------------
@pytest.mark.parametrize("cp_async", [False, True], ids=["vector_copy", "cp_async"])
@pytest.mark.parametrize("in_dtype,out_dtype", MATMUL_DTYPES)
def test_tensorized_te_matmul_ptx(in_dtype, out_dtype, cp_async):
    mod = schedule_matmul(te_matmul(512, 512, 512, in_dtype, out_dtype), in_dtype, out_dtype, cp_async)
    script = mod.script()
    assert "T.ptx_legacy.mma(" in script and "T.ptx_legacy.ldmatrix(" in script
    # The default (s_tir) pipeline: every shared/fragment access the intrinsics make through a
    # pointer is an access_ptr covering the tensorized block's region, so nothing is shrunk.
    ptx = nvcc_compile(cuda_source(mod))
    atom = get_mma_atom(in_dtype, in_dtype, out_dtype)
    assert atom.ptx in ptx
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in ptx
    if in_dtype != "int8":
        assert "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16" in ptx
    if cp_async:
        for needle in ["cp.async.cg.shared.global", "cp.async.commit_group", "cp.async.wait_group 1",
                       "cp.async.wait_group 0"]:
            assert needle in ptx
    else:
        assert "cp.async" not in ptx


def test_tensorized_matmul_assembles_for_sm_80():
    mod = schedule_matmul(te_matmul(256, 256, 256, "float16", "float32"), "float16", "float32", cp_async=True)
    cubin = nvcc_compile(cuda_source(mod, "sm_80"), "sm_80", target_format="cubin")
    assert len(cubin) > 0


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_emitters_build_a_warp_kernel(arch):
    # Plain (non-block) TIR whose shared buffers are reached through pointers: the tirx pipeline
    # (the default one's CompactBufferAllocation would shrink them, primer section 2).
    source = cuda_source(warp_mma_kernel(), arch, tir_pipeline="tirx")
    assert "half A_shared_ptr[256]" in source
    ptx = nvcc_compile(source, arch)
    for needle in ["cp.async.ca.shared.global", "cp.async.cg.shared.global", "cp.async.commit_group",
                   "cp.async.wait_group 0", "ldmatrix.sync.aligned.m8n8.x4.shared.b16",
                   "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16", F16_F32.ptx]:
        assert needle in ptx
    assert len(nvcc_compile(source, arch, target_format="cubin")) > 0
