"""Each kernel's time inside the network, beside its time alone and its database label.

    python benchmarks/in_network.py --network bert_base [--batch 1] [--tuning-db DIR]
                                    [--runs 7] [--top 12] [--json OUT]

The network is lowered as `cdmpp e2e` lowers it (with `--tuning-db`, its best records applied),
built, and run `--runs` times on the Relax VM with an instrument that times every call: a
kernel's in-network time is the median over the runs of its calls' summed time. Then every
kernel is built on its own (as the collector builds it) and timed alone with random inputs
(TVM's time_evaluator, median of 5 repeats of at least 100 ms). With a tuning database, each
kernel's label (its best record's timing, what `replay(db)` in benchmarks/e2e.py sums) is shown
too. The three columns separate what the network context does to a kernel (in-network / alone)
from how far the host has moved since the labels were timed (alone / label).

The instrument is a Python callback around every call: it adds a few microseconds per call,
which shows on kernels of tens of microseconds, not on those of milliseconds.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from pathlib import Path

import numpy as np


def in_network_s(net, runs: int) -> tuple[dict[str, float], list[float]]:
    """({kernel: median over runs of its calls' summed seconds}, wall seconds of each run)."""
    from tvm import relax

    from cdmpp.e2e.measure import random_inputs
    from cdmpp.tvm_env import import_tvm

    tvm = import_tvm()
    vm = relax.VirtualMachine(net.build(), tvm.cpu())
    vm.save_function("main", "bound", *random_inputs(net.mod, 0))
    for _ in range(2):  # warm-up: thread pool, page faults
        vm["bound"]()
    started: dict[str, float] = {}
    spent: dict[str, float] = collections.defaultdict(float)

    def instrument(_func, symbol, before, _ret, *_args):
        if before:
            started[symbol] = time.perf_counter()
        else:
            spent[symbol] += time.perf_counter() - started.pop(symbol)
        return 0  # carry on as usual

    vm.set_instrument(instrument)
    per_run, wall = [], []
    for _ in range(runs):
        spent.clear()
        start = time.perf_counter()
        vm["bound"]()
        wall.append(time.perf_counter() - start)
        per_run.append(dict(spent))
    names = {k.name for k in net.kernels}
    return ({n: float(np.median([r.get(n, 0.0) for r in per_run])) for n in names}, wall)


def alone_s(kernel, target) -> float:
    """Seconds per call of the kernel built and timed on its own."""
    from cdmpp.e2e.measure import build_kernel, kernel_args_info
    from cdmpp.measure.build import ENTRY
    from cdmpp.measure.timing import random_args
    from cdmpp.tvm_env import import_tvm

    tvm = import_tvm()
    module = build_kernel(kernel.func, target)
    args = random_args(kernel_args_info(kernel.func), tvm.cpu(), 0)
    evaluator = module.time_evaluator(ENTRY, tvm.cpu(), number=1, repeat=5, min_repeat_ms=100)
    return float(np.median(evaluator(*args).results))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--network", required=True)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--tuning-db", default=None)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--json")
    args = parser.parse_args()
    from cdmpp.device import local_device
    from cdmpp.e2e.kernels import database_latencies, lower_network
    from cdmpp.e2e.networks import import_network
    from cdmpp.measure.collect import set_threads

    device = local_device()
    set_threads(device.threads)
    net = lower_network(import_network(args.network, args.batch), device.target,
                        tuning_db=args.tuning_db, name=args.network, batch=args.batch)
    labels = database_latencies(net) if args.tuning_db else {}
    inside, wall = in_network_s(net, args.runs)
    calls = {k.name: k.calls for k in net.kernels}
    top = sorted(inside, key=inside.get, reverse=True)[:args.top]
    rows = []
    for kernel in net.kernels:
        if kernel.name in top:
            alone = alone_s(kernel, device.target) * kernel.calls
            label = labels[kernel.name] * kernel.calls if kernel.name in labels else None
            rows.append({"kernel": kernel.name, "calls": kernel.calls,
                         "in_network_s": inside[kernel.name], "alone_s": alone, "label_s": label})
    rows.sort(key=lambda r: -r["in_network_s"])
    ms = lambda s: "" if s is None else f"{1e3 * s:.3f}"  # noqa: E731
    ratio = lambda a, b: "" if a is None or b is None else f"{a / b:.3f}"  # noqa: E731
    print(f"{args.network} b{args.batch} ({'tuned' if args.tuning_db else 'untuned'}), device "
          f"{device.device_id}: runs {', '.join(f'{1e3 * w:.1f}' for w in wall)} ms "
          f"(instrumented); all calls of the top {len(rows)} kernels, ms:")
    print(f"{'kernel':<42} {'calls':>5} {'in network':>11} {'alone':>10} {'label':>10} "
          f"{'net/alone':>9} {'alone/label':>11}")
    for r in rows:
        print(f"{r['kernel'][:42]:<42} {r['calls']:>5} {ms(r['in_network_s']):>11} "
              f"{ms(r['alone_s']):>10} {ms(r['label_s']):>10} "
              f"{ratio(r['in_network_s'], r['alone_s']):>9} "
              f"{ratio(r['alone_s'], r['label_s']):>11}")
    total = {c: sum(r[c] for r in rows) for c in ("in_network_s", "alone_s")}
    labelled = [r for r in rows if r["label_s"] is not None]
    print(f"top {len(rows)} together: in network {ms(total['in_network_s'])} ms, alone "
          f"{ms(total['alone_s'])} ms" + (
              f"; the {len(labelled)} with a label: alone "
              f"{ms(sum(r['alone_s'] for r in labelled))} ms, label "
              f"{ms(sum(r['label_s'] for r in labelled))} ms" if labelled else ""))
    if args.json:
        Path(args.json).write_text(json.dumps({"network": args.network, "batch": args.batch,
                                               "tuning_db": args.tuning_db, "runs_s": wall,
                                               "device_id": device.device_id, "kernels": rows},
                                              indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
