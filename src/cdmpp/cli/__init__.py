"""The `cdmpp` command line; shared argument parsing lives here."""


def csv_list(text: str) -> tuple[str, ...]:
    """A comma-separated command-line value: "a, b,,c" -> ("a", "b", "c")."""
    return tuple(part.strip() for part in text.split(",") if part.strip())


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (0 or less is refused, not read as "the default")."""
    return _int_at_least(text, 1)


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0."""
    return _int_at_least(text, 0)


def positive_float(text: str) -> float:
    """argparse type: a number > 0 (a budget of 0 or less minutes is no budget)."""
    import argparse
    import math

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"must be a positive number, not {text}")
    return value


def _int_at_least(text: str, low: int) -> int:
    import argparse

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
    return value


def model_help(default: str) -> str:
    """--model's help for the commands that predict with a shipped or trained model; `default`
    says which model is used when none is given."""
    return ("default (the shipped model of a Zen 4 VM: three cdmpp seeds and XGBoost, also "
            "named ensemble), seeds (those three seeds alone), zen5 (cdmpp trained on the "
            "Zen 4 and Zen 5 VMs' data, fitted for Zen 5), emeraldrapids (cdmpp trained on the "
            "three CPUs' data, fitted for an Intel Xeon VM, with an expert for default "
            "programs), zen3 (the same on four CPUs, fitted for a Zen 3 VM), xeon480 (the same on "
            "five CPUs, fitted for a model-167 Intel Xeon VM), xgb, or a model "
            f"directory written by cdmpp train or cdmpp calibrate (default: {default})")


def add_for_device_argument(p, default: str) -> None:
    """--for-device: the device a multi-device model predicts for (`load_estimator`)."""
    p.add_argument("--for-device", default=None, metavar="ID|local|DEVICE_JSON",
                   help="the device to predict for: a device id the model was trained on (a "
                        "multi-device model such as zen3 knows every CPU of its training "
                        "data); 'local' for this machine (zero-shot from its measured device "
                        "vector when the model never saw it); or a device.json written by "
                        "cdmpp collect (or its directory) (default: " + default + ")")


def for_device_note(spec, target, device) -> str | None:
    """The note `cdmpp e2e` prints when its model does not predict for this machine's
    `device`: fitted elsewhere (no --for-device), or asked about another device; and when it
    predicts for this machine zero-shot."""
    from cdmpp.device import short_name
    from cdmpp.model.registry import device_mismatch, for_device_id, same_processor_known

    here = f"{device.device_id} ({short_name(device)})"
    if target is None:
        return device_mismatch(spec, device)
    target_id = for_device_id(target)
    if target_id != device.device_id:
        if target_id == same_processor_known(spec, device):
            return (f"note: predicting for device {target_id}, another VM of this machine's "
                    f"processor, {here}: the same CPU and TVM target, other CPU flags")
        return f"note: predicting for device {target_id} (--for-device), not this machine's {here}"
    if not isinstance(target, str):
        return (f"note: {spec} was not trained on this device's records: predicting for {here} "
                "zero-shot, from its measured device vector")
    return None


def add_network_arguments(p) -> None:
    """--network NAME | --onnx FILE, and --batch: the network `cdmpp e2e` and `cdmpp tune` take."""
    from cdmpp.e2e.networks import NETWORKS

    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--network", choices=sorted(NETWORKS), metavar="NAME",
                     help=f"a built-in network: {', '.join(NETWORKS)}")
    src.add_argument("--onnx", metavar="FILE", help="an ONNX model (needs the onnx package)")
    p.add_argument("--batch", type=positive_int, default=None,
                   help="batch size: of a built-in network, or what an ONNX model's open "
                        "(symbolic) leading input dimension is bound to (default: 1)")


def import_network_argument(args, log) -> tuple[str, int | None, object]:
    """(name, batch, Relax IRModule) of the network `add_network_arguments` parsed."""
    if args.onnx:
        from cdmpp.e2e.onnx_model import load_onnx

        net = load_onnx(args.onnx, batch=args.batch)
        log(f"{args.onnx}: inputs {net.input_shapes}")
        return net.name, net.batch, net.mod
    import torch

    from cdmpp.e2e.networks import import_network

    torch.set_num_threads(1)  # export only; keeps the cores for TVM
    batch = args.batch or 1
    return args.network, batch, import_network(args.network, batch)
