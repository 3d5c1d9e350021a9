"""Conversions between TVM objects and the JSON lines of a meta_schedule JSONDatabase.

Only this module (and the collector) touch TVM's serialization; everything else sees plain JSON.
"""

from __future__ import annotations

import json

from cdmpp.tvm_env import import_tvm, meta_schedule


def _json_parse():
    import tvm_ffi

    return tvm_ffi.get_global_func("ffi.json.Parse")


def _json_stringify():
    import tvm_ffi

    return tvm_ffi.get_global_func("ffi.json.Stringify")


def parse_ffi_json(obj):
    """Plain JSON (lists, dicts, numbers, strings) -> the FFI JSON objects TVM's `from_json`
    methods take."""
    return _json_parse()(json.dumps(obj))


def decode_workload(workload_json: list):
    """`[shash, encoded_mod]` -> meta_schedule `Workload`."""
    ms = meta_schedule()
    return ms.database.Workload.from_json(parse_ffi_json(workload_json))


def encode_workload(mod) -> list:
    """IRModule -> `[shash, encoded_mod]`, byte for byte as TVM's JSONDatabase writes it."""
    ms = meta_schedule()
    from tvm.s_tir.meta_schedule import _ffi_api

    workload = ms.database.Workload(mod)
    return json.loads(_json_stringify()(_ffi_api.WorkloadAsJSON(workload), None))


def to_plain_json(obj):
    """A TVM container of strings/IntImm/FloatImm (as `Trace.as_json` returns) -> plain Python."""
    tvm = import_tvm()
    if obj is None or isinstance(obj, bool):
        return obj
    if isinstance(obj, tvm.tirx.IntImm):
        return int(obj.value)
    if isinstance(obj, tvm.tirx.FloatImm):
        return float(obj.value)
    if isinstance(obj, str):
        return str(obj)
    if isinstance(obj, (int, float)):
        return obj
    if hasattr(obj, "items"):
        return {str(k): to_plain_json(v) for k, v in obj.items()}
    if hasattr(obj, "__len__"):
        return [to_plain_json(x) for x in obj]
    raise TypeError(f"cannot convert {type(obj).__name__} to JSON")


def trace_to_json(trace) -> list:
    """Trace -> JSON `[instructions, decisions]`, postprocessing instructions included."""
    return to_plain_json(trace.as_json(remove_postproc=False))


def args_info_to_json(args_info) -> list:
    from tvm.s_tir.meta_schedule import _ffi_api

    return [to_plain_json(_ffi_api.ArgInfoAsJSON(a)) for a in args_info]


def target_to_json(target) -> dict:
    return to_plain_json(target.export())


def replay_trace(mod, trace_json, *, direct: bool = True):
    """Apply a stored trace (with its postprocessing) to a workload; return the schedule.

    `direct`: replay instruction by instruction, taking recorded compute locations directly
    (`trace_replay.replay_direct`, the same module at about half the cost on convolutions),
    and use TVM's own replay where that cannot. False: always TVM's own replay."""
    import_tvm()
    from tvm import s_tir

    if direct:
        from cdmpp.measure.trace_replay import DirectReplayError, replay_direct

        try:
            return replay_direct(mod, trace_json)
        except DirectReplayError:
            pass
    sch = s_tir.Schedule(mod)
    s_tir.Trace.apply_json_to_schedule(_json_parse()(json.dumps(trace_json)), sch)
    return sch


def structural_hash(mod) -> str:
    """TVM's structural hash, as a decimal string like the workload file's."""
    import tvm_ffi

    return str(tvm_ffi.structural_hash(mod))


def structural_equal(a, b) -> bool:
    import tvm_ffi

    return bool(tvm_ffi.structural_equal(a, b))


def save_module(mod) -> str:
    """IRModule -> JSON text (to keep a measured module beside its database)."""
    tvm = import_tvm()
    return tvm.ir.save_json(mod)


def load_module(text: str):
    tvm = import_tvm()
    return tvm.ir.load_json(text)
