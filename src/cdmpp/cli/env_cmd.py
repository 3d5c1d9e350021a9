"""`cdmpp env`: versions and the local device fingerprint, for bug reports."""

from __future__ import annotations

import importlib.metadata as md
import platform

from cdmpp.cli import positive_int

PACKAGES = ("cdmpp", "apache-tvm", "apache-tvm-ffi", "torch", "xgboost", "numpy",
            "scikit-learn", "pyarrow", "tqdm", "psutil", "cloudpickle")
DISTRIBUTIONS = {"xgboost": ("xgboost-cpu", "xgboost")}  # the same module, either wheel


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("env", help="print versions and the local device fingerprint")
    p.add_argument("--threads", type=positive_int, default=None, help="thread count to describe")
    p.add_argument("--json", action="store_true", help="print device.json instead of text")
    p.set_defaults(run=run)


def package_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in PACKAGES:
        versions[name] = "not installed"
        for dist in DISTRIBUTIONS.get(name, (name,)):
            try:
                versions[name] = f"{md.version(dist)} ({dist})" if dist != name else md.version(dist)
                break
            except md.PackageNotFoundError:
                continue
    return versions


def run(args) -> int:
    import json

    from cdmpp.device import describe, local_device

    device = local_device(threads=args.threads)
    if args.json:
        print(json.dumps(device.to_json(), indent=2, sort_keys=True))
        return 0
    for name, version in package_versions().items():
        print(f"{name:>14}: {version}")
    print()
    print(describe(device))
    print(shipped_model_line(device))
    also = also_knowing_line(device)
    if also:
        print(also)
    from cdmpp.measure.placement import describe_placements

    print(describe_placements(device.device_id))
    return 0


def shipped_model_line(device) -> str:
    """Which shipped model `predict` and `e2e` use on `device` (a `Device`), and whether it
    was fitted for it, or for another VM of the same processor."""
    from cdmpp.device import same_processor
    from cdmpp.model.registry import fitted_device, fitted_device_id, for_device

    try:
        name = for_device(device)
        fitted = fitted_device_id(name)
        theirs = fitted_device(name)
    except (FileNotFoundError, ValueError) as e:
        return f"model      no shipped model ({e})"
    if fitted == device.device_id:
        return f"model      {name}: the shipped model fitted for this device"
    if theirs is not None and same_processor(theirs, device):
        return (f"model      {name}, fitted for device {fitted}: the same processor and TVM "
                "target as this one, other CPU flags")
    return (f"model      {name}, fitted for device {fitted}, not this one: its predictions are "
            "that device's latencies (`cdmpp calibrate` fits a model here, starting from the "
            "shipped one that best matches what it measures)")


def also_knowing_line(device) -> str | None:
    """The shipped models of other devices that know this one (a `Device` or its id), or
    another VM of its processor, too (`--for-device local`)."""
    from cdmpp.model.registry import also_knowing

    names = also_knowing(device)
    if not names:
        return None
    return (f"           also trained on this device's (or its processor's) records: "
            f"{', '.join(names)} (with --for-device local they predict for it)")
