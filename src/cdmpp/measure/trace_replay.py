"""Replay a stored trace through the schedule's own primitives, one instruction at a time.

TVM's `Trace.apply_json_to_schedule` re-runs each sampling instruction with its recorded
decision. For `SampleComputeLocation` that still lists every legal compute-at location (a trial
compute-at at each candidate loop) before it takes the recorded one: over half of a conv2d
replay (docs/features.md). Here the recorded location is taken directly: the loop at that
index among the first consumer's loops (the list TVM's decision indexes), the root (-1:
nothing to do) or inlining (-2); `ComputeAt` / `ComputeInline` themselves refuse an illegal
location. Every other instruction calls the primitive TVM's replay calls, with the same
arguments.

Anything this module does not know (an instruction kind outside `SUPPORTED_KINDS`, a sample
without a decision, a name that was never defined, a primitive that refuses) raises
`DirectReplayError` before a wrong program can come out; `tvm_codec.replay_trace` then falls
back to TVM's replay. Every kind listed was checked against TVM's replay, by structural
equality, on all 14,844 stored traces of ../shared/data and the project's collection.
"""

from __future__ import annotations

from cdmpp.tvm_env import import_tvm


class DirectReplayError(RuntimeError):
    """The trace cannot be replayed here; TVM's own replay must be used."""


class _Location:
    """A compute location that is not a loop. Only `ComputeAt` takes it: any other primitive
    given one fails to convert it, so the trace falls back to TVM's replay."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return self.name


_ROOT, _INLINE = _Location("compute-root"), _Location("compute-inline")


def _ffi():
    import_tvm()
    from tvm.s_tir.schedule import _ffi_api

    return _ffi_api


def _value(x, rvs: dict):
    """A JSON input -> the argument: an RV by name, None, a string literal, a number, a list."""
    if isinstance(x, str):
        if x == "None":
            return None
        if len(x) >= 2 and x[0] == '"' and x[-1] == '"':
            return x[1:-1]
        try:
            return rvs[x]
        except KeyError:
            raise DirectReplayError(f"input {x!r} is not defined before it is used") from None
    if isinstance(x, list):
        return [_value(y, rvs) for y in x]
    return x


def _compute_location(F, sch, args, attrs, decision):
    if decision is None:
        raise DirectReplayError("SampleComputeLocation without a decision")
    if decision == -1:
        return [_ROOT]
    if decision == -2:
        return [_INLINE]
    consumers = F.ScheduleGetConsumers(sch, args[0])
    loops = F.ScheduleGetLoops(sch, consumers[0]) if len(consumers) else []
    if not 0 <= decision < len(loops):
        raise DirectReplayError(f"compute location {decision} is not a loop of the consumer")
    return [loops[decision]]


def _compute_at(F, sch, args, attrs, decision):
    block, loop = args
    if loop is _ROOT:
        return None
    if loop is _INLINE:
        F.ScheduleComputeInline(sch, block)
    else:
        F.ScheduleComputeAt(sch, block, loop, bool(attrs[0]), int(attrs[1]))
    return None


def _transform_layout(F, sch, args, attrs, decision):
    from tvm_ffi.serialization import from_json_graph_str

    block, index_map = args  # the index map is serialized in place of an input
    F.ScheduleTransformLayout(sch, block, attrs[0], attrs[1], from_json_graph_str(index_map),
                              attrs[2], bool(attrs[3]))


# kind -> f(F, schedule, inputs, attrs, decision) -> outputs (a sequence) or None
_KINDS = {
    "GetSBlock": lambda F, s, a, t, d: [F.ScheduleGetSBlock(s, t[0], t[1])],
    "GetLoops": lambda F, s, a, t, d: F.ScheduleGetLoops(s, a[0]),
    "GetChildBlocks": lambda F, s, a, t, d: F.ScheduleGetChildBlocks(s, a[0]),
    "GetConsumers": lambda F, s, a, t, d: F.ScheduleGetConsumers(s, a[0]),
    "GetProducers": lambda F, s, a, t, d: F.ScheduleGetProducers(s, a[0]),
    "SamplePerfectTile": lambda F, s, a, t, d: F.ScheduleSamplePerfectTile(s, a[0], t[0], t[1], d),
    "SampleCategorical": lambda F, s, a, t, d: [F.ScheduleSampleCategorical(s, t[0], t[1], d)],
    "SampleComputeLocation": _compute_location,
    "ComputeAt": _compute_at,
    "ReverseComputeAt": lambda F, s, a, t, d: F.ScheduleReverseComputeAt(
        s, a[0], a[1], bool(t[0]), int(t[1])),
    "ComputeInline": lambda F, s, a, t, d: F.ScheduleComputeInline(s, a[0]),
    "Split": lambda F, s, a, t, d: F.ScheduleSplit(s, a[0], a[1:], bool(t[0]), bool(t[1])),
    "Fuse": lambda F, s, a, t, d: [F.ScheduleFuse(s, a, bool(t[0]))],
    "Reorder": lambda F, s, a, t, d: F.ScheduleReorder(s, a),
    "Parallel": lambda F, s, a, t, d: F.ScheduleParallel(s, a[0]),
    "Vectorize": lambda F, s, a, t, d: F.ScheduleVectorize(s, a[0]),
    "Annotate": lambda F, s, a, t, d: F.ScheduleAnnotate(s, a[0], t[0], a[1]),
    "Unannotate": lambda F, s, a, t, d: F.ScheduleUnannotate(s, a[0], t[0]),
    "DecomposeReduction": lambda F, s, a, t, d: [F.ScheduleDecomposeReduction(s, a[0], a[1])],
    "CacheRead": lambda F, s, a, t, d: [F.ScheduleCacheRead(s, a[0], t[0], t[1], a[1])],
    "CacheWrite": lambda F, s, a, t, d: [F.ScheduleCacheWrite(s, a[0], t[0], t[1], a[1])],
    "RFactor": lambda F, s, a, t, d: [F.ScheduleRFactor(s, a[0], t[0])],
    "EnterPostproc": lambda F, s, a, t, d: F.ScheduleEnterPostproc(s),
    "TransformLayout": _transform_layout,
}
SUPPORTED_KINDS = frozenset(_KINDS)


def unsupported_kinds(trace_json) -> set[str]:
    """The instruction kinds of a stored trace that `replay_direct` does not handle."""
    return {inst[0] for inst in trace_json[0]} - SUPPORTED_KINDS


def replay_direct(mod, trace_json):
    """Apply a stored trace `[instructions, decisions]` (postprocessing included) to `mod`;
    return the schedule. Its own trace is not the stored one (a compute location appears as
    the `GetConsumers` / `GetLoops` that found it); its module is what TVM's replay gives.
    Raises `DirectReplayError` for anything it cannot replay exactly."""
    from tvm import s_tir

    insts, decisions = trace_json
    missing = unsupported_kinds(trace_json)
    if missing:
        raise DirectReplayError(f"instruction kinds not handled here: {sorted(missing)}")
    F = _ffi()
    decided = {int(i): d for i, d in decisions}
    sch = s_tir.Schedule(mod)
    rvs: dict = {}
    for i, (kind, inputs, attrs, outputs) in enumerate(insts):
        if kind == "TransformLayout":
            args = [_value(inputs[0], rvs), inputs[1]]
        else:
            args = [_value(x, rvs) for x in inputs]
        try:
            out = _KINDS[kind](F, sch, args, attrs, decided.get(i))
        except DirectReplayError:
            raise
        except Exception as e:  # noqa: BLE001 - TVM refused: let its own replay decide
            raise DirectReplayError(f"instruction {i} ({kind}): {type(e).__name__}: "
                                    f"{str(e).splitlines()[0] if str(e) else ''}") from e
        if outputs:
            if out is None or len(out) != len(outputs):
                raise DirectReplayError(f"instruction {i} ({kind}) gave "
                                        f"{0 if out is None else len(out)} outputs, the trace "
                                        f"names {len(outputs)}")
            rvs.update(zip(outputs, out))
    return sch
