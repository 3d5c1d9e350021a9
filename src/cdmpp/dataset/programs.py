"""`ProgramSet`: the input every estimator takes (cdmpp's transformer and the baselines).

Programs are ragged: program i has n_i store leaves, each with a feature vector and its
position in the pre-order serialization of the compact AST. Labels stay outside (`y`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def work_columns() -> list[int]:
    """The leaf-feature columns whose sum (after undoing slog) is a store's work: its
    floating-point operations, then the bytes each of its five buffer slots accesses."""
    from cdmpp.features.matching import COL_ACCESS, COL_FLOAT_OPS

    return list(COL_FLOAT_OPS) + [COL_ACCESS + 18 * k + 3 for k in range(5)]


@dataclass(frozen=True)
class ProgramSet:
    leaf_features: tuple  # n arrays, each float32 (n_i, F), raw (un-normalized) features
    leaf_pos: tuple  # n arrays, each int32 (n_i,)
    device: np.ndarray | None = None  # float32 (n, D) device vectors, or None (one device)
    task: tuple | None = None  # n task names (for per-task metrics), or None
    # bool (n,): True where a program is its task's default (untuned) schedule, the one TVM
    # builds without tuning (`ProgramRecord.is_default`, a network's untuned kernels); None:
    # not known. Read by models with a default-program expert (model.default_expert).
    default: np.ndarray | None = None

    def __post_init__(self):
        if len(self.leaf_features) != len(self.leaf_pos):
            raise ValueError("leaf_features and leaf_pos must have one entry per program")
        if self.device is not None and len(self.device) != len(self.leaf_features):
            raise ValueError("device must have one row per program")
        if self.default is not None and np.shape(self.default) != (len(self.leaf_features),):
            raise ValueError(f"default must hold one flag per program ({len(self)}), got "
                             f"shape {np.shape(self.default)}")

    def __len__(self) -> int:
        return len(self.leaf_features)

    def subset(self, rows) -> "ProgramSet":
        rows = np.asarray(rows, dtype=np.int64)
        return ProgramSet(tuple(self.leaf_features[i] for i in rows),
                          tuple(self.leaf_pos[i] for i in rows),
                          None if self.device is None else self.device[rows],
                          None if self.task is None else tuple(self.task[i] for i in rows),
                          None if self.default is None else np.asarray(self.default)[rows])

    def with_device(self, vector) -> "ProgramSet":
        """The same programs, all on the device `vector` (None: no device vectors)."""
        tiled = None if vector is None else np.tile(np.asarray(vector, dtype=np.float32),
                                                    (len(self), 1))
        return ProgramSet(self.leaf_features, self.leaf_pos, tiled, self.task, self.default)

    def first_columns(self, n: int) -> "ProgramSet":
        """The same programs, each leaf cut to its first `n` feature columns (views, no copy):
        `features.matching.N_TVM_FEATURES` leaves TVM's per-store row, without the loop view."""
        if len(self) and n > self.n_features:  # an empty set has no leaves to cut
            raise ValueError(f"the leaves have {self.n_features} columns, not {n}")
        return ProgramSet(tuple(f[:, :n] for f in self.leaf_features), self.leaf_pos,
                          self.device, self.task, self.default)

    @property
    def n_features(self) -> int:
        return int(self.leaf_features[0].shape[1]) if len(self) else 0

    def padded(self, max_leaves: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(features (n, L, F), positions (n, L), mask (n, L) True where a leaf is real)."""
        counts = np.array([len(f) for f in self.leaf_features])
        width = int(max_leaves or (counts.max() if len(counts) else 0))
        if len(counts) and counts.max() > width:
            raise ValueError(f"a program has {counts.max()} leaves, more than {width}")
        feats = np.zeros((len(self), width, self.n_features), dtype=np.float32)
        pos = np.zeros((len(self), width), dtype=np.int64)
        mask = np.zeros((len(self), width), dtype=bool)
        for i, (f, p) in enumerate(zip(self.leaf_features, self.leaf_pos)):
            feats[i, :len(f)] = f
            pos[i, :len(p)] = p
            mask[i, :len(f)] = True
        return feats, pos, mask

    def _leaf_work(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(every leaf's features, its work, the program it belongs to), in program order."""
        leaves = np.concatenate(self.leaf_features)  # one call: per program costs more
        logged = leaves[:, work_columns()].astype(np.float64)
        per_leaf = (np.exp2(np.clip(logged, 0, 100)) - 1).sum(axis=1)
        owner = np.repeat(np.arange(len(self)), [len(f) for f in self.leaf_features])
        return leaves, per_leaf, owner

    def work(self) -> np.ndarray:
        """(n,) each program's work: its floating-point operations plus the bytes its stores'
        buffers access, summed over the leaves, plus 1. TVM's per-store features hold these
        counts as slog (log2(x + 1)), so they are exponentiated back before summing. Latency
        divided by work varies far less across operators and shapes than latency does
        (measured: log-latency std 2.3, after dividing by work 1.1), which is what
        `ModelConfig.target="per_work"` predicts."""
        if not len(self):
            return np.ones(0)
        cached = self.__dict__.get("_work")
        return self._work_of(*self._leaf_work()[1:]) if cached is None else cached

    def _work_of(self, per_leaf: np.ndarray, owner: np.ndarray) -> np.ndarray:
        # Kept on the (immutable) set, read-only: an ensemble's members each need it, and it
        # costs a pass over every leaf.
        work = 1.0 + np.bincount(owner, weights=per_leaf, minlength=len(self))
        work.flags.writeable = False
        object.__setattr__(self, "_work", work)
        return work

    def heaviest(self, per_work: bool = False, out: np.ndarray | None = None) -> np.ndarray:
        """(n, F) float64 (or `out`, filled and returned): the features of each program's store
        with the most work (the first of equals; zeros for a program without leaves). A sum over
        the leaves blurs the store that takes the time with the small ones around it
        (initializations, copies, epilogues).

        per_work: (n, 2F), followed by the same features minus log2 of the program's `work`.
        Counts are slog (log2(x + 1)), so for them this is about log2 of the count per unit of
        the program's work: its intensities, which a held-out network's larger or smaller
        shapes leave where the training shapes put them (for the other columns, one-hots and
        ratios, it is noise a tree can ignore)."""
        f = self.n_features
        out = _output(out, (len(self), 2 * f if per_work else f))
        if not len(self):
            return out
        leaves, per_leaf, owner = self._leaf_work()
        first = np.lexsort((-per_leaf, owner))  # by program, heaviest first; stable on ties
        counts = np.bincount(owner, minlength=len(self))
        has = counts > 0
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])[has]
        out[has, :f] = leaves[first[starts]]
        out[~has, :f] = 0
        if per_work:
            # `work` from the same pass over the leaves: one concatenation, not two
            work = self._work_of(per_leaf, owner)
            np.subtract(out[:, :f], np.log2(work)[:, None], out=out[:, f:])  # no leaves: zeros
        return out

    def summed(self, out: np.ndarray | None = None) -> np.ndarray:
        """TenSet-style program vector: per-store features summed over the leaves, plus the
        leaf count. (n, F + 1) float64 (or `out`, filled and returned)"""
        out = _output(out, (len(self), self.n_features + 1))
        for i, f in enumerate(self.leaf_features):
            out[i, :-1] = f.sum(axis=0)
            out[i, -1] = len(f)
        return out


def _output(out: np.ndarray | None, shape: tuple) -> np.ndarray:
    """`out` (checked: the caller's array, e.g. a view of a wider matrix, to fill in place
    rather than copy into it) or a new float64 array of `shape`."""
    if out is None:
        return np.empty(shape)
    if out.shape != shape:
        raise ValueError(f"out has shape {out.shape}, the result {shape}")
    return out


def check_programs(programs) -> None:
    """A clear TypeError when an estimator is given something else than a `ProgramSet`."""
    if not isinstance(programs, ProgramSet):
        raise TypeError(f"cdmpp's estimators take a ProgramSet (compact ASTs: each program's leaf "
                        f"features and pre-order positions), not a {type(programs).__name__}: "
                        "read one from a feature store (cdmpp.dataset.loader.programs_for_rows) "
                        "or predict TIR programs with cdmpp.predict_programs")
