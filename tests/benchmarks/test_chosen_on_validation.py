"""benchmarks/chosen_on_validation.py: its names for the settings (its carve is
`cdmpp.dataset.splits.carve_rows`, tested there)."""

import pytest
from benchmark_helpers import load_benchmark


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("chosen_on_validation.py")


def test_its_shipped_and_plain_names_are_what_cdmpp_ships(bench):
    from cdmpp.baselines import XGB_PER_WORK_SETTINGS, XGB_SETTINGS

    assert bench.GRID[bench.SHIPPED["xgb"]] == XGB_SETTINGS and bench.GRID[bench.PLAIN] == {}
    assert bench.WORK_GRID[bench.SHIPPED["xgb-work"]] == XGB_PER_WORK_SETTINGS
    assert not any(s.get("heaviest_leaf") for s in bench.GRID.values())  # TenSet-style


def test_each_setting_is_fitted_as_written_not_over_the_shipped_settings(bench, monkeypatch):
    from cdmpp.baselines.xgb import XGBBaseline

    seen = []

    def capture(self, *args, **kwargs):
        seen.append(self.get_params())
        raise StopIteration  # nothing to fit: the settings are what is checked

    monkeypatch.setattr(XGBBaseline, "fit", capture)
    for kind in ("xgb", "xgb-work"):
        for name in (bench.PLAIN, "d8-lr.05-heavy"):
            with pytest.raises(StopIteration):
                bench.fit_predict(kind, None, None, None, 0, bench.WORK_GRID[name])
    plain = XGBBaseline().get_params()
    assert seen[0] == plain and seen[2] == dict(plain, per_work=True)
    assert seen[3] == dict(plain, per_work=True, max_depth=8, learning_rate=0.05,
                           n_estimators=800, heaviest_leaf=True)
