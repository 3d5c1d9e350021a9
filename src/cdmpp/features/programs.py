"""The program that was measured, rebuilt from its database record, or a clear refusal.

A record's trace does not always replay to the module that was timed. The collector keeps the
structural hash of the measured module (and the module itself when replay differs); here we
rebuild the module and check it against that hash, so features are never computed from a
different program than the one timed.
"""

from __future__ import annotations

from pathlib import Path

from cdmpp.measure import tvm_codec


class UnfaithfulRecord(ValueError):
    """The record's program cannot be rebuilt as it was measured."""


def measured_program(record, workload_mod=None):
    """The program that `record` timed: a `Schedule` when its trace was replayed (what the
    feature extractor takes cheapest), else the IRModule. Imports TVM."""
    meta = record.meta
    program = None
    if meta.get("measured_module"):
        text = (Path(record.db) / meta["measured_module"]).read_text()
        mod = tvm_codec.load_module(text)
    else:
        mod = workload_mod if workload_mod is not None else record.workload.mod()
        insts = record.trace_json[0] if record.trace_json else []
        if insts:
            try:
                program = tvm_codec.replay_trace(mod, record.trace_json)
            except Exception as e:  # noqa: BLE001 - any replay error makes the record unusable
                raise UnfaithfulRecord(f"its trace does not replay: {type(e).__name__}: {e}")
            mod = program.mod
    expected = meta.get("mod_shash")
    if expected is not None and tvm_codec.structural_hash(mod) != expected:
        raise UnfaithfulRecord("replaying its trace gives a different module than the one "
                               f"measured (structural hash {expected})")
    return program if program is not None else mod
