"""Time a whole network with TVM's Relax VM, and its kernels one by one, like the collector.

    m = measure_network(net, kernels=True)   # net: kernels.NetworkModule
    m.latency_s, m.measurement.passes, m.kernel_s()

The protocol is the collector's (`measure.timing`): the network (and, with `kernels=True`, each
kernel built on its own) is timed in interleaved passes, a reference kernel before each, extra
passes when the two best passes disagree; the label is the minimum over every repeat of every
pass (see `types.Measurement`), and every value is kept. TVM runs with the device's thread count.
The VM is timed through `save_function` (arguments bound once), so a repeat is the inference
alone; its first pass starts with one untimed warm-up run (time_evaluator's), and a network
whose runs take `min_repeat_ms` or more is then timed run by run.

With `kernels=True` each kernel is also timed *inside* the network after the passes: the VM's
instrument hook stamps every call of a few extra inferences (`profile_in_network`). A kernel can
run slower there than alone: on the Intel Xeon, BERT-base's weight matmuls ran 1.3-1.4x their
time alone, as they do alone after 256 MiB of other memory traffic (docs/measurement.md).

A memory-streaming probe is timed before every pass (`measure.placement`): the host may move our
threads between placements in which a network runs up to 28% apart while its kernels timed
alone do not. With `both_placements_s`, a network timed in one placement only, on a device that
has shown two, is timed again when the other comes (waiting at most that long): its label is
then the minimum over both, as the kernels' labels, timed in passes minutes apart, are.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Mapping

import numpy as np

from cdmpp.measure.placement import has_two_placements, memory_state, remember_memory_probe
from cdmpp.tvm_env import import_tvm
from cdmpp.types import Measurement


@dataclass(frozen=True)
class NetworkMeasurement:
    network: str
    batch: int | None
    device_id: str
    threads: int
    measurement: Measurement  # the whole network: every repeat of every pass
    kernels: Mapping[str, Measurement] = field(default_factory=dict, hash=False)  # per call
    failed: Mapping[str, str] = field(default_factory=dict, hash=False)  # kernel -> error
    reference_s: float | None = None  # the reference kernel's best time in this run
    reference_best_s: float | None = None  # ... and on this device ever (measure.reference)
    # the memory probe's fastest and slowest time on this device ever (measure.placement)
    probe_best_s: float | None = None
    probe_worst_s: float | None = None
    # kernel -> seconds of each of its calls inside the network, call by call over the
    # profiled inferences (`profile_in_network`); empty unless kernels were timed
    in_network: Mapping[str, tuple[float, ...]] = field(default_factory=dict, hash=False)
    in_network_runs: int = 0
    # when it was timed (UTC, ISO 8601): the shared host drifts over the day, so a measured
    # total is only comparable with the hour it was taken in
    started_utc: str | None = None
    ended_utc: str | None = None

    @property
    def host_slowdown(self) -> float | None:
        """How much slower the reference kernel ran in this run than its best on this device
        (1.0: as fast as ever; 1.3: the whole run was ~30% slow), or None if unknown."""
        if not self.reference_s or not self.reference_best_s:
            return None
        return self.reference_s / self.reference_best_s

    @property
    def latency_s(self) -> float:
        return self.measurement.latency_s

    def by_placement(self) -> dict[str, float]:
        """{placement: the network's best time in passes timed in it} (`placement`'s
        FAST_MEMORY / SLOW_MEMORY); empty unless the device has shown two placements."""
        if not has_two_placements(self.probe_best_s, self.probe_worst_s):
            return {}
        out: dict[str, float] = {}
        for p in self.measurement.passes:
            state = memory_state(p.memory_probe_s, self.probe_best_s)
            if state is not None:
                out[state] = min(out.get(state, float("inf")), p.min_s)
        return out

    @property
    def one_of_two_placements(self) -> bool:
        """The network was timed in one placement of a device known to have two."""
        return len(self.by_placement()) == 1

    def kernel_s(self) -> dict[str, float]:
        """{kernel: measured seconds per call} of the kernels timed on their own."""
        return {name: m.latency_s for name, m in self.kernels.items()}

    def kernel_median_s(self) -> dict[str, float]:
        """{kernel: median over its repeats alone}: the host's typical state, where
        `kernel_s` (the label's statistic, the minimum) is its best moment."""
        return {name: float(np.median(m.run_secs)) for name, m in self.kernels.items()}

    def in_network_s(self) -> dict[str, float]:
        """{kernel: seconds per call inside the network}: each call site's fastest time over
        the profiled inferences, averaged over the kernel's call sites."""
        runs = max(self.in_network_runs, 1)
        out = {}
        for name, samples in self.in_network.items():
            per_run = len(samples) // runs
            if per_run == 0:
                continue
            sites = np.asarray(samples[:per_run * runs], dtype=np.float64).reshape(runs, per_run)
            out[name] = float(sites.min(axis=0).mean())
        return out

    def to_json(self) -> dict:
        def one(m: Measurement) -> dict:
            return {"latency_s": m.latency_s, "run_secs": list(m.run_secs),
                    "pass_ref_ratios": [p.ref_ratio for p in m.passes],
                    "pass_memory_probe_s": [p.memory_probe_s for p in m.passes]}

        return {"network": self.network, "batch": self.batch, "device_id": self.device_id,
                "threads": self.threads, "network_timing": one(self.measurement),
                "kernels": {k: one(m) for k, m in self.kernels.items()},
                "failed": dict(self.failed), "reference_s": self.reference_s,
                "reference_best_s": self.reference_best_s, "host_slowdown": self.host_slowdown,
                "probe_best_s": self.probe_best_s, "probe_worst_s": self.probe_worst_s,
                "by_placement": self.by_placement(),
                "in_network_runs": self.in_network_runs,
                "started_utc": self.started_utc, "ended_utc": self.ended_utc,
                "in_network_s": self.in_network_s(),
                "in_network_calls_s": {k: list(v) for k, v in self.in_network.items()}}


class VMProgram:
    """A Relax VM function with bound arguments, timed like a built kernel by `Timer`
    (it has the `time_evaluator(name, device, **kw)` of a runtime module)."""

    def __init__(self, executable, inputs, func: str = "main"):
        tvm = import_tvm()
        from tvm import relax

        self.vm = relax.VirtualMachine(executable, tvm.cpu())
        self.vm.save_function(func, f"{func}__cdmpp_bound", *inputs)
        self._saved = f"{func}__cdmpp_bound"

    def run(self):
        return self.vm[self._saved]()

    def time_evaluator(self, _name, device, **kwargs):
        evaluator = self.vm.time_evaluator(self._saved, device, **kwargs)
        return lambda *_args: evaluator()


def _dtype(ty) -> str:
    return str(ty.dtype)


def random_inputs(mod, seed: int = 0, func: str = "main") -> list:
    """Random tensors for the parameters of a Relax function (floats in [-1, 1); integers 0,
    valid indices for embeddings)."""
    tvm = import_tvm()
    rng = np.random.default_rng(seed)
    arrays = []
    for param in mod[func].params:
        ty = param.ty
        if not hasattr(ty, "shape") or ty.shape is None:
            raise ValueError(f"{func} parameter {param.name} is not a tensor of known shape "
                             f"({ty}); cannot make an input for it")
        shape = tuple(int(s) for s in ty.shape)
        dtype = _dtype(ty)
        if np.issubdtype(np.dtype(dtype), np.floating):
            data = rng.uniform(-1, 1, size=shape).astype(dtype)
        else:
            data = np.zeros(shape, dtype=dtype)
        arrays.append(tvm.runtime.tensor(data, tvm.cpu()))
    return arrays


def kernel_args_info(func) -> list:
    """`args_info` JSON (`["TENSOR", dtype, shape]`) of a PrimFunc's parameters (TVM's
    `ArgInfo`, as meta_schedule records them)."""
    from cdmpp.tvm_env import meta_schedule

    infos = meta_schedule().arg_info.ArgInfo.from_prim_func(func)
    return [[str(x) if i < 2 else [int(d) for d in x] for i, x in enumerate(info.as_json())]
            for info in infos]


KERNEL_BUILD_TIMEOUT_S = 300.0  # untuned kernels of large networks compile for seconds
# inferences profiled call by call: up to this many, within about this many seconds (an untuned
# BERT-base takes ~30 s per inference here: it gets one, and no warm-up)
IN_NETWORK_RUNS = 5
IN_NETWORK_BUDGET_S = 10.0


def profile_in_network(executable, inputs, kernel_names, *, runs: int, warm_up: bool = True,
                       func: str = "main") -> dict[str, tuple[float, ...]]:
    """{kernel: seconds of each call, in call order over `runs` inferences} for the kernels
    named, timed inside the network by the VM's instrument hook (before and after each call),
    after one untimed inference if `warm_up`. The hook's own cost (a Python call, ~1-2 us) is
    inside every stamp, so kernels of a few microseconds read high."""
    tvm = import_tvm()
    from tvm import relax

    names = set(kernel_names)
    stamps: dict[str, list[float]] = {name: [] for name in names}
    started = [0.0]

    def instrument(_func, symbol, before_run, _ret, *_args):
        if symbol in names:
            if before_run:
                started[0] = time.perf_counter()
            else:
                stamps[symbol].append(time.perf_counter() - started[0])
        return 0  # VMInstrumentReturnKind.NO_OP: run the call as usual

    vm = relax.VirtualMachine(executable, tvm.cpu())
    if warm_up:
        vm[func](*inputs)
    vm.set_instrument(instrument)
    for _ in range(runs):
        vm[func](*inputs)
    return {name: tuple(v) for name, v in stamps.items() if v}


def build_kernel(func, target):
    """A PrimFunc built on its own (TVM's default TIR pipeline), as the collector builds."""
    from cdmpp.e2e.kernels import kernel_module
    from cdmpp.measure.build import compile_module

    return compile_module(kernel_module(func), target).jit()


def measure_network(net, *, device=None, protocol=None, kernels: bool = False,
                    seed: int = 0, executable=None,
                    both_placements_s: float = 0.0) -> NetworkMeasurement:
    """Time `net` (a `kernels.NetworkModule`) end to end; with `kernels`, also each kernel on
    its own (interleaved with the network in the same passes). With `both_placements_s`, wait
    up to that long for the placement the network was not timed in (see the module doc).
    Runs with the device's threads; the process's own thread settings are restored after."""
    from cdmpp.device import local_device
    from cdmpp.measure.collect import threads_for

    device = device or local_device()
    with threads_for(device.threads):
        return _measure_network(net, device, protocol, kernels, seed, executable,
                                both_placements_s)


def _measure_network(net, device, protocol, kernels, seed, executable,
                     both_placements_s) -> NetworkMeasurement:
    tvm = import_tvm()
    from cdmpp.measure.reference import remember_reference
    from cdmpp.measure.timing import Protocol, Timer, random_args

    started = _utc_now()
    protocol = replace(protocol or Protocol(), memory_probe=True)
    exe = executable if executable is not None else net.build()
    inputs = random_inputs(net.mod, seed)  # timed whole, then profiled call by call
    programs = [("__network__", VMProgram(exe, inputs), [])]
    failed: dict[str, str] = {}
    if kernels:
        from cdmpp.e2e.kernels import kernel_module
        from cdmpp.measure.build import build_many

        mods = [kernel_module(k.func) for k in net.kernels]
        # built as the collector builds: a killable child compiles, the parent loads
        for k, built in zip(net.kernels, build_many(mods, net.target, KERNEL_BUILD_TIMEOUT_S)):
            if not built.ok:
                failed[k.name] = f"build failed: {built.error}"
                continue
            try:
                args = random_args(kernel_args_info(k.func), tvm.cpu(), seed)
                programs.append((k.name, built.module, args))
            except Exception as e:  # noqa: BLE001 - reported, the rest is still timed
                failed[k.name] = f"{type(e).__name__}: {e}"
    timer = Timer(protocol, net.target)
    results = timer.measure_batch(programs)
    network = results.pop("__network__")
    if isinstance(network, Exception):
        raise RuntimeError(f"running {net.name} failed: {network}") from network
    best, worst = remember_memory_probe(device.device_id,
                                        [p.memory_probe_s for p in network.passes])
    if both_placements_s > 0 and has_two_placements(best, worst):
        network, best, worst = _in_the_other_placement(timer, programs[0], network,
                                                       device.device_id, (best, worst),
                                                       both_placements_s)
    per_kernel = {}
    for name, m in results.items():
        if isinstance(m, Exception):
            failed[name] = f"{type(m).__name__}: {m}"
        else:
            per_kernel[name] = m
    in_network, runs = {}, 0
    if kernels:
        runs = max(1, min(IN_NETWORK_RUNS, int(IN_NETWORK_BUDGET_S / network.latency_s)))
        # a network slower than the budget (untuned, seconds a kernel) skips the warm-up run
        in_network = profile_in_network(exe, inputs,
                                        [k.name for k in net.kernels], runs=runs,
                                        warm_up=network.latency_s < IN_NETWORK_BUDGET_S)
    return NetworkMeasurement(net.name, net.batch, device.device_id, device.threads, network,
                              per_kernel, failed, timer.ref_best_s,
                              remember_reference(device.device_id, timer.ref_best_s),
                              best, worst, in_network, runs, started, _utc_now())


def _utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _in_the_other_placement(timer, program, network: Measurement, device_id: str,
                            probe_range: tuple[float, float], wait_s: float):
    """If every pass of `network` ran in one placement, wait (probing every second, at most
    `wait_s`) for two probes in a row in the other, and time the network there too; its passes
    are appended. Returns the network's measurement and the device's probe range, updated."""
    best_s = probe_range[0]
    seen = {memory_state(p.memory_probe_s, best_s) for p in network.passes}
    if len(seen) != 1:
        return network, *probe_range
    deadline = time.monotonic() + wait_s
    probes = []
    while time.monotonic() < deadline:
        probes.append(timer.memory_probe_s())
        if all(memory_state(p, best_s) not in seen for p in probes[-2:]) and len(probes) > 1:
            more = timer.measure_batch([program])["__network__"]
            if not isinstance(more, Exception):
                network = Measurement(network.run_secs + more.run_secs,
                                      network.passes + more.passes)
            break
        time.sleep(1.0)
    if not probes:
        return network, *probe_range
    # the probes of one placement (the network's, or the run of two in the other) are a run
    best, worst = remember_memory_probe(device_id, probes[-2:])
    return network, min(best, probe_range[0]), max(worst, probe_range[1])
