"""Predicted end-to-end latency of a network: kernel latencies from an estimator, replayed.

    net = lower_network(import_network("resnet18"), device.target, name="resnet18", batch=1)
    result = predict_network(load_estimator("default"), net)
    result.predicted_s, result.kernels[:5], result.critical_path_kernels()

Every kernel TVM runs (the fused PrimFuncs `main` calls) is featurized with
`cdmpp.features.extract` on the PrimFunc itself (structurally equal kernels once), predicted
in one `estimator.predict(ProgramSet)` call, and the dataflow graph of `main` is replayed
(`e2e.replay`) with those latencies plus the device's calibrated call overhead (`e2e.overhead`).
A kernel that cannot be featurized or gets no valid prediction is an error naming it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Mapping

import numpy as np

from cdmpp.e2e.graph import Graph, from_relax
from cdmpp.e2e.replay import CallOverhead, ReplayResult, replay
from cdmpp.e2e.search import SEARCH_SIGMA


@dataclass(frozen=True)
class KernelPrediction:
    name: str
    calls: int
    predicted_s: float  # one call, kernel only
    total_s: float  # calls * (predicted_s + overhead per call)
    measured_s: float | None = None  # one call, timed on its own (with --measure)
    tuned: bool = False  # its schedule came from the tuning database
    kind: str = "call_tir"  # graph node kind; "builtin" rows have no kernel time
    database_s: float | None = None  # one call, as the tuning database records it
    in_network_s: float | None = None  # one call, timed inside the network (with --measure)
    # one call: the database's timing on its own device x this model's / that device's model's
    # prediction (`E2EResult.with_anchor`); the prediction where the database has no timing
    anchored_s: float | None = None
    # a tuned kernel predicted as the fastest of the programs its search timed here
    # (`e2e.search`): the prediction of the program the database chose, and how many programs
    # there were; `predicted_s` is then the fastest of them
    chosen_program_s: float | None = None
    candidates: int | None = None

    def to_json(self) -> dict:
        return {"name": self.name, "calls": self.calls, "predicted_s": self.predicted_s,
                "predicted_total_s": self.total_s, "measured_s": self.measured_s,
                "measured_total_s": None if self.measured_s is None
                else self.calls * self.measured_s, "tuned": self.tuned, "kind": self.kind,
                "database_s": self.database_s, "in_network_s": self.in_network_s,
                "anchored_s": self.anchored_s, "chosen_program_s": self.chosen_program_s,
                "candidates": self.candidates}


@dataclass(frozen=True)
class E2EResult:
    network: str
    batch: int | None
    device_id: str | None
    predicted_s: float
    kernels: tuple[KernelPrediction, ...]  # by predicted total, largest first
    graph: Graph = field(repr=False)
    replay: ReplayResult = field(repr=False)
    timings_s: Mapping[str, float] = field(default_factory=dict, hash=False)
    measured_s: float | None = None
    measurement: object = field(default=None, repr=False, compare=False)  # NetworkMeasurement
    measured_kernels_replay_s: float | None = None  # replay with kernels timed alone
    # ... with each kernel's median time alone instead of its best: a run of minutes is timed
    # at the shared host's typical state, the labels at its best (docs/cross_device.md)
    measured_kernels_median_replay_s: float | None = None
    database_replay_s: float | None = None  # replay with the tuning database's timings
    database_timed_here: bool = False  # those timings were taken on this device
    in_network_replay_s: float | None = None  # replay with kernels timed inside the network
    anchored_replay_s: float | None = None  # replay anchored on the database's own timings
    anchor_model: str | None = None  # the model of the database's device behind it
    # with tuned kernels predicted as the fastest of their search (`e2e.search`): the model
    # error's spread it assumed, and the replay with the programs the database chose, each
    # predicted on its own (what `predicted_s` is without a search to go by)
    search_sigma: float | None = None
    chosen_programs_replay_s: float | None = None

    @property
    def error_rel(self) -> float | None:
        """(predicted - measured) / measured, or None without a measurement."""
        if self.measured_s is None:
            return None
        return (self.predicted_s - self.measured_s) / self.measured_s

    def critical_path_kernels(self) -> tuple[str, ...]:
        return tuple(self.graph.nodes[i].kernel for i in self.replay.critical_path)

    def with_measurement(self, m) -> "E2EResult":
        """A new result holding a `measure.NetworkMeasurement` of the same network. When every
        kernel was timed on its own, `measured_kernels_replay_s` is the replay of the graph
        with those timings: its gap to `measured_s` is the replay's own error. When every kernel
        was also timed inside the network, `in_network_replay_s` is the replay with those: the
        part of that gap the kernels account for (running slower in the network than alone)."""
        per_kernel = m.kernel_s()
        in_network = m.in_network_s()
        kernels = tuple(replace(k, measured_s=per_kernel.get(k.name),
                                in_network_s=in_network.get(k.name)) for k in self.kernels)
        return replace(self, kernels=kernels, measured_s=m.latency_s, measurement=m,
                       measured_kernels_replay_s=self._replay_with(per_kernel),
                       measured_kernels_median_replay_s=self._replay_with(m.kernel_median_s()),
                       # timed inside the network, the kernels already read their weights
                       # and activations from memory: no such terms on top
                       in_network_replay_s=self._replay_with(in_network, from_memory=False)
                       if in_network else None)

    def with_database(self, latencies: Mapping[str, float], timed_here: bool = False
                      ) -> "E2EResult":
        """A new result holding the tuning database's time of each kernel
        (`kernels.database_latencies`). When the database times every kernel,
        `database_replay_s` is the replay of the graph with those times (and the same call
        overhead): what the database alone says the network takes, with no model and no
        new measurement; its gap to `predicted_s` is the model's error on these kernels.
        `timed_here`: the database was timed on this device, so its replay is of measurements
        of these very programs here."""
        kernels = tuple(replace(k, database_s=latencies.get(k.name)) for k in self.kernels)
        return replace(self, kernels=kernels, database_replay_s=self._replay_with(latencies),
                       database_timed_here=timed_here)

    def with_anchor(self, source_predicted: Mapping[str, float], model: str) -> "E2EResult":
        """A new result anchored on the tuning database's timings (call `with_database`
        first), for a database timed on another device: each kernel it times gets its timing
        there x this result's prediction / `source_predicted` (`model`'s prediction for that
        device), the rest their prediction; `anchored_replay_s` is the replay with those.

        Why: a model pulls a task's fastest programs toward the task's middle, and a tuning
        search picks exactly those (docs/tune.md). Two models of two devices err alike on the
        same program, so their ratio carries over where either alone is far off (ResNet-18
        tuned on Zen 4, on the model-167 Xeon: docs/tune.md, "Anchored on the database's
        timings")."""
        kernels = []
        for k in self.kernels:
            source = source_predicted.get(k.name)
            anchored = k.predicted_s
            if k.database_s is not None and source is not None and source > 0:
                anchored = k.database_s * k.predicted_s / source
            kernels.append(replace(k, anchored_s=anchored) if k.kind != "builtin" else k)
        durations = {k.name: k.anchored_s for k in kernels if k.anchored_s is not None}
        return replace(self, kernels=tuple(kernels), anchor_model=model,
                       anchored_replay_s=self._replay_with(durations))

    def _replay_with(self, kernel_s: Mapping[str, float], from_memory: bool = True
                     ) -> float | None:
        """The total of this result's graph replayed with other kernel durations (same queues
        and call overhead; without the terms for weights and activations read from memory
        unless `from_memory`), or None when some kernel has none."""
        overhead = self.replay.overhead
        if not from_memory:
            overhead = overhead.from_cache()
        try:
            return replay(self.graph, dict(kernel_s), overhead=overhead,
                          queue_of=dict(enumerate(self.replay.queue))).total_s
        except KeyError:  # replay.MissingDurationError
            return None

    def weights_s(self) -> float:
        """What the replay charges for weights read from memory, over one inference."""
        return sum(self.replay.overhead.weights_s(node) for node in self.graph.nodes)

    def activations_s(self) -> float:
        """What the replay charges for activations read from memory, over one inference."""
        return sum(self.replay.overhead.activations_s(node) for node in self.graph.nodes)

    def to_json(self) -> dict:
        o = self.replay.overhead
        return {"network": self.network, "batch": self.batch, "device_id": self.device_id,
                "predicted_s": self.predicted_s, "measured_s": self.measured_s,
                "error_rel": self.error_rel,
                "measured_kernels_replay_s": self.measured_kernels_replay_s,
                "measured_kernels_median_replay_s": self.measured_kernels_median_replay_s,
                "database_replay_s": self.database_replay_s,
                "database_timed_here": self.database_timed_here,
                "in_network_replay_s": self.in_network_replay_s,
                "anchored_replay_s": self.anchored_replay_s, "anchor_model": self.anchor_model,
                "search_sigma": self.search_sigma,
                "chosen_programs_replay_s": self.chosen_programs_replay_s,
                "kernels": [k.to_json() for k in self.kernels],
                "nodes": len(self.graph),
                "overhead": {"per_call_s": o.per_call_s, "per_builtin_s": o.per_builtin_s,
                             "per_invoke_s": o.per_invoke_s,
                             "per_weight_byte_s": o.per_weight_byte_s,
                             "per_tuned_weight_byte_s": o.per_tuned_weight_byte_s,
                             "weights_s": self.weights_s(),
                             "per_activation_byte_s": o.per_activation_byte_s,
                             "activations_s": self.activations_s()},
                "weight_bytes": self.graph.weight_bytes(),
                "activation_bytes": self.graph.activation_bytes(),
                "critical_path": list(self.critical_path_kernels()),
                "timings_s": dict(self.timings_s),
                "measurement": None if self.measurement is None else self.measurement.to_json()}


def kernel_programs(kernels, target):
    """(ProgramSet of the distinct kernels, kernel name -> row). Structurally equal PrimFuncs
    share a row; a row is flagged default (`ProgramSet.default`) when its kernel is
    (`Kernel.default`). Raises RuntimeError naming a kernel that cannot be featurized."""
    import tvm_ffi

    from cdmpp.dataset.programs import ProgramSet
    from cdmpp.features.parallel import extract_each

    distinct: dict[int, object] = {}  # structural hash -> the first kernel with that PrimFunc
    hashes = []
    for k in kernels:
        hashes.append(tvm_ffi.structural_hash(k.func))
        distinct.setdefault(hashes[-1], k)
    asts = extract_each([k.func for k in distinct.values()], target)
    for k, ast in zip(distinct.values(), asts):
        if isinstance(ast, Exception):
            raise RuntimeError(f"cannot featurize kernel {k.name}: {type(ast).__name__}: "
                               f"{ast}") from ast
    by_hash = {h: row for row, h in enumerate(distinct)}
    rows = {k.name: by_hash[h] for k, h in zip(kernels, hashes)}
    feats = [ast.leaf_features for ast in asts]
    pos = [ast.leaf_pos for ast in asts]
    names = [k.name for k in distinct.values()]
    default = [k.default for k in distinct.values()]
    return ProgramSet(tuple(feats), tuple(pos), None, tuple(names),
                      np.array(default, dtype=bool)), rows


def predict_kernels(estimator, kernels, target) -> dict[str, float]:
    """{kernel name: predicted seconds per call}."""
    programs, rows = kernel_programs(kernels, target)
    if not len(programs):
        return {}
    latency = np.asarray(estimator.predict(programs), dtype=np.float64).reshape(-1)
    if latency.shape != (len(programs),):
        raise RuntimeError(f"the estimator returned {latency.shape} predictions for "
                           f"{len(programs)} kernels")
    out = {name: float(latency[row]) for name, row in rows.items()}
    bad = [f"{n} ({v!r})" for n, v in out.items() if not (np.isfinite(v) and v >= 0)]
    if bad:
        raise RuntimeError(f"the estimator gave no valid latency for kernel(s): {', '.join(bad)}")
    return out


def predict_network(estimator, network, target=None, *, overhead="auto", device=None,
                    queue_of: Mapping[int, str] | None = None,
                    extra_kernel_s: Mapping[str, float] | None = None,
                    search_db=None, search_sigma: float = SEARCH_SIGMA,
                    log=None) -> E2EResult:
    """Predict `network` (a `kernels.NetworkModule`, or a Relax IRModule, lowered here).

    `target`: the network's own by default. `overhead`: a `CallOverhead`, "auto" (the calibrated
    overhead of `device`, default this machine, measured and cached on first use) or None (no
    overhead). `queue_of`: node id -> queue (default: one CPU queue). `extra_kernel_s`:
    durations for kernels cdmpp cannot featurize (e.g. `call_dps_packed` library calls).
    `search_db`: the path of a tuning database timed on the device predicted for, the network
    lowered with it; each tuned kernel is then predicted as the fastest of the programs it
    timed for that kernel, with a model error of spread `search_sigma` (`e2e.search`).
    `timings_s` holds the time of each step; "prediction_s" (features + estimator + replay)
    excludes TVM's import and lowering ("lower_s").
    """
    from cdmpp.e2e.kernels import NetworkModule, lower_network

    timings = {}
    # the device's cold-weights and memory-streaming probes (e2e.cold, e2e.activations), with
    # the calibrated overhead
    cold = stream = None
    if not isinstance(network, NetworkModule):
        if target is None:
            raise ValueError("predicting a Relax IRModule needs a target")
        t0 = time.perf_counter()
        network = lower_network(network, target)
        timings["lower_s"] = time.perf_counter() - t0
    target = target or network.target
    if overhead == "auto":
        from cdmpp.device import local_device
        from cdmpp.e2e.overhead import load_overhead

        device = device or local_device()
        calibration = load_overhead(device, log=log)
        overhead, cold, stream = calibration.overhead, calibration.cold, calibration.activations
    overhead = overhead or CallOverhead()

    t0 = time.perf_counter()
    kernel_s = predict_kernels(estimator, network.kernels, target)
    chosen_s, candidates = {}, {}
    if search_db is not None:
        from cdmpp.e2e.search import candidate_predictions, fastest_of_search

        candidates = candidate_predictions(estimator, network, search_db)
        chosen_s = {name: kernel_s[name] for name in candidates}
        kernel_s = {**kernel_s, **fastest_of_search(candidates, search_sigma)}
    t1 = time.perf_counter()
    graph = from_relax(network.mod)
    if cold is not None:  # every weight of an inference passes the caches between two reads
        weights = graph.weight_bytes()
        overhead = replace(overhead, per_weight_byte_s=cold.at(weights),
                           per_tuned_weight_byte_s=cold.at(weights, tuned=True),
                           tuned_kernels=frozenset(k.name for k in network.kernels if k.tuned))
    if stream is not None:  # every kernel reads what the kernels before it just wrote
        overhead = replace(overhead, per_activation_byte_s=stream.s_per_byte)
    result = replay(graph, {**(extra_kernel_s or {}), **kernel_s}, overhead=overhead,
                    queue_of=queue_of)
    t2 = time.perf_counter()
    timings.update(features_and_estimator_s=t1 - t0, replay_s=t2 - t1, prediction_s=t2 - t0)

    tuned = {k.name: k.tuned for k in network.kernels}
    kernels = tuple(KernelPrediction(row.name, row.calls, row.kernel_s, row.total_s,
                                     tuned=tuned.get(row.name, False), kind=row.kind,
                                     chosen_program_s=chosen_s.get(row.name),
                                     candidates=len(candidates[row.name])
                                     if row.name in candidates else None)
                    for row in result.breakdown)
    out = E2EResult(network.name, network.batch, getattr(device, "device_id", None),
                    result.total_s, kernels, graph, result, timings)
    if search_db is None:
        return out
    return replace(out, search_sigma=search_sigma,
                   chosen_programs_replay_s=out._replay_with(
                       {**(extra_kernel_s or {}), **kernel_s, **chosen_s}))
