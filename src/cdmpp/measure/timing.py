"""Time built programs on the local CPU in interleaved passes, with a reference kernel.

Interference on shared VMs comes in bursts that slow everything for seconds. So:
- every program is timed once per pass, and passes go over the whole batch (interleaved), so
  the passes of one program are seconds apart;
- a small fixed reference kernel is timed just before each program; its slowdown against its
  best time in this run tells whether the machine was disturbed during that pass;
- a program whose two best passes disagree by more than `tolerance_rel`, or that has fewer
  than two undisturbed passes, gets extra passes (up to `max_extra_passes`);
- before each pass, while the reference kernel runs more than `wait_slow_rel` slower than its
  best (measured here: bursts where it ran 2-11x slow, and the programs timed then got labels
  up to several times too high, with passes that agree with each other), the timer waits, up to
  `quiet_wait_s`, for the burst to pass. Records that still got no undisturbed pass are
  re-timed later with `cdmpp collect --remeasure-disturbed`.
The label is the minimum over all repeats of all passes (see types.Measurement).
With `Protocol(memory_probe=True)` a memory-streaming kernel is also timed before each pass: it
tells which of two placements the host gave our threads, which the reference kernel (it fits in
L2) cannot (`measure.placement`).
A program whose runs each take `min_repeat_ms` or more is timed by time_evaluator in its first
pass only (which warms it up), then run by run without another warm-up.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Callable, Sequence

import numpy as np

from cdmpp.measure.build import ENTRY
from cdmpp.tvm_env import import_tvm
from cdmpp.types import Measurement, PassStats


@dataclass(frozen=True)
class Protocol:
    """How each program is timed. Defaults are the measured choice (docs/measurement.md)."""

    number: int = 1  # runs per repeat; time_evaluator grows it to reach min_repeat_ms
    repeat: int = 3  # repeats per pass
    min_repeat_ms: int = 20
    passes: int = 3
    max_extra_passes: int = 2
    tolerance_rel: float = 0.03  # two best passes further apart than this: measure again
    ref_slow_rel: float = 0.10  # reference kernel this much slower than its best: pass disturbed
    flush_cache: bool = False  # flush CPU caches before each run (TVM's cache_flush_cpu_non_first_arg)
    wait_slow_rel: float = 0.5  # reference kernel this much slower: wait before the pass ...
    quiet_wait_s: float = 20.0  # ... for at most this long (0: never wait)
    # TVM's time_evaluator runs the program once, untimed, before every pass: for a program
    # whose every run takes min_repeat_ms or more, a quarter of the pass. False: such a
    # program is warmed up in its first pass only, then timed run by run (docs/measurement.md)
    warm_up_every_pass: bool = False
    memory_probe: bool = False  # time `placement.memory_probe_kernel` before each pass

    def to_json(self) -> dict:
        return asdict(self)


def random_args(args_info_json: Sequence, device, seed: int = 0) -> list:
    """Arrays for a program's arguments, from its `args_info` JSON (`["TENSOR", dtype, shape]`)."""
    tvm = import_tvm()
    rng = np.random.default_rng(seed)
    arrays = []
    for info in args_info_json:
        if info[0] != "TENSOR":
            raise ValueError(f"unsupported argument kind {info[0]!r} in args_info")
        dtype, shape = info[1], tuple(int(s) for s in info[2])
        if np.issubdtype(np.dtype(dtype), np.floating):
            data = rng.uniform(-1, 1, size=shape).astype(dtype)
        else:
            data = np.zeros(shape, dtype=dtype)
        arrays.append(tvm.runtime.tensor(data, device))
    return arrays


def matmul_schedule(m: int, k: int, n: int):
    """An unscheduled float32 matmul C[m, n] = A[m, k] @ B[k, n], as an `s_tir.Schedule` to
    schedule (block "C"; parameters A, B, C)."""
    tvm = import_tvm()
    from tvm import s_tir, te

    a = te.placeholder((m, k), name="A")
    b = te.placeholder((k, n), name="B")
    r = te.reduce_axis((0, k), name="k")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
    return s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func([a, b, c])}))


def reference_kernel(target: dict, size: int = 128):
    """A fixed, parallel matmul: its time tracks how fast the machine is right now."""
    sch = matmul_schedule(size, size, size)
    i, _, _ = sch.get_loops(sch.get_sblock("C"))
    sch.parallel(i)
    from cdmpp.measure.build import compile_module

    return compile_module(sch.mod, target).jit(), [["TENSOR", "float32", [size, size]]] * 3


@dataclass(frozen=True)
class _Results:
    results: tuple  # seconds per repeat, as time_evaluator's result has them


def _entry_call(rt_mod, args) -> Callable[[], object] | None:
    """A call of the program's entry with its arguments (None when there is none to call)."""
    run = getattr(rt_mod, "run", None)
    if callable(run):  # a program with its inputs bound (e2e.measure.VMProgram)
        return run
    try:
        func = rt_mod.get_function(ENTRY)
    except Exception:  # noqa: BLE001 - no entry to call: time_evaluator keeps timing it
        return None
    return lambda: func(*args)


class Timer:
    """Times programs with one protocol on the local CPU, tracking the reference kernel."""

    def __init__(self, protocol: Protocol, target: dict):
        tvm = import_tvm()
        self.protocol = protocol
        self.device = tvm.cpu()
        ref_mod, ref_args = reference_kernel(target)
        self._ref = ref_mod.time_evaluator(ENTRY, self.device, number=1, repeat=1,
                                           min_repeat_ms=5)
        self._ref_args = random_args(ref_args, self.device)
        self.ref_best_s = min(self._time_ref() for _ in range(5))
        self.waited_s = 0.0  # time spent waiting for a quiet machine
        self._probe = None
        if protocol.memory_probe:
            from cdmpp.measure.placement import memory_probe_kernel

            probe_mod, probe_args = memory_probe_kernel(target)
            self._probe = probe_mod.time_evaluator(ENTRY, self.device, number=1, repeat=3)
            self._probe_args = random_args(probe_args, self.device)

    def memory_probe_s(self) -> float | None:
        """The memory probe's best of three runs now (None without `memory_probe`)."""
        if self._probe is None:
            return None
        return float(min(self._probe(*self._probe_args).results))

    def _time_ref(self) -> float:
        return float(self._ref(*self._ref_args).results[0])

    def ref_ratio(self) -> float:
        now = self._time_ref()
        self.ref_best_s = min(self.ref_best_s, now)
        return now / self.ref_best_s

    def wait_for_quiet(self) -> float:
        """Wait (at most `quiet_wait_s`) while the reference kernel says the machine is far
        slower than its best; return the seconds waited."""
        p = self.protocol
        if p.quiet_wait_s <= 0:
            return 0.0
        start = time.monotonic()
        while (self.ref_ratio() > 1 + p.wait_slow_rel
               and time.monotonic() - start < p.quiet_wait_s):
            time.sleep(0.25)
        waited = time.monotonic() - start
        self.waited_s += waited
        return waited

    def evaluator(self, rt_mod) -> Callable:
        p = self.protocol
        extra = {"f_preproc": "cache_flush_cpu_non_first_arg"} if p.flush_cache else {}
        return rt_mod.time_evaluator(ENTRY, self.device, number=p.number, repeat=p.repeat,
                                     min_repeat_ms=p.min_repeat_ms, **extra)

    def one_pass(self, evaluator, args) -> PassStats:
        probe = self.memory_probe_s()  # first: it evicts the caches, the reference refills L2
        ratio = self.ref_ratio()
        values = tuple(float(v) for v in evaluator(*args).results)
        return PassStats(values, round(ratio, 4), probe)

    def run_by_run(self, call: Callable[[], object]) -> Callable:
        """An evaluator for a program that takes `min_repeat_ms` or more per run: `repeat`
        runs, each timed alone, no warm-up (what time_evaluator does with number=1, minus its
        warm-up run)."""
        repeat = self.protocol.repeat

        def evaluate(*_args):
            values = []
            for _ in range(repeat):
                start = time.perf_counter()
                call()
                values.append(time.perf_counter() - start)
            return _Results(tuple(values))

        return evaluate

    def _long_enough(self, stats: PassStats) -> bool:
        """Every run of the pass lasted min_repeat_ms: time_evaluator ran them one by one."""
        p = self.protocol
        return (not p.warm_up_every_pass and p.number == 1 and not p.flush_cache
                and min(stats.values_s) * 1e3 >= p.min_repeat_ms)

    def needs_more(self, passes: list[PassStats]) -> bool:
        p = self.protocol
        clean = sorted(s.min_s for s in passes if s.undisturbed(p.ref_slow_rel))
        if len(clean) < 2:
            return True
        return (clean[1] - clean[0]) / clean[0] > p.tolerance_rel

    def measure_batch(self, programs: Sequence[tuple[str, object, list]],
                      on_pass: Callable[[], None] | None = None) -> dict[str, Measurement]:
        """Time `(key, runtime_module, args)` programs in interleaved passes.

        A program that raises while running is returned as an exception instead of a
        Measurement, so one bad program does not lose the batch.
        """
        evaluators = {key: self.evaluator(mod) for key, mod, _ in programs}
        modules = {key: mod for key, mod, _ in programs}
        args = {key: a for key, _, a in programs}
        passes: dict[str, list[PassStats]] = {key: [] for key, _, _ in programs}
        errors: dict[str, Exception] = {}

        def run(keys):
            self.wait_for_quiet()
            for key in keys:
                if key in errors:
                    continue
                try:
                    stats = self.one_pass(evaluators[key], args[key])
                    passes[key].append(stats)
                    if len(passes[key]) == 1 and self._long_enough(stats):
                        call = _entry_call(modules[key], args[key])
                        if call is not None:
                            evaluators[key] = self.run_by_run(call)
                except Exception as e:  # noqa: BLE001 - the program failed to run
                    errors[key] = e
            if on_pass:
                on_pass()

        keys = list(passes)
        for _ in range(self.protocol.passes):
            run(keys)
        for _ in range(self.protocol.max_extra_passes):
            flagged = [k for k in keys if k not in errors and self.needs_more(passes[k])]
            if not flagged:
                break
            run(flagged)
        out: dict = dict(errors)
        for key in keys:
            if key not in errors:
                flat = tuple(v for s in passes[key] for v in s.values_s)
                out[key] = Measurement(flat, tuple(passes[key]))
        return out

