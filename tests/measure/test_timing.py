"""Pass statistics, the label, the noise floor, and interleaved timing of real programs."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from cdmpp.measure.noise import noise_floor
from cdmpp.measure.timing import Protocol, Timer, random_args
from cdmpp.types import Measurement, check_run_secs


def test_run_secs_grouped_into_passes():
    m = Measurement.from_run_secs([1.0, 1.2, 1.1, 2.0, 2.0, 2.1], repeats_per_pass=3)
    assert m.pass_medians_s == (1.1, 2.0)
    assert m.latency_s == 1.0  # the fastest repeat
    assert m.pass_to_pass_rel == pytest.approx(0.9 / 1.1)
    # a length that does not divide into passes falls back to one pass per value
    assert len(Measurement.from_run_secs([1.0, 2.0], repeats_per_pass=3).passes) == 2


def test_noise_rel_is_gap_of_two_best_passes():
    m = Measurement.from_run_secs([1.0, 1.5, 1.02], repeats_per_pass=1)
    assert m.noise_rel == pytest.approx(0.02)
    m = Measurement.from_run_secs([1.0, 1.3, 1.1, 1.3], repeats_per_pass=2)
    assert m.noise_rel == pytest.approx(0.1)
    assert Measurement.from_run_secs([1.0]).noise_rel is None


def test_noise_floor_shares():
    ms = [Measurement.from_run_secs([1.0, r]) for r in (1.01, 1.04, 1.08, 1.5)]
    floor = noise_floor(ms)
    assert floor.n == 4
    assert floor.within_5 == 0.5 and floor.within_10 == 0.75
    assert floor.median_pass_to_pass_rel == pytest.approx(0.06)
    assert "4 records" in str(floor)


@pytest.mark.parametrize("bad", [None, [], [float("nan")], [0.0], [-1.0], [1e10], ["x"]])
def test_invalid_run_secs_are_explained(bad):
    assert check_run_secs(bad)


def test_interleaved_passes_on_real_programs():
    from cdmpp.device import local_device
    from cdmpp.measure.build import compile_module
    from cdmpp.tvm_env import import_tvm
    from conftest import MATMUL_64, SOFTMAX_SMALL

    tvm = import_tvm()
    target = local_device().target
    timer = Timer(Protocol(repeat=2, min_repeat_ms=1, passes=3, max_extra_passes=0), target)
    programs = []
    for task in (MATMUL_64, SOFTMAX_SMALL):
        mod = tvm.IRModule({"main": task.prim_func().with_attr("global_symbol", "main")})
        from tvm.s_tir.meta_schedule.arg_info import ArgInfo

        from cdmpp.measure import tvm_codec
        args = tvm_codec.args_info_to_json(ArgInfo.from_prim_func(mod["main"]))
        programs.append((task.name, compile_module(mod, target).jit(),
                         random_args(args, timer.device)))
    out = timer.measure_batch(programs)
    for task in (MATMUL_64, SOFTMAX_SMALL):
        m = out[task.name]
        assert len(m.passes) == 3 and len(m.run_secs) == 6
        assert all(p.ref_ratio >= 1.0 for p in m.passes)
        assert m.latency_s == min(m.run_secs) > 0


def test_clean_passes_counts_undisturbed_passes():
    from cdmpp.types import Measurement

    m = Measurement.from_run_secs([1.0, 1.1, 3.0, 3.1], 2, [1.05, 2.5])
    assert m.clean_passes(0.10) == 1 and m.clean_passes(2.0) == 2
    assert Measurement.from_run_secs([1.0, 1.1], 2).clean_passes(0.10) is None


@pytest.mark.parametrize("wait_s", [0.0, 5.0])
def test_timer_waits_while_the_reference_kernel_is_slow(monkeypatch, wait_s):
    from cdmpp.device import local_device

    timer = Timer(Protocol(quiet_wait_s=wait_s), local_device().target)
    ratios = iter([3.0, 2.0, 1.02])
    monkeypatch.setattr(timer, "ref_ratio", lambda: next(ratios))
    monkeypatch.setattr("time.sleep", lambda s: None)
    waited = timer.wait_for_quiet()
    assert waited >= 0 and timer.waited_s == waited
    # waiting: the burst (3.0, 2.0) is sat out; not waiting: the reference is not even timed
    assert next(ratios, None) is (None if wait_s else 3.0)


def test_the_wait_ends_once_the_reference_is_within_wait_slow_rel(monkeypatch):
    from cdmpp.device import local_device

    timer = Timer(Protocol(wait_slow_rel=0.5, quiet_wait_s=5.0), local_device().target)
    ratios = iter([1.6, 1.4, 99.0])  # 1.6x: still a burst; 1.4x: quiet enough to time
    monkeypatch.setattr(timer, "ref_ratio", lambda: next(ratios))
    monkeypatch.setattr("time.sleep", lambda s: None)
    timer.wait_for_quiet()
    assert next(ratios) == 99.0  # both read, and no more


def _stats(min_s: float, ref_ratio: float = 1.0):
    from cdmpp.types import PassStats

    return PassStats((min_s, min_s * 1.01), ref_ratio, None)


def test_passes_that_disagree_or_are_disturbed_ask_for_more():
    timer = Timer.__new__(Timer)  # needs_more reads only the protocol
    timer.protocol = Protocol(tolerance_rel=0.03, ref_slow_rel=0.10)
    assert not timer.needs_more([_stats(1.0), _stats(1.02), _stats(1.5)])
    assert timer.needs_more([_stats(1.0), _stats(1.05)])  # two best 5% apart
    # the fast pass was disturbed (reference 1.2x): one clean pass is not enough
    assert timer.needs_more([_stats(1.0, 1.2), _stats(1.01)])
    assert not timer.needs_more([_stats(1.0, 1.2), _stats(1.01), _stats(1.02)])


def test_programs_whose_passes_disagree_get_extra_passes(monkeypatch):
    from cdmpp.device import local_device

    timer = Timer(Protocol(passes=3, max_extra_passes=2, tolerance_rel=0.03),
                  local_device().target)
    monkeypatch.setattr(timer, "ref_ratio", lambda: 1.0)
    monkeypatch.setattr(timer, "wait_for_quiet", lambda: 0.0)
    runs = {"steady": iter([1e-3] * 10), "noisy": iter([1e-3, 2e-3, 3e-3, 4e-3, 5e-3, 6e-3])}

    def evaluator(key):  # stands for time_evaluator on the program `key`
        return lambda *args: SimpleNamespace(results=(next(runs[key]),))

    monkeypatch.setattr(timer, "evaluator", evaluator)
    out = timer.measure_batch([("steady", "steady", []), ("noisy", "noisy", [])])
    assert len(out["steady"].passes) == 3  # agreeing passes: no extra pass
    assert len(out["noisy"].passes) == 5  # 3 + max_extra_passes, as they never agree
    assert out["noisy"].latency_s == 1e-3


@pytest.mark.parametrize("every_pass", [True, False])
def test_warm_up_once_times_long_programs_run_by_run(monkeypatch, every_pass):
    from cdmpp.device import local_device
    from cdmpp.measure import timing
    from cdmpp.measure.build import compile_module
    from cdmpp.measure.tvm_codec import args_info_to_json
    from cdmpp.tvm_env import import_tvm
    from conftest import MATMUL_64
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    tvm = import_tvm()
    target = local_device().target
    # min_repeat_ms=0: every program counts as one whose runs each last min_repeat_ms
    protocol = Protocol(repeat=2, min_repeat_ms=0, passes=3, max_extra_passes=0,
                        warm_up_every_pass=every_pass)
    timer = Timer(protocol, target)
    mod = tvm.IRModule({"main": MATMUL_64.prim_func().with_attr("global_symbol", "main")})
    args = random_args(args_info_to_json(ArgInfo.from_prim_func(mod["main"])), timer.device)
    built = compile_module(mod, target).jit()
    calls = []
    original = timing.Timer.run_by_run

    def spy(self, call):
        evaluate = original(self, call)
        return lambda *a: calls.append(1) or evaluate(*a)

    monkeypatch.setattr(timing.Timer, "run_by_run", spy)
    m = timer.measure_batch([("mm", built, args)])["mm"]
    assert len(m.passes) == 3 and all(len(p.values_s) == 2 for p in m.passes)
    assert m.latency_s == min(m.run_secs) > 0
    # the first pass always goes through time_evaluator (its warm-up); the rest run by run
    assert len(calls) == (0 if every_pass else 2)


def test_run_by_run_calls_a_bound_program():
    from cdmpp.device import local_device
    from cdmpp.measure.timing import _entry_call

    class Bound:  # like e2e.measure.VMProgram: inputs bound, `run()` takes none
        runs = 0

        def run(self):
            Bound.runs += 1

    timer = Timer(Protocol(repeat=3), local_device().target)
    values = timer.run_by_run(_entry_call(Bound(), []))().results
    assert Bound.runs == 3 and len(values) == 3 and all(v >= 0 for v in values)
    assert _entry_call(object(), []) is None
