"""Train/test splits of a feature store's samples, saved with the store for reproducibility.

Kinds:
- random:  within every task, a random share of its records is held out;
- by-task: whole tasks are held out;
- by-network:NAMES  the tasks of the named networks are held out; a task that also occurs in a
  training network is shared: it goes to neither side unless `shared` says otherwise (a model
  that saw a task in training has not been tested on an unseen network by predicting it);
- by-device:IDS  every record measured on the named devices is held out.
A sample is identified by (db, record_index), so a split stays valid when the store grows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

SPLITS_DIR = "splits"


@dataclass(frozen=True)
class Split:
    name: str
    kind: str
    params: dict
    train: tuple  # ((db, record_index), ...)
    test: tuple
    excluded: tuple = field(default=())  # shared tasks of a by-network split

    def rows(self, samples) -> tuple[np.ndarray, np.ndarray]:
        """Row numbers of the train and test samples in a samples table."""
        index = {(db, int(r)): i for i, (db, r) in enumerate(
            zip(samples.column("db").to_pylist(), samples.column("record_index").to_pylist()))}
        missing = [s for s in self.train + self.test if tuple(s) not in index]
        if missing:
            raise ValueError(f"split {self.name!r} names {len(missing)} samples that are not in "
                             f"this store, e.g. {missing[0]}")
        return (np.array([index[tuple(s)] for s in self.train], dtype=np.int64),
                np.array([index[tuple(s)] for s in self.test], dtype=np.int64))

    def save(self, store_path: str | Path) -> Path:
        from cdmpp.atomic import write_text_atomic

        directory = Path(store_path) / SPLITS_DIR
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{self.name}.json"
        write_text_atomic(path, json.dumps({
            "name": self.name, "kind": self.kind, "params": self.params,
            "train": [list(s) for s in self.train], "test": [list(s) for s in self.test],
            "excluded": [list(s) for s in self.excluded]}))
        # normalizers saved beside an earlier split of this name were fitted on its training
        # side: they go with it (`cdmpp split` fits this one's)
        (directory / f"{self.name}.norm.npz").unlink(missing_ok=True)
        return path

    @classmethod
    def load(cls, store_path: str | Path, name: str) -> "Split":
        path = Path(store_path) / SPLITS_DIR / f"{name}.json"
        if not path.exists():
            raise FileNotFoundError(f"no split {name!r} in {path.parent}")
        d = json.loads(path.read_text())
        as_tuples = lambda xs: tuple((db, int(r)) for db, r in xs)  # noqa: E731
        return cls(d["name"], d["kind"], d["params"], as_tuples(d["train"]),
                   as_tuples(d["test"]), as_tuples(d.get("excluded", [])))


def carve_rows(n: int, fraction: float, seed: int, tasks=None) -> tuple[np.ndarray, np.ndarray]:
    """(fit rows, validation rows) of a training side of `n` records: validation holds
    `fraction` of its tasks when `tasks` (one name per record, at least two distinct) is
    given, as a split that tests on unseen tasks needs, else `fraction` of its records; drawn
    with `seed`, each side in the draw's order. The one carve behind every validation set
    cdmpp chooses on: `CDMPPRegressor`'s epochs and the benchmarks' settings."""
    rng = np.random.default_rng(seed)
    names = sorted(set(tasks)) if tasks is not None else []
    if len(names) >= 2:
        n_val = max(1, int(round(fraction * len(names))))
        held = {names[i] for i in rng.permutation(len(names))[:n_val]}
        is_val = np.array([t in held for t in tasks])
        return np.flatnonzero(~is_val), np.flatnonzero(is_val)
    order = rng.permutation(n)
    n_val = max(1, int(round(fraction * n)))
    return order[n_val:], order[:n_val]


def _ids(samples, rows) -> tuple:
    dbs = samples.column("db").to_pylist()
    recs = samples.column("record_index").to_pylist()
    return tuple((dbs[i], int(recs[i])) for i in rows)


def random_split(samples, test_fraction: float = 0.2, seed: int = 0) -> Split:
    rng = np.random.default_rng(seed)
    tasks = np.array(samples.column("task").to_pylist())
    test_mask = np.zeros(len(tasks), dtype=bool)
    for task in np.unique(tasks):
        rows = np.flatnonzero(tasks == task)
        n_test = int(round(test_fraction * len(rows)))
        test_mask[rng.choice(rows, size=n_test, replace=False)] = True
    return Split("random", "random", {"test_fraction": test_fraction, "seed": seed},
                 _ids(samples, np.flatnonzero(~test_mask)), _ids(samples, np.flatnonzero(test_mask)))


def task_split(samples, test_fraction: float = 0.2, seed: int = 0) -> Split:
    rng = np.random.default_rng(seed)
    tasks = np.array(samples.column("task").to_pylist())
    unique = np.unique(tasks)
    held = set(rng.choice(unique, size=max(1, int(round(test_fraction * len(unique)))),
                          replace=False))
    test_mask = np.array([t in held for t in tasks])
    return Split("by-task", "by-task", {"test_fraction": test_fraction, "seed": seed,
                                        "test_tasks": sorted(held)},
                 _ids(samples, np.flatnonzero(~test_mask)), _ids(samples, np.flatnonzero(test_mask)))


def network_split(samples, networks, shared: str = "exclude") -> Split:
    """Hold out `networks`; `shared` ('exclude', 'train' or 'test') places shared tasks."""
    if shared not in ("exclude", "train", "test"):
        raise ValueError(f"shared must be exclude, train or test, not {shared!r}")
    held = set(networks)
    known = {n for nets in samples.column("networks").to_pylist() for n in nets.split(",") if n}
    unknown = held - known
    if unknown:
        raise ValueError(f"no sample comes from network(s) {sorted(unknown)}; "
                         f"the store has {sorted(known)}")
    side = []
    for nets in samples.column("networks").to_pylist():
        names = {n for n in nets.split(",") if n}
        if not names & held:
            side.append("train")
        elif names - held:
            side.append(shared if shared != "exclude" else "excluded")
        else:
            side.append("test")
    side = np.array(side)
    name = "by-network-" + "-".join(sorted(held))
    return Split(name, "by-network", {"networks": sorted(held), "shared": shared},
                 _ids(samples, np.flatnonzero(side == "train")),
                 _ids(samples, np.flatnonzero(side == "test")),
                 _ids(samples, np.flatnonzero(side == "excluded")))


def device_split(samples, devices) -> Split:
    held = set(devices)
    ids = np.array(samples.column("device_id").to_pylist())
    unknown = held - set(ids.tolist())
    if unknown:
        raise ValueError(f"no sample was measured on device(s) {sorted(unknown)}; "
                         f"the store has {sorted(set(ids.tolist()))}")
    test_mask = np.isin(ids, list(held))
    return Split("by-device-" + "-".join(sorted(held)).replace("/", "_"), "by-device",
                 {"devices": sorted(held)},
                 _ids(samples, np.flatnonzero(~test_mask)), _ids(samples, np.flatnonzero(test_mask)))


def parse_split_spec(spec: str) -> tuple[str, list[str]]:
    """(kind, names) of a command-line split spec: random | by-task | by-network:A,B |
    by-device:ID,...; a clear ValueError for anything else (checked before any data is read)."""
    kind, colon, arg = spec.partition(":")
    names = [a for a in arg.split(",") if a]
    if kind in ("random", "by-task") and not colon:
        return kind, []
    if kind in ("by-network", "by-device") and names:
        return kind, names
    raise ValueError(f"unknown split {spec!r}: use random, by-task, by-network:NAME,... "
                     "or by-device:ID,...")


def make_split(samples, spec: str, seed: int = 0) -> Split:
    """A split from a command-line spec (`parse_split_spec`); a ValueError, before any caller
    saves or trains on it, when it leaves a side empty."""
    kind, names = parse_split_spec(spec)
    if kind == "random":
        split = random_split(samples, seed=seed)
    elif kind == "by-task":
        split = task_split(samples, seed=seed)
    elif kind == "by-network":
        split = network_split(samples, names)
    else:
        split = device_split(samples, names)
    if not (len(split.train) and len(split.test)):
        raise ValueError(f"split {split.name} leaves {len(split.train)} train and "
                         f"{len(split.test)} test records: nothing to fit or to test on")
    return split
