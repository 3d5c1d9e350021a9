"""A cost model for TVM's meta_schedule tuner: a cdmpp estimator scores the candidates.

    import cdmpp.tune
    from tvm.s_tir import meta_schedule as ms

    database = ms.tune_tir(func, target, "work_dir", max_trials_global=64,
                           cost_model=cdmpp.tune.cost_model())   # shipped model, this machine
    database = ms.tune_tir(func, target, "work_dir", max_trials_global=64,
                           cost_model=cdmpp.tune.cost_model("xgb"))  # shipped XGBoost baseline

Every candidate is featurized with `cdmpp.features.extract` on its schedule (the post-processed
program the runner would time, as the collector's records are) and predicted by the estimator.
The score TVM receives is `1e-6 / predicted seconds`: higher is faster, and one scale for every
call, because the evolutionary search keeps its best candidates across generations by score.

With `online` (the default) it also learns from the tuner's own measurements: an XGBoost
fitted on the log of measured over predicted latency (per-store features summed per program,
as the baselines see them) corrects the estimator once `min_online_samples` programs have
been timed. `online=False` scores with the estimator alone. In `benchmarks/tune.py` with the
device's threads the two were level within the re-timing's noise (best found 1.026x and
1.021x the best of four cost models, geometric mean of six runs; docs/tune.md); the 5-of-6
lead that made `online` the default was measured with one thread in TVM's runner.
"""

from __future__ import annotations

import functools
import io
import warnings
from collections import OrderedDict

import numpy as np

from cdmpp.atomic import write_bytes_atomic

SCORE_SCALE_S = 1e-6  # score = SCORE_SCALE_S / predicted seconds: 1.0 for a 1 us program


class CandidateScorer:
    """The state behind the cost model, free of TVM's callback interface (so it can be tested
    and reused): predicted seconds of schedules, a cache of them, and the online correction."""

    def __init__(self, estimator, *, online: bool = True, min_online_samples: int = 32,
                 cache_size: int = 100_000, seed: int = 0, threads: int | None = None):
        self.estimator = estimator
        self.threads = threads  # featurizing threads (None: the cores this process may use)
        self.online = online
        self.min_online_samples = min_online_samples
        self.cache_size = cache_size
        self.seed = seed
        self._cache: OrderedDict = OrderedDict()  # structural hash -> (summed features, seconds)
        self.failed = 0  # candidates that could not be featurized (scored 0)
        self.measured_x: list[np.ndarray] = []  # online: summed features of timed programs
        self.measured_log_ratio: list[float] = []  # online: log(measured / predicted)
        self.correction_ = None  # the fitted online correction (an xgboost.XGBRegressor)

    def _estimate(self, schedules, target) -> list[tuple[np.ndarray, float] | None]:
        """(summed features, estimator seconds) of each schedule, None where it cannot be
        featurized; each distinct program is featurized and predicted once."""
        import tvm_ffi

        from cdmpp.dataset.programs import ProgramSet
        from cdmpp.features.parallel import extract_each

        keys = [tvm_ffi.structural_hash(sch.mod) for sch in schedules]
        todo: dict[int, object] = {}
        for key, sch in zip(keys, schedules):
            if key not in self._cache and key not in todo:
                todo[key] = sch
        asts, new_keys = [], []
        # on the cores the tuner leaves idle while it waits for the scores
        found = extract_each(todo.values(), target, threads=self.threads)
        for key, ast in zip(todo, found):
            if not isinstance(ast, Exception):
                asts.append(ast)
                new_keys.append(key)
                continue
            self.failed += 1  # one odd candidate must not stop the tuner
            self._remember(key, None)
            if self.failed == 1:
                warnings.warn(f"cdmpp cannot featurize a tuning candidate "
                              f"({type(ast).__name__}: {ast}); such candidates score 0",
                              stacklevel=3)
        if asts:
            programs = ProgramSet(tuple(a.leaf_features for a in asts),
                                  tuple(a.leaf_pos for a in asts))
            seconds = np.asarray(self.estimator.predict(programs), dtype=np.float64).reshape(-1)
            summed = programs.summed()
            for i, key in enumerate(new_keys):
                ok = np.isfinite(seconds[i]) and seconds[i] > 0
                self._remember(key, (summed[i], float(seconds[i])) if ok else None)
        return [self._cache[key] for key in keys]

    def _remember(self, key, value) -> None:
        self._cache[key] = value
        self._cache.move_to_end(key)
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)

    def predict_s(self, schedules, target) -> np.ndarray:
        """Predicted seconds of each schedule (NaN where it cannot be featurized), with the
        online correction when one is fitted."""
        found = self._estimate(schedules, target)
        seconds = np.array([np.nan if f is None else f[1] for f in found])
        if self.correction_ is not None and any(f is not None for f in found):
            rows = [i for i, f in enumerate(found) if f is not None]
            x = np.stack([found[i][0] for i in rows])
            seconds[rows] *= np.exp(self.correction_.predict(x))
        return seconds

    def scores(self, schedules, target) -> np.ndarray:
        """What TVM's search ranks by: SCORE_SCALE_S / predicted seconds, 0 where unknown."""
        seconds = self.predict_s(schedules, target)
        with np.errstate(invalid="ignore", divide="ignore"):
            out = SCORE_SCALE_S / seconds
        return np.where(np.isfinite(out) & (out > 0), out, 0.0).astype(np.float64)

    def observe(self, schedules, run_secs, target) -> None:
        """Timings of schedules (`run_secs` lists; None or an invalid list for a failed run).
        With `online`, refits the correction once enough programs are timed."""
        if not self.online:
            return
        from cdmpp.types import check_run_secs

        timed = [(sch, min(secs)) for sch, secs in zip(schedules, run_secs)
                 if secs is not None and check_run_secs(list(secs)) is None]
        if not timed:
            return
        found = self._estimate([sch for sch, _ in timed], target)
        for (_, measured), f in zip(timed, found):
            if f is not None:
                self.measured_x.append(f[0])
                self.measured_log_ratio.append(float(np.log(measured / f[1])))
        if len(self.measured_log_ratio) >= self.min_online_samples:
            self._fit_correction()

    def _fit_correction(self) -> None:
        import xgboost as xgb

        model = xgb.XGBRegressor(n_estimators=50, max_depth=3, learning_rate=0.1,
                                 subsample=0.8, random_state=self.seed, n_jobs=1)
        model.fit(np.stack(self.measured_x), np.array(self.measured_log_ratio))
        self.correction_ = model

    def state(self) -> dict:
        return {"measured_x": np.stack(self.measured_x) if self.measured_x
                else np.zeros((0, 0)), "measured_log_ratio": np.array(self.measured_log_ratio)}

    def set_state(self, state) -> None:
        self.measured_x = list(np.asarray(state["measured_x"], dtype=np.float64))
        self.measured_log_ratio = [float(v) for v in state["measured_log_ratio"]]
        self.correction_ = None
        if self.online and len(self.measured_log_ratio) >= self.min_online_samples:
            self._fit_correction()


def cost_model(model=None, *, online: bool = True, min_online_samples: int = 32,
               seed: int = 0, threads: int | None = None):
    """A `tvm.s_tir.meta_schedule.cost_model.CostModel` for `tune_tir`/`tune_relax`/`TuneContext`.

    `model`: as `cdmpp.load_model` takes it (None: the shipped model for this machine).
    `online`: also learn a correction from the tuner's measurements (see the module's doc;
    False: the estimator alone). `threads`: how many candidates are featurized at once
    (default: the cores this process may use; `cdmpp.features.parallel`).
    The candidates are featurized for the tuning context's target. `save(path)` writes the
    online measurements (npz) and `load(path)` reads them back."""
    from cdmpp.api import load_model

    scorer = CandidateScorer(load_model(model), online=online,
                             min_online_samples=min_online_samples, seed=seed, threads=threads)
    return _cost_model_class()(scorer)


@functools.cache
def _cost_model_class():
    """The PyCostModel subclass, made on first use: `import cdmpp.tune` imports no TVM."""
    from cdmpp.tvm_env import import_tvm

    import_tvm()
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.cost_model import PyCostModel

    @derived_object
    class CdmppCostModel(PyCostModel):
        """cdmpp's estimator as meta_schedule's cost model (`cdmpp.tune.cost_model`)."""

        def __init__(self, scorer: CandidateScorer):
            super().__init__()
            self.scorer = scorer

        def predict(self, context, candidates):
            return self.scorer.scores([c.sch for c in candidates], context.target)

        def update(self, context, candidates, results):
            run_secs = [None if r.error_msg else [float(s) for s in r.run_secs or []]
                        for r in results]
            self.scorer.observe([c.sch for c in candidates], run_secs, context.target)

        def save(self, path):
            buf = io.BytesIO()
            np.savez(buf, **self.scorer.state())
            write_bytes_atomic(path, buf.getvalue())

        def load(self, path):
            with np.load(path) as state:
                self.scorer.set_state(state)

    return CdmppCostModel
