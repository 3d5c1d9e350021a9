"""Record in a shipped multi-device model the device vector of every device it was trained on
(`trained_on["device_vectors"]`, which `cdmpp train --for-device` writes since 2026-11-29), for
the models trained before that: zen5, emeraldrapids, zen3.

    python scripts/record_device_vectors.py zen5 emeraldrapids zen3

Training read each device's vector from the feature store, which keeps one device.json per
device id: the last database of that device in `--data` order (`features.build`). The same
device measured its peak FLOP/s and memory bandwidth again in each collection, so the four
Zen 4 databases give four slightly different vectors, and the one the model learned is the
last one's. This script takes each device.json of the model's `trained_on["data"]` (the
repository's `data/*.tar.xz`) in that order, keeps the last per device, and writes them only
after checking them against what the model itself saved: the vector of the device it was
fitted for must be the one it holds, and every network's device min-max scaling must be the
element-wise min and max of these vectors (the scaling was fitted on exactly them).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tarfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
TOLERANCE = 1e-5  # the saved figures went through float32


def vectors_from_data(data: list[str]) -> dict:
    """{device_id: vector} from the device.json of each `trained_on["data"]` entry, the last
    per device winning (as in the feature store)."""
    from cdmpp.device import Device, device_vector

    out: dict = {}
    for entry in data:
        path = ROOT / entry.split(" (")[0]
        if not path.is_file():
            raise FileNotFoundError(f"{entry}: no {path} in this checkout")
        with tarfile.open(path) as tar:
            members = [m for m in tar.getmembers() if Path(m.name).name == "device.json"]
            if not members:
                raise ValueError(f"{path} holds no device.json")
            for member in members:
                device = Device.from_json(json.load(tar.extractfile(member)),
                                          source=f"{path}:{member.name}")
                out[device.device_id] = [float(x) for x in device_vector(device)]
    return out


def check(model_dir: Path, meta: dict, vectors: dict) -> None:
    """Raise unless `vectors` are the ones the saved model was scaled on and fitted for."""
    fitted = meta["trained_on"]["device_id"]
    if sorted(vectors) != sorted(meta["trained_on"].get("devices", {})):
        raise ValueError(f"{model_dir}: the data's devices {sorted(vectors)} are not the "
                         f"model's {sorted(meta['trained_on'].get('devices', {}))}")
    stacked = np.array(list(vectors.values()))
    checked = 0
    for path in sorted(model_dir.rglob("*.json")):
        saved = json.loads(path.read_text())
        own = saved.get("device_vector", saved.get("device_vector_"))
        if own is not None and not np.allclose(own, vectors[fitted], atol=TOLERANCE):
            raise ValueError(f"{path}: holds {own}, the data's {fitted} is {vectors[fitted]}")
        if "device_min" in saved:
            if not (np.allclose(saved["device_min"], stacked.min(0), atol=TOLERANCE)
                    and np.allclose(saved["device_max"], stacked.max(0), atol=TOLERANCE)):
                raise ValueError(f"{path}: its device scaling is not the min-max of the "
                                 "data's vectors")
        checked += own is not None
    if not checked:
        raise ValueError(f"{model_dir}: no saved device vector to check against")
    print(f"{model_dir.name}: {len(vectors)} devices, checked against {checked} saved parts")


def record(name: str) -> None:
    from cdmpp.model.registry import META_FILE, resolve

    model_dir = resolve(name)
    meta = json.loads((model_dir / META_FILE).read_text())
    vectors = vectors_from_data(meta["trained_on"]["data"])
    check(model_dir, meta, vectors)
    meta["trained_on"]["device_vectors"] = vectors
    tmp = model_dir / (META_FILE + ".tmp")
    tmp.write_text(json.dumps(meta, indent=1) + "\n")
    os.replace(tmp, model_dir / META_FILE)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+", help="shipped model names or directories")
    for name in parser.parse_args().models:
        record(name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
