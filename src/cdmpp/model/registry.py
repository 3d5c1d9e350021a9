"""Saving and loading any estimator by directory, and the models shipped with cdmpp.

An estimator directory holds:
  estimator.json   {"kind": "cdmpp" | "xgb" | "mlp" | "ensemble" | "default_expert",
                    "cdmpp_version", "feature_version", "created" (UTC, ISO 8601),
                    "trained_on": {...} (what the caller passed)}
  model            the estimator's own files (`estimator.save(DIR / "model")`: a directory for
                   XGBoost, one file for the MLP)

    save_estimator(model, "runs/xgb-epyc", trained_on={"store": "...", "split": "random"})
    model = load_estimator("runs/xgb-epyc")   # or a shipped name: "default", "xgb", ...

Classes are imported only when a directory of their kind is loaded (torch and xgboost are
heavy). Every class has `.save(path)` and the classmethod `.load(path)`.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import cdmpp
from cdmpp.clock import now_iso

SHIPPED_DIR = Path(cdmpp.__file__).parent / "assets" / "models"
META_FILE = "estimator.json"
MODEL_NAME = "model"

# kind -> (module, class); imported lazily
KINDS = {
    "cdmpp": ("cdmpp.model.estimator", "CDMPPRegressor"),
    "xgb": ("cdmpp.baselines.xgb", "XGBBaseline"),
    "mlp": ("cdmpp.baselines.mlp", "MLPBaseline"),
    "ensemble": ("cdmpp.model.ensemble", "EnsembleRegressor"),
    "default_expert": ("cdmpp.model.default_expert", "DefaultExpertRegressor"),
    "scaled": ("cdmpp.model.scaled", "ScaledRegressor"),
}
# names load_estimator resolves to a shipped directory (SHIPPED_DIR / directory). "default"
# is the three cdmpp seeds and XGBoost on latency per work, trained on the Zen 4 VM's data
# (also named "ensemble"); "seeds" the three seeds alone, which "default" named until
# 2026-12-05: better per program (held-out networks 35.2% against 39.4%), end to end (18 of 18
# Zen 4 networks within 10%, mean 1.2% against 1.7%) and as a calibration's base on three
# other CPUs (docs/cross_device.md, "Fine-tuning the shipped ensemble")
SHIPPED = {"default": "ensemble", "ensemble": "ensemble", "seeds": "seeds", "xgb": "xgb",
           "zen5": "zen5", "emeraldrapids": "emeraldrapids", "zen3": "zen3", "xeon480": "xeon480"}
# the shipped cdmpp models of one device each, which `for_device` chooses from: "default"
# (trained on the Zen 4 VM's data), "zen5" (trained on that data and 3,438 programs timed
# on a Zen 5 VM, with the device encoder: `cdmpp train --for-device`, docs/cross_device.md)
# and "emeraldrapids" (trained the same way on both VMs' data and 3,045 programs timed on an
# Intel Xeon Emerald Rapids VM, those weighted 4 in the loss: `--device-weight`; fitted for it;
# with a default-program expert: `--default-expert`, model.default_expert), and "zen3" (the
# same recipe with a Zen 3 VM as the fourth CPU, fitted for it), and "xeon480" (the same recipe
# with the model-167 Intel Xeon VM, 480 MiB of L3, as the fifth, fitted for it)
DEVICE_MODELS = ("default", "zen5", "emeraldrapids", "zen3", "xeon480")


def estimator_class(kind: str):
    """The class of a kind ("cdmpp", "xgb", "mlp"), imported now."""
    import importlib

    if kind not in KINDS:
        raise ValueError(f"unknown estimator kind {kind!r}; known kinds: {sorted(KINDS)}")
    module, name = KINDS[kind]
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as e:
        raise RuntimeError(f"estimator kind {kind!r} needs {module}.{name}, which this "
                           f"installation of cdmpp does not provide ({e})") from e


def kind_of(estimator) -> str:
    """The kind of an estimator object, from its class (subclasses count)."""
    import sys

    for kind, (module, name) in KINDS.items():
        # Only look at modules already imported: an object of that class implies its module is.
        cls = getattr(sys.modules.get(module), name, None)
        if cls is not None and isinstance(estimator, cls):
            return kind
    raise ValueError(f"cannot save a {type(estimator).__name__}: save_estimator knows "
                     + ", ".join(f"{m}.{n}" for m, n in KINDS.values()))


def _feature_version() -> str:
    from cdmpp.features import FEATURE_VERSION

    return FEATURE_VERSION


def check_output_dir(directory) -> None:
    """Raise unless `directory` can take a saved estimator: missing, empty, or one already
    (callers that work long before saving check first)."""
    directory = Path(directory)
    if directory.exists():
        if not directory.is_dir():
            raise FileExistsError(f"{directory} exists and is not a directory")
        if any(directory.iterdir()) and not (directory / META_FILE).exists():
            raise FileExistsError(f"{directory} exists, is not empty and holds no {META_FILE}: "
                                  "refusing to replace it with a saved estimator")


def save_estimator(estimator, directory, *, trained_on: dict | None = None,
                   kind: str | None = None, device=None) -> Path:
    """Write `estimator` to `directory` (estimator.json + model); returns the directory.
    `device`: the `Device` it was fitted for, kept as its device.json (`fitted_device`).

    Atomic: everything is written to a temporary directory beside it, then renamed into place,
    so a crash leaves either the old directory or the new one. An existing directory is
    replaced only if it is an estimator directory (has estimator.json) or empty.
    """
    directory = Path(directory)
    kind = kind or kind_of(estimator)
    if kind not in KINDS:
        raise ValueError(f"unknown estimator kind {kind!r}; known kinds: {sorted(KINDS)}")
    check_output_dir(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = directory.with_name(f".{directory.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        estimator.save(tmp / MODEL_NAME)
        meta = {"kind": kind, "cdmpp_version": cdmpp.__version__,
                "feature_version": _feature_version(),
                "created": now_iso(),
                "trained_on": dict(trained_on or {})}
        (tmp / META_FILE).write_text(json.dumps(meta, indent=1, default=str) + "\n")
        if device is not None:
            from cdmpp.device import save_device

            save_device(tmp, device)
        _fsync_tree(tmp)
        if directory.exists():
            old = directory.with_name(f".{directory.name}.old{os.getpid()}")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(directory, old)
            os.replace(tmp, directory)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, directory)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return directory


def _fsync_tree(root: Path) -> None:
    for path in sorted(root.rglob("*")):
        if path.is_file():
            with open(path, "rb") as f:
                os.fsync(f.fileno())


def resolve(spec: str | Path) -> Path:
    """The directory a model spec names: a shipped name (`SHIPPED`) or a path."""
    if isinstance(spec, str) and spec in SHIPPED:
        path = SHIPPED_DIR / SHIPPED[spec]
        if not (path / META_FILE).is_file():
            raise FileNotFoundError(
                f"no {spec!r} model is shipped with this cdmpp {cdmpp.__version__} yet "
                f"(nothing at {path}); pass --model DIR with a directory written by "
                "save_estimator (a trained model) instead")
        return path
    path = Path(spec)
    if not path.exists():
        raise FileNotFoundError(f"model directory {path} does not exist (model names: "
                                f"{', '.join(sorted(SHIPPED))}, or a directory written by "
                                "save_estimator)")
    if not path.is_dir():
        raise ValueError(f"{path} is a file; a model is a directory written by save_estimator")
    if not (path / META_FILE).is_file():
        raise FileNotFoundError(
            f"{path} holds no {META_FILE}: not a directory written by save_estimator. An "
            "estimator's own `save(DIR)` writes its files only (read them back with that "
            "class's `load(DIR)`); `cdmpp.model.registry.save_estimator(model, DIR)` writes "
            "what --model and cdmpp.load_model read")
    return path


def written_by_save_estimator(path) -> str:
    """For an estimator class's `load` error: a hint when `path` was written by
    `save_estimator` (its model files are one level down), else ""."""
    if (Path(path) / META_FILE).is_file():
        return (f"; {path} was written by save_estimator (cdmpp train, calibrate): load it with "
                "cdmpp.load_model(DIR) or cdmpp.model.registry.load_estimator(DIR)")
    return ""


def save_composite(path, parts: dict, meta_file: str, meta: dict) -> Path:
    """Write an estimator made of fitted estimators: each of `parts` ({subdirectory:
    estimator}) with `save_estimator`, then `meta` as the JSON file `meta_file`; returns
    `path`. `read_composite_meta` reads the file back."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    for sub, estimator in parts.items():
        save_estimator(estimator, path / sub)
    (path / meta_file).write_text(json.dumps(meta, indent=1) + "\n")
    return path


def read_composite_meta(path, meta_file: str, kind: str, fmt, what: str) -> dict:
    """The JSON file `meta_file` that an estimator made of saved estimators (an ensemble, a
    model with a default-program expert) writes beside them, checked for its kind and format
    (`fmt`: one, or a tuple of those the class still reads); `what` names the class in
    errors."""
    path = Path(path)
    try:
        meta = json.loads((path / meta_file).read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"{path} is not a saved {what}: {meta_file} is "
                                f"missing{written_by_save_estimator(path)}") from None
    formats = fmt if isinstance(fmt, tuple) else (fmt,)
    if meta.get("kind") != kind or meta.get("format") not in formats:
        wanted = " or ".join(str(f) for f in formats)
        raise ValueError(f"{path / meta_file}: not {what} format {wanted} (kind "
                         f"{meta.get('kind')!r}, format {meta.get('format')!r})")
    return meta


def read_meta(spec: str | Path) -> dict:
    """The estimator.json of a model spec (see `resolve`), with "path" added."""
    path = resolve(spec)
    try:
        meta = json.loads((path / META_FILE).read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path / META_FILE} is not valid JSON: {e}") from e
    if not isinstance(meta, dict) or meta.get("kind") not in KINDS:
        raise ValueError(f"{path / META_FILE} names no known estimator kind "
                         f"(got {meta.get('kind') if isinstance(meta, dict) else meta!r}; "
                         f"known: {sorted(KINDS)})")
    return dict(meta, path=str(path))


def load_estimator(spec: str | Path, *, check_features: bool = True, for_device=None):
    """A fitted estimator from a spec: "default" (the shipped cdmpp model of the Zen 4 VM,
    also named "ensemble": the geometric mean of three cdmpp seeds and XGBoost on latency per
    work), "seeds" (those three seeds alone), "xgb" (the shipped XGBoost baseline), "zen5",
    "emeraldrapids", "zen3", "xeon480" (fitted for the Zen 5, Intel Xeon Emerald Rapids, Zen 3
    and model-167 Intel Xeon VMs) or
    a directory written by `save_estimator`. A name wins over a directory of the same name:
    write "./xgb" for that.

    With `check_features`, a model trained on another feature-extractor version is refused:
    its inputs would not mean what it learned. `for_device`: the device to predict for
    (default: the one the model was fitted for). A device id: one the model was trained on
    (`device_vectors`; another is refused with the ids it knows). A `cdmpp.device.Device` with
    its peak FLOP/s and bandwidth measured (a collector's device.json): a device the model knows
    by its id, else zero-shot from its device vector, with a warning when that vector lies
    outside the training devices' range.
    """
    meta = read_meta(spec)
    path = Path(meta["path"])
    if check_features:
        current = _feature_version()
        if meta.get("feature_version") != current:
            raise ValueError(f"{path} was trained on features of version "
                             f"{meta.get('feature_version')!r}, this cdmpp extracts version "
                             f"{current!r}: retrain it on a fresh feature store")
    model_path = path / MODEL_NAME
    if not model_path.exists():
        raise FileNotFoundError(f"{path} has {META_FILE} but no {MODEL_NAME} "
                                "(the model's own files): the directory is incomplete")
    vector = None
    if for_device is not None:  # an unknown device fails before the weights are read
        vector = _vector_for(spec, meta, for_device)
    try:
        estimator = estimator_class(meta["kind"]).load(model_path)
    except Exception as e:  # any reader's error (JSON, torch, numpy, xgboost): name the model
        raise ValueError(f"{path}: its model files cannot be read ({type(e).__name__}: {e}); "
                         "the directory is damaged or incomplete: train or save it again") from e
    if vector is None:
        return estimator
    from cdmpp.model.retarget import outside_training_range, with_device_vector

    estimator = with_device_vector(estimator, vector)
    if not isinstance(for_device, str) and for_device_id(for_device) not in device_vectors(spec):
        import warnings

        fields = outside_training_range(estimator, vector)
        if fields:
            warnings.warn(f"device {for_device.device_id} is outside the range of the devices "
                          f"{spec} was trained on in {', '.join(fields)}: its zero-shot "
                          "prediction extrapolates", stacklevel=2)
    return estimator


def device_vectors(spec: str | Path) -> dict:
    """{device_id: device vector (list of floats)} of every device a multi-device model was
    trained on (`trained_on["device_vectors"]`, written by `cdmpp train --for-device`); {} for
    a model trained on one device."""
    vectors = (read_meta(spec).get("trained_on") or {}).get("device_vectors") or {}
    return {str(k): [float(x) for x in v] for k, v in vectors.items()}


def knows_device(spec: str | Path, device_id: str) -> bool:
    """Whether `spec` was fitted for `device_id` or trained on its records."""
    return device_id == fitted_device_id(spec) or device_id in device_vectors(spec)


def same_processor_known(spec: str | Path, device) -> str | None:
    """The id of a device `spec` knows (`knows_device`) that is the same processor as
    `device` (`device.same_processor`: another VM of it, other CPU flags), among the devices
    whose device.json is at hand (the shipped models' and `spec`'s own); else None."""
    from cdmpp.device import same_processor

    known = [fitted_device(name) for name in shipped_device_models()] + [fitted_device(spec)]
    for other in known:
        if (other is not None and other.device_id != device.device_id
                and knows_device(spec, other.device_id) and same_processor(other, device)):
            return other.device_id
    return None


def resolve_for_device(value: str | None, spec, local, threads=None):
    """What `load_estimator(for_device=...)` takes for a --for-device `value` (None, "local", a
    device id, a device.json or its directory) and model `spec`: None; a device id; or a
    `Device`: the device.json's, or for "local" (`local()`: this machine's `Device`, or its
    id) the id of this machine, or of another VM of its processor, when `spec` knows it
    (`same_processor_known`), else this machine measured once (`measured_local_device`)."""
    if value is None or not isinstance(value, (str, os.PathLike)):  # None, or a Device
        return value
    value = str(value)
    if value == "local":
        from cdmpp.device import Device

        here = local()
        if knows_device(spec, for_device_id(here)):
            return for_device_id(here)
        alias = same_processor_known(spec, here) if isinstance(here, Device) else None
        if alias is not None:
            return alias
        from cdmpp.measure.microbench import measured_local_device

        return measured_local_device(threads)
    path = Path(value)
    if not path.exists():
        if value.endswith(".json") or os.sep in value:  # meant as a file: say it is missing
            raise FileNotFoundError(f"device {value}: no such device.json or directory")
        return value
    import json

    from cdmpp.device import DEVICE_FILE, Device

    file = path / DEVICE_FILE if path.is_dir() else path
    try:
        return Device.from_json(json.loads(file.read_text()), source=str(file))
    except FileNotFoundError:
        raise ValueError(f"device {value}: a directory without {DEVICE_FILE}") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"device {value}: {file} is not JSON ({e})") from None


def for_device_id(value) -> str | None:
    """The device id a resolved for-device value names (`resolve_for_device`: None, a device
    id, or a `Device`)."""
    if value is None or isinstance(value, str):
        return value
    return str(value.device_id)


def _vector_for(spec, meta: dict, device):
    """The device vector `load_estimator(for_device=device)` sets (a device id, or a Device),
    or None when that is the device the model is fitted for (nothing to change)."""
    device_id = for_device_id(device)
    trained_on = meta.get("trained_on") or {}
    if str(trained_on.get("device_id")) == device_id:
        return None
    if meta.get("kind") == "scaled":  # its factor is one device's speed
        raise ValueError(f"model {spec} was rescaled for device {trained_on.get('device_id')} "
                         f"(`cdmpp calibrate --rescale`) and predicts for that one only, not "
                         f"{device_id}: ask its base model ({trained_on.get('base_model')}), "
                         "or rescale it on that device")
    known = device_vectors(spec)
    if device_id in known:
        return known[device_id]
    if isinstance(device, str):
        fitted = trained_on.get("device_id")
        knows = sorted(set(known) | ({str(fitted)} if fitted else set()))
        raise ValueError(f"model {spec} cannot predict for device {device_id}: it knows "
                         + (", ".join(knows) if knows else "no device id")
                         + ". For another device, give its device.json (written by `cdmpp "
                         "collect` there, with its measured peak and bandwidth) to predict "
                         "zero-shot, or fit the model to it with `cdmpp calibrate` "
                         "(docs/cross_device.md)")
    if not device.peak_gflops or not device.memory_gbps:
        raise ValueError(f"device {device_id}: its peak FLOP/s and memory bandwidth are not "
                         "measured, and a zero-shot prediction needs them (the collector "
                         "measures them into device.json; `--for-device local` measures this "
                         "machine)")
    from cdmpp.device import device_vector

    return [float(x) for x in device_vector(device)]


def fitted_device_id(spec: str | Path) -> str | None:
    """The device a model was fitted for (its `trained_on["device_id"]`: the one device of its
    training data, or the device `cdmpp calibrate` fitted it to); None when unknown."""
    device_id = (read_meta(spec).get("trained_on") or {}).get("device_id")
    return str(device_id) if device_id else None


def fitted_device(spec: str | Path):
    """The `Device` a model was fitted for, from its device.json (the shipped models carry
    theirs, `cdmpp calibrate` writes it); None when the directory has none."""
    from cdmpp.device import load_device

    return load_device(resolve(spec))


def device_mismatch(spec: str | Path, device, device_name: str = "") -> str | None:
    """A one-line warning when `spec` was fitted for another device than `device` (a
    `Device`, or a device id), else None. Such a model predicts for the device it knows, not
    this one: ResNet-18 untuned, predicted 1,805 ms for the Zen 4 VM it was trained on, ran in
    1,574 ms on a Zen 5 VM. Another VM of the same processor (`device.same_processor`) is
    named as such: its latencies are the model's own device's."""
    from cdmpp.device import Device, same_processor, short_name

    device_id = device.device_id if isinstance(device, Device) else device
    if isinstance(device, Device) and not device_name:
        device_name = short_name(device)
    fitted = fitted_device_id(spec)
    if fitted is None or fitted == device_id:
        return None
    about = f" ({device_name})" if device_name else ""
    theirs = fitted_device(spec) if isinstance(device, Device) else None
    if theirs is not None and same_processor(theirs, device):
        hidden = sorted(set(theirs.isa_features) - set(device.isa_features))
        extra = sorted(set(device.isa_features) - set(theirs.isa_features))
        flags = "; ".join(part for part in (
            f"flags {', '.join(hidden)} hidden here" if hidden else "",
            f"flags {', '.join(extra)} only here" if extra else "") if part)
        return (f"note: model {spec} was fitted for device {fitted}, the same processor as "
                f"this one, {device_id}{about}, with the same TVM target"
                + (f" ({flags})" if flags else "") + ": it predicts as for its own device")
    head = (f"note: model {spec} was fitted for device {fitted}, not {device_id}{about}: "
            "its latencies are those of its own device. ")
    if device_id in device_vectors(spec):
        return head + ("It was trained on this device's records too: --for-device "
                       f"{device_id} predicts for this one (docs/cross_device.md)")
    widest = _widest_shipped()
    zero_shot = (f"; --model {widest} --for-device local predicts it zero-shot, from its "
                 "measured device vector" if widest else "")
    return (head + "`cdmpp calibrate --out DIR` fits it to this one (with --rescale, one "
            "factor from a minute of measuring)" + zero_shot + " (docs/cross_device.md)")


def _widest_shipped() -> str | None:
    """The shipped model trained on the most devices (None if none has several): the one to
    ask about a device no model knows (a model without Zen 4's records, asked about it
    zero-shot: 15 of 18 untuned networks within 10%, docs/cross_device.md)."""
    best, most = None, 1
    for name in shipped_device_models():
        n = len(device_vectors(name))
        if n > most:
            best, most = name, n
    return best


def also_knowing(device) -> list[str]:
    """The shipped multi-device models fitted for another device that were trained on the
    records of `device` (a device id, or a `Device`: also those of another VM of its
    processor, `same_processor_known`), but not the one `for_device` picks for it:
    `--for-device local` makes them predict for it."""
    from cdmpp.device import Device

    if not isinstance(device, Device):
        return [name for name in shipped_device_models()
                if fitted_device_id(name) != device and device in device_vectors(name)]
    chosen = for_device(device)
    return [name for name in shipped_device_models()
            if name != chosen and fitted_device_id(name) != device.device_id
            and (device.device_id in device_vectors(name)
                 or same_processor_known(name, device) is not None)]


def shipped_device_models() -> list[str]:
    """The names of `DEVICE_MODELS` this build ships (a build may leave some out)."""
    return [name for name in DEVICE_MODELS if (SHIPPED_DIR / SHIPPED[name] / META_FILE).is_file()]


def for_device(device) -> str:
    """The name of the shipped cdmpp model fitted for `device` (`fitted_for`), else "default":
    what `predict` and `e2e` use when no --model is given."""
    return fitted_for(device) or "default"


def fitted_for(device) -> str | None:
    """The name of the shipped cdmpp model fitted for `device` (a `Device` or a device id:
    "default" on the Zen 4 VM, "zen5" on the Zen 5 VM, "emeraldrapids" on the Emerald Rapids
    one, "zen3" on the Zen 3 one, "xeon480" on the model-167 Intel Xeon), else, for a
    `Device`, the one fitted for the same processor (`device.same_processor`: another VM of
    it, whose hypervisor shows other CPU flags), else None: a CPU no shipped model knows."""
    from cdmpp.device import Device, same_processor

    device_id = device.device_id if isinstance(device, Device) else device
    names = shipped_device_models()
    for name in names:
        if fitted_device_id(name) == device_id:
            return name
    if isinstance(device, Device):
        for name in names:
            theirs = fitted_device(name)
            if theirs is not None and same_processor(theirs, device):
                return name
    return None
