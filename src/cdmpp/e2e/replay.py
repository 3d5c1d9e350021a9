"""dPRO-style replay of a dataflow graph: when does each call start and end, and in total.

    result = replay(graph, {"fused_conv2d_add_relu": 1.2e-3, ...},
                    overhead=CallOverhead(per_call_s=4e-6))  # or e2e.overhead.load_overhead()
    result.total_s, result.critical_path, result.breakdown

Model (dPRO, MLSys'22, simplified to inference on one host):
- every node lasts its kernel's time (per call) + the per-call overhead of its kind (the VM's
  dispatch: `Overhead.per_call_s` for kernels, `per_builtin_s` for builtins such as a reshape
  view, which have no kernel time) + its weights read from memory (`Node.weight_bytes` x
  `CallOverhead.per_weight_byte_s`, or `per_tuned_weight_byte_s` for a kernel in
  `tuned_kernels`: `e2e.cold`) + its activations read from memory (`Node.activation_bytes` x
  `CallOverhead.per_activation_byte_s`: `e2e.activations`);
- every node runs on one queue (a device or stream): all CPU nodes share queue "cpu" unless
  `queue_of` says otherwise; a queue runs one node at a time, in a fixed order: the graph's
  topological order with ties broken by `priority`, then by program order (as the VM executes);
- a node starts when its queue is free and all its inputs have ended;
- the run ends `Overhead.per_invoke_s` (entering and leaving `main`) after the last node.
Because queues are FIFO in that fixed order, computing start/end times node by node in that
order is an exact discrete-event simulation.

The critical path is traced back from the last node to end: at each step, the predecessor
(an input, or the previous node on the same queue) whose end time set this node's start.

A kernel node without a duration is an error naming the kernel: never a silent zero.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping

from cdmpp.e2e.graph import KERNEL_KINDS, Graph

DEFAULT_QUEUE = "cpu"


@dataclass(frozen=True)
class CallOverhead:
    """Fixed costs of the runtime around kernels, in seconds (see `e2e.overhead`)."""

    per_call_s: float = 0.0  # dispatch of one kernel call by the VM (incl. output allocation)
    per_builtin_s: float = 0.0  # one builtin without a kernel (e.g. a reshape view)
    per_invoke_s: float = 0.0  # entering and leaving `main` once
    per_weight_byte_s: float = 0.0  # a weight byte read from memory, not cache (e2e.cold)
    # ... by a kernel whose schedule came from a tuning database (its own probe, e2e.cold)
    per_tuned_weight_byte_s: float = 0.0
    tuned_kernels: frozenset[str] = frozenset()
    # an activation byte a kernel reads, passed through memory by the kernels before it
    # (e2e.activations)
    per_activation_byte_s: float = 0.0

    def for_kind(self, kind: str) -> float:
        return self.per_call_s if kind in KERNEL_KINDS else self.per_builtin_s

    def weights_s(self, node) -> float:
        """The node's weights read from memory."""
        tuned = node.kernel in self.tuned_kernels
        return node.weight_bytes * (self.per_tuned_weight_byte_s if tuned
                                    else self.per_weight_byte_s)

    def activations_s(self, node) -> float:
        """The node's activations read from memory."""
        return node.activation_bytes * self.per_activation_byte_s

    def for_node(self, node) -> float:
        """Dispatch of the node's kind + its weights and activations read from memory."""
        return self.for_kind(node.kind) + self.weights_s(node) + self.activations_s(node)

    def without_weights(self) -> "CallOverhead":
        """The same overhead with weights read from cache."""
        return replace(self, per_weight_byte_s=0.0, per_tuned_weight_byte_s=0.0)

    def from_cache(self) -> "CallOverhead":
        """The same overhead with weights and activations read from cache: for kernel times
        taken inside the network, which hold both already."""
        return replace(self.without_weights(), per_activation_byte_s=0.0)


@dataclass(frozen=True)
class KernelTime:
    """One kernel's share of a replay."""

    name: str
    kind: str  # graph node kind (call_tir, builtin, ...)
    calls: int
    kernel_s: float  # one call, kernel only
    # one call, runtime overhead (+ weights and activations from memory), mean over calls
    overhead_s: float
    total_s: float  # calls * (kernel_s + overhead_s)
    share: float  # of the sum over all kernels and builtins


@dataclass(frozen=True)
class ReplayResult:
    total_s: float  # end of the last node + per_invoke_s
    start_s: tuple[float, ...]  # per node id
    end_s: tuple[float, ...]  # per node id
    queue: tuple[str, ...]  # per node id
    order: tuple[int, ...]  # the order nodes were issued in
    critical_path: tuple[int, ...]  # node ids, first to last
    breakdown: tuple[KernelTime, ...]  # by total time, largest first
    overhead: CallOverhead

    def duration_s(self, node_id: int) -> float:
        return self.end_s[node_id] - self.start_s[node_id]

    def busy_s(self) -> dict[str, float]:
        """Time each queue spends running nodes."""
        out: dict[str, float] = {}
        for i, q in enumerate(self.queue):
            out[q] = out.get(q, 0.0) + self.duration_s(i)
        return out


class MissingDurationError(KeyError):
    """A kernel of the graph has no duration."""

    def __str__(self) -> str:  # KeyError quotes its message; this one reads as a sentence
        return str(self.args[0])


def _check_durations(graph: Graph, kernel_s: Mapping[str, float]) -> None:
    missing: dict[str, int] = {}
    for node in graph.nodes:
        if node.kind in KERNEL_KINDS and node.kernel not in kernel_s:
            missing[node.kernel] = missing.get(node.kernel, 0) + 1
    if missing:
        names = ", ".join(f"{k} ({n} call{'s' * (n > 1)})" for k, n in missing.items())
        raise MissingDurationError(f"no duration for kernel(s): {names}")
    for name, value in kernel_s.items():
        if not (value >= 0.0 and value < float("inf")):
            raise ValueError(f"kernel {name}: duration must be finite and >= 0, got {value!r}")


def replay(graph: Graph, kernel_s: Mapping[str, float], *,
           overhead: CallOverhead | None = None,
           queue_of: Mapping[int, str] | None = None,
           priority: Mapping[int, float] | None = None) -> ReplayResult:
    """Replay `graph` with `kernel_s[kernel]` seconds per call of each kernel.

    `queue_of`: node id -> queue name (default: every node on "cpu"). `priority`: node id ->
    number, lower runs first among nodes ready at the same point of the order (default: program
    order). Builtins need no entry in `kernel_s` (they cost only `overhead.per_builtin_s`).
    """
    overhead = overhead or CallOverhead()
    _check_durations(graph, kernel_s)
    n = len(graph.nodes)
    queue = tuple((queue_of or {}).get(i, DEFAULT_QUEUE) for i in range(n))
    order = graph.topological_order(priority)
    start, end = [0.0] * n, [0.0] * n
    prev_on_queue: list[int | None] = [None] * n
    last: dict[str, int] = {}  # queue -> last node issued on it
    for i in order:
        node = graph.nodes[i]
        q = queue[i]
        ready = max((end[j] for j in node.inputs), default=0.0)
        if q in last:
            prev_on_queue[i] = last[q]
            ready = max(ready, end[last[q]])
        duration = overhead.for_node(node) + (
            float(kernel_s[node.kernel]) if node.kind in KERNEL_KINDS else 0.0)
        start[i], end[i] = ready, ready + duration
        last[q] = i
    finish = max(end, default=0.0)
    return ReplayResult(
        total_s=finish + overhead.per_invoke_s, start_s=tuple(start), end_s=tuple(end),
        queue=queue, order=order,
        critical_path=_critical_path(graph, start, end, prev_on_queue),
        breakdown=_breakdown(graph, kernel_s, overhead), overhead=overhead)


def _critical_path(graph: Graph, start, end, prev_on_queue) -> tuple[int, ...]:
    if not graph.nodes:
        return ()
    # the last node to end; among equal ends, the one latest in program order
    i = max(range(len(end)), key=lambda k: (end[k], k))
    path = [i]
    while True:
        preds = list(graph.nodes[i].inputs)
        if prev_on_queue[i] is not None:
            preds.append(prev_on_queue[i])
        binding = [j for j in preds if end[j] == start[i]]
        if not binding:
            break
        i = max(binding, key=lambda k: (end[k] - start[k], k))  # ties: longest, then latest
        path.append(i)
    return tuple(reversed(path))


def _breakdown(graph: Graph, kernel_s, overhead: CallOverhead) -> tuple[KernelTime, ...]:
    calls: dict[tuple[str, str], int] = {}
    extra_s: dict[tuple[str, str], float] = {}  # all calls' overhead
    for node in graph.nodes:
        key = (node.kernel, node.kind)
        calls[key] = calls.get(key, 0) + 1
        extra_s[key] = extra_s.get(key, 0.0) + overhead.for_node(node)
    rows = []
    for (name, kind), count in calls.items():
        k = float(kernel_s[name]) if kind in KERNEL_KINDS else 0.0
        o = extra_s[(name, kind)] / count
        rows.append((name, kind, count, k, o, count * k + extra_s[(name, kind)]))
    total = sum(r[-1] for r in rows) or 1.0
    rows.sort(key=lambda r: -r[-1])  # stable: ties keep first-call order
    return tuple(KernelTime(*r, share=r[-1] / total) for r in rows)
