"""Compressed copies of collection directories (how datasets are kept in the repository)."""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

# what a collection directory holds that is worth keeping (".build" is scratch)
KEPT = ("database_workload.json", "database_tuning_record.json", "cdmpp_measurements.jsonl",
        "failures.jsonl", "tasks.json", "device.json", "manifest.json", "candidates",
        "measured_modules")


def pack(directory: str | Path, archive: str | Path) -> Path:
    """Write `directory` to `archive` (.tar.xz) atomically."""
    directory, archive = Path(directory), Path(archive)
    tmp = archive.with_name(f".{archive.name}.tmp")
    with tarfile.open(tmp, "w:xz", preset=9) as tar:
        for name in KEPT:
            if (directory / name).exists():
                tar.add(directory / name, arcname=name, recursive=True)
    os.replace(tmp, archive)
    return archive


def unpack(archive: str | Path, directory: str | Path) -> Path:
    """Extract `archive` into `directory` (created); refuses paths that leave it."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, "r:xz") as tar:
        tar.extractall(directory, filter="data")
    return directory
