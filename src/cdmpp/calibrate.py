"""Calibrate a model for the device it runs on: pick a few tasks, measure them, fine-tune.

    result = calibrate(CalibrateConfig(out="models/my-laptop", tasks=10))

1. Embed every catalog task with the base model (features of the task's default program, on
   this device) and choose the k most representative tasks (KMeans, CDMPP) or k random ones.
   With a budget and no k, the tasks are put in that order for a generous k (`OVERBOOK` x
   what the budget is estimated to fit) and measured in order until the budget is spent: how
   many programs a task has, and how fast they time, is only known by measuring.
2. Measure sampled programs of those tasks here with the collector (resumable, within the
   time budget), into `<out>.data/` (a TVM JSON database with its device.json).
3. Fine-tune the base model on them (and on `data`: collections already measured on this
   device, e.g. `cdmpp collect --kernels-of` of the networks to predict), optionally with
   domain adaptation towards the default programs of every catalog task on this device, and
   save it: `cdmpp predict --model OUT`. With `tasks=0` nothing new is measured. Members of
   other kinds (the shipped default's XGBoost) are kept, their weights chosen again for this
   device on its tasks held out by fold, and the whole rescaled (`fine_tuned_model`). With
   `balance`, each source (this run's data directory, each of `data`) weighs the same in the
   fine-tuning, so a network's few kernels are not lost among hundreds of catalog programs.

Without a base named (`model=None`): the shipped model fitted for this device or its
processor, or on a CPU none is fitted for, the shipped model whose predictions one factor maps
best onto what step 2 measured (`choose_base`): a new CPU is often one a model knows, at
another speed.

With `rescale`, step 3 fine-tunes nothing: the base model, asked about this device (zero-shot
from its device vector when the model never saw it), is multiplied by one factor, the median of
measured / predicted over the programs measured (`model.scaled`); with `neighbors` (5 by
default) each program by the median over the measured programs nearest it in the base model's
embedding space instead, as kinds of kernel move apart from one machine to another. Measuring
only the chosen tasks' default programs (`programs_per_task=0`, the CLI's default with
--rescale), that takes about a minute and took the untuned networks of CPUs outside the
training CPUs' range from 21-41% off to 5-10% (docs/cross_device.md, "Every CPU left out in
turn", "A factor per kind of kernel").

A model with a device encoder remembers the device it was calibrated for
(`CDMPPRegressor.device_vector_`), so predicting without device vectors means "this device".
"""

from __future__ import annotations

import copy
import sys
import time
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

# the CDMPP models a base is made of: each is fine-tuned, the first's embeddings choose tasks
from cdmpp.model.members import cdmpp_members

# Measured collection speed on a 2-core VM (docs/measurement.md), to size k from a budget.
PROGRAMS_PER_HOUR = 3000.0
# Of a time budget, the share given to measuring (the rest: task selection and fine-tuning,
# which took 0.2 of 5.3 minutes in a real 10-minute calibration of the three seeds; the shipped
# default, whose weights are chosen by fold as well, took 1.07 minutes to fine-tune on the 784
# programs of one, 0.41 without choosing them; docs/cross_device.md).
MEASURE_SHARE = 0.85
# With only a budget, order this many times the estimated task count and measure until the
# budget is spent. Measured: sized at PROGRAMS_PER_HOUR alone, a 10-minute calibration used
# 5.3 minutes, because element-wise and pooling tasks have fewer than 8 distinct programs.
OVERBOOK = 3
# Each base member is fine-tuned this many times (other seeds: another validation carve by task,
# another order) and all are kept, averaged. Measured: the untuned BERT-base total that one
# calibration of the shipped default (three members, the same 784 Zen 5 measurements) predicts
# moved over a 13% range with the fine-tuning seed alone, 41% from a retrained default; with
# three fine-tunings each, 4% (docs/cross_device.md, "How much a calibration moves with its
# seed"). Each costs seconds of CPU.
FINE_TUNES = 3
# When the base holds models of other kinds beside its CDMPP ones (the shipped default: the
# seeds at weight 0.3 beside an XGBoost), once: the other members damp a fine-tuning's seed.
# Measured on Zen 5 (784 programs, four seeds each): BERT-base within 2.2% with one fine-tuning
# of each seed, 1.3% with three; per program 13.5-13.7% against 13.5-13.6%; predicting 16,157
# and 21,185 programs/s against 12,310 (docs/cross_device.md, "Fine-tuning the shipped
# ensemble").
FINE_TUNES_BESIDE_OTHERS = 1
# Tasks a rescale measures when given neither k nor a budget: their default programs, about a
# minute. Simulated on four CPUs each left out of training, KMeans at k = 10 put a CPU's
# networks 5-41% off by the seed (one factor from ten programs follows a few outliers), at
# k = 20 5.2-9.8% (docs/cross_device.md, "Every CPU left out in turn").
RESCALE_TASKS = 20
# Each program's factor from its 5 nearest measured default programs: simulated for five
# (model, CPU) pairs, the untuned networks within 10% 55 -> 62 of 90 (KMeans' median seed), the
# worst of 20 random draws 9.6-18.9% -> 7.0-11.8% mean error; measured on a fresh Zen 3 VM, 7 ->
# 9 of 9 networks at batch 1, 4 -> 7 of 7 CNNs at batch 4 (docs/cross_device.md, "A factor per
# kind of kernel").
RESCALE_NEIGHBORS = 5
# With no base named and no shipped model fitted for this CPU, the base is the shipped model
# whose predictions one factor maps best onto what was measured here (`choose_base`), once at
# least this many programs are measured. Measured on an Intel Xeon VM no model had seen (the
# same microarchitecture as `emeraldrapids`'s VM, 0.74x its times within a std(log) of 0.08),
# on the 678 programs of 311 tasks no run measured: a rescale's 20 default programs chose
# `zen3` (spread 0.124; `emeraldrapids` 0.134, `default` 0.373), 16.8% MAPE against 29.9%
# rescaled from `default`; a 10-minute KMeans calibration's 956 chose `emeraldrapids` (0.169;
# the others 0.193-0.287), 13.4% against 16.6% (docs/cross_device.md, "A sixth CPU").
MIN_PROGRAMS_TO_CHOOSE = 10
# A base holding other kinds beside its CDMPP models has its top-level weights chosen again for
# the device: by this many folds of the measured tasks, over this many splits of them, the
# MAPEs averaged (one split's choice moved by up to 0.3 with its seed; two chose weights within
# 0.4 points of MAPE of the test's best on four of five real calibrations; docs/cross_device.md,
# "The weights chosen per device"). Each fold fine-tunes the CDMPP models once more.
WEIGHT_FOLDS = 4
WEIGHT_SPLITS = 2


@dataclass(frozen=True)
class CalibrateConfig:
    out: str
    # the model to start from; None: the shipped model of the device calibrated, the one
    # `predict`, `e2e` and `tune` use there (`registry.for_device`)
    model: str | None = None
    budget_minutes: float | None = None  # total time; with `tasks` unset it also sizes k
    tasks: int | None = None  # k: how many tasks to measure (0: none, fine-tune on `data`)
    programs_per_task: int = 8
    selection: str = "kmeans"  # or "random"
    adapt: str | None = None  # "cmd" | "mmd": align to every catalog task's default program
    adapt_weight: float = 0.1
    epochs: int = 100
    threads: int | None = None
    mcpu: str | None = None
    ops: tuple | None = None  # restrict candidate tasks (names or operator families)
    networks: tuple | None = None
    seed: int = 0
    # collections measured on this device (same device id) to fine-tune on as well
    data: tuple = ()
    # fine-tunings of each CDMPP model of the base, all kept (averaged); None: FINE_TUNES, or
    # FINE_TUNES_BESIDE_OTHERS for a base that holds other kinds too (`fine_tunes_for`)
    fine_tunes: int | None = None
    # one factor on the base model for this device instead of fine-tuning (`model.scaled`)
    rescale: bool = False
    # with rescale: each program's factor from its k nearest measured programs (0: one factor)
    neighbors: int = RESCALE_NEIGHBORS
    # a base holding other kinds: its top-level weights chosen for this device by this many
    # folds of the measured tasks (`fold_chosen_weights`); 0 keeps the base's weights
    weight_folds: int = WEIGHT_FOLDS
    # fine-tuning: every source of programs (this data directory, each of `data`) weighs the
    # same in the loss and in the choice of epoch, however many programs it holds
    balance: bool = False
    # fine-tuning: once the tasks carved out for validation chose the epoch count, fine-tune
    # again from the base on every program for that many epochs (`TrainConfig.refit`)
    refit: bool = False

    def __post_init__(self):
        if self.fine_tunes is not None and self.fine_tunes < 1:
            raise ValueError(f"fine_tunes must be at least 1, not {self.fine_tunes}")
        if self.programs_per_task < 0:
            raise ValueError(f"programs_per_task must be at least 0, not "
                             f"{self.programs_per_task}")
        if self.neighbors < 0:
            raise ValueError(f"neighbors must be at least 0, not {self.neighbors}")
        if self.weight_folds < 0 or self.weight_folds == 1:
            raise ValueError(f"weight_folds must be 0 (keep the weights) or at least 2, not "
                             f"{self.weight_folds}")
        if self.rescale and self.adapt:
            raise ValueError("rescale trains nothing, so there is nothing to adapt: drop adapt")
        if self.rescale and self.balance:
            raise ValueError("rescale trains nothing, so there is nothing to balance (each "
                             "program's factor already comes from the measured programs "
                             "nearest it): drop balance")
        if self.rescale and self.refit:
            raise ValueError("rescale trains nothing, so there is nothing to refit: drop refit")

    @property
    def data_dir(self) -> Path:
        out = Path(self.out).resolve()  # "." and "models/." name a directory too
        return out.with_name(out.name + ".data")


def tasks_for_budget(budget_minutes: float, programs_per_task: int) -> int:
    """How many tasks fit a budget: measuring gets MEASURE_SHARE of it at PROGRAMS_PER_HOUR."""
    programs = budget_minutes * MEASURE_SHARE * PROGRAMS_PER_HOUR / 60.0
    return max(1, int(programs // (programs_per_task + 1)))


def default_programs(tasks, target):
    """ProgramSet of each task's default (untuned) program: features only, nothing is run."""
    from cdmpp.dataset.programs import ProgramSet
    from cdmpp.features.parallel import extract_each

    tasks = list(tasks)
    asts = extract_each([t.prim_func() for t in tasks], target)
    for t, ast in zip(tasks, asts):
        if isinstance(ast, Exception):
            raise ast
    return ProgramSet(tuple(a.leaf_features for a in asts), tuple(a.leaf_pos for a in asts),
                      None, tuple(t.name for t in tasks))


def choose_tasks(estimator, programs, k: int, selection: str, seed: int,
                 round_size: int | None = None) -> list[str]:
    """k task names in the order to measure them: the KMeans choice over the model's
    embeddings, or a random choice. With `round_size` < k, KMeans picks in rounds: the
    `round_size` most representative tasks, then the most representative of the rest, ...
    so that the tasks a budget reaches first are a representative set on their own."""
    from cdmpp.train.selection import kmeans_select, random_select, task_embeddings

    if selection == "random":
        return random_select(sorted(set(programs.task)), k, seed=seed)
    if selection != "kmeans":
        raise ValueError(f"unknown selection {selection!r}: use kmeans or random")
    z, names = task_embeddings(estimator, programs, programs.task)
    step = min(round_size or k, k)
    chosen: list[str] = []
    while len(chosen) < k:
        taken = set(chosen)
        rest = [i for i, n in enumerate(names) if n not in taken]
        chosen += kmeans_select(z[rest], [names[i] for i in rest], min(step, k - len(chosen)),
                                seed=seed)
    return chosen


def base_device_vector(first, device, name):
    """The device vector of `device` that `first` (a base's first CDMPP model) reads, or None
    for a model without a device encoder; a model taking vectors of another length than this
    cdmpp makes is refused by `name`."""
    from cdmpp.device import device_vector

    dim = first.model_config_.device_dim
    if not dim:
        return None
    vector = device_vector(device)
    if len(vector) != dim:
        raise ValueError(f"{name} takes device vectors of length {dim}, this cdmpp makes "
                         f"{len(vector)}")
    return vector


def holds_other_kinds(model) -> bool:
    """Whether `model` (under a default-program expert, if any) holds models that are not
    CDMPP models, as the shipped default's XGBoost."""
    from cdmpp.model.default_expert import DefaultExpertRegressor
    from cdmpp.model.estimator import CDMPPRegressor
    from cdmpp.model.members import flat_members

    if isinstance(model, DefaultExpertRegressor):
        model = model.model_
    return not all(isinstance(m, CDMPPRegressor) for m in flat_members(model))


def fine_tunes_for(base, config: CalibrateConfig) -> int:
    """How many times each CDMPP model of `base` is fine-tuned: `config.fine_tunes` if given,
    else FINE_TUNES, or FINE_TUNES_BESIDE_OTHERS when `base` also holds other kinds."""
    if config.fine_tunes is not None:
        return config.fine_tunes
    return FINE_TUNES_BESIDE_OTHERS if holds_other_kinds(base) else FINE_TUNES


def fine_tuned_model(base, members, programs, latency_s, config: CalibrateConfig, vector,
                     unlabeled=None, log=None, progress: bool = True, weight=None):
    """The calibrated model: `fine_tunes_for` fine-tuned copies of each of `members` (the
    CDMPP members of `base`, which stay untouched) in the place of each, all copies of one
    ensemble's members in one ensemble, in member order, each copy with its member's weight;
    a single copy is itself. Members of other kinds (the shipped default's XGBoost) cannot
    be fine-tuned: they stay, the top-level weights are chosen again for this device
    (`fold_chosen_weights`, unless `config.weight_folds` is 0), and the rebuilt model is
    rescaled on the same programs (`ScaledRegressor`, each program's factor from its
    `config.neighbors` nearest, or one factor where the same folds find that better), which
    takes their predictions to this device. `weight`: each program's weight in the
    fine-tunings' loss and choice of epoch (None: all alike; the rescale is not weighted). A
    default-program expert of `base` is kept when it was fitted for this device (its device
    vector is `vector`), else dropped: its trees know the default programs of the device it
    was fitted on, not this one."""
    import numpy as np

    from cdmpp.model.default_expert import DefaultExpertRegressor
    from cdmpp.model.ensemble import EnsembleRegressor
    from cdmpp.model.scaled import ScaledRegressor

    expert = None
    if isinstance(base, DefaultExpertRegressor):
        base, expert = base.model_, base
    others = holds_other_kinds(base)
    chosen = fold_chosen_weights(base, members, programs, latency_s, config, vector,
                                 unlabeled=unlabeled, log=log, weight=weight) if others else None
    model = _fine_tuned(base, members, programs, latency_s, config, vector, unlabeled, log,
                        progress, weight)
    neighbors = config.neighbors
    if chosen is not None:
        weights, neighbors = chosen
        model = EnsembleRegressor.from_fitted(model.members_, weights)
    if others:
        model = ScaledRegressor(model, neighbors).fit(programs, latency_s)
        if log:
            log(f"the members that are not CDMPP models were kept as they were: the whole "
                f"model rescaled, x{model.scale_:.3f} over {len(latency_s)} programs"
                + (f", each program by its {neighbors} nearest" if neighbors else ""))
    if expert is None:
        return model
    fitted_for = getattr(expert.expert_, "device_vector_", None)
    if vector is not None and fitted_for is not None and np.array_equal(
            np.asarray(fitted_for, dtype=np.float64), np.asarray(vector, dtype=np.float64)):
        return DefaultExpertRegressor.from_fitted(model, expert.expert_, expert.expert_weight_)
    if log:
        log("the base model's default-program expert was fitted for another device: the "
            "calibrated model does without it")
    return model


def _fine_tuned(base, members, programs, latency_s, config: CalibrateConfig, vector,
                unlabeled=None, log=None, progress: bool = True, weight=None):
    """`base` rebuilt with `fine_tunes_for` fine-tuned copies of each of `members`."""
    count = fine_tunes_for(base, config)
    copies = {id(m): [copy.deepcopy(m) for _ in range(count)] for m in members}
    # by id: a model held twice is fine-tuned once
    fine_tune_members([c for found in copies.values() for c in found], programs, latency_s,
                      config, vector, unlabeled=unlabeled, log=log, progress=progress,
                      weight=weight)
    return _with_copies(base, copies)


def fold_chosen_weights(base, members, programs, latency_s, config: CalibrateConfig, vector,
                        unlabeled=None, log=None, weight=None):
    """(weights, neighbors) for this device: the weights of the top-level members of `base`
    (an ensemble holding other kinds) and how finely the calibrated model is rescaled, each
    program by its `config.neighbors` nearest or by one factor (0); or None to keep the base's
    weights and `config.neighbors` (`config.weight_folds` 0, or fewer than two tasks per fold
    measured). The measured tasks are dealt to `config.weight_folds` folds, in WEIGHT_SPLITS
    shuffles; for each fold `base` is fine-tuned as the calibration fine-tunes it, on the other
    folds, and predicts the fold's programs, rescaled from the others either way; the weights
    (over a grid of tenths) and the rescale with the lowest MAPE of those predictions win
    (`model.fold_weights.choose_fold_rescale`)."""
    import numpy as np

    from cdmpp.model.fold_weights import FoldPredictions, choose_fold_rescale, task_folds

    log = log or (lambda msg: None)
    folds = config.weight_folds
    tasks = programs.task
    n_tasks = 0 if tasks is None else len(set(tasks))
    if not folds or n_tasks < 2 * folds:
        if folds:
            log(f"kept the base model's weights: {n_tasks} tasks measured, {folds} folds need "
                f"{2 * folds} to choose them")
        return None
    y = np.asarray(latency_s, dtype=np.float64)
    splits = []
    for split in range(WEIGHT_SPLITS):
        fold_of = task_folds(tasks, folds, config.seed + split)
        found = []
        for k in range(folds):
            log(f"choosing the weights for this device: split {split + 1} of {WEIGHT_SPLITS}, "
                f"fold {k + 1} of {folds}")
            fit, held = np.flatnonzero(fold_of != k), np.flatnonzero(fold_of == k)
            model = _fine_tuned(base, members, programs.subset(fit), y[fit], config, vector,
                                unlabeled, progress=False,
                                weight=None if weight is None else np.asarray(weight)[fit])
            found.append(FoldPredictions(*_member_outputs(model, programs.subset(fit)), y[fit],
                                         *_member_outputs(model, programs.subset(held)),
                                         y[held]))
        splits.append(found)
    weights, neighbors, error = choose_fold_rescale(splits, config.neighbors)
    rescale = f"each program's factor from its {neighbors} nearest" if neighbors else "one factor"
    log(f"weights for this device: {', '.join(f'{w:.1f}' for w in weights)} (the base's "
        f"{', '.join(f'{w:.1f}' for w in base.weights_)}), rescaled with {rescale}: MAPE "
        f"{100 * error:.1f}% on the tasks each fold held out")
    return weights, neighbors


def _member_outputs(model, programs) -> tuple:
    """(each top-level member's predictions as rows, the placing embeddings) of `programs`."""
    import numpy as np

    predictions, embeddings = model.member_predictions(programs, embed=True)
    return np.asarray(predictions, dtype=np.float64), np.asarray(embeddings, dtype=np.float64)


def _with_copies(model, copies: dict):
    """`model` with each CDMPP model in it replaced by its fine-tuned `copies` (by id); an
    ensemble of CDMPP models becomes one ensemble of all their copies, each with its member's
    weight; members of other kinds are kept."""
    from cdmpp.model.ensemble import EnsembleRegressor
    from cdmpp.model.estimator import CDMPPRegressor

    if isinstance(model, CDMPPRegressor):
        found = copies[id(model)]
        return found[0] if len(found) == 1 else EnsembleRegressor.from_fitted(found)
    if not isinstance(model, EnsembleRegressor):
        return model
    if all(isinstance(m, CDMPPRegressor) for m in model.members_):
        found = [(c, w) for m, w in zip(model.members_, model.weights_) for c in copies[id(m)]]
        if len(found) == 1:
            return found[0][0]
        return EnsembleRegressor.from_fitted([c for c, _ in found], [w for _, w in found])
    return EnsembleRegressor.from_fitted([_with_copies(m, copies) for m in model.members_],
                                         model.weights_)


def fine_tune_members(members, programs, latency_s, config: CalibrateConfig, vector,
                      unlabeled=None, log=None, progress: bool = True, weight=None) -> None:
    """Fine-tune each member in place (seed `config.seed + i`) and give it the device vector."""
    import numpy as np

    from cdmpp.model.estimator import fine_tune_config

    for i, member in enumerate(members):
        if log and len(members) > 1:
            log(f"fine-tuning member {i + 1} of {len(members)}")
        tc = fine_tune_config(member.train_config_, epochs=config.epochs, adapt=config.adapt,
                              adapt_weight=config.adapt_weight, seed=config.seed + i,
                              refit=config.refit)
        member.progress = progress
        member.fine_tune(programs, latency_s, train_config=tc, unlabeled=unlabeled,
                         sample_weight=weight)
        if vector is not None:
            member.device_vector_ = np.asarray(vector, dtype=np.float64)


def calibrate(config: CalibrateConfig, tasks=None, log=None, progress: bool = True) -> dict:
    """Run the three steps; returns a summary (also saved as the model's `trained_on`).
    `tasks`: the candidate `Task`s (default: the catalog, filtered by `config.ops/networks`)."""
    from cdmpp.device import local_device
    from cdmpp.features.samples import target_device_id
    from cdmpp.measure.collect import claim_measured_device
    from cdmpp.model.registry import (check_output_dir, fitted_for, load_estimator,
                                      save_estimator, shipped_device_models)
    from cdmpp.model.scaled import ScaledRegressor, unscaled
    from cdmpp.programs.catalog import select

    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    start = time.monotonic()
    if config.tasks is None and config.budget_minutes is None and not config.data:
        raise ValueError("give --tasks K or --budget-minutes M (or both), or --data DIR")
    if config.tasks == 0 and not config.data:
        raise ValueError("--tasks 0 measures nothing: give --data DIR to fine-tune on")
    from cdmpp.measure.database import find_databases

    for path in config.data:
        find_databases(path)  # a wrong --data fails before anything is written or measured
    check_output_dir(config.out)  # else found only when saving, after all the measuring
    here = local_device(config.threads, config.mcpu)
    choices = []  # shipped bases to choose from once measured: no base named, none fitted here
    if config.model is None:
        fitted = fitted_for(here)
        config = replace(config, model=fitted or "default")
        choices = [] if fitted else shipped_device_models()
    candidates = list(tasks) if tasks is not None else select(config.ops, config.networks)
    base = unscaled(load_estimator(config.model))  # a rescaled base: start from its own base
    # members of other kinds (the shipped default's XGBoost) stay in the model, which is
    # then rescaled as a whole; the first CDMPP member chooses the tasks
    members = cdmpp_members(base, config.model)
    first = members[0]
    # --data of another device is refused before anything is written (a database without
    # device.json, as TVM's own tuner writes, is taken when its target is this one's)
    _check_data_devices(config.data, (here.device_id, target_device_id(here.target)))
    # the measured device, kept in the data directory: the collector reuses its figures, and
    # a resumed calibration gives the same device vector
    device, _ = claim_measured_device(config.data_dir, config.threads, config.mcpu)
    vector = base_device_vector(first, device, config.model)
    measure = config.tasks != 0 and (config.tasks, config.budget_minutes) != (None, None)
    everything = None  # every candidate's default program: to choose from, and to adapt to
    if measure or config.adapt:
        log(f"embedding {len(candidates)} tasks with {config.model}")
        everything = default_programs(candidates, device.target).with_device(vector)
    chosen = _measure(config, candidates, everything, first, device, start, log,
                      progress) if measure else []
    # every task measured in the data directory: those of earlier runs too (a rerun with
    # another budget or k chooses other tasks; what was measured for this device still counts);
    # --data's devices were checked above
    train, n_extra, sources = _training_programs(config.data_dir, None, config.data)
    tasks_of_rows = list(train.programs.task or ())
    n_own = len(tasks_of_rows) - n_extra
    have = set(tasks_of_rows[:n_own])
    measured = [t for t in chosen if t in have]
    earlier = sorted(have - set(chosen))
    if len(train.latency_s) < 2:
        raise RuntimeError(f"only {len(train.latency_s)} program(s) measured in "
                           f"{config.data_dir}" + "".join(f", {d}" for d in config.data) +
                           (": raise the budget" if measure else ""))
    spreads = {}
    if len(choices) > 1 and len(train.latency_s) >= MIN_PROGRAMS_TO_CHOOSE:
        name, spreads = choose_base(choices, device, train.programs, train.latency_s)
        log(f"base chosen by the {len(train.latency_s)} programs measured here: {name} "
            "(mean |log measured / predicted| after one factor: " +
            ", ".join(f"{n} {v:.3f}" for n, v in spreads.items()) + ")")
        if name != config.model:
            config = replace(config, model=name)
            base, members, vector = _base_parts(name, device)
            if everything is not None:
                everything = everything.with_device(vector)
    if config.rescale:
        model = rescaled_model(config.model, device, vector, train.programs, train.latency_s,
                               config.neighbors)
        low, high = model.scale_interval_
        log(f"rescaled {config.model} for device {device.device_id}: x{model.scale_:.3f}, the "
            f"median of measured / predicted over {len(train.latency_s)} programs (90% "
            f"bootstrap interval x{low:.3f}-{high:.3f}: a wide one says measure more tasks)"
            + (f"; each program by its {config.neighbors} nearest of them" if config.neighbors
               else ""))
    else:
        weight = balanced_weights(sources) if config.balance else None
        if weight is not None:
            each, counts = dict(zip(sources, weight)), Counter(sources)
            log("each source weighs the same: " + ", ".join(
                f"{src} {counts[src]} programs x{w:.2f}" for src, w in each.items()))
        model = fine_tuned_model(base, members, train.programs.with_device(vector),
                                 train.latency_s, config, vector,
                                 unlabeled=everything if config.adapt else None, log=log,
                                 progress=progress, weight=weight)
    info = {"base_model": str(config.model), "base_spreads": spreads,
            "device_id": device.device_id,
            "selection": config.selection if measure else None, "tasks": measured,
            "earlier_tasks": earlier,
            "records": int(len(train.latency_s)), "data": str(config.data_dir),
            "extra_data": [str(d) for d in config.data],
            "extra_records": n_extra,
            "extra_tasks": sorted(set(tasks_of_rows[n_own:])),
            "balanced": config.balance, "refit": config.refit,
            "adapt": config.adapt, "fine_tunes": 0 if config.rescale else fine_tunes_for(base, config),
            # a base's top-level weights, chosen for this device when it holds other kinds
            **({"weights": _top_weights(model)}
               if not config.rescale and holds_other_kinds(base) else {}),
            # a rescale, or a fine-tuning that rescaled the members it could not fine-tune
            **({"rescale": model.scale_, "rescale_interval_90": model.scale_interval_,
                "rescale_neighbors": model.neighbors}
               if isinstance(model, ScaledRegressor) else {}),
            "minutes": round((time.monotonic() - start) / 60.0, 2)}
    save_estimator(model, config.out, trained_on=info, device=device)
    log(f"saved {config.out}: {'rescaled' if config.rescale else 'fine-tuned'} on "
        f"{info['records']} programs ({len(measured)} tasks "
        f"chosen now, {len(earlier)} more measured by earlier runs in {config.data_dir}, "
        f"{n_extra} programs from --data) in {info['minutes']} min")
    return info


def _top_weights(model) -> list[float]:
    """The weights of the ensemble under any rescale and default-program expert of `model`."""
    from cdmpp.model.default_expert import DefaultExpertRegressor
    from cdmpp.model.scaled import unscaled

    if isinstance(model, DefaultExpertRegressor):
        model = model.model_
    return [float(w) for w in unscaled(model).weights_]


def rescaled_model(spec, device, vector, programs, latency_s, neighbors: int = 0):
    """`ScaledRegressor` of model `spec` asked about `device` (its own vector when the model
    was trained on it, else zero-shot from `device`'s; a model without a device encoder as it
    is), its factor (or with `neighbors`, each program's) learned from `programs` measured
    here."""
    from cdmpp.model.registry import knows_device, load_estimator
    from cdmpp.model.scaled import ScaledRegressor, unscaled

    if vector is None:
        base = load_estimator(spec)
    else:
        here = device.device_id if knows_device(spec, device.device_id) else device
        base = load_estimator(spec, for_device=here)
    return ScaledRegressor(unscaled(base), neighbors).fit(programs, latency_s)


def choose_base(names, device, programs, latency_s) -> tuple[str, dict[str, float]]:
    """The model of `names` whose predictions for `device` (as `rescaled_model` asks it) one
    factor maps best onto `latency_s` measured here: the least mean |log(measured /
    predicted)| once each is rescaled by its median ratio. A device like one a model was fitted
    for differs from it mostly by its speed; returns the name and every model's spread."""
    import numpy as np

    latency_s = np.asarray(latency_s, dtype=np.float64)
    spreads = {}
    for name in names:
        model = rescaled_model(name, device, _base_parts(name, device)[2], programs, latency_s)
        spreads[name] = float(np.mean(np.abs(np.log(latency_s / model.predict(programs)))))
    return min(spreads, key=spreads.get), spreads


def _base_parts(name, device):
    """(base, its CDMPP members, the device vector of `device` they read) of model `name`,
    under any rescale."""
    from cdmpp.model.registry import load_estimator
    from cdmpp.model.scaled import unscaled

    base = unscaled(load_estimator(name))
    members = cdmpp_members(base, name)
    return base, members, base_device_vector(members[0], device, name)


def _check_data_devices(data, device_ids: tuple) -> None:
    """Every database of `data` was measured on a device of `device_ids` (this device's
    names), by its device.json, or its records' target when it has none (the device the
    feature store gives its records): a calibration learns this device's latencies only."""
    from cdmpp.features.samples import device_id_of
    from cdmpp.measure.database import find_databases, load_database

    for root in data:
        for path in find_databases(root):
            records = load_database(path, strict=False).records
            device = device_id_of(path, records[0].target) if records else None
            if device is not None and device not in device_ids:
                raise ValueError(f"{path} was measured on device {device}, not on this one "
                                 f"({device_ids[0]}): calibrate fine-tunes on this device's "
                                 "measurements only")


def _measure(config: CalibrateConfig, candidates, everything, embedder, device, start, log,
             progress) -> list[str]:
    """Choose the tasks and measure them into `config.data_dir`; the chosen names, in order."""
    from cdmpp.measure.collect import CollectConfig, collect

    fits = (None if config.budget_minutes is None else
            tasks_for_budget(config.budget_minutes, config.programs_per_task))
    k = min(config.tasks or OVERBOOK * fits, len(candidates))
    chosen = choose_tasks(embedder, everything, k, config.selection, config.seed,
                          round_size=None if config.tasks else fits)
    log(f"{config.selection} chose {k} tasks" + ("" if config.tasks else
        " (in order; measured until the budget is spent)") + f": {', '.join(chosen)}")
    budget = None
    if config.budget_minutes is not None:
        spent = (time.monotonic() - start) / 60.0
        budget = max(0.5, config.budget_minutes * MEASURE_SHARE - spent)
    by_name = {t.name: t for t in candidates}
    summary = collect(CollectConfig(out=str(config.data_dir),
                                    programs_per_task=config.programs_per_task,
                                    threads=device.threads, mcpu=config.mcpu,
                                    time_budget_min=budget, seed=config.seed),
                      [by_name[n] for n in chosen], progress=progress,
                      command=f"cdmpp calibrate --out {config.out}")
    log(str(summary))
    return chosen


def measured_programs(data_dir: Path, tasks=None, extra=(), device_ids: tuple = ()):
    """Labeled programs of `tasks` (None: every task) from a collection directory, and every
    program of the collections `extra` (features extracted into `<data_dir>/features`)."""
    return _training_programs(data_dir, tasks, extra, device_ids)[0]


def balanced_weights(sources) -> "np.ndarray":
    """Each program's weight when every source weighs the same in all: 1 / (its source's
    program count), scaled to a mean of 1 (the loss keeps its size, so the learning rate its
    meaning). Each batch's loss is the weighted mean of its own programs, so a small source's
    share of an epoch comes out below an equal one (24 kernels beside 520 programs, batches of
    16: about a third, against 4% unweighted)."""
    import numpy as np

    counts = Counter(sources)
    weight = np.array([1.0 / counts[src] for src in sources])
    return weight * (len(weight) / weight.sum())


def _training_programs(data_dir: Path, tasks, extra=(), device_ids: tuple = ()):
    """(`measured_programs`, how many of them come from `extra`: the last ones, the database
    each program comes from). Records of
    `extra` whose device is not in `device_ids` (this device's names; empty: any) are an error
    naming the database: a calibration learns this device's latencies only."""
    import numpy as np

    from cdmpp.dataset.loader import default_program_mask, labeled
    from cdmpp.features.build import build_store
    from cdmpp.features.store import FeatureStore
    from cdmpp.measure.database import RECORD_FILE

    if device_ids:
        _check_data_devices(extra, device_ids)  # before anything is extracted
    store_dir = Path(data_dir) / "features"
    has_own = (Path(data_dir) / RECORD_FILE).exists()  # not when nothing was measured
    sources = [data_dir] * has_own + list(extra)
    build_store(sources, store_dir, progress=False)
    store = FeatureStore(store_dir)
    samples = store.samples(databases=sources)  # not what earlier calls added to the store
    own_root, wanted = Path(data_dir).resolve(), None if tasks is None else set(tasks)
    own, others = [], []
    latency = samples.column("latency_s").to_numpy()
    dbs = samples.column("db").to_pylist()
    for i, (db, task) in enumerate(zip(dbs, samples.column("task").to_pylist())):
        if Path(db).resolve() == own_root:
            if (wanted is None or task in wanted) and np.isfinite(latency[i]):
                own.append(i)
        elif np.isfinite(latency[i]):
            others.append(i)
    rows = own + others
    data = labeled(store, samples, rows)
    # flagged as at prediction time, where a model's default-program expert joins on them: a
    # rescale's factor is learned from the predictions it will scale
    flags = default_program_mask(samples, rows)
    return (replace(data, programs=replace(data.programs, default=flags)), len(others),
            [dbs[i] for i in rows])
