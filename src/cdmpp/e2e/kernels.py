"""From a Relax network to the kernels TVM runs, and the module that runs them.

    net = lower_network(import_network("resnet18"), target)      # fusion, as TVM compiles
    for k in net.kernels: print(k.name, k.calls)                 # fused PrimFuncs + call counts
    exe = net.build()                                            # tvm.compile of the same module

The passes are the CPU backend's (`tvm.relax.backend.cpu_generic`): library dispatch, then
LegalizeOps, AnnotateTIROpPattern, FoldConstant, FuseOps, FuseTIR; with a tuning database, TVM's
`MetaScheduleApplyDatabase` then replaces every fused PrimFunc the database holds by its best
schedule (as `meta_schedule.relax_integration.compile_relax` does); untuned PrimFuncs stay as they
are. Last, `RewriteDataflowReshape` turns reshape kernels into the VM's no-copy view builtin, as
the rest of the pipeline would, so they are not counted as kernels.

`build()` compiles exactly this module (the remaining dataflow-lowering and finalization
passes, then TVM's default TIR pipeline), so what is predicted is what is measured. Note that
`tvm.compile(mod, "llvm")` on an unfused module uses another pipeline (no fusion on CPU).
"""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import dataclass, field

from cdmpp.tvm_env import import_tvm


@dataclass(frozen=True)
class Kernel:
    """One PrimFunc that `main` calls, and how often."""

    name: str  # GlobalVar name in the module
    calls: int  # call sites in `main` (each runs once per inference)
    # tvm.tirx.PrimFunc; schedule a copy (`workload_module`), never this object
    func: object = field(compare=False, repr=False)
    tuned: bool = False  # its schedule came from the tuning database
    # with a tuning database: the PrimFunc before the database was applied (the workload the
    # database knows it by); None without one
    untuned_func: object = field(default=None, compare=False, repr=False)
    # the PrimFunc as TVM's default pipeline leaves it, no schedule applied: its task's default
    # program (`ProgramRecord.is_default`), which a default-program expert joins in predicting
    default: bool = False


@dataclass(frozen=True)
class NetworkModule:
    """A Relax module after fusion: `main` + the PrimFuncs it calls."""

    mod: object = field(compare=False, repr=False)  # tvm.IRModule
    kernels: tuple[Kernel, ...]
    target: dict = field(hash=False)
    name: str = "network"
    batch: int | None = None
    tuning_db: str | None = None
    # the meta_schedule Database `tuning_db` names, opened once by `lower_network` (opening a
    # JSON database of 1,641 records takes ~5 s here); None without one
    database: object = field(default=None, compare=False, repr=False)
    # the device `tuning_db` was timed on (its device.json, else its records' target), when
    # it is a path with records; None otherwise
    database_device_id: str | None = None

    def kernel(self, name: str) -> Kernel:
        for k in self.kernels:
            if k.name == name:
                return k
        raise KeyError(f"{self.name} has no kernel {name!r}")

    def build(self):
        """The executable of this module (`tvm.compile`), for `tvm.relax.VirtualMachine`."""
        tvm = import_tvm()
        from tvm.relax.backend.cpu_generic import pipeline

        tgt = tvm.target.Target(self.target)
        rest = tvm.transform.Sequential(pipeline.dataflow_lower_passes(tgt)
                                        + pipeline.finalize_passes(tgt))
        with tgt:
            return tvm.compile(self.mod, tgt, relax_pipeline=rest)


def kernel_module(func):
    """A kernel's PrimFunc as a module of its own, entry `main`: what is built and timed alone,
    and (copied) the workload meta_schedule knows it by."""
    tvm = import_tvm()
    return tvm.IRModule({"main": func.with_attr("global_symbol", "main")})


def workload_module(kernel: Kernel, untuned: bool = False):
    """The meta_schedule workload of a kernel (as `relax_integration.extract_tasks` makes it):
    a tuning record of this IRModule in the database replaces the kernel. A deep copy: a
    `s_tir.Schedule` edits the statements of the module it is given in place, which would
    otherwise change `kernel.func` (they share them). `untuned`: the kernel's PrimFunc from
    before the tuning database was applied (`Kernel.untuned_func`)."""
    tvm = import_tvm()
    func = kernel.func
    if untuned:
        if kernel.untuned_func is None:
            raise ValueError(f"kernel {kernel.name} was lowered without a tuning database")
        func = kernel.untuned_func
    return tvm.ir.load_json(tvm.ir.save_json(kernel_module(func)))


def database_latencies(net: "NetworkModule", tuning_db=None) -> dict[str, float]:
    """{kernel: seconds per call} that the tuning database records for the kernels whose
    workload it holds: its best record for the workload (the one TVM applies), with cdmpp's
    label statistic, the minimum of the record's `run_secs` (docs/measurement.md). Kernels the
    database does not hold, or whose best record has no valid timing, are left out.
    `tuning_db`: by default the database the network was lowered with."""
    from cdmpp.types import check_run_secs

    tvm = import_tvm()
    database = open_tuning_database(tuning_db) if tuning_db is not None else net.database
    if database is None:
        raise ValueError(f"{net.name} was lowered without a tuning database")
    target = tvm.target.Target(net.target)
    out = {}
    for k in net.kernels:  # workload_module raises for a kernel lowered without a database
        record = database.query_tuning_record(workload_module(k, untuned=True), target, "main")
        if record is None or record.run_secs is None:
            continue
        secs = [float(x) for x in record.run_secs]
        if check_run_secs(secs) is None:
            out[k.name] = min(secs)
    return out


def open_tuning_database(tuning_db):
    """None, a meta_schedule Database, or the path of a TVM JSON database."""
    return read_tuning_database(tuning_db)[0]


def read_tuning_database(tuning_db) -> tuple[object, str | None]:
    """(`open_tuning_database(tuning_db)`, the device a path's records were timed on, or None
    for a Database object or a database without records), reading the files once."""
    from pathlib import Path

    from cdmpp.tvm_env import meta_schedule

    if tuning_db is None or not isinstance(tuning_db, (str, os.PathLike)):
        return tuning_db, None
    from cdmpp.features.samples import device_id_of
    from cdmpp.measure.database import load_database

    path = Path(tuning_db)
    if not (path / "database_workload.json").is_file():
        raise FileNotFoundError(f"{path} is not a TVM JSON database (no database_workload.json)")
    # TVM's own reader crashes the process on a blank line and names no line on a broken one:
    # read the lines with ours first. Failed timings (TVM's 1e10 marker) are lines TVM reads.
    loaded = load_database(path, strict=False)
    timed_on = device_id_of(path, loaded.records[0].target) if loaded.records else None
    unreadable = [s for s in loaded.skipped if not s.reason.startswith("bad timing")]
    if not unreadable:
        return meta_schedule().database.JSONDatabase(work_dir=str(path)), timed_on
    n = len(unreadable)
    warnings.warn(f"{path}: {n} line{'s' * (n != 1)} cannot be read and {'are' if n != 1 else 'is'}"
                  f" left out of the tuning database (first: {unreadable[0]}); `cdmpp db "
                  f"{path}` lists them", stacklevel=3)
    return _readable_lines_database(path, {(s.file, s.line) for s in unreadable}), timed_on


def _readable_lines_database(path, unreadable: set):
    """A meta_schedule MemoryDatabase of the lines of JSON database `path` that are not in
    `unreadable` ((file, 1-based line) pairs), workload indices kept as the file has them."""
    from cdmpp.measure.database import RECORD_FILE, WORKLOAD_FILE
    from cdmpp.measure.tvm_codec import decode_workload, parse_ffi_json
    from cdmpp.tvm_env import meta_schedule

    ms = meta_schedule()
    database = ms.database.MemoryDatabase()
    wl_file, rec_file = path / WORKLOAD_FILE, path / RECORD_FILE
    workloads = {}
    for i, text in enumerate(wl_file.read_text(encoding="utf-8").splitlines()):
        if (str(wl_file), i + 1) not in unreadable and text.strip():
            workloads[i] = database.commit_workload(decode_workload(json.loads(text)).mod)
    for i, text in enumerate(rec_file.read_text(encoding="utf-8").splitlines()):
        if (str(rec_file), i + 1) in unreadable or not text.strip():
            continue
        index, record = json.loads(text)
        database.commit_tuning_record(
            ms.database.TuningRecord.from_json(parse_ffi_json(record), workloads[index]))
    return database


def _passes(target):
    tvm = import_tvm()
    from tvm.relax.backend.cpu_generic import pipeline

    tgt = tvm.target.Target(target)
    return tgt, tvm.transform.Sequential(pipeline.library_dispatch_passes(tgt)
                                         + pipeline.legalize_passes(tgt))


def fuse(mod, target, tuning_db=None):
    """`mod` (Relax, unfused) after the CPU backend's fusion passes (and the database)."""
    return _fuse(mod, target, tuning_db)[0]


def _fuse(mod, target, tuning_db=None):
    """(fused module, names of the PrimFuncs the database replaced, {name: PrimFunc before
    the database was applied} (empty without a database))."""
    import_tvm()
    from tvm import relax

    from cdmpp.measure.tvm_codec import structural_equal

    tgt, seq = _passes(target)
    replaced: set = set()
    before: dict = {}
    with tgt:  # the caller's PassContext, as tvm.compile runs its pipeline
        mod = seq(mod)
        database = open_tuning_database(tuning_db)
        if database is not None:
            before = {gv.name_hint: f for gv, f in mod.functions.items()}
            with database:
                mod = relax.transform.MetaScheduleApplyDatabase()(mod)
            replaced = {gv.name_hint for gv, f in mod.functions.items()
                        if not structural_equal(f, before.get(gv.name_hint))}
        mod = relax.transform.RewriteDataflowReshape()(mod)
    return mod, replaced, before


def call_counts(mod) -> dict[str, int]:
    """{PrimFunc name: call sites in `main`} for every `call_tir` / `call_tir_inplace`."""
    from cdmpp.e2e.graph import from_relax

    counts: dict[str, int] = {}
    for node in from_relax(mod).nodes:
        if node.kind == "call_tir":
            counts[node.kernel] = counts.get(node.kernel, 0) + 1
    return counts


def target_dict(target) -> dict:
    """A target (dict, string or `tvm.target.Target`) as the JSON-friendly dict of `Device`."""
    import json

    if isinstance(target, dict):
        return target
    tvm = import_tvm()
    from cdmpp.device import _jsonable

    return json.loads(json.dumps(_jsonable(tvm.target.Target(target).export())))


def lower_network(mod, target, *, tuning_db=None, name: str = "network",
                  batch: int | None = None) -> NetworkModule:
    """The fused network and its kernels (PrimFuncs that `main` calls, in first-call order)."""
    tvm = import_tvm()

    # opened once: database_latencies reads it too
    database, timed_on = read_tuning_database(tuning_db)
    fused, replaced, before = _fuse(mod, target, database)
    funcs = {gv.name_hint: f for gv, f in fused.functions.items()
             if isinstance(f, tvm.tirx.PrimFunc)}
    kernels = tuple(Kernel(kname, calls, funcs[kname], kname in replaced, before.get(kname),
                           default=kname not in replaced)
                    for kname, calls in call_counts(fused).items())
    db_name = None if tuning_db is None else (
        str(tuning_db) if isinstance(tuning_db, (str, os.PathLike)) else type(tuning_db).__name__)
    return NetworkModule(fused, kernels, target_dict(target), name, batch, db_name, database,
                         timed_on)
