"""TVM's per-store rows: skipping the repeated StmtSimplify gives exactly TVM's full pass list."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from cdmpp.features import tvm_rows
from cdmpp.measure.database import find_databases
from cdmpp.tvm_env import import_tvm

TARGET = {"kind": "llvm", "mcpu": "znver4", "num-cores": 2}
ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "data" / "epyc-2c"
# every operator of ../shared/data (77 families and shapes), else the repository's fixtures
ROOTS = find_databases(SHARED if SHARED.is_dir() else ROOT / "tests" / "fixtures")


def _both(obj):
    """(rows with the skip, rows of TVM's full pass list, how many StmtSimplify were skipped)."""
    sch, mod = tvm_rows.as_schedule_and_func(obj)
    with tvm_rows.skipping_repeated_simplify() as skipper:
        fast = tvm_rows.per_store_rows(sch, mod, TARGET, exact=True)  # inside: skipper applies
    exact = tvm_rows.per_store_rows(sch, mod, TARGET, exact=True)
    assert np.array_equal(tvm_rows.per_store_rows(sch, mod, TARGET), fast, equal_nan=True)
    return fast, exact, skipper.skipped


def _scheduled_records():
    """Each operator's default program and its first measured program."""
    from cdmpp.features.programs import measured_program
    from cdmpp.measure.database import load_database

    for root in ROOTS:
        db = load_database(root)
        workload = db.records[0].workload.mod()
        yield workload
        yield measured_program(db.records[0], workload)


def test_skipping_the_repeated_simplify_gives_tvms_rows_on_real_programs():
    n = 0
    for obj in _scheduled_records():
        fast, exact, skipped = _both(obj)
        assert skipped == 1
        assert fast.shape == exact.shape and np.array_equal(fast, exact, equal_nan=True)
        n += 1
    assert n >= 6


def test_the_second_simplify_runs_when_the_passes_between_changed_the_module():
    tvm = import_tvm()  # noqa: F841  (TVMScript needs TVM)
    from tvm.script import tirx as T

    @T.prim_func(s_tir=True)
    def matched(A: T.Buffer((64, 64), "float32"), B: T.Buffer((64, 64), "float32")):
        for i in range(64):
            with T.sblock("row"):
                vi = T.axis.spatial(64, i)
                T.reads(A[vi, 0:64])
                T.writes(B[vi, 0:64])
                a = T.match_buffer(A[vi, 0:64], (64,), offset_factor=1)
                b = T.match_buffer(B[vi, 0:64], (64,), offset_factor=1)
                for j in range(64):
                    b[j] = a[j] * T.float32(2)  # LowerMatchBuffer rewrites this store

    fast, exact, skipped = _both(matched)
    assert skipped == 0
    assert fast.shape == (1, 164) and np.array_equal(fast, exact, equal_nan=True)


def test_the_callers_pass_context_is_kept():
    tvm = import_tvm()

    with tvm.transform.PassContext(config={"tirx.disable_vectorize": True}, opt_level=3):
        with tvm_rows.skipping_repeated_simplify() as skipper:
            inner = tvm.transform.PassContext.current()
            assert skipper is not None and inner.opt_level == 3
            assert bool(inner.config["tirx.disable_vectorize"])
    # a caller's own instruments see every pass: nothing is skipped
    from tvm.ir.instrument import PassTimingInstrument

    with tvm.transform.PassContext(instruments=[PassTimingInstrument()]):
        with tvm_rows.skipping_repeated_simplify() as skipper:
            assert skipper is None
