"""Which placement the host gave our threads right now, seen by a memory-streaming probe.

On the Zen 5 VM (2026-11-25) the host moved our two vCPUs between two placements every 10-90 s,
about half the time in each. The reference kernel (a matmul that fits in L2) ran the same in
both; a kernel streaming 64 MiB (twice the L3) did not: 1.2-1.6 ms in one placement, 2.4-3.3 ms
in the other. In the fast one MobileNet-V2 at batch 4 (tuned) ran 51-54 ms whole against
40-42 ms in the other, while its kernels timed alone ran within 1.3% of each other in both
(docs/measurement.md, "Two placements of the threads"). That fits (we cannot see the host) the
two threads sitting on two L3 caches, each with its own link to memory, so that data passed
from kernel to kernel crosses caches.

The probe's time is kept with each pass (`types.PassStats.memory_probe_s`); the device's
fastest probe and slowest run are kept in `<cache>/devices/<id>/memory_probe.json`, so a run
that saw only one placement can tell whether the device has another.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from cdmpp.measure.reference import read_kept, write_kept

PROBE_FILE = "memory_probe.json"
PROBE_MIB = 64  # twice the largest L3 seen here: the probe streams from memory, not a cache
# a probe this much slower than the device's fastest is the other placement. Measured over 240
# rows: 1.17-1.60 ms in one placement, 2.39-3.30 ms in the other; 1.5 x 1.17 = 1.76 falls between
PLACEMENT_SPLIT = 1.5
FAST_MEMORY, SLOW_MEMORY = "fast-memory", "slow-memory"


def memory_probe_kernel(target: dict, mib: int = PROBE_MIB):
    """A parallel, vectorized `B = 2 * A` over `mib` MiB of float32: memory bound."""
    from cdmpp.tvm_env import import_tvm

    tvm = import_tvm()
    from tvm import s_tir, te

    from cdmpp.measure.build import compile_module

    n = mib * 1024 * 1024 // 4
    a = te.placeholder((n,), name="A")
    b = te.compute((n,), lambda i: a[i] * 2.0, name="B")
    sch = s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func([a, b])}))
    (i,) = sch.get_loops(sch.get_sblock("B"))
    outer, inner = sch.split(i, [None, 65536])
    sch.parallel(outer)
    _, lanes = sch.split(inner, [None, 16])
    sch.vectorize(lanes)
    return compile_module(sch.mod, target).jit(), [["TENSOR", "float32", [n]]] * 2


def memory_state(probe_s: float | None, best_s: float | None) -> str | None:
    """FAST_MEMORY when the probe ran within PLACEMENT_SPLIT of the device's best, else
    SLOW_MEMORY; None when either is unknown."""
    if not probe_s or not best_s:
        return None
    return FAST_MEMORY if probe_s < PLACEMENT_SPLIT * best_s else SLOW_MEMORY


def has_two_placements(best_s: float | None, worst_s: float | None) -> bool:
    """The device's probe has run in both placements (as far as its history tells)."""
    return bool(best_s and worst_s and worst_s >= PLACEMENT_SPLIT * best_s)


def remember_memory_probe(device_id: str, probe_s, root: str | Path | None = None
                          ) -> tuple[float, float]:
    """Fold a run's probe times into the device's (fastest, slowest) and return them. The
    fastest is the fastest probe ever; the slowest is the slowest run's *median* probe, so a
    single disturbed probe (seen here: 1.48x in a busy second) does not make a second placement.
    An unreadable file is replaced; a cache that cannot be written is reported on stderr."""
    times = [float(t) for t in probe_s if t]
    if not times or min(times) <= 0:
        raise ValueError(f"probe times must be positive, got {list(probe_s)}")
    fastest, typical = min(times), float(statistics.median(times))
    best, worst = probe_history(device_id, root) or (float("inf"), 0.0)
    new_best, new_worst = min(best, fastest), max(worst, typical)
    if (new_best, new_worst) != (best, worst):
        write_kept(device_id, PROBE_FILE, {"best_s": new_best, "worst_s": new_worst},
                   "the memory probe", root)
    return new_best, new_worst


def probe_history(device_id: str, root: str | Path | None = None) -> tuple[float, float] | None:
    """The device's (fastest probe, slowest run) so far; None if never probed or unreadable."""
    return read_kept(device_id, PROBE_FILE, ("best_s", "worst_s"), root)


def describe_placements(device_id: str, root: str | Path | None = None) -> str:
    """One line for `cdmpp env`: what the device's probe history says about placements."""
    kept = probe_history(device_id, root)
    if kept is None:
        return "placements not probed yet (`cdmpp e2e --measure` probes them)"
    best, worst = kept
    span = f"memory probe {1e3 * best:.2f}-{1e3 * worst:.2f} ms"
    if has_two_placements(best, worst):
        return (f"placements two seen ({span}): a network can run up to 28% apart in them; "
                "`cdmpp e2e --measure` times it in both")
    return f"placements one seen ({span})"
