"""The best time of the reference kernel ever seen on a device, kept across runs.

Within a run, a pass is judged disturbed against the reference kernel's best time *in that run*
(`timing.Timer`), so a run during which the shared host is slow throughout looks undisturbed.
Comparing the run's best with the device's best ever tells how much slower the whole run was:
measured here, the same tuned networks timed 13-69% slower in a run an hour after another.

Kept in `<cache>/devices/<device_id>/reference.json` ({"best_s": ..., "updated": ...}).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from cdmpp.atomic import write_text_atomic
from cdmpp.clock import now_iso
from cdmpp.paths import device_dir

REFERENCE_FILE = "reference.json"
SLOW_RUN_REL = 0.10  # a run whose reference kernel is this much slower than its best: warn


def read_kept(device_id: str, name: str, keys, root: str | Path | None = None):
    """The floats `keys` of the device's kept file `name`, or None when it is missing or
    unreadable (a kept file only ever holds extremes: a lost one is rebuilt by the next run)."""
    try:
        kept = json.loads((device_dir(device_id, root) / name).read_text())
        return tuple(float(kept[k]) for k in keys)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_kept(device_id: str, name: str, fields: dict, what: str,
               root: str | Path | None = None) -> None:
    """Write the device's kept file `name` atomically; a cache that cannot be written is
    reported on stderr (naming `what`) and the measurement goes on."""
    path = device_dir(device_id, root) / name
    try:
        write_text_atomic(path, json.dumps({"device_id": device_id, **fields,
                                            "updated": now_iso()}) + "\n")
    except OSError as e:  # a cache that cannot be written must not lose a measurement
        print(f"cdmpp: could not record {what} in {path}: {e}", file=sys.stderr)


def remember_reference(device_id: str, run_best_s: float, root: str | Path | None = None) -> float:
    """Record this run's best reference time; return the device's best ever (including it).
    An unreadable file is replaced (it only ever holds a minimum); a cache that cannot be
    written is reported on stderr and the measurement goes on."""
    if not run_best_s > 0:
        raise ValueError(f"reference time must be positive, got {run_best_s}")
    (best,) = read_kept(device_id, REFERENCE_FILE, ("best_s",), root) or (float("inf"),)
    if run_best_s < best:
        best = run_best_s
        write_kept(device_id, REFERENCE_FILE, {"best_s": best}, "the reference time", root)
    return best
