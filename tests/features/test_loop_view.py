"""Loop view: the loop left innermost after TVM's and LLVM's unrolling, and strides along it."""

from __future__ import annotations

import numpy as np

from cdmpp.features import loop_view as lv
from cdmpp.tvm_env import import_tvm

COL = {name: i for i, name in enumerate(lv.COLUMNS)}


def _matmul(k_extent: int, unroll_step: int = 0, vector_j: bool = False):
    """C[i, j] += A[i, k] * B[k, j]: i parallel (64), j (16), k innermost (`k_extent`)."""
    tvm = import_tvm()  # noqa: F841  (TVMScript needs TVM)
    from tvm.script import tirx as T

    ann = {"pragma_auto_unroll_max_step": unroll_step} if unroll_step else {}
    K = k_extent

    if vector_j:
        @T.prim_func(s_tir=True)
        def func(A: T.Buffer((64, K), "float32"), B: T.Buffer((K, 16), "float32"),
                 C: T.Buffer((64, 16), "float32")):  # fmt: skip
            for i in T.parallel(64, annotations=ann):
                for k in range(K):
                    for j in T.vectorized(16):
                        with T.sblock("C"):
                            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
        return func

    @T.prim_func(s_tir=True)
    def func(A: T.Buffer((64, K), "float32"), B: T.Buffer((K, 16), "float32"),
             C: T.Buffer((64, 16), "float32")):  # fmt: skip
        for i in T.parallel(64, annotations=ann):
            for j in range(16):
                for u in range(1):  # a unit loop: dropped, as TVM's feature passes drop it
                    for k in range(K):
                        with T.sblock("C"):
                            vi, vk = T.axis.remap("SR", [i, k])
                            vj = T.axis.spatial(16, j + u)
                            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
    return func


def _rows(func):
    from cdmpp.features import tir_tree, tvm_rows

    _, mod = tvm_rows.as_schedule_and_func(func)
    tree = tir_tree.build_tree(tvm_rows.lowered_func(mod))
    return lv.leaf_rows(tree)


def test_llvm_unrolls_a_short_reduction_and_the_output_loop_is_left():
    # 3 loads: body 8; 32 x 8 = 256 fits LLVM's budget, 16 x 256 does not: j is left, along
    # which C and B move by 1 and A stays: what LLVM's loop vectorizer takes
    (row,) = _rows(_matmul(32))
    assert row[COL["loop_extent_log2"]] == 4 and row[COL["loop_serial"]] == 1
    assert row[COL["store_stride_log2"]] == 1  # log2(1 + 1)
    assert (row[COL["loads_stride_0"]], row[COL["loads_unit_stride"]],
            row[COL["loads_other_stride"]]) == (1, 2, 0)  # fmt: skip
    assert row[COL["unrolled_log2"]] == 5 and row[COL["tvm_unrolled_log2"]] == 0
    assert row[COL["llvm_vectorizable"]] == 1 and row[COL["loads"]] == 3


def test_a_long_reduction_stays_innermost():
    # 64 x 8 = 512 is over the budget: k is left; the store does not move along it, B moves
    # by its row (16), A by 1: not vectorizable as it stands
    (row,) = _rows(_matmul(64))
    assert row[COL["loop_extent_log2"]] == 6 and row[COL["loop_serial"]] == 1
    assert row[COL["store_stride_log2"]] == 0
    assert (row[COL["loads_stride_0"]], row[COL["loads_unit_stride"]],
            row[COL["loads_other_stride"]]) == (1, 1, 1)  # fmt: skip
    assert row[COL["unrolled_log2"]] == 0 and row[COL["llvm_vectorizable"]] == 0


def test_tvm_unrolls_inside_its_step_and_only_while_everything_inside_was_unrolled():
    # step 64: TVM unrolls k (64 <= 64), not j (16 x 64 > 64); LLVM then cannot fit j either
    (row,) = _rows(_matmul(64, unroll_step=64))
    assert row[COL["tvm_unrolled_log2"]] == 6 and row[COL["unrolled_log2"]] == 6
    assert row[COL["loop_extent_log2"]] == 4 and row[COL["llvm_vectorizable"]] == 1
    # step 16: k (32) is over it, so TVM unrolls nothing, and LLVM unrolls k as before
    (row,) = _rows(_matmul(32, unroll_step=16))
    assert row[COL["tvm_unrolled_log2"]] == 0 and row[COL["unrolled_log2"]] == 5


def test_a_vectorized_loop_is_the_loop_left():
    (row,) = _rows(_matmul(64, vector_j=True))
    assert row[COL["loop_vectorized"]] == 1 and row[COL["loop_serial"]] == 0
    assert row[COL["loop_extent_log2"]] == 4 and row[COL["llvm_vectorizable"]] == 0


def test_the_compact_ast_ends_every_leaf_with_its_loop_view_row():
    from cdmpp.features import extract
    from cdmpp.features.matching import N_TVM_FEATURES

    func = _matmul(32)
    ast = extract(func, {"kind": "llvm", "mcpu": "znver4", "num-cores": 2})
    rows = _rows(func)
    assert ast.leaf_features.shape == (len(rows), N_TVM_FEATURES + lv.N_COLUMNS)
    np.testing.assert_array_equal(ast.leaf_features[:, N_TVM_FEATURES:],
                                  rows.astype(np.float32))
    assert ast.leaf_features[0, N_TVM_FEATURES + COL["llvm_vectorizable"]] == 1
