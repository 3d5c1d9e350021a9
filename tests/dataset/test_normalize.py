"""Normalizers are fitted on the training side only: test data cannot move them."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from cdmpp.dataset.normalize import Normalizer, boxcox, fit_on_split, inv_boxcox
from cdmpp.dataset.splits import make_split
from cdmpp.features.build import build_store
from cdmpp.features.store import FeatureStore


def test_boxcox_round_trip_and_unfitted_error():
    y = np.array([1e-5, 3e-4, 2e-3, 0.1])
    n = Normalizer().fit(np.random.default_rng(0).random((10, 4)), y)
    assert n.inverse_target(n.transform_target(y)) == pytest.approx(y, rel=1e-9)
    with pytest.raises(RuntimeError, match="not fitted"):
        Normalizer().transform_target(y)


def test_labels_of_one_program_fall_back_to_the_log_and_give_finite_targets():
    # 32 timings of one program within 5%: scipy's fit alone runs off (-17 on real ones)
    from scipy import stats

    from cdmpp.dataset.normalize import LAMBDA_BOUND

    y = 2.0e-5 * (1 + 0.05 * np.random.default_rng(0).random(32))
    runaway = stats.boxcox(y)[1]
    assert abs(runaway) > LAMBDA_BOUND
    n = Normalizer().fit(np.random.default_rng(1).random((32, 4)), y)
    assert n.boxcox_lambda_ == 0.0
    z = n.transform_target(y)
    assert np.all(np.isfinite(z)) and abs(z.mean()) < 1e-6 and z.std() == pytest.approx(1.0)
    assert n.inverse_target(z) == pytest.approx(y, rel=1e-9)
    assert np.all(np.isfinite(n.inverse_target(np.linspace(-5, 5, 11))))


@pytest.mark.parametrize("lam", [-0.3, 0.0, 0.07, 1.5])
def test_numpy_boxcox_matches_scipy(lam):
    from scipy import special

    y = np.array([1e-6, 3e-4, 2e-3, 0.1, 4.0])
    assert boxcox(y, lam) == pytest.approx(special.boxcox(y, lam), rel=1e-12)
    t = np.array([-40.0, -3.0, -0.5, 0.0, 2.0, 7.0])  # lam * t < -1 gives NaN in both
    np.testing.assert_allclose(inv_boxcox(t, lam), special.inv_boxcox(t, lam), rtol=1e-12)


def test_test_data_do_not_influence_the_normalizer(fixture_dbs, tmp_path, monkeypatch):
    build_store(fixture_dbs, tmp_path / "store", workers=1, progress=False)
    store = FeatureStore(tmp_path / "store")
    split = make_split(store.samples(), "by-network:resnet18")
    clean = fit_on_split(store, split).to_arrays()

    # poison every test sample: huge latencies, and huge features for test-only programs
    samples = store.samples()
    _, test_rows = split.rows(samples)
    latency = np.asarray(samples.column("latency_s")).copy()
    latency[test_rows] *= 1000.0
    poisoned = samples.set_column(samples.schema.get_field_index("latency_s"), "latency_s",
                                  pa.array(latency))
    keys = samples.column("key").to_pylist()
    train_rows, _ = split.rows(samples)
    train_keys = {keys[i] for i in train_rows}
    real_program = store.program
    monkeypatch.setattr(store, "samples", lambda: poisoned)
    monkeypatch.setattr(store, "program", lambda k: real_program(k) if k in train_keys
                        else (real_program(k)[0] * 0 + 1e9, real_program(k)[1]))
    leaked = fit_on_split(store, split).to_arrays()
    for name in clean:
        np.testing.assert_array_equal(clean[name], leaked[name])
    # and the check itself is sharp: poisoning the training side does move it
    monkeypatch.setattr(store, "program", lambda k: (real_program(k)[0] * 0 + 1e9,
                                                     real_program(k)[1]))
    assert not np.array_equal(fit_on_split(store, split).to_arrays()["feature_max"],
                              clean["feature_max"])
