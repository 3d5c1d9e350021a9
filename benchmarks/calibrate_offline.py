"""`cdmpp calibrate` from measurements another machine took: a calibrated model of that device.

    python benchmarks/calibrate_offline.py --data <cal/k10> --model default --out cal/z3-default
    python benchmarks/calibrate_offline.py --data <cal/k10> --model default --rescale --out ...
    python benchmarks/calibration.py --db <zen3-2c> --model cal/z3-default --model ...
    python benchmarks/e2e.py --model cal/z3-default \
        --measured-from benchmarks/measured/7566cfb52e598ab7-untuned.json

`cdmpp calibrate --tasks 0 --data DIR` takes only measurements of the machine it runs on. This
takes a collection of any device (e.g. the 10-minute calibrations data/README.md lists, a
`cdmpp calibrate` run's `<out>.data` on the Zen 3 or Intel Xeon VM) and fits `--model` to that
device exactly as `cdmpp calibrate` does on it: each CDMPP member fine-tuned `--fine-tunes`
times (`calibrate.fine_tunes_for`), the other kinds kept, the top-level weights chosen by
`--weight-folds` folds of the tasks and the whole rescaled (`calibrate.fine_tuned_model`), or
with `--rescale` one factor, or each program's from its `--neighbors` nearest
(`calibrate.rescaled_model`). The model is saved with that device's device.json and id and
the tasks it was fitted on, so benchmarks/calibration.py scores it on the other tasks and
benchmarks/e2e.py judges it on the device's stored network totals.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main() -> int:
    from cdmpp.calibrate import (RESCALE_NEIGHBORS, WEIGHT_FOLDS, CalibrateConfig,
                                 base_device_vector, fine_tuned_model, measured_programs,
                                 rescaled_model)

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="a collection directory of one device")
    parser.add_argument("--model", default="default", help="the base model")
    parser.add_argument("--out", required=True)
    parser.add_argument("--rescale", action="store_true")
    parser.add_argument("--neighbors", type=int, default=RESCALE_NEIGHBORS)
    parser.add_argument("--fine-tunes", type=int, default=None,
                        help="as cdmpp calibrate's (default: as it chooses for the base)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--weight-folds", type=int, default=WEIGHT_FOLDS,
                        help="as cdmpp calibrate's (0: keep the base's weights)")
    args = parser.parse_args()

    from cdmpp.device import load_device
    from cdmpp.model.members import cdmpp_members
    from cdmpp.model.registry import load_estimator, save_estimator
    from cdmpp.model.scaled import unscaled

    device = load_device(args.data)
    if device is None:
        raise SystemExit(f"{args.data} has no device.json: whose measurements are these?")
    data = measured_programs(Path(args.data))
    tasks = sorted(set(data.programs.task))
    base = unscaled(load_estimator(args.model))
    members = cdmpp_members(base, args.model)
    vector = base_device_vector(members[0], device, args.model)
    if args.rescale:
        model = rescaled_model(args.model, device, vector, data.programs, data.latency_s,
                               args.neighbors)
    else:
        config = CalibrateConfig(out=args.out, model=args.model, seed=args.seed,
                                 fine_tunes=args.fine_tunes, neighbors=args.neighbors,
                                 weight_folds=args.weight_folds)
        model = fine_tuned_model(base, members, data.programs.with_device(vector),
                                 data.latency_s, config, vector, progress=False,
                                 log=lambda m: print(m, file=sys.stderr))
    save_estimator(model, args.out, device=device, trained_on={
        "base_model": args.model, "device_id": device.device_id, "tasks": tasks,
        "records": int(len(data.latency_s)), "data": str(args.data),
        "rescale": getattr(model, "scale_", None), "offline": True})
    print(f"{args.out}: {args.model} {'rescaled' if args.rescale else 'fine-tuned'} for "
          f"device {device.device_id} on {len(data.latency_s)} programs of {len(tasks)} tasks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
