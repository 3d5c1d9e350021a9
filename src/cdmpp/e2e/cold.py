"""Weights that a network reads from memory, where a kernel timed alone finds them in cache.

    cold = measure_cold_weights(device)        # ~10 s; kept in overhead.json
    cold.at(graph.weight_bytes(), tuned=True)  # extra seconds per weight byte of a tuned kernel

A kernel timed alone runs many times in a row, so its weights stay in the caches. In a network
every weight is read once per inference, and all the other weights pass through the caches in
between: when they are more than the last-level cache holds, each kernel reads its weights
from memory. Measured on the Intel Xeon (docs/measurement.md, kernels timed inside the network
by `e2e.measure.profile_in_network`): BERT-base's and GPT-2's weight matmuls (325 MiB of weights,
L3 260 MiB) ran 1.06-1.42x their time alone; the convolutions of ResNet-18 and ResNet-50 (45 and
98 MiB) and MobileNet-V2 (14 MiB) ran within a few percent of alone.

How much a kernel loses depends on its schedule, so the probe is BERT-base's first feed-forward
matmul (9 MiB of weights) under two schedules (`METHOD`, version 3), each timed on one weight
tensor back to back (warm) and cycling through copies of its weights totalling twice the
last-level cache, as a network cycles through its layers' weights; seven interleaved passes,
the median call of each; extra seconds per weight byte = the median over passes of (cycling -
warm) / weight bytes, at least 0 (~10 s in all):
- `plain`: scheduled by hand (parallel rows, vectorized columns), for the kernels TVM's default
  pipeline leaves and any kernel not from a tuning database;
- `tuned`: a meta_schedule-tuned schedule of it (`TUNED_PROBE`, shipped), for kernels whose
  schedule came from a tuning database. On the Zen 5 VM the plain probe reads 0-0.022 ns per
  byte (at 70 GFLOP/s it is compute-bound, and most of the weights it streams hide under its
  arithmetic), the tuned one 0.023-0.067, and the tuned kernels of BERT-base and GPT-2 ran
  1.03-1.27x slower inside the network than alone, 1.04-1.17x alone cycling through copies of
  their arguments (docs/measurement.md, "A tuned probe for tuned kernels").
A network whose matrix weights of one inference (`graph.Node.weight_bytes`: a convolution's are
not counted) exceed the cache costs each kernel call its weight bytes x its probe's extra
(`e2e.replay`); one whose weights fit costs nothing more.

The cache is the one the VM really has (method 4): the plain probe is also timed cycling
through 2, 4, 8, ... copies of its weights while they total less than the reported last-level
cache, three passes each, stopping at the first that costs at least half the extra at twice
that cache; the cache is the largest total below it (one copy when the first costs it
already), or the reported one when none does. The L3 a VM reports is the host's, shared with
every other tenant: the model-167 Intel Xeon VM reports 480 MiB, yet cycling 18 MiB of copies
already cost 0.14 ns a byte there and 36 MiB the full 0.2-0.3, and BERT-base's and GPT-2's
tuned kernels (325 MiB of weights) ran 1.3-1.4x their time alone inside the network, which a
threshold at the reported 480 MiB did not charge (docs/measurement.md, "Matrix weights, and
the cache a VM really has").

Why matrix weights only: the convolutions of ResNet-50 (98 MiB of weights, beyond the measured
cache on every CPU profiled) ran 1.00-1.11x their time alone inside the network on the Intel
Xeons and Zen 5, and ResNet-18's 1.04-1.05x, where the transformers' weight matmuls ran
1.07-1.42x; charging them at the probe's rate would have put ResNet-50 27% high. The rule was
chosen after seeing these profiles, so their figures are not an independent test of it (the
probes' magnitudes are measured, not fitted).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

PROBE_MKN = (128, 768, 3072)  # rows, reduction, columns: BERT-base's first feed-forward matmul
DEFAULT_LLC_BYTES = 32 * 2**20  # when the device does not report its last-level cache
# the tuned probe's record: workload, trace, weight arguments (assets/probes/README.md)
TUNED_PROBE = Path(__file__).resolve().parents[1] / "assets" / "probes" / "tuned_ffn_matmul.json"
METHOD = ("extra time per weight byte of BERT-base's 128x768x3072 float32 feed-forward matmul "
          "(9 MiB of weights), hand-scheduled (plain) and meta_schedule-tuned (tuned), cycling "
          "through copies of its weights totalling twice the last-level cache, vs on one copy; "
          "median call per pass, median over passes of the difference; the cache: the plain "
          "probe cycling 2, 4, 8, ... copies below the last-level cache (3 passes each), the "
          "largest total costing less than half the extra; applied to the matrix weights of "
          "networks whose matrix weights per inference exceed that cache, the tuned probe's "
          "to kernels from a tuning database")
CACHE_PASSES = 3  # passes of each size the cache is probed at (the full probe takes 7)
CACHE_EXTRA_SHARE = 0.5  # a total of copies costing this share of the full extra is beyond it


@dataclass(frozen=True)
class ColdProbe:
    """One probe kernel timed warm and cycling through copies of its weights, pass by pass."""

    weight_bytes: int  # the probe's weights (one copy)
    cycled_bytes: int  # weights it cycled through (copies x weight bytes)
    warm_s: tuple[float, ...]  # per pass: median call on one copy of its weights
    cycled_s: tuple[float, ...]  # per pass: median call cycling through the copies

    @property
    def s_per_byte(self) -> float:
        """Extra seconds per weight byte read from memory: the median over passes of cycled -
        warm (the memory's speed moves with the host's placement of our threads, so a pass
        is compared with itself; the median is the typical state), at least 0."""
        extra = np.median(np.subtract(self.cycled_s, self.warm_s))
        return max(float(extra), 0.0) / self.weight_bytes

    def to_json(self) -> dict:
        return {"weight_bytes": self.weight_bytes, "cycled_bytes": self.cycled_bytes,
                "warm_s": list(self.warm_s), "cycled_s": list(self.cycled_s),
                "s_per_byte": self.s_per_byte}

    @classmethod
    def from_json(cls, d: dict) -> "ColdProbe":
        return cls(int(d["weight_bytes"]), int(d["cycled_bytes"]),
                   tuple(float(x) for x in d["warm_s"]), tuple(float(x) for x in d["cycled_s"]))


@dataclass(frozen=True)
class ColdWeights:
    llc_bytes: int  # the last-level cache the device reports
    plain: ColdProbe  # the hand-scheduled probe: untuned kernels
    tuned: ColdProbe | None = None  # the tuned probe: kernels from a tuning database (None:
    # the plain probe's rate for every kernel)
    # the plain probe cycling through ever more copies below `llc_bytes`, smallest first
    # (empty: not probed, the reported cache holds)
    below_llc: tuple[ColdProbe, ...] = ()

    @property
    def cache_bytes(self) -> int:
        """The cache the VM really has: the largest total of copies the plain probe cycled
        through at less than half its extra beyond the last-level cache (one copy if the
        smallest total already cost that); the reported cache if none cost it."""
        below = self.plain.weight_bytes
        for probe in self.below_llc:
            if _beyond_the_cache(probe, self.plain):
                return below
            below = probe.cycled_bytes
        return self.llc_bytes

    def at(self, network_weight_bytes: float, tuned: bool = False) -> float:
        """Extra seconds per weight byte of a kernel (`tuned`: from a tuning database) in a
        network reading that many bytes of matrix weights per inference: its probe's cost
        beyond the cache the VM has (`cache_bytes`), 0 within it."""
        if network_weight_bytes <= self.cache_bytes:
            return 0.0
        probe = self.tuned if tuned and self.tuned is not None else self.plain
        return probe.s_per_byte

    def to_json(self) -> dict:
        return {"method": METHOD, "llc_bytes": self.llc_bytes, "cache_bytes": self.cache_bytes,
                "plain": self.plain.to_json(),
                "tuned": None if self.tuned is None else self.tuned.to_json(),
                "below_llc": [p.to_json() for p in self.below_llc]}

    @classmethod
    def from_json(cls, d: dict) -> "ColdWeights":
        return cls(int(d["llc_bytes"]), ColdProbe.from_json(d["plain"]),
                   None if d.get("tuned") is None else ColdProbe.from_json(d["tuned"]),
                   tuple(ColdProbe.from_json(p) for p in d.get("below_llc", ())))


def probe_kernel(target, mkn=PROBE_MKN):
    """(built module, args_info JSON, indices of the weight arguments) of the plain probe
    C = A @ W, scheduled by hand."""
    from cdmpp.measure.build import compile_module
    from cdmpp.measure.timing import matmul_schedule

    m, k, n = mkn
    sch = matmul_schedule(m, k, n)
    i, j, kk = sch.get_loops(sch.get_sblock("C"))
    jo, ji = sch.split(j, [None, 16])
    io, ii = sch.split(i, [None, 4])
    sch.reorder(io, jo, kk, ii, ji)
    sch.parallel(io)
    sch.vectorize(ji)
    info = [["TENSOR", "float32", [m, k]], ["TENSOR", "float32", [k, n]],
            ["TENSOR", "float32", [m, n]]]
    return compile_module(sch.mod, target).jit(), info, (1,)


def tuned_probe_kernel(target):
    """(built module, args_info JSON, indices of the weight arguments) of the tuned probe: the
    shipped record's trace replayed on its workload (the schedule, for any target)."""
    from cdmpp.measure import tvm_codec
    from cdmpp.measure.build import compile_module

    record = json.loads(TUNED_PROBE.read_text())
    workload = tvm_codec.decode_workload(record["workload"]).mod
    sch = tvm_codec.replay_trace(workload, record["trace"])
    return (compile_module(sch.mod, target).jit(), record["args_info"],
            tuple(record["weight_args"]))


def measure_cold_weights(device, *, llc_bytes: int | None = None, runs: int = 48,
                         passes: int = 7, mkn=PROBE_MKN) -> ColdWeights:
    """Time both probes warm and cycling through copies of their weights totalling twice
    `llc_bytes` (default: the device's L3, else its L2, else `DEFAULT_LLC_BYTES`; at most a
    quarter of the device's memory), then the plain one below `llc_bytes` to find the cache
    the VM really has (`_below_llc`). Runs with the caller's thread settings."""
    llc = int(llc_bytes or device.l3_bytes or device.l2_bytes or DEFAULT_LLC_BYTES)
    if llc <= 0:
        raise ValueError(f"the last-level cache must be > 0 bytes, got {llc}")
    cycled_bytes = 2 * llc
    if getattr(device, "memory_bytes", 0):  # a CPU with a huge L3 must not exhaust the RAM
        cycled_bytes = min(cycled_bytes, device.memory_bytes // 4)
    plain_kernel = probe_kernel(device.target, mkn)
    plain = _time_probe(*plain_kernel, cycled_bytes, runs, passes)
    tuned = _time_probe(*tuned_probe_kernel(device.target), cycled_bytes, runs, passes)
    return ColdWeights(llc, plain, tuned, _below_llc(plain_kernel, plain, llc, runs))


def _below_llc(kernel, plain: ColdProbe, llc: int, runs: int) -> tuple[ColdProbe, ...]:
    """The plain probe cycling through 2, 4, 8, ... copies of its weights while they total less
    than `llc`, up to the first beyond the cache (`ColdWeights.cache_bytes`; the larger ones
    would cost it too); none when `plain` has no extra to find."""
    probes = []
    copies = 2
    while plain.s_per_byte > 0 and copies * plain.weight_bytes < llc:
        probe = _time_probe(*kernel, copies * plain.weight_bytes, runs, CACHE_PASSES)
        probes.append(probe)
        if _beyond_the_cache(probe, plain):
            break
        copies *= 2
    return tuple(probes)


def _beyond_the_cache(probe: ColdProbe, full: ColdProbe) -> bool:
    """Whether the probe's copies cost at least `CACHE_EXTRA_SHARE` of the extra `full` (its
    cycling through twice the last-level cache) measured; never when that extra is 0."""
    return full.s_per_byte > 0 and probe.s_per_byte >= CACHE_EXTRA_SHARE * full.s_per_byte


def _time_probe(module, info, weight_args, cycled_bytes: int, runs: int, passes: int
                ) -> ColdProbe:
    from cdmpp.measure.build import ENTRY
    from cdmpp.measure.timing import random_args
    from cdmpp.tvm_env import import_tvm

    tvm = import_tvm()
    func = module.get_function(ENTRY)
    args = random_args(info, tvm.cpu())
    weight_bytes = sum(args[i].numpy().nbytes for i in weight_args)
    copies = max(2, -(-cycled_bytes // weight_bytes))
    arg_sets = [args] + [[tvm.runtime.tensor(a.numpy(), tvm.cpu()) if i in weight_args else a
                          for i, a in enumerate(args)] for _ in range(copies - 1)]

    def median_call(n: int) -> float:
        """Median time of a call cycling through the first `n` weight copies, after a cycle."""
        for k in range(n):
            func(*arg_sets[k])
        times = []
        for k in range(max(runs, n)):
            start = time.perf_counter()
            func(*arg_sets[k % n])
            times.append(time.perf_counter() - start)
        return float(np.median(times))

    warm, cycled = [], []
    for _ in range(passes):
        warm.append(median_call(1))
        cycled.append(median_call(copies))
    return ColdProbe(weight_bytes, copies * weight_bytes, tuple(warm), tuple(cycled))
