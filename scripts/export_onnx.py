"""Write built-in networks as ONNX files, as a user's exporter would (batch axis left open).

    python scripts/export_onnx.py resnet18 mobilenet_v2 bert_base [--out DIR] [--static]

TorchScript-based `torch.onnx.export` (opset 17), BatchNorm folded as it does in eval mode, the
first input's batch dimension left open as "N" unless `--static`. Then, e.g.:

    cdmpp e2e --onnx DIR/resnet18.onnx --batch 4 --measure
    python benchmarks/e2e.py --networks DIR/resnet18.onnx,DIR/bert_base.onnx --batches 1

Needs the `onnx` package (`pip install -e '.[onnx]'`). docs/model.md, "ONNX networks", has
what these gave on the Zen 5 VM.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path


def export(name: str, out: Path, static: bool = False) -> Path:
    import torch

    from cdmpp.e2e.networks import torch_model

    model, inputs = torch_model(name, 1)
    path = out / f"{name}.onnx"
    tmp = path.with_suffix(".onnx.tmp")
    with warnings.catch_warnings():  # the TorchScript exporter's deprecation notice
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(model, tuple(inputs), str(tmp), dynamo=False, opset_version=17,
                          input_names=["x"],
                          dynamic_axes=None if static else {"x": {0: "N"}})
    tmp.replace(path)
    return path


def main() -> int:
    from cdmpp.e2e.networks import NETWORKS

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("networks", nargs="+", choices=sorted(NETWORKS), metavar="NETWORK")
    parser.add_argument("--out", default=".", type=Path)
    parser.add_argument("--static", action="store_true", help="fix the batch dimension at 1")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.networks:
        print(f"wrote {export(name, args.out, args.static)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
