"""Which devices' records a model trains on: one device's for a model without device input, or
every device's, each with its device vector, for a model fitted for one of them.

The same program takes a different time on each device, so a model without a device encoder
must not see two devices' labels as one: measured here, `../shared/data/epyc-2c` (timed with
TVM's default thread pool, which runs 1 worker on this 2-vCPU VM) is 1.8x slower than our
collection (2 pinned threads) on the same tasks, and training on both made XGBoost's error on
our records worse (MAPE 41% -> 49%, docs/measurement.md).
"""

from __future__ import annotations

import collections


def device_counts(samples) -> dict:
    """{device_id: {"records": n, "databases": sorted db paths}} of a samples table."""
    out: dict = collections.defaultdict(lambda: {"records": 0, "databases": set()})
    for device, db in zip(samples.column("device_id").to_pylist(),
                          samples.column("db").to_pylist()):
        out[device]["records"] += 1
        out[device]["databases"].add(db)
    return {k: {"records": v["records"], "databases": sorted(v["databases"])}
            for k, v in out.items()}


def _describe(counts: dict) -> str:
    parts = []
    for device, c in sorted(counts.items(), key=lambda kv: -kv[1]["records"]):
        dbs = c["databases"]
        where = dbs[0] + (f" and {len(dbs) - 1} more" if len(dbs) > 1 else "")
        parts.append(f"{device} ({c['records']} records, from {where})")
    return "; ".join(parts)


def one_device(samples, device: str | None = None):
    """The samples of one device: `device` if given, else the only one there is.

    Raises ValueError naming the devices (records, databases) when the samples span several
    and none was chosen, or when the chosen one has no record.
    """
    counts = device_counts(samples)
    if device is not None:
        _require(counts, device)
        ids = samples.column("device_id").to_pylist()
        return samples.take([i for i, d in enumerate(ids) if d == device])
    if len(counts) > 1:
        raise ValueError(
            f"the given databases hold {len(counts)} devices: {_describe(counts)}. The same "
            "program takes a different time on each, and this model has no device input: "
            "choose one with --device ID")
    return samples


def _require(counts: dict, device: str) -> None:
    if device not in counts:
        raise ValueError(f"no record of device {device!r} in the given databases; they hold "
                         f"{_describe(counts) or 'no record'}")


def require_device(samples, device: str) -> None:
    """For a multi-device training fitted for `device` (every device's records, each with its
    device vector): raises ValueError naming the devices there are when `device` has no
    record, since a model cannot be fitted for a device it never saw."""
    _require(device_counts(samples), device)


def training_samples(samples, *, for_device: str | None = None, device: str | None = None):
    """(samples, device_id): the records a model trains on, and the device it predicts for.

    With `for_device` (a multi-device fit, the device encoder on): every device's records,
    `for_device` among them. Without: one device's records (`one_device`), since a model with
    no device input must not see two devices' labels as one. Raises ValueError naming the
    devices there are when the choice cannot be met, or when there is no record at all.
    """
    if not samples.num_rows:
        raise ValueError("the given databases hold no usable record to train on")
    if for_device is not None:
        if device is not None:
            raise ValueError("--device (one device's records) and --for-device (every "
                             "device's, with the device encoder) are two ways to train: give "
                             "one")
        require_device(samples, for_device)
        return samples, for_device
    samples = one_device(samples, device)
    return samples, samples.column("device_id")[0].as_py()


def device_vector_of(store, samples, device: str):
    """float64 (D,): the device vector of `device`, from the device.json the store kept."""
    import numpy as np

    from cdmpp.dataset.loader import device_vectors

    ids = samples.column("device_id").to_pylist()
    row = ids.index(device)
    return device_vectors(store, samples, [row])[0].astype(np.float64)
