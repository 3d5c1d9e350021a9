"""Compact AST: tree shape, positions, TVM rows matched to the right store leaves, determinism."""

from __future__ import annotations

import hashlib
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cdmpp.features import N_LEAF_FEATURES, CompactAST, FeatureMatchError, extract
from cdmpp.features import compact_ast as ca
from cdmpp.features import matching as mt
from cdmpp.tvm_env import import_tvm

TARGET = {"kind": "llvm", "mcpu": "znver4", "num-cores": 2}
ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
SHARED = ROOT.parent / "shared" / "data" / "epyc-2c"
FAMILIES = (
    "dense_64x768x768", "conv3x3_1x64x56x56_k64s1", "dwconv3x3_1x144x56x56_s2",
    "softmax_12x128x128", "layernorm_64x768", "maxpool3x3_1x64x112x112_s2", "gap_1x512x7x7",
    "bmm_12x64x64x64", "addrelu_1x64x56x56", "densegelu_64x768x3072", "conv1x1_1x64x56x56_k256",
    "conv7x7_1x3x224x224_k64s2", "gconv3x3_1x128x56x56_g32", "convbr3x3_1x64x56x56_k64",
)  # fmt: skip
FOR_KINDS = (ca.FOR_SERIAL, ca.FOR_PARALLEL, ca.FOR_VECTORIZED, ca.FOR_UNROLLED,
             ca.FOR_THREAD_BINDING)  # fmt: skip
F_ADDSUB, F_MUL, I_ADDSUB, I_MUL = 1, 2, 8, 9  # arithmetic-op columns (counts x loop product)


def _programs():
    tvm = import_tvm()  # noqa: F841  (TVMScript needs TVM)
    from tvm.script import tirx as T

    @T.prim_func(s_tir=True)
    def nest(A: T.Buffer((64, 64), "float32"), B: T.Buffer((64, 64), "float32"),
             C: T.Buffer((64,), "float32")):  # fmt: skip
        X = T.sblock_alloc_buffer((64, 64))
        for i in T.parallel(64, annotations={"pragma_auto_unroll_max_step": 16}):
            for j0 in range(16):
                for j1 in T.vectorized(4):
                    with T.sblock("scale"):
                        vi = T.axis.spatial(64, i)
                        vj = T.axis.spatial(64, j0 * 4 + j1)
                        X[vi, vj] = A[vi, vj] * T.float32(2)
        for i in range(64):
            for j in T.unroll(8):
                for u in range(1):  # a unit loop: TVM's feature passes drop it
                    with T.sblock("shift"):
                        vi = T.axis.spatial(64, i)
                        vj = T.axis.spatial(64, j * 8 + u)
                        B[vi, vj] = X[vi, vj] + T.float32(1)
        for i, k in T.grid(64, 64):
            with T.sblock("sum"):
                vi, vk = T.axis.remap("SR", [i, k])
                with T.init():
                    C[vi] = T.float32(0)
                C[vi] = C[vi] + X[vi, vk]

    @T.prim_func(s_tir=True)
    def matmul(A: T.Buffer((64, 64), "float32"), B: T.Buffer((64, 64), "float32"),
               C: T.Buffer((64, 64), "float32")):  # fmt: skip
        for i, j, k in T.grid(64, 64, 64):
            with T.sblock("C"):
                vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                with T.init():
                    C[vi, vj] = T.float32(0)
                C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]

    @T.prim_func(s_tir=True)
    def twice(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
        for i in range(32):
            with T.sblock("lo"):
                vi = T.axis.spatial(64, i)
                B[vi] = A[vi] + T.float32(1)
        for i in T.parallel(32):
            with T.sblock("hi"):
                vi = T.axis.spatial(64, i + 32)
                B[vi] = A[vi] * T.float32(2)

    return nest, matmul, twice


@pytest.fixture(scope="module")
def progs():
    return _programs()


def _tiled(matmul, factor: int):
    from tvm import s_tir

    sch = s_tir.Schedule(matmul)
    i, j, k = sch.get_loops(sch.get_sblock("C"))
    j0, j1 = sch.split(j, factors=[None, factor])
    sch.reorder(i, j0, k, j1)
    sch.parallel(i)
    sch.vectorize(j1)
    return sch


def _records(db_dir: Path, n: int):
    from cdmpp.measure import tvm_codec
    from cdmpp.measure.database import load_database

    db = load_database(db_dir)
    default = db.records[0].workload.mod()
    return default, [tvm_codec.replay_trace(r.workload.mod(), r.trace_json) for r in db.records[:n]]


def _ancestors(ast: CompactAST, node: int) -> list:
    out, p = [], int(ast.node_parent[node])
    while p >= 0:
        out.append(p)
        p = int(ast.node_parent[p])
    return out[::-1]  # outermost first


def _check_rows_against_tree(ast: CompactAST) -> None:
    """Re-derive, from the stored arrays alone, what TVM's row must say about each leaf's loops."""
    for leaf, node in enumerate(ast.leaf_node.tolist()):
        anc = [a for a in _ancestors(ast, node) if ast.node_kind[a] in FOR_KINDS]
        row = ast.leaf_features[leaf]
        ext = [int(ast.node_extent[a]) for a in anc]
        assert row[mt.COL_NUM_LOOPS] == pytest.approx(mt.slog(len(anc)), abs=1e-4)
        if all(e > 0 for e in ext):
            assert row[mt.COL_OUTER_PROD] == pytest.approx(mt.slog(math.prod(ext)), abs=1e-4)
        for kind, col in ((ca.FOR_VECTORIZED, mt.COL_VEC), (ca.FOR_UNROLLED, mt.COL_UNROLL),
                          (ca.FOR_PARALLEL, mt.COL_PARALLEL)):  # fmt: skip
            sel = [int(ast.node_extent[a]) for a in anc if ast.node_kind[a] == kind]
            assert row[col] == pytest.approx(mt.slog(len(sel)), abs=1e-4)
            want = (mt.slog(math.prod(sel)), mt.slog(sel[-1])) if sel else (0.0, 0.0)
            if all(e > 0 for e in sel):
                assert tuple(row[col + 1 : col + 3]) == pytest.approx(want, abs=1e-4)


def _digest(asts) -> str:
    h = hashlib.sha256()
    for ast in asts:
        for name, arr in ast.to_arrays().items():
            h.update(f"{name}{arr.dtype}{arr.shape}".encode())
            h.update(np.ascontiguousarray(arr).tobytes())
    return h.hexdigest()


def test_importing_features_does_not_import_tvm():
    code = "import sys, cdmpp.features; assert 'tvm' not in sys.modules, 'tvm imported'"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=60)


def test_hand_written_nest_has_known_nodes_positions_and_rows(progs):
    nest = progs[0]
    ast = extract(nest, TARGET)
    k = ca
    assert ast.node_kind.tolist() == [
        k.ALLOC,  # X (used by all three nests: stays at the root)
        k.ATTR, k.FOR_PARALLEL, k.FOR_SERIAL, k.FOR_VECTORIZED, k.STORE,  # pragma; i, j0, j1; X=
        k.FOR_SERIAL, k.FOR_UNROLLED, k.STORE,  # i, j (unit loop u dropped); B=
        k.FOR_SERIAL, k.FOR_SERIAL, k.STORE_CONST, k.STORE,  # i, k; C=0 (init); C+=
    ]  # fmt: skip
    assert ast.node_parent.tolist() == [-1, 0, 1, 2, 3, 4, 0, 6, 7, 0, 9, 10, 10]
    assert ast.node_extent.tolist() == [1, 1, 64, 16, 4, 1, 64, 8, 1, 64, 64, 1, 1]
    assert ast.n_nodes() == 13 and ast.n_leaves() == 3
    assert ast.leaf_node.tolist() == [5, 8, 12]
    # serialization: every node, then its children, then END (-1)
    E = ca.END
    assert ast.serialization().tolist() == [0, 1, 2, 3, 4, 5, E, E, E, E, E, 6, 7, 8, E, E, E,
                                            9, 10, 11, E, 12, E, E, E, E]  # fmt: skip
    assert ast.leaf_pos.tolist() == [5, 13, 21]
    assert [ast.serialization().tolist().index(n) for n in ast.leaf_node] == ast.leaf_pos.tolist()
    f = ast.leaf_features
    assert f.shape == (3, N_LEAF_FEATURES) and f.dtype == np.float32
    slog = mt.slog
    # each row is its store: X = A*2 (4096 muls), B = X+1 (64*8 adds), C += X (4096 adds)
    assert f[0, F_MUL] == pytest.approx(slog(4096)) and f[0, F_ADDSUB] == 0
    assert f[1, F_ADDSUB] == pytest.approx(slog(512)) and f[1, F_MUL] == 0
    assert f[2, F_ADDSUB] == pytest.approx(slog(4096)) and f[2, F_MUL] == 0
    assert f[1, I_MUL] == pytest.approx(slog(512))  # index j*8 under 64*8 iterations
    # ...its loops: parallel 64 / vectorized 4 / auto-unroll 16; unrolled 8; two serial loops
    assert f[0, mt.COL_PARALLEL : mt.COL_PARALLEL + 3] == pytest.approx([1, slog(64), slog(64)])
    assert f[0, mt.COL_VEC : mt.COL_VEC + 3] == pytest.approx([1, slog(4), slog(4)])
    assert f[0, mt.COL_AUTO_UNROLL] == pytest.approx(slog(16))
    assert f[1, mt.COL_UNROLL : mt.COL_UNROLL + 3] == pytest.approx([1, slog(8), slog(8)])
    assert f[:, mt.COL_NUM_LOOPS] == pytest.approx([slog(3), slog(2), slog(2)])
    # ...and its buffer: X and B are 64x64 floats, C is 64 floats (allocation features)
    want = [[slog(16384), slog(4096)], [slog(16384), slog(4096)], [slog(256), slog(64)]]
    np.testing.assert_allclose(f[:, mt.COL_ALLOC : mt.COL_ALLOC + 2], want, rtol=1e-5)
    _check_rows_against_tree(ast)


def test_tile_size_alone_changes_the_features(progs):
    matmul = progs[1]
    a, b = extract(_tiled(matmul, 8), TARGET), extract(_tiled(matmul, 16), TARGET)
    assert a.node_kind.tolist() == b.node_kind.tolist()
    assert a.leaf_pos.tolist() == b.leaf_pos.tolist()
    assert a.node_extent.tolist() != b.node_extent.tolist()
    assert sorted(set(a.node_extent.tolist()) ^ set(b.node_extent.tolist())) == [4, 8, 16]
    assert not np.array_equal(a.leaf_features, b.leaf_features)
    vec = mt.COL_VEC + 2
    assert a.leaf_features[0, vec] == pytest.approx(mt.slog(8))
    assert b.leaf_features[0, vec] == pytest.approx(mt.slog(16))
    assert extract(_tiled(matmul, 8), TARGET) == a  # and the same schedule gives the same AST
    for ast in (a, b):
        _check_rows_against_tree(ast)


def test_default_and_scheduled_programs_extract(progs):
    from cdmpp.programs.catalog import get_task

    default = extract(get_task("softmax_12x64x64").prim_func(), TARGET)
    assert default.n_leaves() == 4  # max, exp, sum, norm (the two reduction inits are constants)
    assert (default.node_kind == ca.STORE_CONST).sum() == 2
    _check_rows_against_tree(default)
    mod_default, schs = _records(FIXTURES / "dense_64x768x768", 4)
    for obj in [mod_default, *schs, *(s.mod for s in schs)]:
        ast = extract(obj, TARGET)
        assert ast.n_leaves() >= 1
        _check_rows_against_tree(ast)
    assert extract(schs[1], TARGET) == extract(schs[1].mod, TARGET)  # Schedule or its module


def _check_param_store_rows(obj, ast: CompactAST) -> int:
    """Rows of stores into a function parameter carry that parameter's size (bytes, elements)."""
    from cdmpp.features import tir_tree, tvm_rows

    _, mod = tvm_rows.as_schedule_and_func(obj)
    func = tvm_rows.lowered_func(mod)
    tree = tir_tree.build_tree(func)
    tvm = import_tvm()
    params = {str(b.name): b for b in func.params if isinstance(b, tvm.tirx.Buffer)}
    checked = 0
    for leaf, (_, name) in enumerate(tree.leaf_buffers):
        if name in params:
            buf = params[name]
            n = math.prod(int(d) for d in buf.shape)
            size = n * tvm_dtype_bytes(buf.dtype)
            got = ast.leaf_features[leaf, mt.COL_ALLOC : mt.COL_ALLOC + 2]
            np.testing.assert_allclose(got, [mt.slog(size), mt.slog(n)], rtol=1e-5)
            checked += 1
    return checked


def tvm_dtype_bytes(dtype) -> int:
    return np.dtype(str(dtype)).itemsize


def test_rows_match_leaves_on_real_records_of_many_operator_families():
    from conftest import require_shared

    require_shared(SHARED)
    seen = params = 0
    for name in FAMILIES:
        if not (SHARED / name).exists():
            continue
        default, schs = _records(SHARED / name, 3)
        for obj in (default, *schs):
            ast = extract(obj, TARGET)  # raises FeatureMatchError if rows != leaves
            assert ast.leaf_features.shape == (ast.n_leaves(), N_LEAF_FEATURES)
            _check_rows_against_tree(ast)
            params += _check_param_store_rows(obj, ast)
            seen += 1
    assert seen >= 20 and params >= seen  # every program stores into its output parameter


def test_already_lowered_kernels_extract(progs):
    """LowerOpaqueBlock output (what a built network's kernels look like before codegen)."""
    tvm = import_tvm()
    from tvm.s_tir import transform as st

    lower = tvm.transform.Sequential([
        st.RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True), st.LowerInitBlock(),
        st.PlanAndUpdateBufferAllocationLocation(), st.ConvertBlocksToOpaque(),
        st.CompactBufferAllocation(), st.LowerOpaqueBlock(),
    ])  # fmt: skip
    nest = progs[0]
    block_form = extract(nest, TARGET)
    lowered = extract(lower(tvm.IRModule({"main": nest})), TARGET)
    assert lowered.node_kind.tolist() == block_form.node_kind.tolist()
    assert lowered.leaf_pos.tolist() == block_form.leaf_pos.tolist()
    # TVM reads the unroll pragma from loop annotations only: lowered, it has become an AttrStmt
    assert lowered.leaf_features[0, mt.COL_AUTO_UNROLL] == 0
    _, schs = _records(FIXTURES / "dense_64x768x768", 4)
    for sch in schs:  # scheduled: pragmas become ill-formed AttrStmts that Schedule rejects
        ast = extract(lower(sch.mod), TARGET)
        assert ast.n_leaves() == extract(sch, TARGET).n_leaves()
        _check_rows_against_tree(ast)


def test_fused_relax_kernels_extract():
    tvm = import_tvm()
    from tvm import relax
    from tvm.relax.frontend import nn

    class Net(nn.Module):
        def __init__(self):
            self.conv = nn.Conv2D(4, 8, 3, padding=1, bias=True)
            self.fc = nn.Linear(8 * 8 * 8, 16)

        def forward(self, x):
            y = nn.relu(self.conv(x))
            y = nn.gelu(self.fc(nn.op.reshape(y, (1, 8 * 8 * 8))))
            return nn.op.softmax(y)

    spec = {"forward": {"x": nn.spec.Tensor((1, 4, 8, 8), "float32")}}
    mod, _ = Net().export_tvm(spec=spec)
    passes = [relax.transform.LegalizeOps(), relax.transform.AnnotateTIROpPattern(),
              relax.transform.FuseOps(), relax.transform.FuseTIR()]  # fmt: skip
    mod = tvm.transform.Sequential(passes)(mod)
    kernels = {gv.name_hint: f for gv, f in mod.functions.items()
               if isinstance(f, tvm.tirx.PrimFunc)}  # fmt: skip
    assert any(name.startswith("fused_conv2d") for name in kernels) and "softmax" in kernels
    for func in kernels.values():
        ast = extract(func, TARGET)
        assert ast.n_leaves() >= 1
        _check_rows_against_tree(ast)
    with pytest.raises(ValueError, match="one PrimFunc"):
        extract(mod, TARGET)  # a whole network is not one kernel


def test_full_pass_list_when_simplify_makes_a_store_constant():
    tvm = import_tvm()  # noqa: F841
    from tvm.script import tirx as T

    @T.prim_func(s_tir=True)
    def cancel(A: T.Buffer((64,), "int32"), B: T.Buffer((64,), "int32"),
               C: T.Buffer((64,), "int32")):  # fmt: skip
        for i in range(64):
            with T.sblock("b"):
                vi = T.axis.spatial(64, i)
                B[vi] = A[vi] - A[vi]  # TVM's Simplify folds this to 0: no row
        for i in range(64):
            with T.sblock("c"):
                vi = T.axis.spatial(64, i)
                C[vi] = A[vi] + 1

    ast = extract(cancel, TARGET)
    assert ast.kind_names() == ["FOR_SERIAL", "STORE_CONST", "FOR_SERIAL", "STORE"]
    assert ast.leaf_features[0, I_ADDSUB] == pytest.approx(mt.slog(64))


def test_a_buffer_written_by_two_stores_is_a_clear_error(progs):
    from cdmpp.features import tvm_rows

    tvm = import_tvm()
    twice = progs[2]
    # TVM's rows are per buffer: one row for B, with the loops of its LAST store (parallel)
    rows = tvm_rows.per_store_rows(None, tvm.IRModule({"main": twice}), TARGET)
    assert rows.shape == (1, mt.N_TVM_FEATURES) and rows[0, mt.COL_PARALLEL] == 1
    with pytest.raises(FeatureMatchError, match=r"ONE TVM row.*'B': 2"):
        extract(twice, TARGET)


def test_arrays_round_trip(progs):
    ast = extract(progs[0], TARGET)
    arrays = ast.to_arrays()
    assert {k: v.dtype for k, v in arrays.items()} == {
        "node_kind": np.int8, "node_parent": np.int32, "node_extent": np.int64,
        "leaf_node": np.int32, "leaf_pos": np.int32, "leaf_features": np.float32,
    }  # fmt: skip
    back = CompactAST.from_arrays({k: v.copy() for k, v in arrays.items()})
    assert back == ast and back.n_leaves() == 3
    with pytest.raises(ValueError):
        CompactAST.from_arrays({**arrays, "leaf_node": np.array([0, 1, 2], dtype=np.int32)})


_SUBPROCESS = """
import sys
sys.path.insert(0, {tests!r})
import test_compact_ast as t
from cdmpp.features import extract
nest, matmul, _ = t._programs()
asts = [extract(nest, t.TARGET), extract(t._tiled(matmul, 8), t.TARGET)]
_, schs = t._records(t.FIXTURES / "dense_64x768x768", 4)
asts += [extract(s, t.TARGET) for s in schs]
print(t._digest(asts))
"""


def test_identical_across_processes(progs):
    nest, matmul, _ = progs
    asts = [extract(nest, TARGET), extract(_tiled(matmul, 8), TARGET)]
    _, schs = _records(FIXTURES / "dense_64x768x768", 4)
    asts += [extract(s, TARGET) for s in schs]
    here = _digest(asts)
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), PYTHONHASHSEED="123")
    code = _SUBPROCESS.format(tests=str(Path(__file__).parent))
    out = subprocess.run([sys.executable, "-c", code], check=True, env=env, capture_output=True,
                         text=True, timeout=120)  # fmt: skip
    assert out.stdout.strip().splitlines()[-1] == here


def _conv_named(names: tuple[str, str, str]):
    """A 3x3 conv + bias + ReLU (SqueezeNet's fire expand at a tiny size) with these buffer names."""
    import_tvm()
    from tvm import te, topi

    x, w, b = (te.placeholder(s, name=n) for s, n in
               zip(((1, 16, 13, 13), (64, 16, 3, 3), (1, 64, 1, 1)), names))
    out = topi.nn.relu(topi.add(topi.nn.conv2d_nchw(x, w, 1, 1, 1), b))
    return te.create_prim_func([x, w, b, out])


def test_features_do_not_depend_on_buffer_names():
    from cdmpp.features import tvm_rows

    tvm = import_tvm()
    catalog_names, relax_names = _conv_named(("X", "W", "B")), _conv_named(("lv11", "param_0",
                                                                          "param_1"))
    raw = [tvm_rows.per_store_rows(None, tvm.IRModule({"main": f}), TARGET)
           for f in (catalog_names, relax_names)]
    assert not np.array_equal(*raw)  # TVM's own rows: input and weight in swapped slots
    assert np.array_equal(np.sort(raw[0], axis=None), np.sort(raw[1], axis=None))
    a, b = extract(catalog_names, TARGET), extract(relax_names, TARGET)
    assert np.array_equal(a.leaf_features, b.leaf_features)
    # the same slots, only reordered: the leaves keep TVM's values, slot by slot
    def slot_blocks(rows):
        rows = np.asarray(rows, dtype=np.float32)
        return sorted(map(tuple, rows[:, mt.COL_ACCESS:mt.COL_ACCESS + 90].reshape(-1, 18)))

    assert len(raw[0]) == a.n_leaves()
    assert slot_blocks(a.leaf_features) == slot_blocks(raw[0])
    assert np.array_equal(np.sort(a.leaf_features[:, :mt.N_TVM_FEATURES], axis=None),
                          np.sort(np.asarray(raw[0], dtype=np.float32), axis=None))
