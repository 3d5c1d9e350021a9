"""Asking a multi-device model about another of the devices it was trained on.

A model trained with device vectors (`cdmpp train --for-device`) predicts, for programs that
carry none, the device it was fitted for (`device_vector_`). It learned every training
device's latencies, each under that device's vector; those vectors are kept in its
`trained_on["device_vectors"]`, and setting one of them here makes the same weights predict
that device. The vector of a device it never saw (measured by the collector) makes it predict
that one zero-shot. Measured on the Zen 4 VM (docs/cross_device.md, "One model, the devices it
knows"): `zen3`, fitted for a Zen 3 VM, put the untuned networks 10-43% above their Zen 4
times; given the Zen 4 vector, 18 of 18 within 10%.
"""

from __future__ import annotations

import copy

import numpy as np


def takes_device(estimator) -> bool:
    """Whether an estimator (or any part of it) reads a device vector."""
    return any(True for _ in _device_parts(estimator))


def _device_parts(estimator):
    """The parts of an estimator that read a device vector: a CDMPPRegressor with a device
    encoder, a baseline fitted with device vectors; an ensemble's members and a model with a
    default-program expert are walked into."""
    for member in getattr(estimator, "members_", None) or ():
        yield from _device_parts(member)
    for attr in ("model_", "expert_"):
        part = getattr(estimator, attr, None)
        if part is not None:
            yield from _device_parts(part)
    config = getattr(estimator, "model_config_", None)
    if (config is not None and getattr(config, "device_dim", 0)) or getattr(
            estimator, "has_device_", False):
        yield estimator


def with_device_vector(estimator, vector):
    """A copy of `estimator` whose every device-reading part predicts for `vector` (the weights
    are shared, not copied). Raises ValueError when nothing in it reads a device vector, or the
    vector's length is not the one it was trained on."""
    vector = np.asarray(vector, dtype=np.float64)
    out = _copy_tree(estimator)
    parts = list(_device_parts(out))
    if not parts:
        raise ValueError(f"this {type(estimator).__name__} was trained without device "
                         "vectors: it predicts only the device of its training data")
    for part in parts:
        want = _vector_length(part)
        if want is not None and want != len(vector):
            raise ValueError(f"a device vector of length {len(vector)} for a model trained on "
                             f"vectors of length {want}")
        part.device_vector_ = vector.copy()
    return out


def _vector_length(part) -> int | None:
    config = getattr(part, "model_config_", None)
    if config is not None and getattr(config, "device_dim", 0):
        return int(config.device_dim)
    own = getattr(part, "device_vector_", None)
    return None if own is None else len(own)


def _copy_tree(estimator):
    """Shallow copies of the estimator and of each part that holds parts or a device vector:
    setting a vector on the copy leaves the loaded original as it was."""
    out = copy.copy(estimator)
    if getattr(out, "members_", None) is not None:
        out.members_ = [_copy_tree(m) for m in out.members_]
    for attr in ("model_", "expert_"):
        if getattr(out, attr, None) is not None:
            setattr(out, attr, _copy_tree(getattr(out, attr)))
    return out


def outside_training_range(estimator, vector) -> list[str]:
    """The device-vector fields (`cdmpp.device.DEVICE_VECTOR_FIELDS`) where `vector` lies
    outside the range of the devices a model was trained on (its saved min-max scaling):
    there a zero-shot prediction extrapolates."""
    from cdmpp.device import DEVICE_VECTOR_FIELDS

    vector = np.asarray(vector, dtype=np.float64)
    out: set = set()
    for part in _device_parts(estimator):
        low, high = getattr(part, "device_min_", None), getattr(part, "device_max_", None)
        if low is None or high is None:
            continue
        span = np.maximum(np.asarray(high) - np.asarray(low), 1e-9)
        # a hair of tolerance: the saved scaling went through float32
        off = (vector < np.asarray(low) - 1e-4 * span) | (vector > np.asarray(high) + 1e-4 * span)
        out.update(DEVICE_VECTOR_FIELDS[i] for i in np.flatnonzero(off))
    return [f for f in DEVICE_VECTOR_FIELDS if f in out]
