"""The Python API (`cdmpp.load_model`, `cdmpp.predict_programs`, `cdmpp.predict_network`)."""

from __future__ import annotations

import subprocess
import sys
import warnings

import numpy as np
import pytest

import cdmpp
from cdmpp.features import N_LEAF_FEATURES

PER_KERNEL_S = 1e-4


class FixedEstimator:
    """Predicts PER_KERNEL_S for every program (no trained model needed)."""

    def predict(self, programs):
        assert all(f.ndim == 2 and f.shape[1] == N_LEAF_FEATURES for f in programs.leaf_features)
        return np.full(len(programs), PER_KERNEL_S)


def test_import_cdmpp_exposes_the_api_and_imports_nothing_heavy():
    code = ("import sys, cdmpp; assert all(callable(getattr(cdmpp, n)) for n in cdmpp.__all__);"
            "heavy = [m for m in ('tvm', 'torch', 'numpy') if m in sys.modules];"
            "assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.fixture(scope="module")
def sample_programs():
    """The first four records of the shipped sample data, as the programs that were measured."""
    from cdmpp.features.programs import measured_program
    from cdmpp.measure.database import load_database
    from cdmpp.predict import sample_databases

    (root,) = sample_databases()
    db = load_database(root)
    records = db.records[:4]
    return root, records, [measured_program(r, r.workload.mod()) for r in records]


def test_predict_programs_gives_what_predict_gives_for_the_same_records(sample_programs):
    from cdmpp.model.registry import load_estimator
    from cdmpp.predict import predict_databases

    root, records, programs = sample_programs
    got = cdmpp.predict_programs(programs, model="default", target=records[0].target)
    by_index = {p.record_index: p.predicted_latency_s
                for p in predict_databases(load_estimator("default"), [root]).predictions}
    assert got.dtype == np.float64 and got.shape == (4,)
    # the database path predicts the 28 sample records together, this one 4: on some CPUs
    # (seen on an Intel Xeon, AVX-512) float32 kernels round differently for another batch
    # shape, by ~2e-7 relative; anything beyond float32 rounding is a real difference
    np.testing.assert_allclose(got, [by_index[r.record_index] for r in records], rtol=1e-6)


def test_one_program_a_schedule_and_a_primfunc_are_the_same_program(sample_programs):
    from tvm import s_tir

    _, records, programs = sample_programs
    mod = programs[0].mod if isinstance(programs[0], s_tir.Schedule) else programs[0]
    func = next(iter(mod.functions.values()))
    model, target = cdmpp.load_model("default"), records[0].target
    assert cdmpp.load_model(model) is model  # an estimator is taken as is
    (expected,) = cdmpp.predict_programs([programs[0]], model=model, target=target)
    for given in (mod, func, s_tir.Schedule(mod)):
        got = cdmpp.predict_programs(given, model=model, target=target)
        np.testing.assert_array_equal(got, [expected])


def test_a_bad_program_is_named_before_any_model_is_loaded(sample_programs):
    _, _, programs = sample_programs
    with pytest.raises(TypeError, match="program 1 is a str"):
        cdmpp.predict_programs([programs[0], "not a program"], model="/nonexistent/model")
    with pytest.raises(TypeError, match="model must be a name, a directory or an estimator"):
        cdmpp.load_model(3)
    from cdmpp.tvm_env import import_tvm

    import_tvm()
    from tvm import te

    n = te.var("n")
    a = te.placeholder((n, 64), name="A")
    symbolic = te.create_prim_func([a, te.compute((n, 64), lambda i, j: a[i, j] * 2.0)])
    with pytest.raises(ValueError, match=r"program 1 has a symbolic shape \(A: \[n, 64\]\)"):
        cdmpp.predict_programs([programs[0], symbolic], model="/nonexistent/model")


@pytest.mark.parametrize("form", ["torch", "builtin", "onnx"])
def test_predict_network_takes_a_module_a_name_or_an_onnx_file(form, stored_overhead, tmp_path,
                                                                tiny_onnx):
    import torch

    # two Linear layers (+ ReLU fused into the first) in every form: two kernels, one call each
    if form == "torch":
        module = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                     torch.nn.Linear(32, 8)).eval()
        result = cdmpp.predict_network(module, (torch.randn(2, 16),), model=FixedEstimator())
        assert (result.network, result.batch) == ("Sequential", 2)  # its inputs' batch
    elif form == "builtin":
        result = cdmpp.predict_network("tiny_mlp", batch=2, model=FixedEstimator())
        assert (result.network, result.batch) == ("tiny_mlp", 2)
    else:
        tiny_onnx(tmp_path / "mlp.onnx", batch="N")
        result = cdmpp.predict_network(tmp_path / "mlp.onnx", batch=3, model=FixedEstimator())
        assert (result.network, result.batch) == ("mlp", 3)
    assert len(result.kernels) == 2 and result.measured_s is None
    # the stored overhead: 1 us per call and per invoke
    assert result.predicted_s == pytest.approx(2 * (PER_KERNEL_S + 1e-6) + 1e-6)


def test_predict_network_refuses_what_it_cannot_import(stored_overhead):
    import torch

    model = FixedEstimator()
    with pytest.raises(ValueError, match="needs example inputs"):
        cdmpp.predict_network(torch.nn.Linear(4, 4), model=model)
    with pytest.raises(ValueError, match="neither a built-in network .* nor an ONNX file"):
        cdmpp.predict_network("resnet_19", model=model)
    with pytest.raises(ValueError, match="makes its own inputs"):
        cdmpp.predict_network("tiny_mlp", (torch.randn(2, 16),), model=model)
    with pytest.raises(TypeError, match="cannot predict a int"):
        cdmpp.predict_network(3, model=model)
    with pytest.raises(ValueError, match="batch must be >= 1"):
        cdmpp.predict_network("tiny_mlp", batch=0, model=model)
    with pytest.raises(ValueError, match=r"runs at its example inputs' batch \(1\), not batch=4"):
        cdmpp.predict_network(torch.nn.Linear(4, 4), (torch.randn(1, 4),), batch=4, model=model)


def test_a_model_fitted_for_another_device_is_named_in_a_warning(stored_overhead, monkeypatch):
    from cdmpp.model import registry

    monkeypatch.setattr(registry, "load_estimator",
                        lambda spec, for_device=None: FixedEstimator())
    monkeypatch.setattr(registry, "fitted_device_id", lambda spec: "0123456789abcdef")
    monkeypatch.setattr(registry, "fitted_device", lambda spec: None)  # no device.json
    shipped_vectors = registry.device_vectors
    monkeypatch.setattr(registry, "device_vectors",
                        lambda spec: {} if spec == "somewhere" else shipped_vectors(spec))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cdmpp.predict_network("tiny_mlp", model="somewhere")
    notes = [str(w.message) for w in caught if "fitted for device" in str(w.message)]
    assert notes == [f"note: model somewhere was fitted for device 0123456789abcdef, not "
                     f"{stored_overhead.device_id} ({_short(stored_overhead)}): its latencies "
                     "are those of its own device. `cdmpp calibrate --out DIR` fits it to "
                     "this one (with --rescale, one factor from a minute of measuring); "
                     "--model xeon480 --for-device local predicts it zero-shot, from "
                     "its measured device vector (docs/cross_device.md)"]


def test_predict_programs_names_a_model_of_another_device_too(sample_programs, monkeypatch):
    from cdmpp.model import registry

    _, records, programs = sample_programs
    monkeypatch.setattr(registry, "fitted_device_id", lambda spec: "0123456789abcdef")
    monkeypatch.setattr(registry, "fitted_device", lambda spec: None)  # no device.json
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cdmpp.predict_programs(programs[:1], model="default")  # for this machine: noted
        cdmpp.predict_programs(programs[:1], model="default", target=records[0].target)
    notes = [w for w in caught if "fitted for device 0123456789abcdef" in str(w.message)]
    assert len(notes) == 1 and notes[0].filename == __file__  # points at the caller


def test_load_model_for_device_asks_a_multi_device_model_about_it(sample_programs):
    from cdmpp.model import registry

    _, _, programs = sample_programs
    zen4 = registry.fitted_device_id("default")
    as_zen4 = cdmpp.load_model("zen3", for_device=zen4)
    vector = registry.device_vectors("zen3")[zen4]
    np.testing.assert_allclose(
        cdmpp.predict_programs(programs[:2], model="zen3", for_device=zen4),
        cdmpp.predict_programs(programs[:2], model=as_zen4), rtol=1e-6)
    # zen3: one transformer and its default-program expert, both asked about Zen 4
    assert np.allclose(as_zen4.model_.device_vector_, vector)
    assert np.allclose(as_zen4.expert_.device_vector_, vector)
    with pytest.raises(ValueError, match="not a loaded estimator"):
        cdmpp.load_model(as_zen4, for_device=zen4)


def _short(device):
    from cdmpp.device import short_name

    return short_name(device)


class RecordingEstimator(FixedEstimator):
    """FixedEstimator that keeps the programs it was asked about."""

    def __init__(self):
        self.programs = []

    def predict(self, programs):
        self.programs.append(programs)
        return super().predict(programs)


def test_predict_network_applies_the_tuning_database(stored_overhead, tmp_path):
    """A database with one record (tiny_mlp's first kernel, its outer loop parallel, timed
    1 us): that kernel is predicted as scheduled there, and the database's time is replayed."""
    from cdmpp.e2e.kernels import lower_network, workload_module
    from cdmpp.e2e.networks import import_network
    from cdmpp.tvm_env import import_tvm, meta_schedule

    tvm, ms = import_tvm(), meta_schedule()
    from tvm import s_tir

    device = stored_overhead
    kernel = lower_network(import_network("tiny_mlp", 2), device.target).kernels[0]
    sch = s_tir.Schedule(workload_module(kernel))
    sch.parallel(sch.get_loops(sch.get_sblock("matmul"))[0])
    (tmp_path / "db").mkdir()
    db = ms.database.JSONDatabase(work_dir=str(tmp_path / "db"))
    db.commit_tuning_record(ms.database.TuningRecord(
        sch.trace, db.commit_workload(workload_module(kernel)), [1e-6],
        tvm.target.Target(device.target), ms.arg_info.ArgInfo.from_prim_func(kernel.func)))

    plain_model, tuned_model = RecordingEstimator(), RecordingEstimator()
    plain = cdmpp.predict_network("tiny_mlp", batch=2, model=plain_model)
    tuned = cdmpp.predict_network("tiny_mlp", batch=2, model=tuned_model,
                                  tuning_db=tmp_path / "db")
    assert [k.tuned for k in plain.kernels] == [False, False]
    assert {k.name: k.tuned for k in tuned.kernels} == {k.name: k.name == kernel.name
                                                        for k in plain.kernels}
    assert {k.name: k.database_s for k in tuned.kernels} == {
        k.name: 1e-6 if k.name == kernel.name else None for k in plain.kernels}
    # the estimator saw the tuned schedule of that kernel: other features, same other kernel
    (before,), (after,) = plain_model.programs, tuned_model.programs
    i = before.task.index(kernel.name)
    assert not np.array_equal(before.leaf_features[i], after.leaf_features[i])
    for j in set(range(len(before))) - {i}:
        np.testing.assert_array_equal(before.leaf_features[j], after.leaf_features[j])
    # timed here (its records' target is this device's): no word; timed elsewhere: a warning
    import warnings

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        r = cdmpp.predict_network("tiny_mlp", batch=2, model=FixedEstimator(),
                                  tuning_db=tmp_path / "db")
    assert not [w for w in seen if "tuning database" in str(w.message)]
    assert r.database_timed_here and r.anchored_replay_s is None
    (tmp_path / "db" / "device.json").write_text('{"device_id": "0123456789abcdef"}')
    with pytest.warns(UserWarning, match="timed on device 0123456789abcdef, not on this one"):
        r = cdmpp.predict_network("tiny_mlp", batch=2, model=FixedEstimator(),
                                  tuning_db=tmp_path / "db")
    assert r.anchored_replay_s is None  # no model is fitted for that device
    assert not r.database_timed_here
    # timed on a CPU a shipped model is fitted for: anchored with it, unless asked not to
    from cdmpp.model.registry import fitted_device, shipped_device_models

    other = next(fitted_device(n).device_id for n in shipped_device_models()
                 if fitted_device(n).device_id != device.device_id)
    (tmp_path / "db" / "device.json").write_text(f'{{"device_id": "{other}"}}')
    with pytest.warns(UserWarning, match=f"timed on device {other}"):
        r = cdmpp.predict_network("tiny_mlp", batch=2, model=FixedEstimator(),
                                  tuning_db=tmp_path / "db")
    assert r.anchored_replay_s is not None and r.anchor_model is not None
    with pytest.warns(UserWarning, match=f"timed on device {other}"):
        r = cdmpp.predict_network("tiny_mlp", batch=2, model=FixedEstimator(),
                                  tuning_db=tmp_path / "db", anchor_model=None)
    assert r.anchored_replay_s is None


def test_predict_programs_passes_default_flags_to_the_model(sample_programs):
    _, records, programs = sample_programs
    target = records[0].target

    class Recorder(FixedEstimator):
        def predict(self, given):
            self.default = given.default
            return super().predict(given)

    model = Recorder()
    cdmpp.predict_programs(programs[:2], model=model, target=target)
    np.testing.assert_array_equal(model.default, [False, False])  # scheduled, unless told
    cdmpp.predict_programs(programs[:2], model=model, target=target, default=[True, False])
    np.testing.assert_array_equal(model.default, [True, False])
    cdmpp.predict_programs(programs[:1], model=model, target=target, default=True)
    np.testing.assert_array_equal(model.default, [True])
    with pytest.raises(ValueError, match=r"one flag or one per program \(2\), got 3"):
        cdmpp.predict_programs(programs[:2], model=model, target=target, default=[True] * 3)
