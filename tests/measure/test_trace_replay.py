"""Direct trace replay gives exactly TVM's replay, or refuses and lets TVM's replay decide."""

from __future__ import annotations

import copy

import pytest

from cdmpp.measure import tvm_codec
from cdmpp.measure.database import load_database
from cdmpp.measure.trace_replay import (SUPPORTED_KINDS, DirectReplayError, replay_direct,
                                        unsupported_kinds)

# Between them, these databases use every supported instruction kind and every kind of
# compute-location decision (root, inline, a loop).
DATABASES = ("densegelu_128x768x3072", "softmax_12x128x128", "conv3x3_1x64x56x56_k64s1",
             "conv1x1_1x24x56x56_k144")


def _classes(trace_json) -> set[str]:
    """Instruction kinds of a trace, with compute-location decisions told apart."""
    insts, decisions = trace_json
    out = {inst[0] for inst in insts}
    for i, d in decisions:
        if insts[i][0] == "SampleComputeLocation":
            out.add({-1: "location:root", -2: "location:inline"}.get(d, "location:loop"))
    return out


def _records(shared_data):
    """A few records of each database, chosen so that together they use every class."""
    out, seen = [], set()
    for name in DATABASES:
        for i, rec in enumerate(load_database(shared_data / name).records):
            classes = _classes(rec.trace_json)
            if i < 2 or classes - seen:
                out.append(rec)
                seen |= classes
    return out, seen


def _equal(a, b) -> bool:
    return tvm_codec.structural_equal(a.mod, b.mod)


def test_direct_replay_gives_tvms_module_for_every_kind(shared_data):
    records, seen = _records(shared_data)
    assert SUPPORTED_KINDS | {"location:root", "location:inline", "location:loop"} <= seen
    for rec in records:
        mod = rec.workload.mod()
        assert _equal(replay_direct(mod, rec.trace_json),
                      tvm_codec.replay_trace(mod, rec.trace_json, direct=False)), \
            f"{rec.db} record {rec.record_index}"


def _conv_record(shared_data):
    for rec in load_database(shared_data / "conv3x3_1x64x56x56_k64s1").records:
        insts, decisions = rec.trace_json
        if any(insts[i][0] == "SampleComputeLocation" and d >= 0 for i, d in decisions):
            return rec
    raise AssertionError("no conv3x3 record computes a block at a loop")


def test_an_unknown_kind_falls_back_to_tvms_replay(shared_data):
    rec = _conv_record(shared_data)
    trace = copy.deepcopy(rec.trace_json)
    insts = trace[0]
    # unroll the loop the trace vectorizes last: a primitive this module does not handle
    loop = next(inst[1][0] for inst in reversed(insts) if inst[0] == "Vectorize")
    insts.append(["Unroll", [loop], [], []])
    assert unsupported_kinds(trace) == {"Unroll"}
    mod = rec.workload.mod()
    with pytest.raises(DirectReplayError, match="Unroll"):
        replay_direct(mod, trace)
    replayed = tvm_codec.replay_trace(mod, trace)
    assert _equal(replayed, tvm_codec.replay_trace(mod, trace, direct=False))
    assert not _equal(replayed, tvm_codec.replay_trace(mod, rec.trace_json))


def test_a_location_tvm_would_not_take_is_left_to_tvm(shared_data):
    """An edited decision naming a loop where the block cannot be computed: direct replay
    refuses, and `replay_trace` gives what TVM's replay makes of it."""
    rec = _conv_record(shared_data)
    mod = rec.workload.mod()
    insts, decisions = rec.trace_json
    refused = 0
    for j, (i, d) in enumerate(decisions):
        if insts[i][0] != "SampleComputeLocation":
            continue
        for other in range(-2, 10):
            trace = copy.deepcopy(rec.trace_json)
            trace[1][j][1] = other
            try:
                expected = tvm_codec.replay_trace(mod, trace, direct=False)
            except Exception:  # noqa: BLE001 - TVM cannot replay this edit either
                continue
            try:
                direct = replay_direct(mod, trace)
            except DirectReplayError:
                refused += 1
                assert _equal(tvm_codec.replay_trace(mod, trace), expected)
                continue
            assert _equal(direct, expected), f"decision {other}"
    assert refused > 0


def test_undefined_names_and_missing_decisions_are_refused(shared_data):
    rec = _conv_record(shared_data)
    mod = rec.workload.mod()
    insts, decisions = copy.deepcopy(rec.trace_json)
    first_use = next(k for k, inst in enumerate(insts) if inst[1])
    insts[first_use][1][0] = "b999"
    with pytest.raises(DirectReplayError, match="b999"):
        replay_direct(mod, [insts, decisions])
    insts, decisions = copy.deepcopy(rec.trace_json)
    at = [i for i, _ in decisions].index(
        next(i for i, inst in enumerate(insts) if inst[0] == "SampleComputeLocation"))
    with pytest.raises(DirectReplayError, match="without a decision"):
        replay_direct(mod, [insts, decisions[:at] + decisions[at + 1:]])


def test_a_root_location_used_as_a_loop_is_refused(shared_data):
    """TVM's replay hands on a root "loop"; here only ComputeAt accepts one."""
    for rec in load_database(shared_data / "softmax_12x128x128").records:
        insts, decisions = copy.deepcopy(rec.trace_json)
        at = next((i for i, d in decisions
                   if insts[i][0] == "SampleComputeLocation" and d == -1), None)
        if at is not None:
            break
    else:
        raise AssertionError("no softmax record computes a block at the root")
    insts.append(["Parallel", [insts[at][3][0]], [], []])
    with pytest.raises(DirectReplayError, match="Parallel"):
        replay_direct(rec.workload.mod(), [insts, decisions])
