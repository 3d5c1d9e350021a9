"""A Relax module to an `E2EResult`: fuse it for the device, predict every kernel, replay the
graph, and optionally replay a tuning database's timings and time the network with TVM's VM.
One sequence for `cdmpp e2e` and `cdmpp.predict_network`."""

from __future__ import annotations

import time

# a network timed in one placement of the threads, on a device known to have two, waits this
# long for the other (measure.placement; seen here: placements of 10-90 s)
BOTH_PLACEMENTS_WAIT_S = 120.0


def _quiet(_message: str) -> None:
    pass


def _warn_if_timed_elsewhere(net, device) -> None:
    """A tuning database timed on another device: its schedules apply here, but the replay of
    its timings is that device's, not a measure of the prediction's error."""
    import warnings

    from cdmpp.features.samples import target_device_id

    timed_on = net.database_device_id
    if timed_on is not None and timed_on not in (device.device_id,
                                                 target_device_id(device.target)):
        warnings.warn(f"the tuning database {net.tuning_db} was timed on device {timed_on}, not "
                      f"on this one ({device.device_id}): the replay of its timings is that "
                      "device's, not a check of this prediction")


def run_network(mod, estimator, device, *, name: str = "network", batch: int | None = None,
                tuning_db=None, measure: bool = False, log=None):
    """E2EResult of Relax module `mod` on `device` (a `cdmpp.device.Device`): predicted with
    `estimator`; with `tuning_db` its best records applied and their own timings replayed
    beside; with `measure` the network and each kernel timed here (the collector's protocol,
    with the device's threads). `log` gets progress lines."""
    from cdmpp.e2e.kernels import database_latencies, lower_network
    from cdmpp.e2e.predict import predict_network

    log = log or _quiet
    start = time.perf_counter()
    net = lower_network(mod, device.target, tuning_db=tuning_db, name=name, batch=batch)
    lower_s = time.perf_counter() - start
    result = predict_network(estimator, net, device=device, log=log)
    if tuning_db:
        result = result.with_database(database_latencies(net))
        _warn_if_timed_elsewhere(net, device)
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
