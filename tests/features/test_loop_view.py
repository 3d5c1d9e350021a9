"""Loop view: the loop left innermost after TVM's and LLVM's unrolling, and strides along it."""

from __future__ import annotations

import math

import numpy as np
import pytest

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
    return lv.leaf_rows(tree), lv.leaf_iterations(tree)


def test_llvm_unrolls_a_short_reduction_and_the_output_loop_is_left():
    # 3 loads: body 8; 32 x 8 = 256 fits LLVM's budget, 16 x 256 does not: j is left, along
    # which C and B move by 1 and A stays: what LLVM's loop vectorizer takes
    rows, iterations = _rows(_matmul(32))
    (row,) = rows
    assert iterations.tolist() == [64 * 16 * 32]
    assert row[COL["loop_extent_log2"]] == 4 and row[COL["loop_serial"]] == 1
    assert row[COL["store_stride_log2"]] == 1  # log2(1 + 1)
    assert (row[COL["loads_stride_0"]], row[COL["loads_unit_stride"]],
            row[COL["loads_other_stride"]]) == (1, 2, 0)  # fmt: skip
    assert row[COL["unrolled_log2"]] == 5 and row[COL["tvm_unrolled_log2"]] == 0
    assert row[COL["llvm_vectorizable"]] == 1 and row[COL["loads"]] == 3


def test_a_long_reduction_stays_innermost():
    # 64 x 8 = 512 is over the budget: k is left; the store does not move along it, B moves
    # by its row (16), A by 1: not vectorizable as it stands
    (row,), _ = _rows(_matmul(64))
    assert row[COL["loop_extent_log2"]] == 6 and row[COL["loop_serial"]] == 1
    assert row[COL["store_stride_log2"]] == 0
    assert (row[COL["loads_stride_0"]], row[COL["loads_unit_stride"]],
            row[COL["loads_other_stride"]]) == (1, 1, 1)  # fmt: skip
    assert row[COL["unrolled_log2"]] == 0 and row[COL["llvm_vectorizable"]] == 0


def test_tvm_unrolls_inside_its_step_and_only_while_everything_inside_was_unrolled():
    # step 64: TVM unrolls k (64 <= 64), not j (16 x 64 > 64); LLVM then cannot fit j either
    (row,), _ = _rows(_matmul(64, unroll_step=64))
    assert row[COL["tvm_unrolled_log2"]] == 6 and row[COL["unrolled_log2"]] == 6
    assert row[COL["loop_extent_log2"]] == 4 and row[COL["llvm_vectorizable"]] == 1
    # step 16: k (32) is over it, so TVM unrolls nothing, and LLVM unrolls k as before
    (row,), _ = _rows(_matmul(32, unroll_step=16))
    assert row[COL["tvm_unrolled_log2"]] == 0 and row[COL["unrolled_log2"]] == 5


def test_a_vectorized_loop_is_the_loop_left():
    (row,), _ = _rows(_matmul(64, vector_j=True))
    assert row[COL["loop_vectorized"]] == 1 and row[COL["loop_serial"]] == 0
    assert row[COL["loop_extent_log2"]] == 4 and row[COL["llvm_vectorizable"]] == 0


def test_program_vector_keeps_the_store_run_most_and_weights_the_shares():
    rows = np.zeros((2, lv.N_COLUMNS))
    rows[0, COL["loads"]], rows[1, COL["loads"]] = 1, 2
    rows[1, COL["llvm_vectorizable"]] = rows[1, COL["loop_serial"]] = 1
    out = lv.program_vector(rows, np.array([1.0, 3.0]))
    assert out.shape == (lv.N_PROGRAM,)
    assert out[COL["loads"]] == 2  # the second store runs three times as often
    shares = dict(zip(lv.SHARED, out[lv.N_COLUMNS:]))
    assert shares == pytest.approx({"llvm_vectorizable": 0.75, "loop_vectorized": 0.0,
                                    "loop_serial": 0.75})  # fmt: skip
    assert not lv.program_vector(np.zeros((0, lv.N_COLUMNS)), np.zeros(0)).any()


def test_of_program_and_the_leaves_agree_with_the_compact_ast():
    from cdmpp.features import extract

    func = _matmul(32)
    ast = extract(func, {"kind": "llvm", "mcpu": "znver4", "num-cores": 2})
    rows, _ = _rows(func)
    assert len(rows) == len(ast.leaf_node)  # one row per store leaf, as the tree has them
    vector = lv.of_program(func)
    assert vector[COL["llvm_vectorizable"]] == 1
    assert vector[lv.N_COLUMNS + lv.SHARED.index("llvm_vectorizable")] == 1
    assert math.isfinite(vector.sum())
