"""A Relax module to an `E2EResult`: fuse it for the device, predict every kernel, replay the
graph, and optionally replay a tuning database's timings and time the network with TVM's VM.
One sequence for `cdmpp e2e` and `cdmpp.predict_network`."""

from __future__ import annotations

import os
import time

# a network timed in one placement of the threads, on a device known to have two, waits this
# long for the other (measure.placement; seen here: placements of 10-90 s)
BOTH_PLACEMENTS_WAIT_S = 120.0


def _quiet(_message: str) -> None:
    pass


def _elsewhere(timed_on, device) -> bool:
    """Whether a database timed on `timed_on` (a device id, or a records' target id) was timed
    on another device than `device`."""
    from cdmpp.features.samples import target_device_id

    return timed_on is not None and timed_on not in (device.device_id,
                                                     target_device_id(device.target))


def timed_here(timed_on, device) -> bool:
    """Whether a tuning database whose records were timed on `timed_on` (a device id, a
    records' target id, or None when unknown) was timed on `device`."""
    return timed_on is not None and not _elsewhere(timed_on, device)


def _warn_if_timed_elsewhere(net, device) -> None:
    """A tuning database timed on another device: its schedules apply here, but the replay of
    its timings is that device's, not a measure of the prediction's error."""
    import warnings

    timed_on = net.database_device_id
    if _elsewhere(timed_on, device):
        warnings.warn(f"the tuning database {net.tuning_db} was timed on device {timed_on}, not "
                      f"on this one ({device.device_id}): the replay of its timings is that "
                      "device's, not a check of this prediction")


def database_device(tuning_db, timed_on: str | None):
    """The device a tuning database at path `tuning_db` was timed on: its device.json's `Device`
    (another VM of a known CPU is found by it), else `timed_on` (its id, or None): also when
    that device.json holds the id alone, or is otherwise not a whole `Device`."""
    from cdmpp.device import load_device

    if not isinstance(tuning_db, (str, os.PathLike)) or timed_on is None:
        return timed_on
    try:
        source = load_device(tuning_db)
    except ValueError:  # a partial device.json: its id is all there is to go by
        return timed_on
    return source if source is not None and source.device_id == timed_on else timed_on


def anchor_predictions(net, device, anchor_model="auto", *, timed_on=None):
    """(model name, {kernel: seconds per call} it predicts) for anchoring a prediction of
    lowered network `net` on its tuning database's timings (`E2EResult.with_anchor`), when
    the database was timed on another device than `device`; else None. `anchor_model`: the
    model of that device; "auto" the shipped model fitted for it (`registry.fitted_for`),
    None for none. `timed_on`: the database's device (a `Device` or an id; by default
    `database_device` of the path `net` was lowered with), for a network lowered with an open
    meta_schedule Database."""
    from cdmpp.device import Device

    if timed_on is None:
        timed_on = database_device(net.tuning_db, net.database_device_id)
    timed_on_id = timed_on.device_id if isinstance(timed_on, Device) else timed_on
    if anchor_model is None or not _elsewhere(timed_on_id, device):
        return None
    from cdmpp.e2e.predict import predict_kernels
    from cdmpp.model.registry import fitted_for, load_estimator

    name = fitted_for(timed_on) if anchor_model == "auto" else anchor_model
    if name is None:
        return None
    return name, predict_kernels(load_estimator(name), net.kernels, device.target)


def run_network(mod, estimator, device, *, name: str = "network", batch: int | None = None,
                tuning_db=None, measure: bool = False, anchor_model: str | None = "auto",
                search_sigma: float | str | None = "auto", log=None):
    """E2EResult of Relax module `mod` on `device` (a `cdmpp.device.Device`): predicted with
    `estimator`; with `tuning_db` its best records applied and their own timings replayed
    beside; with `measure` the network and each kernel timed here (the collector's protocol,
    with the device's threads). `anchor_model`: for a database timed on another device, the
    model of that device to anchor on its timings (`E2EResult.with_anchor`); "auto" the shipped
    model fitted for it, if any; None not at all. `search_sigma`: for a database (a path)
    timed on this device, each tuned kernel is predicted as the fastest of the programs it
    timed for it, with this spread of the model's error (`e2e.search`; "auto":
    `search.SEARCH_SIGMA`; None: each kernel's chosen program predicted on its own). `log`
    gets progress lines."""
    from cdmpp.e2e.kernels import database_latencies, lower_network
    from cdmpp.e2e.predict import predict_network
    from cdmpp.e2e.search import SEARCH_SIGMA

    log = log or _quiet
    start = time.perf_counter()
    net = lower_network(mod, device.target, tuning_db=tuning_db, name=name, batch=batch)
    lower_s = time.perf_counter() - start
    here = bool(tuning_db) and timed_here(net.database_device_id, device)
    sigma = SEARCH_SIGMA if search_sigma == "auto" else search_sigma
    # the fastest of a search's programs: only where the search timed them, and from a path
    search = here and sigma is not None and isinstance(tuning_db, (str, os.PathLike))
    result = predict_network(estimator, net, device=device, log=log,
                             search_db=tuning_db if search else None,
                             search_sigma=sigma if search else SEARCH_SIGMA)
    if tuning_db:
        result = result.with_database(database_latencies(net), timed_here=here)
        _warn_if_timed_elsewhere(net, device)
        anchor = anchor_predictions(net, device, anchor_model)
        if anchor is not None:
            result = result.with_anchor(anchor[1], anchor[0])
    log(f"fused in {lower_s:.1f} s; predicted in {result.timings_s['prediction_s']:.2f} s")
    if measure:
        from cdmpp.e2e.measure import measure_network

        log(f"measuring {name} and its {len(net.kernels)} kernels (if the host moves the "
            f"threads between two placements, up to {BOTH_PLACEMENTS_WAIT_S:.0f} s more to "
            "time it in both) ...")
        result = result.with_measurement(measure_network(
            net, device=device, kernels=True, both_placements_s=BOTH_PLACEMENTS_WAIT_S))
        for kernel, error in result.measurement.failed.items():
            log(f"kernel {kernel} could not be timed alone: {error}")
    return result
