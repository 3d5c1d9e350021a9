"""The Python API: the calls most users need, each a thin layer over the modules the CLI uses.

    import cdmpp

    model = cdmpp.load_model()                   # the shipped model for this machine
    seconds = cdmpp.predict_programs([func])     # TIR PrimFuncs / IRModules / Schedules
    result = cdmpp.predict_network(module, (x,)) # a torch.nn.Module, an ONNX file, a Relax
                                                 # IRModule or a built-in network's name
    result.predicted_s, result.kernels[:5], result.critical_path_kernels()

`import cdmpp` imports this module; it loads TVM and torch only when a function is called.
"""

from __future__ import annotations

import os
import sys
import warnings


def load_model(model=None, *, for_device: str | None = None):
    """A fitted estimator. `model`: None (the shipped model fitted for this machine, else
    "default", as `cdmpp predict` and `cdmpp e2e` choose), a shipped name ("default", "seeds",
    "zen5", "emeraldrapids", "zen3", "xeon480", "xgb", "ensemble"), a directory written by
    `save_estimator`, or an estimator (returned as is). `for_device`: the device to predict
    for (default: the one the model was fitted for): a device id the model was trained on (a
    multi-device model knows every device of its training data,
    `cdmpp.model.registry.device_vectors`), "local" (this machine; zero-shot from its measured
    device vector when the model never saw it), a device.json path, or a
    `cdmpp.device.Device`."""
    from cdmpp.model.registry import for_device as shipped_for, load_estimator, resolve_for_device

    if model is not None and not isinstance(model, (str, os.PathLike)):
        if not callable(getattr(model, "predict", None)):
            raise TypeError(f"model must be a name, a directory or an estimator with "
                            f"predict(); got {type(model).__name__}")
        if for_device is not None:
            raise ValueError("for_device needs a model name or directory (its training "
                             "devices are in its estimator.json), not a loaded estimator")
        return model
    if model is None or for_device == "local":
        from cdmpp.device import local_device

        here = local_device()
        model = shipped_for(here) if model is None else model
    return load_estimator(model, for_device=resolve_for_device(for_device, model,
                                                               lambda: here))


def _check_static_shapes(program, i: int) -> None:
    """A latency needs concrete sizes: a buffer shape with a variable (`n` rows) describes no
    program that runs; its features would be of some arbitrary size."""
    tvm = sys.modules["tvm"]
    funcs = program.functions.values() if isinstance(program, tvm.IRModule) else [program]
    for func in funcs:
        if not isinstance(func, tvm.tirx.PrimFunc):
            continue
        for param in func.params:  # a tensor parameter carries its buffer's shape
            try:
                shape = list(param.shape)
            except (AttributeError, TypeError, RuntimeError):  # a scalar parameter
                continue
            if not all(isinstance(d, tvm.tirx.IntImm) for d in shape):
                raise ValueError(f"program {i} has a symbolic shape ({param.name}: {shape}): "
                                 "bind its sizes before predicting it")


def _programs_as_kernels(programs, default=False):
    import numpy as np

    from cdmpp.e2e.kernels import Kernel
    from cdmpp.tvm_env import import_tvm

    tvm = import_tvm()
    from tvm import s_tir

    if isinstance(programs, (tvm.tirx.PrimFunc, tvm.IRModule, s_tir.Schedule)):
        programs = [programs]
    programs = list(programs)
    flags = [default] * len(programs) if np.ndim(default) == 0 else list(default)
    if len(flags) != len(programs):
        raise ValueError(f"default must be one flag or one per program ({len(programs)}), "
                         f"got {len(flags)}")
    kernels = []
    for i, program in enumerate(programs):
        if isinstance(program, s_tir.Schedule):
            program = program.mod
        if not isinstance(program, (tvm.tirx.PrimFunc, tvm.IRModule)):
            raise TypeError(f"program {i} is a {type(program).__name__}; expected a TIR "
                            "PrimFunc, an IRModule holding one, or a Schedule")
        _check_static_shapes(program, i)
        kernels.append(Kernel(f"program {i}", 1, program, default=bool(flags[i])))
    return kernels


def predict_programs(programs, *, model=None, target=None, default=False, for_device=None):
    """Predicted seconds (float64 array, one per program) of TIR programs: PrimFuncs (scheduled,
    default or a network's fused kernel), IRModules holding one PrimFunc, or Schedules.
    `target`: what they are compiled for (default: this machine). `default`: True (for all, or
    one flag per program) where a program is its task's default, unscheduled PrimFunc, as
    TVM's default pipeline builds it: a model with a default-program expert
    (`model.default_expert`) blends the expert in there. `for_device`: as in `load_model`. A
    program that cannot be featurized is an error naming its index."""
    import numpy as np

    from cdmpp.e2e.predict import predict_kernels
    from cdmpp.model.registry import for_device as shipped_for

    kernels = _programs_as_kernels(programs, default)  # bad input fails before a model loads
    if target is None or model is None:
        from cdmpp.device import local_device

        device = local_device()
        if target is None and for_device is None:  # for this machine: say if another's
            _note_other_device(model, device)
        target = device.target if target is None else target
        model = shipped_for(device) if model is None else model
    estimator = load_model(model, for_device=for_device)
    seconds = predict_kernels(estimator, kernels, target)
    return np.array([seconds[k.name] for k in kernels], dtype=np.float64)


def _note_other_device(model, device, stacklevel: int = 3) -> None:
    """Warn when `model` (a shipped name or a directory) was fitted for another device than
    `device`: its latencies are that device's. A loaded estimator carries no device to check."""
    from cdmpp.model.registry import device_mismatch

    if isinstance(model, (str, os.PathLike)):
        note = device_mismatch(model, device)
        if note:
            warnings.warn(note, stacklevel=stacklevel)


def _is_torch_module(obj) -> bool:
    torch = sys.modules.get("torch")  # a module cannot be one if torch was never imported
    return torch is not None and isinstance(obj, torch.nn.Module)


def _relax_module(network, inputs, batch):
    """(name, batch, Relax IRModule) of what `predict_network` was given."""
    from cdmpp.e2e.networks import NETWORKS

    if isinstance(network, (str, os.PathLike)):
        path = os.fspath(network)
        if path in NETWORKS:
            from cdmpp.e2e.networks import import_network

            if inputs is not None:
                raise ValueError(f"built-in network {path!r} makes its own inputs; pass "
                                 "batch= instead of inputs")
            return path, batch or 1, import_network(path, batch or 1)
        from cdmpp.programs.network_kernels import is_onnx_file

        if is_onnx_file(path) or os.path.isfile(path):
            from cdmpp.e2e.onnx_model import load_onnx

            net = load_onnx(path, batch=batch)
            return net.name, net.batch, net.mod
        raise ValueError(f"{path!r} is neither a built-in network ({', '.join(NETWORKS)}) "
                         "nor an ONNX file")
    if _is_torch_module(network):
        if inputs is None:
            raise ValueError("a torch.nn.Module needs example inputs: "
                             "predict_network(module, (x,))")
        from cdmpp.e2e.networks import import_torch

        inputs = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
        leading = getattr(inputs[0], "shape", None) if inputs else None
        runs_at = int(leading[0]) if leading is not None and len(leading) else None
        if batch is not None and batch != runs_at:
            raise ValueError(f"a torch.nn.Module runs at its example inputs' batch ({runs_at}), "
                             f"not batch={batch}: give inputs of the batch to predict")
        return type(network).__name__, runs_at, import_torch(network, inputs)
    from cdmpp.tvm_env import import_tvm

    if isinstance(network, import_tvm().IRModule):
        return "network", batch, network
    raise TypeError(f"cannot predict a {type(network).__name__}: give a torch.nn.Module with "
                    "inputs, an ONNX file, a Relax IRModule or a built-in network's name")


def predict_network(network, inputs=None, *, batch: int | None = None, model=None,
                    tuning_db=None, measure: bool = False, threads: int | None = None,
                    log=None, for_device: str | None = None, anchor_model: str | None = "auto",
                    search_sigma: float | str | None = "auto"):
    """Predict a whole network on this machine: an `E2EResult` (`predicted_s`, `kernels`
    largest first, `critical_path_kernels()`, `to_json()`; with `measure`, `measured_s` and
    `error_rel` too), as `cdmpp e2e` prints it.

    `network`: a `torch.nn.Module` with example `inputs` (exported with `torch.export`), an
    ONNX file (an open leading dimension is bound to `batch`, default 1), a Relax IRModule, or
    a built-in network's name (`cdmpp.e2e.networks.NETWORKS`, at `batch`, default 1).
    `tuning_db`: a meta_schedule database whose best records TVM applies; timed on another
    device, its timings also anchor `anchored_replay_s` with `anchor_model`, that device's
    model ("auto": the shipped one fitted for it; None: no anchoring); timed on this device,
    each tuned kernel is predicted as the fastest of the programs it timed for the kernel, the
    model off by a log-normal error of spread `search_sigma` ("auto": the shipped recipe's,
    `cdmpp.e2e.search.SEARCH_SIGMA`; None: the chosen program alone). `measure`: also
    time the network with TVM's VM here. `threads`: the threads it runs with (default: all cores).
    `log`: a callable that gets progress lines. When the model was fitted for another device, a
    warning says so: the latencies are that device's. `for_device`: as in `load_model`
    ("local": this machine, which a multi-device model such as "zen3" knows)."""
    from cdmpp.device import local_device
    from cdmpp.e2e.pipeline import run_network
    from cdmpp.model.registry import for_device as shipped_for, resolve_for_device

    if batch is not None and batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    device = local_device(threads=threads)
    spec = model
    if spec is None:
        spec = shipped_for(device)
    if for_device == "local":  # this machine, at the threads asked
        for_device = resolve_for_device("local", spec, lambda: device, threads)
    estimator = load_model(spec, for_device=for_device)
    if for_device is None:
        _note_other_device(spec, device, stacklevel=3)
    name, batch, mod = _relax_module(network, inputs, batch)
    return run_network(mod, estimator, device, name=name, batch=batch, tuning_db=tuning_db,
                       measure=measure, log=log, anchor_model=anchor_model,
                       search_sigma=search_sigma)
