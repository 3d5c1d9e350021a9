"""CDMPP's compact AST of one tensor program: loops, attributes, allocations and stores of its
TIR as a tree, with a feature vector on every store leaf: TVM's 164-dim per-store row, then
the 12 columns of `loop_view` (the loop LLVM is likely to vectorize around the store).

Nodes are numbered in pre-order (a node's parent always has a smaller id; roots have parent -1;
a PrimFunc body with several top-level nests gives a forest, serialized root after root).
The serialization is the pre-order token sequence in which every node is followed by its
children and then one END marker (balanced parentheses: `node ... END`), so a node with id n at
depth d (roots: 0) sits at position `2*n - d`. `leaf_pos` is that position for each store leaf:
it tells the model where the store is in the nest, beyond its own features.

See `tir_tree` for which TIR statements become nodes, `tvm_rows` for where the rows come from and
`matching` for how (and how strictly) rows are matched to leaves.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cdmpp.features import loop_view
from cdmpp.features.derived import ACCESS_WIDTH, N_BUFFERS
from cdmpp.features.matching import COL_ACCESS, N_TVM_FEATURES, FeatureMatchError, match_problems
from cdmpp.features.tir_tree import (  # noqa: F401  (node kinds are part of this module's API)
    ALLOC, ATTR, FOR_PARALLEL, FOR_SERIAL, FOR_THREAD_BINDING, FOR_UNROLLED, FOR_VECTORIZED,
    KIND_NAMES, STORE, STORE_CONST,
)  # fmt: skip

# goes into every cache key; bump when the tree or the features change.
# 2: the five buffer slots of each leaf ordered by value, not as TVM orders them (by name on ties)
# 3: `loop_view`'s 12 columns appended to every leaf (docs/model.md, "The loop LLVM sees")
FEATURE_VERSION = "3"
N_LEAF_FEATURES = N_TVM_FEATURES + loop_view.N_COLUMNS  # TVM's row, then loop_view.COLUMNS
END = -1  # the end-of-children marker in `CompactAST.serialization()`

_FIELDS = {
    "node_kind": np.int8,
    "node_parent": np.int32,
    "node_extent": np.int64,
    "leaf_node": np.int32,
    "leaf_pos": np.int32,
    "leaf_features": np.float32,
}


@dataclass(frozen=True, eq=False)
class CompactAST:
    node_kind: np.ndarray  # int8 (n_nodes,): FOR_SERIAL ... STORE_CONST (tir_tree codes)
    node_parent: np.ndarray  # int32 (n_nodes,): parent id, -1 for roots
    node_extent: np.ndarray  # int64 (n_nodes,): loop / thread extent, -1 if symbolic, 1 otherwise
    leaf_node: np.ndarray  # int32 (n_leaves,): node id of each STORE leaf, in pre-order
    leaf_pos: np.ndarray  # int32 (n_leaves,): position of the leaf in the serialization
    leaf_features: np.ndarray  # float32 (n_leaves, 176): TVM's row of that store, loop_view's

    def n_leaves(self) -> int:
        return int(self.leaf_node.shape[0])

    def n_nodes(self) -> int:
        return int(self.node_kind.shape[0])

    def depth(self) -> np.ndarray:
        """int32 (n_nodes,): 0 for roots."""
        return _depths(self.node_parent)

    def serialization(self) -> np.ndarray:
        """int32 tokens: node ids in pre-order, END (-1) after each node's children."""
        out = np.full(2 * self.n_nodes(), END, dtype=np.int32)
        ids = np.arange(self.n_nodes(), dtype=np.int32)
        out[2 * ids - self.depth()] = ids
        return out

    def kind_names(self) -> list:
        return [KIND_NAMES[k] for k in self.node_kind]

    def to_arrays(self) -> dict:
        return {name: getattr(self, name) for name in _FIELDS}

    @classmethod
    def from_arrays(cls, d) -> "CompactAST":
        missing = [name for name in _FIELDS if name not in d]
        if missing:
            raise KeyError(f"CompactAST arrays lack {missing}")
        arrs = {name: np.ascontiguousarray(d[name], dtype=dt) for name, dt in _FIELDS.items()}
        ast = cls(**arrs)
        ast.validate()
        return ast

    def validate(self) -> None:
        n, m = self.n_nodes(), self.n_leaves()
        if not (self.node_parent.shape == self.node_extent.shape == (n,)):
            raise ValueError("node arrays differ in length")
        if self.leaf_pos.shape != (m,) or self.leaf_features.shape != (m, N_LEAF_FEATURES):
            raise ValueError(f"leaf arrays must be ({m},) and ({m}, {N_LEAF_FEATURES})")
        if n and np.any(self.node_parent >= np.arange(n)):
            raise ValueError("node_parent must point to an earlier node (pre-order)")
        if m and np.any(self.node_kind[self.leaf_node] != STORE):
            raise ValueError("leaf_node must point to STORE nodes")

    def __eq__(self, other) -> bool:
        if not isinstance(other, CompactAST):
            return NotImplemented
        return all(np.array_equal(getattr(self, f), getattr(other, f)) for f in _FIELDS)

    __hash__ = None


def _depths(parent: np.ndarray) -> np.ndarray:
    depth = np.zeros(parent.shape[0], dtype=np.int32)
    for i, p in enumerate(parent.tolist()):  # parents precede children
        if p >= 0:
            depth[i] = depth[p] + 1
    return depth


def order_buffer_slots(rows: np.ndarray) -> np.ndarray:
    """`rows` with each row's five buffer slots sorted by their own values (descending).

    TVM's PerStoreFeature orders a store's buffers by name where its other keys tie, so one
    computation with other buffer names (a Relax kernel's `lv11, param_0` against `X, W`) got its
    input and weight in swapped slots, and the model another program (docs/model.md). Sorted by
    value, the order depends on what each buffer's accesses are, never on its name."""
    out = np.array(rows, dtype=np.float32)
    lo, hi = COL_ACCESS, COL_ACCESS + N_BUFFERS * ACCESS_WIDTH
    blocks = out[:, lo:hi].reshape(len(out), N_BUFFERS, ACCESS_WIDTH)
    for i in range(len(out)):
        # lexsort sorts by the LAST key first: columns reversed, negated for descending order
        order = np.lexsort((-blocks[i]).T[::-1])
        blocks[i] = blocks[i, order]
    out[:, lo:hi] = blocks.reshape(len(out), -1)
    return out


def _assemble(tree, rows: np.ndarray) -> CompactAST:
    parent = np.asarray(tree.parents, dtype=np.int32)
    leaf = np.asarray(tree.leaves, dtype=np.int32)
    pos = (2 * leaf - _depths(parent)[leaf]).astype(np.int32)
    tvm = order_buffer_slots(
        np.asarray(rows, dtype=np.float32).reshape(len(tree.leaves), N_TVM_FEATURES))
    feats = np.hstack([tvm, loop_view.leaf_rows(tree).astype(np.float32)])
    return CompactAST(
        node_kind=np.asarray(tree.kinds, dtype=np.int8),
        node_parent=parent,
        node_extent=np.asarray(tree.extents, dtype=np.int64),
        leaf_node=leaf,
        leaf_pos=pos,
        leaf_features=feats,
    )


def extract(func_or_mod, target) -> CompactAST:
    """The compact AST of one kernel.

    `func_or_mod`: a `tvm.tirx.PrimFunc`, an IRModule holding one PrimFunc (scheduled, default,
    or a fused Relax kernel; block-form or lowered), or a `tvm.s_tir.Schedule` (cheapest: its
    schedule state is reused). `target`: dict / string / `tvm.target.Target`.
    Raises FeatureMatchError when TVM's rows cannot be matched one-to-one to the store leaves.
    """
    from cdmpp.features import tir_tree, tvm_rows

    sch, mod = tvm_rows.as_schedule_and_func(func_or_mod)
    rows = tvm_rows.per_store_rows(sch, mod, target)
    if rows.ndim != 2 or (rows.shape[0] and rows.shape[1] != N_TVM_FEATURES):
        raise FeatureMatchError(f"TVM returned a {rows.shape} feature matrix")
    report = []
    for kind in ("structural", "full"):  # the full pass list only if the cheap one disagrees
        tree = tir_tree.build_tree(tvm_rows.lowered_func(mod, kind))
        problems = match_problems(tree, rows)
        if not problems:
            return _assemble(tree, rows)
        report.append(f"after the {kind} pass list: " + "; ".join(problems))
    name = next(iter(mod.functions.keys())).name_hint
    raise FeatureMatchError(f"cannot match TVM's per-store rows of '{name}': " + " | ".join(report))
