"""The feature store: compact ASTs of measured programs, on disk, read out of core.

Layout of a store directory:
  shards/NNNNN/           one per extraction run (written to a temp dir, then renamed)
    keys.json             program keys, one per program row
    leaf_features.npy     float32 (n_leaves_total, 176): compact_ast.N_LEAF_FEATURES
    leaf_pos.npy          int32   (n_leaves_total,)
    leaf_offsets.npy      int64   (n_programs + 1,)  program i owns rows offsets[i]:offsets[i+1]
    node_kind.npy, node_parent.npy, node_extent.npy, node_offsets.npy   the trees
  samples.parquet         one row per measured record: which program, label, noise, task, ...
  failures.jsonl          records that could not be featurized (db, record, reason)
  splits/                 saved splits and the normalizers fitted on their training side

A program's key hashes what determines its features: the extractor VERSION, the workload, the
trace (or the measured module when the trace does not replay to it) and the target. The same
program measured on two devices is one program row with two samples. Reading never needs TVM.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

LEAF_ARRAYS = ("leaf_features", "leaf_pos", "leaf_node")
NODE_ARRAYS = ("node_kind", "node_parent", "node_extent")
SAMPLES_FILE = "samples.parquet"
FAILURES_FILE = "failures.jsonl"
DEVICES_FILE = "devices.json"  # {device_id: device.json contents} of the stored databases


@functools.cache  # asked once per record: the metadata lookup reads the disk
def _tvm_version() -> str:
    import importlib.metadata

    try:
        return importlib.metadata.version("apache-tvm")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def program_key(record, feature_version: str) -> str:
    """Content key of a record's program for one extractor version (no TVM needed).

    TVM's version is part of it: TVM computes the per-store rows, an upgrade may change them.
    """
    module_ref = record.meta.get("mod_shash") if record.meta.get("measured_module") else None
    payload = [feature_version, _tvm_version(), record.workload.shash, record.trace_json, module_ref,
               {k: record.target.get(k) for k in ("kind", "mcpu", "num-cores")}]
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


@dataclass(frozen=True)
class Shard:
    """One shard, memory-mapped."""

    path: Path
    keys: tuple[str, ...]
    arrays: dict

    @classmethod
    def open(cls, path: Path) -> "Shard":
        try:
            keys = tuple(json.loads((path / "keys.json").read_text()))
            # plain ndarray views of the mapped files: still read out of core, but slicing one
            # skips np.memmap's per-slice bookkeeping (60% of reading 50,000 programs)
            arrays = {f.stem: np.asarray(np.load(f, mmap_mode="r")) for f in path.glob("*.npy")}
        except (OSError, ValueError) as e:  # shards are renamed into place whole: damaged later
            raise ValueError(f"{path}: a damaged feature-store shard ({type(e).__name__}: {e}); "
                             "remove it and run `cdmpp features` again to extract what it "
                             "held") from e
        return cls(path, keys, arrays)

    def leaves(self, row: int) -> tuple[np.ndarray, np.ndarray]:
        offsets = self.arrays["leaf_offsets"]
        lo, hi = offsets[row], offsets[row + 1]
        return self.arrays["leaf_features"][lo:hi], self.arrays["leaf_pos"][lo:hi]

    def n_leaves(self) -> np.ndarray:
        return np.diff(self.arrays["leaf_offsets"])


def write_shard(path: Path, keys: list[str], asts: list) -> None:
    """Write compact ASTs as one shard: temp directory, fsync, rename."""
    tmp = path.with_name(path.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    parts = [a.to_arrays() for a in asts]
    for names, offsets_name, count in ((LEAF_ARRAYS, "leaf_offsets", "leaf_pos"),
                                       (NODE_ARRAYS, "node_offsets", "node_kind")):
        sizes = [len(p[count]) for p in parts]
        np.save(tmp / f"{offsets_name}.npy", np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64))
        for name in names:
            np.save(tmp / f"{name}.npy", np.concatenate([p[name] for p in parts]) if parts
                    else np.zeros((0,), np.float32))
    (tmp / "keys.json").write_text(json.dumps(keys))
    for f in tmp.iterdir():
        with open(f, "rb") as fh:
            os.fsync(fh.fileno())
    os.replace(tmp, path)


class FeatureStore:
    """A store directory, opened for reading (and growing, with `features.build`)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        shard_dir = self.path / "shards"
        self.shards = [Shard.open(p) for p in sorted(shard_dir.glob("[0-9]*"))
                       if not p.name.endswith(".tmp")] if shard_dir.exists() else []
        self._row_of = {}
        for s, shard in enumerate(self.shards):
            for r, key in enumerate(shard.keys):
                self._row_of[key] = (s, r)

    @property
    def keys(self):
        """The program keys in the store (a set-like view: membership is O(1), nothing copied)."""
        return self._row_of.keys()

    def samples(self, databases=None):
        """The samples table (pyarrow), one row per measured record; with `databases` (paths
        of databases, or folders of them), only their records: a store is shared by every
        command, and training on `--data A` must not pick up what an earlier run added."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        path = self.path / SAMPLES_FILE
        if not path.exists():
            from cdmpp.features.samples import empty_samples

            return empty_samples()
        table = pq.read_table(path)
        if databases is None:
            return table
        from cdmpp.measure.database import unique_databases

        wanted = {str(db.resolve()) for db in unique_databases(databases)}
        column = table.column("db").to_pylist()
        # resolved once per database, not per row (rows of an older cdmpp may be relative)
        taken = {db for db in set(column) if str(Path(db).resolve()) in wanted}
        keep = [i for i, db in enumerate(column) if db in taken]
        return table.take(pa.array(keep, type=pa.int64()))  # typed: `keep` may be empty

    def devices(self) -> dict:
        """{device_id: Device} of the databases whose device.json the store has seen."""
        import json

        from cdmpp.device import Device

        path = self.path / DEVICES_FILE
        if not path.exists():
            return {}
        return {k: Device.from_json(v, source=f"{path}[{k}]")
                for k, v in json.loads(path.read_text()).items()}

    def program(self, key: str) -> tuple[np.ndarray, np.ndarray]:
        """(leaf_features (n, 164), leaf_pos (n,)) of one program."""
        s, r = self._row_of[key]
        return self.shards[s].leaves(r)

    def programs(self, keys) -> list[tuple[np.ndarray, np.ndarray]]:
        return [self.program(k) for k in keys]
