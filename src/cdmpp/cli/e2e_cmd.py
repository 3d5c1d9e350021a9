"""`cdmpp e2e`: predicted (and measured) end-to-end latency of a whole network."""

from __future__ import annotations

import sys

from cdmpp.cli import (add_for_device_argument, add_network_arguments, for_device_note,
                       import_network_argument, model_help, non_negative_int, positive_int)


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "e2e", help="predict the end-to-end latency of a whole network",
        description="Import a network (built-in, or ONNX), fuse it as TVM's CPU pipeline does, "
                    "predict every kernel TVM runs with the model and replay the dataflow "
                    "graph with the device's calibrated per-call overhead (and the "
                    "calibrated cost of the activations each kernel reads from memory, and of "
                    "matrix weights beyond the cache). Prints "
                    "the predicted total and the top kernels; with --measure, also the measured "
                    "total and each kernel timed on its own and inside the network. Writes a "
                    "PNG breakdown.")
    add_network_arguments(p)
    p.add_argument("--tuning-db", metavar="DIR", default=None,
                   help="a TVM meta_schedule JSON database: its best schedules replace the "
                        "kernels it holds (default: TVM's untuned kernels)")
    p.add_argument("--anchor-model", default="auto", metavar="MODEL",
                   help="for a tuning database timed on another device: the model of that "
                        "device whose predictions, with the database's timings, anchor a "
                        "second estimate (its time there x this model's prediction / that "
                        "model's; printed beside the prediction). 'auto' (default): the "
                        "shipped model fitted for that device, if any; 'none': no anchoring")
    p.add_argument("--search-sigma", default="auto", type=_sigma, metavar="SIGMA",
                   help="for a tuning database timed on this device: each tuned kernel is "
                        "predicted as the fastest of the programs the database timed for it, "
                        "the model off by a log-normal error of this spread (default 'auto': "
                        "the shipped recipe's, measured on held-out programs); 'off': each "
                        "kernel's chosen program predicted on its own")
    p.add_argument("--model", default=None, metavar="MODEL",
                   help=model_help("the shipped cdmpp model fitted for "
                                   "this machine's device, else default"))
    add_for_device_argument(p, "the device the model was fitted for")
    p.add_argument("--measure", action="store_true",
                   help="also time the network with TVM's VM, and each kernel on its own and "
                        "inside the network")
    p.add_argument("--json", metavar="OUT", default=None, help="write the result as JSON")
    p.add_argument("--plot", metavar="PNG", default=None,
                   help="breakdown figure (default: e2e-NETWORK-bBATCH.png; 'none': no figure)")
    p.add_argument("--top", type=non_negative_int, default=10, metavar="N",
                   help="kernels in the table")
    p.add_argument("--threads", type=positive_int, default=None,
                   help="threads TVM runs with (default: every core this process may use)")
    p.set_defaults(run=run)


def _sigma(text: str):
    """'auto', 'off' (None) or a spread >= 0."""
    import argparse
    import math

    if text in ("auto", "off"):
        return None if text == "off" else text
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"expected 'auto', 'off' or a number >= 0, got {text!r}")
    return value


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run(args) -> int:
    import time

    from cdmpp.model.registry import for_device, load_estimator, read_meta, resolve_for_device

    spec = args.model
    if spec is not None:  # first: a missing model fails before TVM work
        read_meta(spec)
    if args.anchor_model not in ("auto", "none"):
        read_meta(args.anchor_model)

    from cdmpp.device import local_device
    from cdmpp.e2e.pipeline import run_network
    from cdmpp.e2e.report import format_table, plot_breakdown, write_json

    device = local_device(threads=args.threads)
    if spec is None:
        spec = for_device(device)
        _log(f"model: {spec} (shipped)")
    target = resolve_for_device(args.for_device, spec, lambda: device, args.threads)
    model = load_estimator(spec, for_device=target)
    note = for_device_note(spec, target, device)
    if note:
        _log(note)
    start = time.perf_counter()
    name, batch, mod = import_network_argument(args, _log)
    _log(f"imported in {time.perf_counter() - start:.1f} s")
    result = run_network(mod, model, device, name=name, batch=batch, tuning_db=args.tuning_db,
                         measure=args.measure, log=_log, search_sigma=args.search_sigma,
                         anchor_model=None if args.anchor_model == "none" else args.anchor_model)
    print(format_table(result, args.top))
    if args.json:
        print(f"wrote {write_json(result, args.json)}")
    if args.plot != "none":
        default = f"e2e-{name}" + (f"-b{batch}" if batch else "") + ".png"
        print(f"wrote {plot_breakdown(result, args.plot or default)}")
    return 0
