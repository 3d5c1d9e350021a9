"""From a feature store to what estimators take: `ProgramSet`s and labels (no TVM)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cdmpp.dataset.programs import ProgramSet


@dataclass(frozen=True)
class LabeledPrograms:
    programs: ProgramSet
    latency_s: np.ndarray  # (n,) labels
    noise_rel: np.ndarray  # (n,) label noise of each record (NaN when unknown)
    clean_passes: np.ndarray  # (n,) passes on an undisturbed machine (NaN when unknown)
    rows: np.ndarray  # (n,) row numbers in the samples table


def device_vectors(store, samples, rows) -> np.ndarray:
    """(n, D) device vectors of samples-table rows, from the device.json files the store kept;
    a clear error names a device the store has no description of."""
    from cdmpp.device import device_vector

    devices = store.devices()
    ids = samples.column("device_id").to_pylist()
    vectors = {}
    for i in rows:
        if ids[i] not in vectors:
            if ids[i] not in devices:
                raise ValueError(f"device {ids[i]!r} (record {i} of the samples table) has no "
                                 f"device.json in the store {store.path}: rebuild the store "
                                 "from databases that carry their device.json")
            vectors[ids[i]] = device_vector(devices[ids[i]])
    return np.stack([vectors[ids[i]] for i in rows]).astype(np.float32)


def programs_for_rows(store, samples, rows, with_device: bool = False) -> ProgramSet:
    """The programs of samples-table rows, in that order (with their device vectors)."""
    rows = np.asarray(rows, dtype=np.int64)
    keys = samples.column("key").to_pylist()
    tasks = samples.column("task").to_pylist()
    pairs = store.programs([keys[i] for i in rows])
    return ProgramSet(tuple(np.asarray(f) for f, _ in pairs),
                      tuple(np.asarray(p) for _, p in pairs),
                      device_vectors(store, samples, rows) if with_device else None,
                      tuple(tasks[i] for i in rows))


def labeled(store, samples, rows, with_device: bool = False) -> LabeledPrograms:
    rows = np.asarray(rows, dtype=np.int64)
    latency = np.asarray(samples.column("latency_s").to_numpy())[rows]
    noise = np.asarray(samples.column("noise_rel").to_numpy(zero_copy_only=False))[rows]
    clean = (np.asarray(samples.column("clean_passes").to_numpy(zero_copy_only=False),
                        dtype=float)[rows]
             if "clean_passes" in samples.column_names else np.full(len(rows), np.nan))
    return LabeledPrograms(programs_for_rows(store, samples, rows, with_device), latency, noise,
                           clean, rows)


def split_data(store, split) -> tuple[LabeledPrograms, LabeledPrograms]:
    """(train, test) of a saved split."""
    samples = store.samples()
    train_rows, test_rows = split.rows(samples)
    return labeled(store, samples, train_rows), labeled(store, samples, test_rows)


def default_program_mask(samples, rows=None) -> np.ndarray:
    """(n,) True where a samples-table row is a task's default (untuned) program, the one TVM
    runs without tuning: the collector marks it `kind: default` (its trace is empty). Reads the
    databases' records (no TVM); a database written by TVM's tuner has none."""
    from cdmpp.measure.database import load_database

    dbs = samples.column("db").to_pylist()
    index = samples.column("record_index").to_pylist()
    rows = np.arange(samples.num_rows) if rows is None else np.asarray(rows, dtype=np.int64)
    defaults = {}
    for db in sorted({dbs[i] for i in rows}):
        defaults[db] = {r.record_index for r in load_database(db, strict=False).records
                        if r.is_default}
    return np.array([int(index[i]) in defaults[dbs[i]] for i in rows], dtype=bool)
