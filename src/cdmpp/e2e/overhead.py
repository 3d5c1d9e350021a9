"""The runtime's cost around kernels, calibrated by measurement and kept with the device.

    cal = load_overhead(device)            # cached, or calibrated now (a few seconds) and cached
    cal.overhead.per_call_s                # seconds the VM adds to every kernel call

Method (version `METHOD_VERSION`). The VM is timed on Relax functions built with the same
lowering as networks (`NetworkModule.build`):
- kernel chains: `main` calls one tiny kernel (4-element add) L times in a chain, for several L;
- view chains: `main` does L reshapes (views, `vm.builtin.reshape`, no kernel);
- the tiny kernel alone, timed as the collector times kernels (the time a cost model predicts).
All are timed with the collector's protocol (interleaved passes, reference kernel, minimum).
A least-squares line through (L, time of main) gives the time per link; per call overhead =
slope(kernel chains) - tiny kernel alone; per builtin = slope(view chains); per invoke = time of
the shortest kernel chain - its calls (entering and leaving `main`; the line's intercept is
too sensitive to the slight curvature of the chain times). So the overhead is what the VM adds
beyond the kernel timings the estimator is trained on. Since method 2 it also holds the cost of
weights read from memory in a network where a kernel timed alone finds them in cache
(`e2e.cold`: a probe matmul timed warm and cycling through twice the last-level cache of
copies of its weights; since method 3 under two schedules, hand-written and tuned; since
method 4 with the cache the VM really has, probed below the last-level cache it reports).
Since method 5 it also holds the cost of activations a kernel reads in a network, where the
kernels before it have just written them (`e2e.activations`: a memory-streaming probe).

Stored as `<cache>/devices/<device_id>/overhead.json` beside that device's `device.json`
(`<cache>` = $XDG_CACHE_HOME/cdmpp or ~/.cache/cdmpp), with every measured value.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from cdmpp.clock import now_iso
from cdmpp.e2e.activations import StreamProbe
from cdmpp.e2e.cold import ColdWeights
from cdmpp.e2e.replay import CallOverhead
from cdmpp.paths import device_dir

OVERHEAD_FILE = "overhead.json"
METHOD_VERSION = 5  # 2: + the cold-weights probe (e2e.cold); 3: + its tuned probe;
# 4: + the cache the VM really has, and only matrix weights charged; 5: + activations
# (e2e.activations)
METHOD = ("least-squares slopes of VM time vs chain length: L tiny kernels (minus the kernel "
          "alone) and L reshape views; per-invoke = shortest kernel chain minus its calls; "
          "collector's timing protocol, minimum over every repeat of every pass")
CHAIN_LENGTHS = (1, 64, 128)


@dataclass(frozen=True)
class OverheadCalibration:
    device_id: str
    threads: int
    overhead: CallOverhead
    method_version: int
    created: str  # UTC, ISO 8601
    chain_lengths: tuple[int, ...]
    kernel_chain_s: tuple[float, ...]  # min time of main, per chain length
    view_chain_s: tuple[float, ...]
    tiny_kernel_s: float
    values: dict  # every repeat of every pass: {"kernel_chain_64": [...], ...}
    cold: ColdWeights | None = None  # weights from memory in a network (e2e.cold)
    # activations from memory in a network (e2e.activations)
    activations: StreamProbe | None = None

    def to_json(self) -> dict:
        return {"device_id": self.device_id, "threads": self.threads,
                "per_call_s": self.overhead.per_call_s,
                "per_builtin_s": self.overhead.per_builtin_s,
                "per_invoke_s": self.overhead.per_invoke_s,
                "method_version": self.method_version, "created": self.created,
                "method": METHOD,
                "chain_lengths": list(self.chain_lengths),
                "kernel_chain_s": list(self.kernel_chain_s),
                "view_chain_s": list(self.view_chain_s), "tiny_kernel_s": self.tiny_kernel_s,
                "values": self.values,
                "cold_weights": None if self.cold is None else self.cold.to_json(),
                "activations": None if self.activations is None else self.activations.to_json()}

    @classmethod
    def from_json(cls, d: dict, source: str = "<dict>") -> "OverheadCalibration":
        try:
            return cls(d["device_id"], int(d["threads"]),
                       CallOverhead(float(d["per_call_s"]), float(d["per_builtin_s"]),
                                    float(d["per_invoke_s"])),
                       int(d["method_version"]), d["created"], tuple(d["chain_lengths"]),
                       tuple(d["kernel_chain_s"]), tuple(d["view_chain_s"]),
                       float(d["tiny_kernel_s"]), dict(d.get("values", {})),
                       None if d.get("cold_weights") is None
                       else ColdWeights.from_json(d["cold_weights"]),
                       None if d.get("activations") is None
                       else StreamProbe.from_json(d["activations"]))
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"{source}: not an overhead calibration ({e!r})") from e


def _chain_module(length: int, kind: str):
    """Relax `main(x: (4,) float32)`: `length` tiny kernels ("kernel") or reshapes ("view")."""
    from cdmpp.tvm_env import import_tvm

    import_tvm()
    from tvm import relax, topi
    from tvm.script import relax as R

    bb = relax.BlockBuilder()
    x = relax.Var("x", R.Tensor((4,), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = x
            for i in range(length):
                if kind == "kernel":
                    y = bb.emit_te(lambda a: topi.add(a, 1.0), y, primfunc_name_hint="add_one")
                else:
                    y = bb.emit(relax.op.reshape(y, (2, 2) if i % 2 == 0 else (4,)))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    return bb.get()


def _slope(lengths, times) -> float:
    """Least-squares seconds per chain link."""
    slope, _ = np.polyfit(np.asarray(lengths, float), np.asarray(times, float), 1)
    return float(slope)


def calibrate_overhead(device=None, *, lengths=CHAIN_LENGTHS, protocol=None,
                       cold_llc_bytes: int | None = None, cold: bool = True,
                       activations: bool = True) -> OverheadCalibration:
    """Measure the VM's overhead on this machine (a few seconds), with the device's threads;
    with `cold`, also the cold-weights probe (`e2e.cold`; `cold_llc_bytes`: its last-level
    cache, default the device's); with `activations`, the memory-streaming probe
    (`e2e.activations`, about a second)."""
    from cdmpp.device import local_device
    from cdmpp.measure.collect import threads_for

    if len(lengths) < 2 or min(lengths) < 1:
        raise ValueError(f"need at least two chain lengths >= 1, got {lengths}")
    device = device or local_device()
    with threads_for(device.threads):
        cal = _calibrate_overhead(device, lengths, protocol)
        if cold:
            from cdmpp.e2e.cold import measure_cold_weights

            cal = replace(cal, cold=measure_cold_weights(device, llc_bytes=cold_llc_bytes))
        if activations:
            from cdmpp.e2e.activations import measure_activation_cost

            cal = replace(cal, activations=measure_activation_cost(device))
        return cal


def _calibrate_overhead(device, lengths, protocol) -> OverheadCalibration:
    from cdmpp.e2e.kernels import NetworkModule
    from cdmpp.e2e.measure import VMProgram, build_kernel, random_inputs
    from cdmpp.measure.timing import Protocol, Timer, random_args
    from cdmpp.tvm_env import import_tvm

    tvm = import_tvm()
    protocol = protocol or Protocol(passes=3, max_extra_passes=2)
    programs = []
    for kind in ("kernel", "view"):
        for n in lengths:
            mod = _chain_module(n, kind)
            exe = NetworkModule(mod, (), device.target).build()
            programs.append((f"{kind}_chain_{n}", VMProgram(exe, random_inputs(mod)), []))
    tiny = _chain_module(1, "kernel")["add_one"]
    programs.append(("tiny_kernel", build_kernel(tiny, device.target),
                     random_args([["TENSOR", "float32", [4]]] * 2, tvm.cpu())))
    results = Timer(protocol, device.target).measure_batch(programs)
    for key, m in results.items():
        if isinstance(m, Exception):
            raise RuntimeError(f"overhead calibration: {key} failed to run: {m}") from m
    kernel_chain = tuple(results[f"kernel_chain_{n}"].latency_s for n in lengths)
    view_chain = tuple(results[f"view_chain_{n}"].latency_s for n in lengths)
    tiny_s = results["tiny_kernel"].latency_s
    per_call = max(_slope(lengths, kernel_chain) - tiny_s, 0.0)
    shortest = int(np.argmin(lengths))
    per_invoke = kernel_chain[shortest] - lengths[shortest] * (tiny_s + per_call)
    per_builtin = max(_slope(lengths, view_chain), 0.0)
    overhead = CallOverhead(per_call, per_builtin, max(per_invoke, 0.0))
    return OverheadCalibration(
        device.device_id, device.threads, overhead, METHOD_VERSION,
        now_iso(),
        tuple(int(n) for n in lengths), kernel_chain, view_chain, tiny_s,
        {key: list(m.run_secs) for key, m in results.items()})


def save_overhead(cal: OverheadCalibration, device=None, root: str | Path | None = None) -> Path:
    """Write `overhead.json` (and the device's `device.json`, if given and not there yet: one
    there may hold the device's measured peak and bandwidth, `measured_local_device`)
    atomically."""
    from cdmpp.device import load_device, save_device

    directory = device_dir(cal.device_id, root)
    directory.mkdir(parents=True, exist_ok=True)
    if device is not None:
        if device.device_id != cal.device_id:
            raise ValueError(f"calibration of device {cal.device_id} cannot be stored with "
                             f"device {device.device_id}")
        stored = load_device(directory)
        if stored is None or not stored.peak_gflops:
            save_device(directory, device)
    from cdmpp.atomic import write_text_atomic

    return write_text_atomic(directory / OVERHEAD_FILE, json.dumps(cal.to_json(), indent=1) + "\n")


def read_overhead(device_id: str, root: str | Path | None = None) -> OverheadCalibration | None:
    """The stored calibration of a device (None if there is none, or of an older method)."""
    path = device_dir(device_id, root) / OVERHEAD_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: corrupt overhead file ({e}); delete it to recalibrate") from e
    if not isinstance(data, dict) or data.get("method_version") != METHOD_VERSION:
        return None  # an older method's file: calibrated again
    cal = OverheadCalibration.from_json(data, str(path))
    if cal.device_id != device_id:
        return None
    return cal


def load_overhead(device=None, *, calibrate: bool = True, root: str | Path | None = None,
                  log=None) -> OverheadCalibration:
    """The calibration of `device` (default: this machine) from its cache directory; if there
    is none and `calibrate`, measure it now and store it."""
    from cdmpp.device import local_device

    device = device or local_device()
    cal = read_overhead(device.device_id, root)
    if cal is not None:
        return cal
    if not calibrate:
        raise FileNotFoundError(f"no overhead calibration for device {device.device_id} at "
                                f"{device_dir(device.device_id, root) / OVERHEAD_FILE}")
    if log:
        log(f"calibrating the VM's per-call overhead on device {device.device_id} "
            "(once, a few seconds)")
    cal = calibrate_overhead(device)
    save_overhead(cal, device, root)
    return cal
