"""The kernels TVM actually runs for a network, as collector tasks.

Catalog tasks are single operators (TOPI computes); a network built by TVM runs *fused*
PrimFuncs (conv2d + bias + relu in one kernel, reshapes folded in...). To predict a whole
network well, those exact kernels belong in the training data, and measuring their sampled
schedules also gives a tuning database for that network (its workloads are the ones
`MetaScheduleApplyDatabase` looks up).

    tasks = kernel_tasks(["resnet18"], batches=(1, 4), target=device.target)
    collect(CollectConfig(out="kernels"), tasks)

A network is a built-in name or a path to an ONNX file (`*.onnx`, named by its stem); an ONNX
file's open batch dimension is bound to each batch, and batch None takes the file as it is
(open dimensions bound to 1).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_NUMBER_SUFFIX = re.compile(r"\d+$")


@dataclass(frozen=True)
class KernelTask:
    """A fused kernel of one or more networks: what the collector needs of a task."""

    name: str  # "<kernel family>_<8 hex of its structural hash>", stable across runs
    op: str  # the kernel family: its name in the module without the numbering suffix
    networks: tuple[str, ...]  # sorted network names
    func: object = field(compare=False, repr=False)  # tvm.tirx.PrimFunc
    params: tuple = ()

    def prim_func(self):
        """A deep copy, as catalog tasks build a fresh PrimFunc per call: a schedule edits the
        statements of the module it is given in place."""
        from cdmpp.tvm_env import import_tvm

        tvm = import_tvm()
        return tvm.ir.load_json(tvm.ir.save_json(self.func))


def kernel_family(kernel_name: str) -> str:
    """`fused_conv2d_add_relu3` -> `fused_conv2d_add_relu` (TVM numbers repeated names)."""
    return _NUMBER_SUFFIX.sub("", kernel_name).rstrip("_") or kernel_name


def is_onnx_file(network: str) -> bool:
    return str(network).lower().endswith(".onnx")


def network_module(network: str, batch: int | None):
    """(name, Relax IRModule) of a built-in network or an ONNX file at `batch` (None: a
    built-in's batch 1, an ONNX file as it is)."""
    if is_onnx_file(network):
        from cdmpp.e2e.onnx_model import load_onnx

        net = load_onnx(network, batch=batch)
        return net.name, net.mod
    from cdmpp.e2e.networks import import_network

    return network, import_network(network, 1 if batch is None else batch)


def kernel_tasks(networks, batches=(1,), target=None, log=None) -> list[KernelTask]:
    """The distinct kernels of `networks` at `batches` (structurally equal kernels of several
    networks or batches are one task listing every network), in first-seen order."""
    import tvm_ffi

    from cdmpp.e2e.kernels import lower_network

    found: dict[int, dict] = {}
    for network in networks:
        for batch in batches:
            if log:
                log(f"lowering {network}" + ("" if batch is None else f" at batch {batch}"))
            name, mod = network_module(network, batch)
            net = lower_network(mod, target, name=name, batch=batch)
            for k in net.kernels:
                # hashed as the collector's workload: same name, so equal kernels of two
                # networks (numbered differently there) are one task
                h = int(tvm_ffi.structural_hash(k.func.with_attr("global_symbol", "main")))
                entry = found.setdefault(h, {"kernel": k, "networks": set()})
                entry["networks"].add(name)
    tasks = []
    for h, entry in found.items():
        family = kernel_family(entry["kernel"].name)
        tasks.append(KernelTask(f"{family}_{h & 0xFFFFFFFF:08x}", family,
                                tuple(sorted(entry["networks"])), entry["kernel"].func))
    return tasks
