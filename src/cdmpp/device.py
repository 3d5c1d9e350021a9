"""Device fingerprint (`device.json`): which machine and TVM target a measurement belongs to.

Latencies are only comparable on the same device, so every output directory carries one
`device.json`; `claim_directory` refuses to mix devices in one directory. The `device_id` hashes
only fields that change the measured latency and stay put between runs (not the frequency, which
fluctuates, nor OS/Python/TVM version strings, which change on every upgrade).

`Device.target` is a plain JSON-friendly dict (the full `Target.export()`). A dict is unhashable,
so the field is excluded from `hash()` (it still takes part in `==`); it is covered by `device_id`,
which *is* hashed. Treat it as read-only: pass it to `tvm.target.Target(device.target)`.

`peak_gflops` and `memory_gbps` are measured (`cdmpp.measure.microbench`), not identity: they
are 0.0 until measured, and files written before they existed load with those defaults.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import hashlib
import json
import os
import platform
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

DEVICE_FILE = "device.json"
_CACHE_DIR = Path("/sys/devices/system/cpu/cpu0/cache")
# /proc/cpuinfo flags that change code generation (x86 and ARM spellings); the rest is noise.
# `sme(?!p)`: ARM SME, but not x86 smep (a security flag).
_ISA_RE = re.compile(
    r"^(sse\w*|ssse3|avx\w*|amx\w*|fma\w*|f16c|aes|vaes|pclmulqdq|vpclmulqdq|sha_ni|gfni|"
    r"bmi[12]|popcnt|abm|lzcnt|movbe|adx|asimd\w*|neon|sve\w*|fphp|i8mm|bf16|sme(?!p)\w*)$"
)
_IDENTITY = ("cpu_vendor", "cpu_model", "isa_features", "threads",
             "l1d_bytes", "l2_bytes", "l3_bytes", "memory_bytes", "target")


@dataclass(frozen=True)
class Device:
    device_id: str
    cpu_model: str
    cpu_vendor: str
    isa_features: tuple[str, ...]
    vector_width_bits: int
    physical_cores: int
    logical_cores: int
    threads: int
    frequency_mhz: float
    l1d_bytes: int
    l2_bytes: int
    l3_bytes: int
    memory_bytes: int
    os: str
    python: str
    tvm_version: str
    target: dict = field(hash=False)
    peak_gflops: float = 0.0  # measured float32 FLOP/s of the target's code, 0.0: not measured
    memory_gbps: float = 0.0  # measured streaming (triad) bandwidth, 0.0: not measured

    def to_json(self) -> dict:
        d = dataclasses.asdict(self)
        d["isa_features"] = list(self.isa_features)
        return d

    @classmethod
    def from_json(cls, d: dict, source: str = "<dict>") -> "Device":
        if not isinstance(d, dict):
            raise ValueError(f"{source}: device must be a JSON object, got {type(d).__name__}")
        required = [f for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING]
        missing = [f.name for f in required if f.name not in d]
        if missing:
            raise ValueError(f"{source}: device is missing field(s): {', '.join(missing)}")
        # Fields with defaults (the measured figures) may be absent; unknown keys are ignored.
        values = {f.name: _check_type(source, f.name, f.type, d[f.name])
                  for f in dataclasses.fields(cls) if f.name in d}
        values["isa_features"] = tuple(values["isa_features"])
        dev = cls(**values)
        if dev.device_id != device_id(dev.to_json()):
            # Catches hand edits and id-scheme changes, which would otherwise mix devices.
            raise ValueError(f"{source}: device_id {dev.device_id} does not match its fields "
                             f"(expected {device_id(dev.to_json())}); was the file edited?")
        return dev


def _check_type(source: str, name: str, type_name: str, value):
    ok = {"str": lambda v: isinstance(v, str),
          "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
          "float": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
          "dict": lambda v: isinstance(v, dict) and isinstance(v.get("kind"), str),
          "tuple[str, ...]": lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v)}
    if not ok[type_name](value):
        want = {"dict": "an object with a 'kind'", "tuple[str, ...]": "a list of strings"}
        raise ValueError(f"{source}: field {name!r} should be {want.get(type_name, type_name)}, "
                         f"got {value!r}")
    return float(value) if type_name == "float" else value


def device_id(fields: collections.abc.Mapping) -> str:
    """Short stable id from the identity fields of `fields` (a `to_json()` dict or similar)."""
    target = fields["target"]
    ident = {k: fields[k] for k in _IDENTITY if k not in ("target", "memory_bytes")}
    ident["isa_features"] = sorted(ident["isa_features"])
    ident["memory_gib"] = round(fields["memory_bytes"] / 2**30)  # total RAM jitters by a few MB
    ident["target"] = {k: target.get(k) for k in ("kind", "mcpu", "num-cores")}
    canonical = json.dumps(ident, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def same_processor(a: Device, b: Device) -> bool:
    """True when `a` and `b` differ at most in CPU flags and memory size: same CPU name,
    caches, threads and TVM target, which must name the microarchitecture (`mcpu`; the CPU
    name of a VM may not: "Intel(R) Xeon(R) Processor" on two Intel generations here), so TVM
    generates the same code for both. A hypervisor may hide a few flags on one VM of a
    processor (seen: two Emerald Rapids VMs, one without avx512_bf16, avx512_fp16 and
    avx_vnni), which gives it another `device_id`."""
    keep = [f for f in _IDENTITY if f not in ("isa_features", "memory_bytes", "target")]
    target = lambda d: {k: d.target.get(k) for k in ("kind", "mcpu", "num-cores")}  # noqa: E731
    return (all(getattr(a, f) == getattr(b, f) for f in keep)
            and target(a) == target(b) and a.target.get("mcpu") is not None)


def _cpuinfo() -> dict[str, str]:
    """First processor block of /proc/cpuinfo (all cores are alike on the machines we target)."""
    info: dict[str, str] = {}
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return info
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            info.setdefault(key.strip(), value.strip())
    return info


def _isa_features(info: dict[str, str], tvm) -> tuple[str, ...]:
    flags = (info.get("flags") or info.get("Features") or "").split()
    if not flags:  # no /proc/cpuinfo: ask LLVM, which returns {feature: enabled}
        host = tvm.get_global_func("tvm.codegen.llvm.GetHostCPUFeatures")()
        flags = [str(k).replace(".", "_") for k, v in host.items() if bool(v)]
    return tuple(sorted({f for f in flags if _ISA_RE.match(f)}))


def _vector_width(isa: tuple[str, ...]) -> int:
    """Widest SIMD register the host ISA flags allow (the fallback of `_target_vector_width`)."""
    if "avx512f" in isa:
        return 512
    if "avx2" in isa or "avx" in isa:
        return 256
    return 128 if any(f.startswith(("sse", "asimd", "neon")) for f in isa) else 0


def _target_vector_width(tvm, target, host_isa: tuple[str, ...]) -> int:
    """Widest SIMD register of the code generated for `target` (its mcpu, not the host's: an
    x86-64-v2 target gets SSE code even on an AVX-512 host). Host ISA if LLVM cannot tell."""
    from tvm.target.codegen import target_has_features

    try:
        for feature, bits in (("avx512f", 512), ("avx2", 256), ("avx", 256), ("sse2", 128),
                              ("sse", 128), ("neon", 128), ("asimd", 128)):
            if target_has_features(feature, target):
                return bits
    except Exception:  # noqa: BLE001 - e.g. TVM built without LLVM
        return _vector_width(host_isa)
    return 0  # a target without SIMD


def check_mcpu(mcpu: str) -> None:
    """Raise ValueError for a CPU name LLVM does not know (TVM would silently accept it and
    generate baseline code, mislabelling every measurement)."""
    from cdmpp.tvm_env import import_tvm

    tvm = import_tvm()
    is_valid = getattr(tvm.target.codegen, "llvm_is_valid_cpu", None)
    default_triple = tvm.get_global_func("tvm.codegen.llvm.GetDefaultTargetTriple",
                                         allow_missing=True)
    if is_valid is None or default_triple is None:
        return  # this TVM cannot tell: trust the name
    triple = str(default_triple())
    if not is_valid(mcpu, triple):
        raise ValueError(f"unknown LLVM CPU name {mcpu!r} for {triple} (examples: "
                         "x86-64-v2, haswell, skylake-avx512, znver4; `llc -mcpu=help` lists "
                         "them all)")


def _caches() -> dict[int, int]:
    """{1: L1d, 2: L2, 3: L3} in bytes from sysfs; instruction caches are skipped."""
    sizes: dict[int, int] = {}
    for index in sorted(_CACHE_DIR.glob("index*")):
        try:
            level = int((index / "level").read_text())
            kind = (index / "type").read_text().strip()
            raw = (index / "size").read_text().strip()
        except (OSError, ValueError):
            continue
        if kind == "Instruction" or not raw:
            continue
        unit = {"K": 2**10, "M": 2**20, "G": 2**30}.get(raw[-1].upper(), 1)
        sizes[level] = int(raw.rstrip("KMGkmg")) * unit
    return sizes


def _frequency_mhz(info: dict[str, str]) -> float:
    """Max frequency if the kernel exposes it, else the nominal one; 0.0 if unknown."""
    import psutil

    sysfs = Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")
    if sysfs.exists():
        return int(sysfs.read_text()) / 1000.0
    freq = psutil.cpu_freq()
    if freq and freq.max:
        return float(freq.max)
    nominal = re.search(r"@\s*([\d.]+)\s*GHz", info.get("model name", ""))
    if nominal:  # e.g. "Intel(R) Xeon(R) ... @ 2.60GHz"
        return float(nominal.group(1)) * 1000.0
    # In VMs without cpufreq, "cpu MHz" is the constant TSC rate, i.e. nominal.
    return float(info.get("cpu MHz", 0.0) or (freq.current if freq else 0.0))


def _jsonable(value):
    """TVM FFI Map/Array -> dict/list so the target can go to JSON."""
    if isinstance(value, (str, bool, int, float)) or value is None:
        return value
    if isinstance(value, collections.abc.Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return [_jsonable(v) for v in value]


def local_device(threads: int | None = None, mcpu: str | None = None) -> Device:
    """Fingerprint this machine, timing with `threads` threads for LLVM `mcpu`."""
    import psutil

    from cdmpp.tvm_env import import_tvm

    tvm = import_tvm()
    threads = len(os.sched_getaffinity(0)) if threads is None else threads
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    if mcpu:
        check_mcpu(mcpu)
    mcpu = mcpu or str(tvm.get_global_func("tvm.codegen.llvm.GetHostCPUName")())
    tvm_target = tvm.target.Target({"kind": "llvm", "mcpu": mcpu, "num-cores": threads})
    target = _jsonable(tvm_target.export())
    info, caches = _cpuinfo(), _caches()
    isa = _isa_features(info, tvm)
    fields = dict(
        cpu_model=info.get("model name") or platform.processor() or platform.machine(),
        cpu_vendor=info.get("vendor_id") or info.get("CPU implementer") or "unknown",
        isa_features=isa, vector_width_bits=_target_vector_width(tvm, tvm_target, isa),
        physical_cores=psutil.cpu_count(logical=False) or os.cpu_count() or 1,
        logical_cores=os.cpu_count() or 1, threads=threads,
        frequency_mhz=_frequency_mhz(info),
        l1d_bytes=caches.get(1, 0), l2_bytes=caches.get(2, 0), l3_bytes=caches.get(3, 0),
        memory_bytes=psutil.virtual_memory().total, os=platform.platform(),
        python=platform.python_version(), tvm_version=str(tvm.__version__), target=target,
    )
    return Device(device_id=device_id(fields), **fields)


def save_device(directory, device: Device) -> Path:
    """Write DIR/device.json atomically (readers never see a half-written file)."""
    from cdmpp.atomic import write_text_atomic

    text = json.dumps(device.to_json(), indent=2, sort_keys=True) + "\n"
    return write_text_atomic(Path(directory) / DEVICE_FILE, text)


def load_device(directory) -> Device | None:
    path = Path(directory) / DEVICE_FILE
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: corrupt device file, not valid JSON ({e})") from e
    return Device.from_json(data, source=str(path))


class DeviceMismatchError(RuntimeError):
    pass


def claim_directory(directory, device: Device) -> Device:
    """Bind DIR to `device` on first use; afterwards refuse any other device."""
    stored = load_device(directory)
    if stored is None:
        records = Path(directory) / "database_tuning_record.json"  # the collector claims first
        if records.is_file() and records.read_text(encoding="utf-8").strip():
            raise DeviceMismatchError(
                f"{directory} already holds records but no {DEVICE_FILE}: they were timed on a "
                "device cdmpp cannot tell, and adding this device's would mix devices in one "
                "database. Collect into another --out.")
        save_device(directory, device)
        return device
    if stored.device_id != device.device_id:
        old, new = stored.to_json(), device.to_json()
        show = lambda v: json.dumps(v, sort_keys=True)  # noqa: E731  (stable key order)
        diffs = [f"{k}: {show(old[k])} != {show(new[k])}" for k in _IDENTITY if old[k] != new[k]]
        raise DeviceMismatchError(
            f"{directory} holds measurements of device {stored.device_id}, but this is device "
            f"{device.device_id}; differing fields: {'; '.join(diffs) or '(id scheme only)'}. "
            "Refusing to mix devices in one output directory: "
            + _same_device_hint(old, new) + "or use another --out.")
    return stored


def _same_device_hint(old: dict, new: dict) -> str:
    """How to run as the stored device again, where an option of collect can say so."""
    hints = []
    if old.get("threads") != new.get("threads"):
        hints.append(f"--threads {old.get('threads')}")
    old_mcpu = (old.get("target") or {}).get("mcpu")
    if old_mcpu and old_mcpu != (new.get("target") or {}).get("mcpu"):
        hints.append(f"--mcpu {old_mcpu}")
    return f"to add to it, give {' '.join(hints)} (as it was collected), " if hints else ""


def short_name(device: Device) -> str:
    """One line: CPU, code target and threads, e.g. "AMD EPYC, znver5, 2 threads"."""
    mcpu = device.target.get("mcpu", "generic")
    return f"{device.cpu_model}, {mcpu}, {device.threads} thread{'s' * (device.threads != 1)}"


def describe(device: Device) -> str:
    mib = lambda n: f"{n / 2**20:g} MiB" if n >= 2**20 else f"{n / 2**10:g} KiB"  # noqa: E731
    return "\n".join([
        f"device     {device.device_id}",
        f"cpu        {device.cpu_model} ({device.cpu_vendor})",
        f"cores      {device.physical_cores} physical, {device.logical_cores} logical, "
        f"timing with {device.threads} thread(s)",
        f"frequency  {f'{device.frequency_mhz:.0f} MHz' if device.frequency_mhz else 'unknown'}",
        f"vector     {device.vector_width_bits} bits; isa: {' '.join(device.isa_features)}",
        f"caches     L1d {mib(device.l1d_bytes)}, L2 {mib(device.l2_bytes)}, "
        f"L3 {mib(device.l3_bytes)}",
        f"memory     {device.memory_bytes / 2**30:.1f} GiB",
        f"measured   {_measured(device)}",
        f"target     {json.dumps(device.target, sort_keys=True)}",
        f"software   {device.os}; python {device.python}; tvm {device.tvm_version}",
    ])


def _measured(device: Device) -> str:
    figures = []
    if device.peak_gflops:
        figures.append(f"peak {device.peak_gflops:.1f} GFLOP/s (float32)")
    if device.memory_gbps:
        figures.append(f"memory {device.memory_gbps:.1f} GB/s (triad)")
    return ", ".join(figures) or "not yet (cdmpp collect measures it)"


DEVICE_VECTOR_FIELDS = ("threads", "log2_frequency_mhz", "vector_width_128", "log2_l1d_kib",
                        "log2_l2_kib", "log2_l3_kib", "log2_memory_gib",
                        "log2_peak_gflops", "log2_memory_gbps")


def device_vector(device: Device) -> np.ndarray:
    """The numeric description of a device the model's device encoder takes (CDMPP's device
    vector, for CPUs): threads, frequency, SIMD width and cache/memory sizes, on log scales
    where sizes span orders of magnitude, then the measured compute and memory throughput
    (0 when not measured). Normalized later, on the training devices."""
    return np.array([
        device.threads,
        np.log2(max(device.frequency_mhz, 1.0)),
        device.vector_width_bits / 128.0,
        np.log2(max(device.l1d_bytes, 1) / 1024),
        np.log2(max(device.l2_bytes, 1) / 1024),
        np.log2(max(device.l3_bytes, 1) / 1024),
        np.log2(max(device.memory_bytes, 1) / 2**30),
        np.log2(max(device.peak_gflops, 1.0)),
        np.log2(max(device.memory_gbps, 1.0)),
    ], dtype=np.float32)
