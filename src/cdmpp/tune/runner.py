"""A meta_schedule runner that times programs with the device's number of threads.

    database = ms.tune_tir(func, target, "work_dir", 64, runner=cdmpp.tune.runner(), ...)

TVM's LocalRunner times each program in a worker process whose thread pool takes its size from
TVM_NUM_THREADS, else half the host's hardware threads on x86 (TVM assumes hyper-threading):
one thread on a 2-vCPU machine whose device and target (`num-cores`) have two. A tuning run
with it picks the programs that are fastest on one thread and writes their one-thread times
into the database (measured here: a tuned ResNet-18's database summed to 46.2 ms, its kernels
timed alone with two threads to 23.7 ms). This runner is TVM's LocalRunner with its worker
set to the device's threads when it starts (and when a worker killed at the time limit is
replaced).
"""

from __future__ import annotations

import functools


def runner(threads: int | None = None, timeout_s: float = 30.0):
    """TVM's `LocalRunner`, timing with `threads` threads (None: the local device's)."""
    from cdmpp.tvm_env import meta_schedule

    if threads is None:
        from cdmpp.device import local_device

        threads = local_device().threads
    if int(threads) < 1:
        raise ValueError(f"threads must be at least 1, got {threads!r}")
    if not timeout_s > 0:
        raise ValueError(f"timeout_s must be positive, got {timeout_s!r}")
    return meta_schedule().runner.LocalRunner(
        timeout_sec=timeout_s, initializer=functools.partial(_use_threads, int(threads)))


def _use_threads(threads: int) -> None:
    """Runs in the runner's worker process as it starts."""
    from cdmpp.measure.collect import set_threads

    set_threads(threads)
