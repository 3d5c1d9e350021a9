"""Replay of hand-made graphs: the times can be computed by hand."""

from __future__ import annotations

import pytest

from cdmpp.e2e.graph import Graph, Node
from cdmpp.e2e.replay import CallOverhead, MissingDurationError, replay


def chain(*kernels: str) -> Graph:
    return Graph(tuple(Node(i, k, (i - 1,) if i else ()) for i, k in enumerate(kernels)))


def diamond() -> Graph:
    """a -> (b, c) -> d: b and c are independent."""
    return Graph((Node(0, "a"), Node(1, "b", (0,)), Node(2, "c", (0,)), Node(3, "d", (1, 2))))


DURATIONS = {"a": 1.0, "b": 2.0, "c": 3.0, "d": 0.5}


def test_sequential_chain_is_the_sum_plus_overheads():
    g = chain("a", "b", "b", "d")
    o = CallOverhead(per_call_s=0.25, per_invoke_s=0.125)
    r = replay(g, DURATIONS, overhead=o)
    # (1 + .25) + 2 * (2 + .25) + (.5 + .25) + .125
    assert r.total_s == pytest.approx(6.625)
    assert r.start_s == pytest.approx((0.0, 1.25, 3.5, 5.75))
    assert r.end_s == pytest.approx((1.25, 3.5, 5.75, 6.5))
    assert r.critical_path == (0, 1, 2, 3)
    by_name = {k.name: k for k in r.breakdown}
    assert by_name["b"].calls == 2 and by_name["b"].total_s == pytest.approx(4.5)
    assert r.breakdown[0].name == "b"  # largest total first
    assert sum(k.share for k in r.breakdown) == pytest.approx(1.0)


def test_one_queue_serializes_parallel_branches():
    r = replay(diamond(), DURATIONS)
    assert r.total_s == pytest.approx(1 + 2 + 3 + 0.5)
    assert r.order == (0, 1, 2, 3)  # ties in program order
    assert r.critical_path == (0, 1, 2, 3)  # c waits for b on the queue


def test_parallel_branches_on_two_queues_overlap():
    queues = {2: "stream1"}  # c on its own queue, the rest on "cpu"
    r = replay(diamond(), DURATIONS, queue_of=queues)
    # a: 0-1; b: 1-3 (cpu) || c: 1-4 (stream1); d: max(3, 4) = 4 -> 4.5
    assert r.start_s == pytest.approx((0.0, 1.0, 1.0, 4.0))
    assert r.total_s == pytest.approx(4.5)
    assert r.critical_path == (0, 2, 3)  # through the longer branch
    assert r.busy_s() == pytest.approx({"cpu": 3.5, "stream1": 3.0})
    assert r.queue == ("cpu", "cpu", "stream1", "cpu")


def test_priority_reorders_ready_nodes_on_a_queue():
    r = replay(diamond(), DURATIONS, priority={2: -1})  # c before b
    assert r.order == (0, 2, 1, 3)
    assert r.start_s[2] == pytest.approx(1.0) and r.start_s[1] == pytest.approx(4.0)
    assert r.total_s == pytest.approx(6.5)


def test_a_queue_waits_for_inputs_from_another_queue():
    g = Graph((Node(0, "c"), Node(1, "a"), Node(2, "b", (0,))))
    r = replay(g, DURATIONS, queue_of={0: "gpu"})
    # a runs at 0 on cpu; b needs c (gpu, 0-3) and the cpu (free at 1): starts at 3
    assert r.start_s == pytest.approx((0.0, 0.0, 3.0))
    assert r.critical_path == (0, 2)


def test_missing_kernel_duration_is_an_error_naming_it():
    g = chain("a", "mystery_kernel", "mystery_kernel")
    with pytest.raises(MissingDurationError, match=r"mystery_kernel \(2 calls\)"):
        replay(g, {"a": 1.0})
    with pytest.raises(ValueError, match="finite"):
        replay(chain("a"), {"a": float("nan")})


def test_builtins_cost_only_their_overhead():
    g = Graph((Node(0, "a"), Node(1, "relax.reshape", (0,), "builtin"), Node(2, "d", (1,))))
    r = replay(g, {"a": 1.0, "d": 0.5}, overhead=CallOverhead(per_call_s=0.1, per_builtin_s=0.01))
    assert r.total_s == pytest.approx(1.1 + 0.01 + 0.6)
    assert {k.name: k.kind for k in r.breakdown}["relax.reshape"] == "builtin"


def test_replay_returns_a_new_object_and_keeps_the_graph():
    g = diamond()
    before = g.nodes
    r1, r2 = replay(g, DURATIONS), replay(g, {**DURATIONS, "c": 10.0})
    assert g.nodes == before and r1.total_s != r2.total_s


def test_graph_checks_ids_inputs_and_cycles():
    with pytest.raises(ValueError, match="ids"):
        Graph((Node(1, "a"),))
    with pytest.raises(ValueError, match="unknown node"):
        Graph((Node(0, "a", (5,)),))
    with pytest.raises(ValueError, match="cycle"):
        Graph((Node(0, "a", (1,)), Node(1, "b", (0,)))).topological_order()
    with pytest.raises(ValueError, match="kind"):
        Node(0, "a", (), "kernel")
    assert replay(Graph(()), {}).total_s == 0.0


def test_weights_from_memory_lengthen_each_call_by_their_bytes():
    g = Graph((Node(0, "a", weight_bytes=1000), Node(1, "b", (0,)), Node(2, "a", (1,),
                                                                         weight_bytes=3000)))
    o = CallOverhead(per_call_s=0.5, per_weight_byte_s=1e-3)
    r = replay(g, {"a": 1.0, "b": 2.0}, overhead=o)
    assert [r.duration_s(i) for i in range(3)] == [1.0 + 0.5 + 1.0, 2.0 + 0.5, 1.0 + 0.5 + 3.0]
    assert r.total_s == pytest.approx(2.5 + 2.5 + 4.5)
    rows = {k.name: k for k in r.breakdown}
    assert rows["a"].overhead_s == pytest.approx(0.5 + 2.0)  # mean over its two calls
    assert rows["a"].total_s == pytest.approx(2.5 + 4.5)
    assert replay(g, {"a": 1.0, "b": 2.0}, overhead=CallOverhead(per_call_s=0.5)).total_s == 5.5
    assert replay(g, {"a": 1.0, "b": 2.0}, overhead=o.without_weights()).total_s == 5.5


def test_a_tuned_kernel_reads_its_weights_at_the_tuned_rate():
    g = Graph((Node(0, "a", weight_bytes=1000), Node(1, "b", (0,), weight_bytes=2000)))
    o = CallOverhead(per_weight_byte_s=1e-3, per_tuned_weight_byte_s=4e-3,
                     tuned_kernels=frozenset({"b"}))
    r = replay(g, {"a": 1.0, "b": 2.0}, overhead=o)
    assert [r.duration_s(i) for i in range(2)] == [1.0 + 1.0, 2.0 + 8.0]
    assert [o.weights_s(n) for n in g.nodes] == [1.0, 8.0]


def test_activations_from_memory_lengthen_each_call_by_their_bytes():
    g = Graph((Node(0, "a", activation_bytes=100), Node(1, "b", (0,), weight_bytes=1000,
                                                        activation_bytes=400)))
    o = CallOverhead(per_call_s=0.5, per_weight_byte_s=1e-3, per_activation_byte_s=1e-2)
    r = replay(g, {"a": 1.0, "b": 2.0}, overhead=o)
    assert [r.duration_s(i) for i in range(2)] == pytest.approx([1.0 + 0.5 + 1.0,
                                                                 2.0 + 0.5 + 1.0 + 4.0])
    assert [o.activations_s(n) for n in g.nodes] == pytest.approx([1.0, 4.0])
    # kernel times taken inside the network hold both terms already
    assert replay(g, {"a": 1.0, "b": 2.0}, overhead=o.from_cache()).total_s == 4.0
    assert o.without_weights().per_activation_byte_s == 1e-2  # only the weights' term goes
