"""benchmarks/chosen_on_validation.py: its validation carve and its names for the settings."""

import numpy as np
import pytest
from benchmark_helpers import load_benchmark


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("chosen_on_validation.py")


def test_the_carve_holds_whole_tasks_or_records_and_repeats(bench):
    tasks = tuple(f"t{i % 10}" for i in range(200))
    fit, val = bench.carve(tasks, 0.2, seed=0, by_task=True)
    assert len(fit) + len(val) == 200 and not set(fit) & set(val)
    val_tasks = {tasks[i] for i in val}
    assert len(val_tasks) == 2 and not val_tasks & {tasks[i] for i in fit}
    fit_r, val_r = bench.carve(tasks, 0.2, seed=0, by_task=False)
    assert len(val_r) == 40 and {tasks[i] for i in val_r} & {tasks[i] for i in fit_r}
    np.testing.assert_array_equal(bench.carve(tasks, 0.2, seed=0, by_task=True)[1], val)


def test_its_shipped_and_plain_names_are_what_cdmpp_ships(bench):
    from cdmpp.baselines import XGB_SETTINGS

    from cdmpp.baselines import XGB_PER_WORK_SETTINGS

    assert bench.GRID[bench.SHIPPED["xgb"]] == XGB_SETTINGS and bench.GRID[bench.PLAIN] == {}
    assert bench.GRID[bench.SHIPPED["xgb-work"]] == XGB_PER_WORK_SETTINGS
