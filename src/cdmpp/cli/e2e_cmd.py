"""`cdmpp e2e`: predicted (and measured) end-to-end latency of a whole network."""

from __future__ import annotations

import sys


def add_parser(subparsers) -> None:
    from cdmpp.e2e.networks import NETWORKS

    p = subparsers.add_parser(
        "e2e", help="predict the end-to-end latency of a whole network",
        description="Import a network (built-in, or ONNX), fuse it as TVM's CPU pipeline does, "
                    "predict every kernel TVM runs with the model and replay the dataflow "
                    "graph with the device's calibrated per-call overhead. Prints the predicted "
                    "total and the top kernels; with --measure, also the measured total and "
                    "each kernel timed on its own. Writes a PNG breakdown.")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--network", choices=sorted(NETWORKS), metavar="NAME",
                     help=f"a built-in network: {', '.join(NETWORKS)}")
    src.add_argument("--onnx", metavar="FILE", help="an ONNX model (needs the onnx package)")
    p.add_argument("--batch", type=int, default=None,
                   help="batch size: of a built-in network, or what an ONNX model's open "
                        "(symbolic) leading input dimension is bound to (default: 1)")
    p.add_argument("--tuning-db", metavar="DIR", default=None,
                   help="a TVM meta_schedule JSON database: its best schedules replace the "
                        "kernels it holds (default: TVM's untuned kernels)")
    p.add_argument("--model", default=None, metavar="MODEL",
                   help="default (the shipped cdmpp model, trained on a Zen 4 VM), zen5 (default "
                        "calibrated on a Zen 5 VM), xgb, ensemble (geometric mean of cdmpp and "
                        "XGBoost), or a directory written by save_estimator (default: the "
                        "shipped cdmpp model fitted for this machine's device, else default)")
    p.add_argument("--measure", action="store_true",
                   help="also time the network with TVM's VM and each kernel on its own")
    p.add_argument("--json", metavar="OUT", default=None, help="write the result as JSON")
    p.add_argument("--plot", metavar="PNG", default=None,
                   help="breakdown figure (default: e2e-NETWORK-bBATCH.png; 'none': no figure)")
    p.add_argument("--top", type=int, default=10, metavar="N", help="kernels in the table")
    p.add_argument("--threads", type=int, default=None,
                   help="threads TVM runs with (default: every core this process may use)")
    p.set_defaults(run=run)


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run(args) -> int:
    import time

    from cdmpp.model.registry import device_mismatch, for_device, load_estimator

    if args.batch is not None and args.batch < 1:
        raise ValueError(f"--batch must be >= 1, got {args.batch}")
    spec = args.model
    if spec is not None:
        model = load_estimator(spec)  # first: a missing model fails before TVM work

    from cdmpp.device import local_device, short_name
    from cdmpp.e2e.kernels import lower_network
    from cdmpp.e2e.networks import import_network
    from cdmpp.e2e.onnx_model import load_onnx
    from cdmpp.e2e.predict import predict_network
    from cdmpp.e2e.report import format_table, plot_breakdown, write_json
    from cdmpp.measure.collect import set_threads

    device = local_device(threads=args.threads)
    set_threads(device.threads)
    if spec is None:
        spec = for_device(device.device_id)
        model = load_estimator(spec)
        _log(f"model: {spec} (shipped)")
    note = device_mismatch(spec, device.device_id, short_name(device))
    if note:
        _log(note)
    start = time.perf_counter()
    if args.onnx:
        onnx_net = load_onnx(args.onnx, batch=args.batch)
        name, batch, mod = onnx_net.name, onnx_net.batch, onnx_net.mod
        _log(f"{args.onnx}: inputs {onnx_net.input_shapes}")
    else:
        import torch

        torch.set_num_threads(1)  # export only; keeps the cores for TVM
        name, batch = args.network, args.batch or 1
        mod = import_network(name, batch)
    net = lower_network(mod, device.target, tuning_db=args.tuning_db, name=name, batch=batch)
    lower_s = time.perf_counter() - start
    result = predict_network(model, net, device=device, log=_log)
    if args.tuning_db:
        from cdmpp.e2e.kernels import database_latencies

        result = result.with_database(database_latencies(net))
    _log(f"imported and fused in {lower_s:.1f} s; predicted in "
         f"{result.timings_s['prediction_s']:.2f} s")
    if args.measure:
        from cdmpp.e2e.measure import measure_network

        _log(f"measuring {name} and its {len(net.kernels)} kernels ...")
        result = result.with_measurement(measure_network(net, device=device, kernels=True))
        if result.measurement.failed:
            for kernel, error in result.measurement.failed.items():
                _log(f"kernel {kernel} could not be timed alone: {error}")
    print(format_table(result, args.top))
    if args.json:
        print(f"wrote {write_json(result, args.json)}")
    if args.plot != "none":
        default = f"e2e-{name}" + (f"-b{batch}" if batch else "") + ".png"
        print(f"wrote {plot_breakdown(result, args.plot or default)}")
    return 0
