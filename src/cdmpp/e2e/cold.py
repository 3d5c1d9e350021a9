"""Weights that a network reads from memory, where a kernel timed alone finds them in cache.

    cold = measure_cold_weights(device)        # a few seconds; kept in overhead.json
    cold.at(graph.weight_bytes())              # extra seconds per weight byte in this network

A kernel timed alone runs many times in a row, so its weights stay in the caches. In a network
every weight is read once per inference, and all the other weights pass through the caches in
between: when they are more than the last-level cache holds, each kernel reads its weights
from memory. Measured on the Intel Xeon (docs/measurement.md, kernels timed inside the network
by `e2e.measure.profile_in_network`): BERT-base's and GPT-2's weight matmuls (325 MiB of weights,
L3 260 MiB) ran 1.06-1.42x their time alone; the convolutions of ResNet-18 and ResNet-50 (45 and
98 MiB) and MobileNet-V2 (14 MiB) ran within a few percent of alone.

Method (`METHOD`): a matmul with 9 MiB of weights (BERT-base's first feed-forward layer,
scheduled by hand: parallel rows, vectorized columns) is timed on one weight tensor back to back
(warm) and cycling through copies of its weights totalling twice the last-level cache, as a
network cycles through its layers' weights; three interleaved passes, the median call of each,
the lowest pass. Extra seconds per weight byte = (cycling - warm) / weight bytes, at least 0.
A network whose weights of one inference exceed the last-level cache costs each kernel call its
weight bytes x that more than alone (`e2e.replay`); one whose weights fit costs nothing more.

Why a threshold at the last-level cache and not the probe at the network's size: cycling
the probe through 63 MiB of copies already costs the full amount here, but the convolutions
of ResNet-50 (98 MiB) did not slow down in the network: how much a kernel loses to weights from
memory depends on its schedule, which this probe cannot tell. The threshold is the assumption
that matched the five networks profiled; it was chosen after seeing them, so their figures
are not an independent test of it (the probe's magnitude is measured, not fitted).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

PROBE_MKN = (128, 768, 3072)  # rows, reduction, columns: BERT-base's first feed-forward matmul
DEFAULT_LLC_BYTES = 32 * 2**20  # when the device does not report its last-level cache
METHOD = ("extra time per weight byte of a hand-scheduled 128x768x3072 float32 matmul (9 MiB "
          "of weights) cycling through copies of its weights totalling twice the last-level "
          "cache, vs on one copy; median call per pass, lowest pass; applied to networks whose "
          "weights per inference exceed the last-level cache")


@dataclass(frozen=True)
class ColdWeights:
    llc_bytes: int  # last-level cache the threshold is at
    s_per_byte: float  # extra seconds per weight byte read from memory
    cycled_bytes: int  # weights the probe cycled through (copies x weight bytes)
    weight_bytes: int  # the probe's weights (one copy)
    warm_s: float  # the probe on one weight tensor
    cycled_s: float  # the probe cycling through the copies

    def at(self, network_weight_bytes: float) -> float:
        """Extra seconds per weight byte in a network reading that many bytes of weights per
        inference: the probe's cost beyond the last-level cache, 0 within it."""
        return self.s_per_byte if network_weight_bytes > self.llc_bytes else 0.0

    def to_json(self) -> dict:
        return {"method": METHOD, "llc_bytes": self.llc_bytes, "s_per_byte": self.s_per_byte,
                "cycled_bytes": self.cycled_bytes, "weight_bytes": self.weight_bytes,
                "warm_s": self.warm_s, "cycled_s": self.cycled_s}

    @classmethod
    def from_json(cls, d: dict) -> "ColdWeights":
        return cls(int(d["llc_bytes"]), float(d["s_per_byte"]), int(d["cycled_bytes"]),
                   int(d["weight_bytes"]), float(d["warm_s"]), float(d["cycled_s"]))


def probe_kernel(target, mkn=PROBE_MKN):
    """(built module, args_info JSON, weight bytes) of the probe matmul C = A @ W."""
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
    return compile_module(sch.mod, target).jit(), info, 4 * k * n


def measure_cold_weights(device, *, llc_bytes: int | None = None, runs: int = 9,
                         passes: int = 3, mkn=PROBE_MKN) -> ColdWeights:
    """Time the probe warm and cycling through copies of its weights totalling twice
    `llc_bytes` (default: the device's L3, else its L2, else `DEFAULT_LLC_BYTES`; at most a
    quarter of the device's memory). Runs with the caller's thread settings."""
    from cdmpp.measure.build import ENTRY
    from cdmpp.measure.timing import random_args
    from cdmpp.tvm_env import import_tvm

    tvm = import_tvm()
    llc = int(llc_bytes or device.l3_bytes or device.l2_bytes or DEFAULT_LLC_BYTES)
    if llc <= 0:
        raise ValueError(f"the last-level cache must be > 0 bytes, got {llc}")
    module, info, weight_bytes = probe_kernel(device.target, mkn)
    func = module.get_function(ENTRY)
    a, w, c = random_args(info, tvm.cpu())
    cycled_bytes = 2 * llc
    if getattr(device, "memory_bytes", 0):  # a CPU with a huge L3 must not exhaust the RAM
        cycled_bytes = min(cycled_bytes, device.memory_bytes // 4)
    copies = max(2, -(-cycled_bytes // weight_bytes))
    w_host = w.numpy()
    weights = [w] + [tvm.runtime.tensor(w_host, tvm.cpu()) for _ in range(copies - 1)]

    def median_call(n: int) -> float:
        """Median time of a call cycling through `n` weight tensors, after one cycle."""
        for k in range(n):
            func(a, weights[k], c)
        times = []
        for k in range(max(runs, n)):
            start = time.perf_counter()
            func(a, weights[k % n], c)
            times.append(time.perf_counter() - start)
        return float(np.median(times))

    warm, cycled = [], []
    for _ in range(passes):
        warm.append(median_call(1))
        cycled.append(median_call(copies))
    warm_s, cycled_s = min(warm), min(cycled)
    return ColdWeights(llc, max(cycled_s - warm_s, 0.0) / weight_bytes, copies * weight_bytes,
                       weight_bytes, warm_s, cycled_s)
