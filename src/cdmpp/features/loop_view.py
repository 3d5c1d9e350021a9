"""The loop LLVM is likely to vectorize around each store, and the store's strides along it.

TVM's per-store rows describe a store's loop nest by counts and products, and the strides of
its accesses along the innermost loop of the TIR. The code LLVM generates is shaped by a
different loop: TVM's `UnrollLoop` pass unrolls, inside a `pragma_auto_unroll_max_step`, each
loop whose unrolled body stays within the step (only while every loop inside it was unrolled),
and LLVM then fully unrolls small constant loops itself. The loop left innermost after both is
the one LLVM's loop vectorizer sees. A 1x1 convolution whose 32-long reduction runs innermost
with no vector loop was timed 8.8x faster than predicted: LLVM unrolled the reduction and
vectorized the output loop outside it, along which the store and the input have stride 1
(docs/model.md, "The loop LLVM sees").

For each store leaf of `tir_tree.build_tree`, `leaf_rows` walks its loops from the inside out
under those two rules and describes the loop it stops at (`COLUMNS`). Nothing here reads a
label. `compact_ast.extract` appends `leaf_rows` to TVM's row of every leaf (FEATURE_VERSION
3); `benchmarks/loop_view.py` measures what they add.
"""

from __future__ import annotations

import math

import numpy as np

LOOP_VIEW_VERSION = "1"
# LLVM's full-unroll threshold at -O3 is about 300 IR instructions; a store's body is counted
# as 2 + 2 per load (address arithmetic and the operation). A rough model, not LLVM's cost model.
LLVM_FULL_UNROLL_BUDGET = 300

COLUMNS = (
    "loop_extent_log2",      # extent of the loop left innermost (0: none left)
    "loop_serial",           # ... a serial loop: LLVM's loop vectorizer may vectorize it
    "loop_parallel",         # ... the parallel loop: everything inside it was unrolled
    "loop_vectorized",       # ... a loop the schedule vectorized
    "store_stride_log2",     # log2(1 + |stride|) of the store along that loop (-1: unknown)
    "loads_stride_0",        # loads invariant along it
    "loads_unit_stride",     # loads with stride +-1 along it
    "loads_other_stride",    # loads with another (or unknown) stride
    "unrolled_log2",         # log2 of the iterations unrolled inside it (TVM and LLVM)
    "tvm_unrolled_log2",     # log2 of those TVM's UnrollLoop unrolls
    "llvm_vectorizable",     # serial, unit-stride store, no load of another stride
    "loads",                 # loads in the stored value
)  # fmt: skip
N_COLUMNS = len(COLUMNS)
_COL = {name: i for i, name in enumerate(COLUMNS)}


def _const(expr) -> int | None:
    value = getattr(expr, "value", None)
    return int(value) if isinstance(value, int) else None


def _loads(expr) -> list:
    """The buffer loads in `expr` (their indices included), in no particular order."""
    from tvm import ir

    found, stack = [], [expr]
    while stack:
        e = stack.pop()
        if isinstance(e, ir.TensorLoad):  # a buffer load, as `tir_tree` knows it
            found.append(e)
            stack.extend(e.indices)
            continue
        for name in ("a", "b", "value", "condition", "true_value", "false_value"):
            child = getattr(e, name, None)
            if child is not None and hasattr(child, "ty"):
                stack.append(child)
        args = getattr(e, "args", None)
        if args is not None:
            stack.extend(a for a in args if hasattr(a, "ty"))
    return found


def _stride(buffer, indices, var) -> int | None:
    """Elements the flattened access moves when `var` steps by one (None: not affine in it, or
    a symbolic shape)."""
    from tvm.sym import detect_linear_equation

    shape = [_const(s) for s in buffer.shape]
    stride, step = 0, 1
    for index, size in zip(reversed(list(indices)), reversed(shape)):
        found = detect_linear_equation(index, [var])
        coef = _const(found[0]) if len(found) == 2 else None
        if coef is None:
            return None
        if coef:
            if step is None:
                return None
            stride += coef * step
        step = None if size is None or step is None else step * size
    return stride


def _auto_unroll_steps(loops) -> list:
    """The auto-unroll step in effect at each loop (outer first; 0: none): the nearest
    `pragma_auto_unroll_max_step` at or above it, as `tir_tree` parsed it."""
    steps, step = [], 0
    for _, _, unroll, _ in loops:
        if unroll is not None:
            step = unroll
        steps.append(step)
    return steps


def leaf_row(store, loops) -> np.ndarray:
    """(N_COLUMNS,) of one store under its enclosing `loops` (outer first), as
    `tir_tree.TreeBuild.leaf_nests` holds them."""
    from tvm import tirx

    serial, parallel = int(tirx.ForKind.SERIAL), int(tirx.ForKind.PARALLEL)
    vectorized, unroll = int(tirx.ForKind.VECTORIZED), int(tirx.ForKind.UNROLLED)
    loads = _loads(store.value)
    body = 2 + 2 * len(loads)
    unrolled, tvm_unrolled, tvm_on, left = 1, 1, True, None
    for (kind, ext, _, f), step in zip(reversed(loops), reversed(_auto_unroll_steps(loops))):
        if ext is None or kind not in (serial, unroll):
            left = kind, ext, f  # parallel, vectorized, thread-bound, or symbolic: it stays
            break
        if kind == unroll:
            unrolled *= ext
            continue
        if tvm_on and step and tvm_unrolled * ext <= step:
            tvm_unrolled *= ext
            unrolled *= ext
            continue
        tvm_on = False  # TVM unrolls a loop only when every loop inside it was unrolled
        if unrolled * ext * body <= LLVM_FULL_UNROLL_BUDGET:
            unrolled *= ext
            continue
        left = kind, ext, f
        break
    row = np.zeros(N_COLUMNS)
    row[_COL["unrolled_log2"]] = math.log2(unrolled)
    row[_COL["tvm_unrolled_log2"]] = math.log2(tvm_unrolled)
    row[_COL["loads"]] = len(loads)
    if left is None:
        return row
    kind, ext, f = left  # the walk's kind and extent of the loop left, and its For node
    var = f.loop_var
    store_stride = _stride(store.buffer, store.indices, var)
    strides = [_stride(load.source, load.indices, var) for load in loads]
    stride_0 = sum(s == 0 for s in strides)
    unit = sum(s in (1, -1) for s in strides)
    other = len(strides) - stride_0 - unit
    row[_COL["loop_extent_log2"]] = math.log2(max(ext or 1, 1))
    row[_COL["loop_serial"]] = kind == serial
    row[_COL["loop_parallel"]] = kind == parallel
    row[_COL["loop_vectorized"]] = kind == vectorized
    row[_COL["store_stride_log2"]] = (-1.0 if store_stride is None
                                      else math.log2(1 + abs(store_stride)))
    row[_COL["loads_stride_0"]], row[_COL["loads_unit_stride"]] = stride_0, unit
    row[_COL["loads_other_stride"]] = other
    row[_COL["llvm_vectorizable"]] = kind == serial and store_stride in (1, -1) and not other
    return row


def leaf_rows(tree) -> np.ndarray:
    """(leaves, N_COLUMNS) float64 for the store leaves of a `tir_tree.TreeBuild`, in order."""
    rows = [leaf_row(store, loops) for store, loops in tree.leaf_nests]
    return np.array(rows, dtype=np.float64).reshape(len(rows), N_COLUMNS)
