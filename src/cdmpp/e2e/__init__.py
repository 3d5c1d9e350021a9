"""Whole networks: network -> kernels -> dataflow graph -> replay (dPRO-style).

    from cdmpp.device import local_device
    from cdmpp.e2e.kernels import lower_network
    from cdmpp.e2e.networks import import_network
    from cdmpp.e2e.predict import predict_network
    from cdmpp.model.registry import load_estimator

    device = local_device()
    net = lower_network(import_network("resnet18", batch=1), device.target,
                        name="resnet18", batch=1)              # fused as TVM's CPU pipeline does
    result = predict_network(load_estimator("default"), net, device=device)
    result.predicted_s, result.kernels[:5], result.critical_path_kernels()

    from cdmpp.e2e.measure import measure_network
    result = result.with_measurement(measure_network(net, device=device, kernels=True))

Modules, by the data flow:
  networks   built-in PyTorch networks (random weights) -> Relax via torch.export; ONNX import
  kernels    CPU fusion passes (+ a tuning database) -> the PrimFuncs `main` calls, and the build
  graph      Relax `main` -> frozen dataflow graph (one node per runtime call)
  replay     discrete-event replay on queues -> total, start/end per node, critical path
  overhead   the VM's per-call overhead, calibrated on this machine, cached with the device
  cold       matrix weights a network reads from memory (a probe, kept with the overhead)
  activations  activations a network's kernels read from memory (a probe, kept likewise)
  measure    the whole network (and each kernel alone) timed like the collector times kernels
  predict    features of every kernel -> estimator -> replay -> `E2EResult`
  search     a tuned kernel as the fastest of the programs its tuning database timed
  report     text table, JSON, PNG breakdown
TVM is imported lazily, inside the functions that need it.
"""
