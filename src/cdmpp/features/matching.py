"""Match TVM's per-store rows to the tree's store leaves, and prove each match.

TVM 0.27 emits one row per buffer (written by a non-constant store), in the order of the buffer's
first such store, describing its last such store. Our leaves are exactly those stores, in
pre-order. So when every leaf writes its own buffer, row i belongs to leaf i. That is checked,
row by row, against features that TVM computes from the store's loop nest alone and that the
tree knows independently: the number of enclosing loops, the product of their extents, the
innermost `pragma_auto_unroll_max_step`, and the number / extent product / innermost extent of
the vectorized, unrolled and parallel loops around the store (16 of the 164 columns).
Any disagreement is reported; `extract` raises rather than featurize the wrong store.
"""

from __future__ import annotations

import math

import numpy as np

N_TVM_FEATURES = 164  # the width of TVM's per-store rows

# Column layout of the 164-dim vector (TVM's PerStoreFeature, buffers_per_store=5, 10 samples)
COL_FLOAT_OPS = range(0, 7)  # float mad, add/sub, mul, div/mod, cmp, math and other calls
COL_VEC, COL_UNROLL, COL_PARALLEL = 16, 27, 38  # each: num, prod, len, then 8 one-hot positions
COL_IS_GPU = 49
COL_ACCESS = 57  # 5 buffers x 18 access features (access type one-hot x3, then bytes, ...)
COL_CURVE = 147  # 10 arithmetic-intensity curve points
COL_ALLOC = 157  # alloc_size (bytes), alloc_prod, alloc_outer_prod, alloc_inner_prod
COL_OUTER_PROD, COL_NUM_LOOPS, COL_AUTO_UNROLL = 161, 162, 163

# tir_tree kind codes of the loops behind COL_VEC / COL_UNROLL / COL_PARALLEL
_LOOP_GROUPS = ((2, COL_VEC, "vectorized"), (3, COL_UNROLL, "unrolled"),
                (1, COL_PARALLEL, "parallel"))  # fmt: skip


class FeatureMatchError(ValueError):
    """TVM's per-store rows cannot be matched one-to-one to the store leaves of a program."""


def slog(x: float) -> float:
    """TVM's feature transform: sign(x) * log2(|x| + 1)."""
    return math.copysign(math.log2(abs(x) + 1.0), x)


def shared_buffers(leaf_buffers) -> dict:
    """{buffer name: number of leaves} for buffers written by more than one featurized store."""
    counts: dict = {}
    names: dict = {}
    for handle, name in leaf_buffers:
        counts[handle] = counts.get(handle, 0) + 1
        names[handle] = name
    return {names[h]: n for h, n in counts.items() if n > 1}


def expected_columns(loops) -> list:
    """[(column, value, what)] the row of a store under `loops` (a tir_tree.LeafLoops) must hold."""
    out = [(COL_NUM_LOOPS, slog(loops.n_loops), "number of loops")]
    if loops.prod is not None:
        out.append((COL_OUTER_PROD, slog(loops.prod), "product of loop extents"))
    out.append((COL_AUTO_UNROLL, slog(loops.auto_unroll), "auto_unroll_max_step"))
    for kind, col, name in _LOOP_GROUPS:
        exts = loops.kinds.get(kind, [])
        out.append((col, slog(len(exts)), f"number of {name} loops"))
        if not exts:
            out += [(col + 1, 0.0, f"{name} extent product"), (col + 2, 0.0, f"{name} extent")]
        elif all(e is not None for e in exts):
            out.append((col + 1, slog(math.prod(exts)), f"{name} extent product"))
            out.append((col + 2, slog(exts[-1]), f"innermost {name} extent"))
    return out


def match_problems(tree, rows: np.ndarray, max_report: int = 5) -> list:
    """Why row i cannot be leaf i (empty list: every row matches its leaf)."""
    problems = []
    shared = shared_buffers(tree.leaf_buffers)
    if shared:
        problems.append(
            "buffers written by several non-constant stores get ONE TVM row each (features of the "
            f"last store), so those stores cannot all be leaves: {shared}"
        )
    n_leaves, n_rows = len(tree.leaves), int(rows.shape[0])
    if n_rows != n_leaves:
        names = [name for _, name in tree.leaf_buffers]
        problems.append(f"TVM gives {n_rows} rows, the tree has {n_leaves} store leaves {names}")
    if problems:
        return problems
    for i, loops in enumerate(tree.leaf_loops):
        for col, want, what in expected_columns(loops):
            got = float(rows[i, col])
            if not math.isclose(got, want, rel_tol=1e-5, abs_tol=1e-4):
                name = tree.leaf_buffers[i][1]
                problems.append(
                    f"leaf {i} (store to {name}): column {col} ({what}) is {got:.4f} in TVM's row, "
                    f"{want:.4f} from the tree"
                )
                if len(problems) >= max_report:
                    return problems
    return problems
