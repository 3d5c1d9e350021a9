"""Splits: disjoint, reproducible, whole networks held out, shared tasks on neither side."""

from __future__ import annotations

import numpy as np
import pytest

from cdmpp.dataset.splits import Split, carve_rows, make_split, network_split
from cdmpp.features.build import build_store
from cdmpp.features.store import FeatureStore


@pytest.fixture
def store(fixture_dbs, tmp_path):
    build_store(fixture_dbs, tmp_path / "store", workers=1, progress=False)
    return FeatureStore(tmp_path / "store")


def _tasks(samples, ids):
    index = {(d, r): t for d, r, t in zip(samples.column("db").to_pylist(),
                                          samples.column("record_index").to_pylist(),
                                          samples.column("task").to_pylist())}
    return {index[i] for i in ids}


def test_random_split_holds_out_a_share_of_every_task(store):
    samples = store.samples()
    split = make_split(samples, "random", seed=1)
    assert not set(split.train) & set(split.test)
    assert len(split.train) + len(split.test) == samples.num_rows
    assert _tasks(samples, split.test) == _tasks(samples, split.train)  # within tasks


def test_by_network_holds_out_whole_networks(store):
    samples = store.samples()
    split = make_split(samples, "by-network:resnet18")
    assert _tasks(samples, split.test) == {"addrelu_1x64x56x56"}
    assert "addrelu_1x64x56x56" not in _tasks(samples, split.train)


def test_shared_tasks_go_to_neither_side_unless_asked(store):
    samples = store.samples()
    split = network_split(samples, ["gpt2"])  # every gpt2 task here is also a bert_base task
    assert split.test == () and len(split.excluded) == 8
    assert _tasks(samples, split.train) == {"addrelu_1x64x56x56"}
    assert len(network_split(samples, ["gpt2"], shared="test").test) == 8


def test_saved_split_reloads_identically(store):
    split = make_split(store.samples(), "by-task", seed=3)
    split.save(store.path)
    again = Split.load(store.path, split.name)
    assert again == split
    train, test = again.rows(store.samples())
    assert len(train) == len(split.train) and len(test) == len(split.test)


def test_a_split_saved_again_drops_the_normalizers_of_the_one_it_replaces(store):
    from cdmpp.dataset.normalize import fit_on_split

    first = make_split(store.samples(), "random", seed=0)
    first.save(store.path)
    fit_on_split(store, first)
    norm = store.path / "splits" / f"{first.name}.norm.npz"
    assert norm.exists()
    second = make_split(store.samples(), "random", seed=1)  # same name, other records
    assert second.name == first.name and second.train != first.train
    second.save(store.path)
    assert not norm.exists()  # fitted on the first split's training side: not this one's


def test_bad_specs_are_clear(store):
    with pytest.raises(ValueError, match="alexnet"):
        make_split(store.samples(), "by-network:alexnet")
    for spec in ("sideways", "random:0.5", "by-task:x", "by-network:", "by-device"):
        with pytest.raises(ValueError, match="unknown split"):
            make_split(store.samples(), spec)


def _synthetic_samples(n_tasks: int, per_task: int):
    """A samples table of n_tasks x per_task records (only what a split reads is filled)."""
    import pyarrow as pa

    from cdmpp.features.samples import schema

    rows = [{"key": f"k{t}-{i}", "db": f"/db/task{t}", "record_index": i, "task": f"task{t}",
             "networks": "net"}
            for t in range(n_tasks) for i in range(per_task)]
    return pa.Table.from_pylist(rows, schema=schema())


def _assert_whole_tasks_held_out(samples, split):
    train_tasks, test_tasks = _tasks(samples, split.train), _tasks(samples, split.test)
    assert split.train and split.test
    assert not train_tasks & test_tasks  # no task has records on both sides
    assert len(split.train) + len(split.test) == samples.num_rows
    assert test_tasks == set(split.params["test_tasks"])


def test_by_task_holds_out_whole_tasks(store):
    samples = store.samples()
    for seed in range(5):
        _assert_whole_tasks_held_out(samples, make_split(samples, "by-task", seed=seed))


def test_by_task_holds_out_whole_tasks_of_many():
    samples = _synthetic_samples(n_tasks=40, per_task=10)
    for seed in range(3):
        split = make_split(samples, "by-task", seed=seed)
        _assert_whole_tasks_held_out(samples, split)
        assert len(_tasks(samples, split.test)) == 8  # a fifth of the tasks


def test_random_split_follows_its_seed():
    samples = _synthetic_samples(n_tasks=4, per_task=250)  # C(250, 50)^4 ways to draw
    first = make_split(samples, "random", seed=1)
    assert make_split(samples, "random", seed=1) == first
    for seed in (0, 2, 12345):
        other = make_split(samples, "random", seed=seed)
        assert len(other.test) == len(first.test) == 200
        assert set(other.test) != set(first.test)


def test_the_validation_carve_holds_whole_tasks_or_records_and_repeats():
    tasks = tuple(f"t{i % 10}" for i in range(200))
    fit, val = carve_rows(200, 0.2, seed=0, tasks=tasks)
    assert len(fit) + len(val) == 200 and not set(fit) & set(val)
    val_tasks = {tasks[i] for i in val}
    assert len(val_tasks) == 2 and not val_tasks & {tasks[i] for i in fit}
    np.testing.assert_array_equal(carve_rows(200, 0.2, seed=0, tasks=tasks)[1], val)
    assert {tasks[i] for i in carve_rows(200, 0.2, seed=1, tasks=tasks)[1]} != val_tasks
    fit_r, val_r = carve_rows(200, 0.2, seed=0)
    assert len(val_r) == 40 and sorted(np.concatenate([fit_r, val_r])) == list(range(200))
    assert {tasks[i] for i in val_r} & {tasks[i] for i in fit_r}  # records, not tasks


def test_the_carve_takes_records_when_there_is_one_task():
    fit, val = carve_rows(10, 0.2, seed=0, tasks=("t",) * 10)
    assert len(val) == 2 and len(fit) == 8
