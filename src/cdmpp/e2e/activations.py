"""Activations passed from kernel to kernel: through memory in a network, from cache alone.

    probe = measure_activation_cost(device)  # ~1 s; kept in overhead.json
    probe.s_per_byte                          # seconds per activation byte a kernel reads

A kernel timed alone runs many times in a row on the same inputs, so each thread finds its share
of them in its own cache. In a network a kernel reads what the kernels before it have just
written, and by then the tensors of the calls between, split across the threads another way,
have passed through the caches too. On the model-167 Intel Xeon VM (2026-12-07, the Zen 4
kernels database, `benchmarks/e2e.py --kernels` and `cdmpp e2e --measure`) the tuned CNNs ran
1.14-1.24x (MobileNet-V2), 1.06-1.13x (ResNet-50) and 0.96-1.12x (ResNet-18) the replay of their
kernels timed alone, in four runs over an afternoon: MobileNet-V2, whose kernels move the most
bytes per second of work, lost the most. The untuned networks, whose kernels take 10-100x
longer on the same bytes, ran within a few percent of their kernels alone.

The cost charged (`METHOD`): each kernel call's activation bytes (`graph.Node.activation_bytes`,
its non-constant arguments) x the seconds per byte moved of a memory-streaming probe (the
64 MiB `B = 2 * A` of `measure.placement`, read and written: beyond the caches), the median of
seven passes, each the median of its calls. The probe's rate is measured, not fitted; the rule
(inputs only, all added to the kernel's time) was chosen after seeing the runs above
(docs/measurement.md, "Activations from memory"). It adds under 1% to an untuned network, and
1-2% to a transformer, whose weights `e2e.cold` charges.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

METHOD = ("seconds per byte moved (read and written) by a parallel, vectorized B = 2 * A over "
          "64 MiB of float32 (measure.placement's memory probe): median over passes of the "
          "median call; charged per byte of each kernel call's non-constant arguments")
PASSES = 7
CALLS = 9  # per pass


@dataclass(frozen=True)
class StreamProbe:
    """The memory-streaming probe, timed pass by pass."""

    bytes_moved: int  # read and written by one call
    pass_s: tuple[float, ...]  # per pass: its median call

    def __post_init__(self):
        if self.bytes_moved <= 0 or not self.pass_s or min(self.pass_s) <= 0:
            raise ValueError(f"a streaming probe needs bytes moved > 0 and at least one pass, "
                             f"each > 0 s; got {self.bytes_moved} bytes, passes {self.pass_s}")

    @property
    def s_per_byte(self) -> float:
        """Seconds per byte moved: the median pass (the host's typical state) / bytes moved."""
        return float(np.median(self.pass_s)) / self.bytes_moved

    def to_json(self) -> dict:
        return {"method": METHOD, "bytes_moved": self.bytes_moved, "pass_s": list(self.pass_s),
                "s_per_byte": self.s_per_byte}

    @classmethod
    def from_json(cls, d: dict) -> "StreamProbe":
        return cls(int(d["bytes_moved"]), tuple(float(x) for x in d["pass_s"]))


def measure_activation_cost(device, *, mib: int | None = None, passes: int = PASSES,
                            calls: int = CALLS) -> StreamProbe:
    """Time the memory-streaming probe (`mib` MiB in, as many out; default the placement
    probe's 64) `passes` times, `calls` calls each. Runs with the caller's thread settings."""
    from cdmpp.measure.build import ENTRY
    from cdmpp.measure.placement import PROBE_MIB, memory_probe_kernel
    from cdmpp.measure.timing import random_args
    from cdmpp.tvm_env import import_tvm

    if passes < 1 or calls < 1:
        raise ValueError(f"passes and calls must be >= 1, got {passes} and {calls}")
    tvm = import_tvm()
    module, info = memory_probe_kernel(device.target, mib or PROBE_MIB)
    func = module.get_function(ENTRY)
    args = random_args(info, tvm.cpu())
    moved = sum(a.numpy().nbytes for a in args)
    func(*args)  # first touch of the output's pages
    per_pass = []
    for _ in range(passes):
        times = []
        for _ in range(calls):
            start = time.perf_counter()
            func(*args)
            times.append(time.perf_counter() - start)
        per_pass.append(float(np.median(times)))
    return StreamProbe(moved, tuple(per_pass))
