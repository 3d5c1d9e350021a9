"""Text table, JSON file and PNG breakdown of an `E2EResult`."""

from __future__ import annotations

import json
from pathlib import Path

JSON_KEYS = ("network", "batch", "device_id", "predicted_s", "measured_s", "kernels")


def _ms(x: float | None) -> str:
    """Milliseconds, three decimals; below 0.1 ms three significant digits (a small ONNX
    model's kernels take a fraction of a microsecond)."""
    if x is None:
        return ""
    ms = 1e3 * x
    return f"{ms:.3f}" if ms >= 0.1 or ms == 0 else f"{ms:.3g}"


def slow_host_warning(measurement) -> list[str]:
    """A warning line when the reference kernel says the whole measuring run was slow."""
    from cdmpp.measure.reference import SLOW_RUN_REL

    slowdown = getattr(measurement, "host_slowdown", None)
    if slowdown is None or slowdown <= 1 + SLOW_RUN_REL:
        return []
    return [(f"warning: the reference kernel ran {100 * (slowdown - 1):.0f}% slower during this "
             "measurement than its best on this device: the host is busy and the measured time "
             "is likely too high; measure again when it is quiet")]


def placement_lines(measurement) -> list[str]:
    """The network's best time in each placement of the threads it was timed in, and a
    warning when it saw one placement of a device known to have two (`measure.placement`)."""
    by_placement = getattr(measurement, "by_placement", lambda: {})()
    if len(by_placement) > 1:
        times = ", ".join(f"{state} {_ms(t)} ms" for state, t in sorted(by_placement.items()))
        return [f"placements: timed in both ({times}); the measured time is the lower"]
    if getattr(measurement, "one_of_two_placements", False):
        (state,) = by_placement
        return [f"warning: timed in one placement of the threads ({state}) on a device whose "
                "host has moved them between two; networks have run up to 28% apart in the "
                "two: measure again to see the other"]
    return []


# Untuned kernels predicted this far from their own times here point at the machine's speed
# (a rescale fixes it): on the devices they were fitted for, the shipped models put the untuned
# networks 1.5-4.1% off on average (README), and README's ResNet-18 on a 9%-slower Zen 3 VM
# came out 0.91x its kernels' replay and -10.9% off the network.
RESCALE_HINT_REL = 0.05


def rescale_hint(result) -> list[str]:
    """A hint line when the model's untuned kernels together are more than `RESCALE_HINT_REL`
    off the replay of their own times here: the sign that this machine runs faster or slower
    than the one the model's labels were timed on, which `cdmpp calibrate --rescale` measures
    (it fixed the untuned networks of a fresh, 7-19% slower Zen 3 VM: docs/cross_device.md).
    Not for tuned kernels: their error is the model's on searched programs, which a rescale
    made worse. The speed it fits is the hour's: on the Zen 5 VM the networks at batch 1 ran
    5-30% slow one evening and ResNet-18 moved 5% in eight minutes the next morning."""
    alone = result.measured_kernels_replay_s
    if not alone or any(k.tuned for k in result.kernels):
        return []
    ratio = result.predicted_s / alone
    if abs(ratio - 1) <= RESCALE_HINT_REL:
        return []
    return [f"hint       the prediction is {ratio:.2f}x the replay of the kernels timed alone "
            "here: this machine likely runs {} now than the one the model's labels were timed "
            "on; `cdmpp calibrate --rescale --out DIR` (about 2 minutes) fits the model's scale "
            "to this speed, then use `--model DIR`. On a shared VM the speed moves from hour to "
            "hour: time a network again later to see whether it holds".format(
                "slower" if ratio < 1 else "faster")]


# A kernel whose time alone is this many times its prediction (or 1/this), a round figure set
# once, not fitted to a check: well past the 5% of the rescale hint. BERT-base's two untuned
# [K, N] matmuls on the model-167 Intel Xeon ran 1.9x and 3.0x what `default` predicts, 88% of
# the time of its 24 kernels (docs/cross_device.md, "The model-167 Intel Xeon again").
KERNEL_OFF_RATIO = 1.5
# ... and such kernels carry at least this share of the kernels' replay alone
KERNEL_OFF_SHARE = 0.2


def kernels_hint(result) -> list[str]:
    """A hint line when untuned kernels each more than `KERNEL_OFF_RATIO` off their prediction
    carry `KERNEL_OFF_SHARE` of the kernels' time alone: one factor for the machine cannot fix
    those; the network's own kernels measured and fine-tuned on, weighted as much as a
    calibration's programs (`cdmpp calibrate --balance`), can."""
    if not result.measured_kernels_replay_s or any(k.tuned for k in result.kernels):
        return []
    timed = [k for k in result.kernels if k.measured_s and k.predicted_s > 0]
    total = sum(k.calls * k.measured_s for k in timed)
    off = [k for k in timed
           if max(k.measured_s / k.predicted_s, k.predicted_s / k.measured_s) > KERNEL_OFF_RATIO]
    share = sum(k.calls * k.measured_s for k in off) / total if total else 0.0
    if share < KERNEL_OFF_SHARE:
        return []
    worst = max(off, key=lambda k: k.calls * k.measured_s)
    batch = f" --batches {result.batch}" if result.batch else ""
    return [f"hint       {len(off)} kernel(s) more than {KERNEL_OFF_RATIO}x off their prediction "
            f"take {100 * share:.0f}% of the kernels' time alone (the largest: {worst.name}, "
            f"{worst.measured_s / worst.predicted_s:.2f}x): one factor cannot fix them. Measure "
            f"this network's kernels (`cdmpp collect --out KERN --kernels-of {result.network}"
            f"{batch} --programs-per-task 0`) and fine-tune on them and a calibration's "
            "programs (CAL.data, written by `cdmpp calibrate --out CAL --budget-minutes 10`), "
            "each source weighing the same: `cdmpp calibrate --out DIR --tasks 0 --data CAL.data "
            "--data KERN --balance`, then use `--model DIR`"]


def _when(measurement) -> str:
    """' (timed 2026-11-28 15:18-15:58 UTC)', or '' when the measurement does not say."""
    start, end = (getattr(measurement, k, None) for k in ("started_utc", "ended_utc"))
    if not start or not end:
        return ""
    until = end[11:16] if start[:10] == end[:10] else f"{end[:10]} {end[11:16]}"
    return f" (timed {start[:10]} {start[11:16]}-{until} UTC)"


# the prediction this far from the replay of a database timed here: say which to read
DATABASE_HINT_REL = 0.25


def database_hint(result) -> list[str]:
    """A hint when a tuning database timed on this device replays far from the prediction:
    its timings are measurements of these programs here, and a model is that far off on the
    programs a search picks (ResNet-18 tuned by TVM's search on the model-167 Intel Xeon:
    predicted +143.5%, the database's replay -4.2%; docs/tune.md)."""
    db = result.database_replay_s
    if not result.database_timed_here or not db or \
            abs(result.predicted_s / db - 1) <= DATABASE_HINT_REL:
        return []
    return ["hint: the tuning database was timed on this device, so its replay is of these "
            "programs measured here; a model is often this far off on the programs a search "
            "picks (docs/tune.md, \"Predicting the tuned networks\"): read the replay"]


def search_lines(result) -> list[str]:
    """How the tuned kernels were predicted, when as the fastest of their search."""
    if result.search_sigma is None:
        return []
    searched = [k for k in result.kernels if k.candidates]
    if not searched:
        return ["           (no kernel has two or more programs timed in the tuning database: "
                "each predicted on its own)"]
    chosen = result.chosen_programs_replay_s
    programs = sum(k.candidates for k in searched)
    line = (f"           {len(searched)} tuned kernel{'s' * (len(searched) != 1)} predicted "
            f"as the fastest of the {programs} programs the database timed for them (model "
            f"error spread {result.search_sigma:g}, docs/tune.md)")
    if chosen:
        vs = f"{100 * (chosen / result.predicted_s - 1):+.1f}% from the prediction"
        if result.measured_s:
            vs += f", {100 * (chosen / result.measured_s - 1):+.1f}% from the measured"
        line += (f"; the programs it chose, each predicted on its own: {_ms(chosen)} ms "
                 f"({vs})")
    return [line]


def format_table(result, top: int = 10) -> str:
    """Predicted (and measured) total, error, and the top kernels by predicted time."""
    name = result.network + (f" (batch {result.batch})" if result.batch else "")
    lines = [f"network    {name}: {len(result.graph)} runtime calls, "
             f"{sum(k.kind != 'builtin' for k in result.kernels)} distinct kernels",
             f"predicted  {_ms(result.predicted_s)} ms"]
    lines += search_lines(result)
    if result.measured_s is not None:
        lines.append(f"measured   {_ms(result.measured_s)} ms{_when(result.measurement)}")
        lines.append(f"error      {100 * result.error_rel:+.1f}%")
        lines += slow_host_warning(result.measurement)
        lines += placement_lines(result.measurement)
        if result.measured_kernels_replay_s is not None:
            replayed = result.measured_kernels_replay_s
            lines.append(f"replay of the kernels timed alone: {_ms(replayed)} ms "
                         f"({100 * (replayed / result.measured_s - 1):+.1f}% vs measured: the "
                         "replay's own error)")
        if result.measured_kernels_median_replay_s is not None:
            typical = result.measured_kernels_median_replay_s
            lines.append(f"replay of their median times alone: {_ms(typical)} ms "
                         f"({100 * (typical / result.measured_s - 1):+.1f}% vs measured: a long "
                         "run meets the host's typical state, the labels its best)")
        if result.in_network_replay_s is not None:
            inside = result.in_network_replay_s
            line = f"replay of the kernels timed inside the network: {_ms(inside)} ms " \
                   f"({100 * (inside / result.measured_s - 1):+.1f}% vs measured)"
            if result.measured_kernels_replay_s:
                alone = result.measured_kernels_replay_s
                line += f"; {100 * (inside / alone - 1):+.1f}% vs the replay of them alone"
            lines.append(line)
        # a few kernels far off: one factor (the rescale hint) would not fix them
        lines += kernels_hint(result) or rescale_hint(result)
    in_database = any(k.database_s is not None for k in result.kernels)
    if result.database_replay_s is not None:
        db = result.database_replay_s
        lines.append(f"replay of the tuning database's timings: {_ms(db)} ms (the prediction is "
                     f"{100 * (result.predicted_s / db - 1):+.1f}% from it)")
        lines += database_hint(result)
    elif in_database:
        timed = sum(k.database_s is not None for k in result.kernels)
        total = sum(k.kind != "builtin" for k in result.kernels)
        lines.append(f"the tuning database times {timed} of the {total} kernels: no replay of "
                     "its timings")
    if result.anchored_replay_s is not None:
        anchored = result.anchored_replay_s
        vs = "" if result.measured_s is None else \
            f"; {100 * (anchored / result.measured_s - 1):+.1f}% vs measured"
        lines.append(f"anchored on the database's timings: {_ms(anchored)} ms (a kernel's time "
                     f"there x this model's prediction / {result.anchor_model}'s for that "
                     f"device{vs})")
    path = result.replay.critical_path
    if path:
        on_path = sum(result.replay.duration_s(i) for i in path)
        heaviest = max(path, key=result.replay.duration_s)
        lines.append(f"critical path {len(path)} of {len(result.graph)} calls, "
                     f"{_ms(on_path)} ms busy; its longest call "
                     f"{result.graph.nodes[heaviest].kernel} "
                     f"({_ms(result.replay.duration_s(heaviest))} ms)")
    o = result.replay.overhead
    lines.append(f"overhead   {1e6 * o.per_call_s:.3f} us per kernel call, "
                 f"{1e6 * o.per_builtin_s:.3f} us per builtin, {1e6 * o.per_invoke_s:.3f} us "
                 "per inference")
    weights = result.graph.weight_bytes()
    charged = result.weights_s()
    if weights and charged > 0:
        rates = [f"{1e9 * o.per_weight_byte_s:.3f} ns per byte"]
        if o.tuned_kernels:
            rates.append(f"{1e9 * o.per_tuned_weight_byte_s:.3f} by tuned kernels")
        lines.append(f"weights    {weights / 2**20:.1f} MiB of matrices read per inference, from "
                     f"memory (timed alone, from cache): {', '.join(rates)}, {_ms(charged)} ms")
    elif weights:
        lines.append(f"weights    {weights / 2**20:.1f} MiB of matrices read per inference; not "
                     "charged (within the cache, or no cold-weights calibration)")
    activations = result.graph.activation_bytes()
    if activations and o.per_activation_byte_s > 0:
        lines.append(f"activations {activations / 2**20:.1f} MiB read by the kernels per "
                     "inference, just written by others (timed alone, from cache): "
                     f"{1e9 * o.per_activation_byte_s:.4f} ns per byte, "
                     f"{_ms(result.activations_s())} ms")
    lines.append("")
    measured = any(k.measured_s is not None for k in result.kernels)
    head = f"{'kernel':<44} {'calls':>5} {'pred ms/call':>12} {'pred ms':>9} {'share':>6}"
    in_network = any(k.in_network_s is not None for k in result.kernels)
    if measured:
        head += f" {'meas ms/call':>12} {'error':>7}"
    if in_network:
        head += f" {'in net ms/call':>14}"
    if in_database:
        head += f" {'db ms/call':>11} {'vs db':>7}"
    show_anchored = result.anchored_replay_s is not None
    if show_anchored:
        head += f" {'anch ms/call':>12}"
    show_chosen = any(k.candidates for k in result.kernels)
    if show_chosen:
        head += f" {'programs':>8} {'chosen pred ms/call':>19}"
    lines.append(head)
    for k in result.kernels[:top]:
        share = k.total_s / result.predicted_s if result.predicted_s else 0.0
        row = (f"{k.name[:44]:<44} {k.calls:>5} {_ms(k.predicted_s):>12} {_ms(k.total_s):>9} "
               f"{100 * share:>5.1f}%")
        if measured:
            err = "" if not k.measured_s else f"{100 * (k.predicted_s / k.measured_s - 1):+.0f}%"
            row += f" {_ms(k.measured_s):>12} {err:>7}"
        if in_network:
            row += f" {_ms(k.in_network_s):>14}"
        if in_database:
            err = "" if not k.database_s else f"{100 * (k.predicted_s / k.database_s - 1):+.0f}%"
            row += f" {_ms(k.database_s):>11} {err:>7}"
        if show_anchored:
            row += f" {_ms(k.anchored_s):>12}"
        if show_chosen:
            row += f" {k.candidates or '':>8} {_ms(k.chosen_program_s):>19}"
        lines.append(row)
    if len(result.kernels) > top:
        rest = sum(k.total_s for k in result.kernels[top:])
        lines.append(f"... {len(result.kernels) - top} more kernels: {_ms(rest)} ms")
    return "\n".join(lines)


def write_json(result, path) -> Path:
    """`result.to_json()` (keys `JSON_KEYS` and more), written atomically."""
    from cdmpp.atomic import write_text_atomic

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(result.to_json(), indent=1) + "\n")
    return path


def plot_breakdown(result, path, top: int = 15) -> Path:
    """Horizontal bars: predicted (and measured) time of the top kernels, all calls summed."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    kernels = [k for k in result.kernels if k.kind != "builtin"][:top]
    names = [f"{k.name} x{k.calls}" for k in kernels][::-1]
    pred = [1e3 * k.total_s for k in kernels][::-1]
    meas = [None if k.measured_s is None else 1e3 * k.measured_s * k.calls
            for k in kernels][::-1]
    fig = Figure(figsize=(9, 0.35 * len(kernels) + 1.6))  # Agg, outside pyplot's global state
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ys = range(len(kernels))
    has_meas = any(m is not None for m in meas)
    h = 0.4 if has_meas else 0.7
    ax.barh([y + (h / 2 if has_meas else 0) for y in ys], pred, height=h, label="predicted")
    if has_meas:
        ax.barh([y - h / 2 for y in ys], [m or 0 for m in meas], height=h,
                label="measured (kernel alone)")
    ax.set_yticks(list(ys))
    ax.set_yticklabels(names, fontsize=8)
    ax.set_xlabel("ms per inference (all calls)")
    title = f"{result.network}" + (f" batch {result.batch}" if result.batch else "")
    title += f": predicted {_ms(result.predicted_s)} ms"
    if result.measured_s is not None:
        title += f", measured {_ms(result.measured_s)} ms ({100 * result.error_rel:+.1f}%)"
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path
