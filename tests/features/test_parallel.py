"""`extract_each`: kernels featurized on threads give what `extract` gives one after another."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from cdmpp.features import extract
from cdmpp.features.parallel import extract_each
from cdmpp.measure.database import find_databases
from cdmpp.tvm_env import import_tvm

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "data" / "epyc-2c"
ROOTS = find_databases(SHARED if SHARED.is_dir() else ROOT / "tests" / "fixtures")


@pytest.fixture(scope="module")
def programs():
    """(programs, target): the first measured programs of a few operators (with local caches,
    padding and reductions where the data has them), each operator's default program too."""
    from cdmpp.features.programs import measured_program
    from cdmpp.measure.database import load_database

    out, target = [], None
    for root in ROOTS[:8]:
        db = load_database(root)
        workload = db.records[0].workload.mod()
        out.append(workload)
        out += [measured_program(rec, workload) for rec in db.records[:3]]
        target = db.records[0].target
    return out, target


def _same(a, b) -> bool:
    x, y = a.to_arrays(), b.to_arrays()
    return all(x[k].dtype == y[k].dtype and np.array_equal(x[k], y[k], equal_nan=True)
               for k in x)


def test_threads_give_exactly_what_extract_gives_in_order(programs):
    objs, target = programs
    one_by_one = [extract(obj, target) for obj in objs]
    on_threads = extract_each(objs, target, threads=2)
    assert len(on_threads) == len(objs) >= 12
    assert all(_same(a, b) for a, b in zip(one_by_one, on_threads))
    assert all(_same(a, b) for a, b in zip(one_by_one, extract_each(objs, target, threads=1)))


@pytest.fixture
def extracting_threads(monkeypatch):
    """The ids of the threads `extract` is called on, filled as it is."""
    import cdmpp.features

    seen, real = set(), cdmpp.features.extract

    def recording(obj, tgt):
        seen.add(threading.get_ident())
        return real(obj, tgt)

    monkeypatch.setattr(cdmpp.features, "extract", recording)
    return seen


def test_threads_really_run_them(programs, extracting_threads):
    objs, target = programs
    seen = extracting_threads
    extract_each(objs, target, threads=2)
    assert threading.get_ident() not in seen and 1 <= len(seen) <= 2


def test_an_object_that_fails_comes_back_as_its_error_in_its_place(programs):
    objs, target = programs
    mixed = [objs[0], "not a kernel", objs[1]]
    got = extract_each(mixed, target, threads=2)
    assert _same(got[0], extract(objs[0], target)) and _same(got[2], extract(objs[1], target))
    assert isinstance(got[1], TypeError) and "PrimFunc" in str(got[1])


def test_the_callers_pass_context_reaches_the_threads(programs):
    """With CompactBufferAllocation disabled by the caller, TVM's rows change for programs with
    local buffers; the threads must compute under the caller's context, not TVM's default."""
    tvm = import_tvm()
    objs, target = programs
    default = [extract(obj, target) for obj in objs]
    with tvm.transform.PassContext(disabled_pass=["s_tir.CompactBufferAllocation"]):
        one_by_one = [extract(obj, target) for obj in objs]
        on_threads = extract_each(objs, target, threads=2)
    assert any(not _same(a, b) for a, b in zip(default, one_by_one))  # the context matters
    assert all(_same(a, b) for a, b in zip(one_by_one, on_threads))


def test_a_caller_with_instruments_gets_every_extraction_on_its_own_thread(
        programs, extracting_threads):
    from tvm.ir.instrument import PassTimingInstrument

    tvm = import_tvm()
    objs, target = programs
    seen = extracting_threads
    with tvm.transform.PassContext(instruments=[PassTimingInstrument()]):
        extract_each(objs[:3], target, threads=2)
    assert seen == {threading.get_ident()}
