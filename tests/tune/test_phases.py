"""Where a tuning run's time went, read from the task scheduler's log."""

from __future__ import annotations

from datetime import datetime

from cdmpp.tune.phases import SCHEDULER_LOG, log_size, phases_from_log, phases_since

# lines as a real `cdmpp tune` log writes them (ResNet-18 on Zen 3), with a table row between
LOG = """\
2026-12-02 00:50:40 [INFO] [task_scheduler.cc:174] Initializing Task #0: "conv2d"
2026-12-02 00:50:41 [INFO] [task_scheduler.cc:195] TaskScheduler picks Task #0: "conv2d"
2026-12-02 00:51:26 [INFO] [task_scheduler.cc:208] Sending 32 sample(s) to builder
2026-12-02 00:51:41 [INFO] [task_scheduler.cc:218] Sending 32 valid sample(s) to runner
 ID |                                      Name |      FLOP | Weight | Speed (GFLOPS)
2026-12-02 00:52:05 [INFO] [task_scheduler.cc:195] TaskScheduler picks Task #2: "max_pool2d"
2026-12-02 00:52:10 [INFO] [task_scheduler.cc:208] Sending 1 sample(s) to builder
2026-12-02 00:52:15 [INFO] [task_scheduler.cc:218] Sending 1 valid sample(s) to runner
"""


def test_each_phase_runs_from_its_event_to_the_next():
    phases = phases_from_log(LOG.splitlines(), end=datetime(2026, 12, 2, 0, 52, 20))
    assert phases.rounds == 2
    assert phases.search_s == 45 + 5  # pick -> to builder
    assert phases.build_s == 15 + 5  # to builder -> to runner
    assert phases.run_s == 24 + 5  # to runner -> next pick, the last to the end
    assert str(phases) == "search 50 s, builds 20 s, runs 29 s over 2 rounds"


def test_without_an_end_the_last_phase_is_left_out():
    phases = phases_from_log(LOG.splitlines())
    assert (phases.search_s, phases.build_s, phases.run_s) == (50, 20, 24)


def test_a_rerun_reads_only_what_it_appended(tmp_path):
    assert log_size(tmp_path) == 0 and phases_since(tmp_path, 0) is None
    path = tmp_path / SCHEDULER_LOG
    path.parent.mkdir(parents=True)
    first, second = LOG.splitlines(keepends=True)[:5], LOG.splitlines(keepends=True)[5:]
    path.write_text("".join(first))
    offset = log_size(tmp_path)
    with open(path, "a") as f:
        f.write("".join(second))
    phases = phases_since(tmp_path, offset, end=datetime(2026, 12, 2, 0, 52, 20))
    assert (phases.rounds, phases.search_s, phases.build_s, phases.run_s) == (1, 5, 5, 5)
