"""Build programs for timing, with a hard time limit on code generation.

Some random schedules spend minutes in LLVM code generation, and an in-process call cannot be
interrupted. So a forked child (it inherits the imported TVM and the modules: no import cost,
unlike LocalBuilder's workers, and nothing to serialize) compiles the programs whose indices
it is sent on a pipe, in order, and is killed when one takes longer than the time limit; a
new child then goes on with the next program. Several children can take programs from one
queue (`compile_from_queue`), each the next as it finishes one. The child writes each
compiled module as LLVM IR text (`write_to_file(..., "ll")`, ~1 ms) and reports it on a pipe;
the parent loads it (~4 ms) and asks for its entry function, which is when LLVM emits the
machine code (60-100 ms per program here), while the child compiles the next ones on the
other core. The loaded module gives the
same assembly as the compiled one (29 of 29 programs of the ten operators of
benchmarks/collect.py) and the same outputs (tests/measure/test_build.py). Shipping a shared
library instead costs ~0.3 s per program (exporting and linking with the system compiler);
compiling the program again in the parent ~0.1 s; forking a child per program 35-60 ms.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cdmpp.tvm_env import import_tvm

ENTRY = "main"  # the function the timer times (the workloads' global symbol)


@dataclass(frozen=True)
class BuildResult:
    ok: bool
    build_secs: float  # the child's compile time
    error: str | None = None  # "timeout: ..." or the compiler's error
    module: object = None  # the in-process runtime module (ready for time_evaluator) when ok


def compile_module(mod, target):
    """Compile as meta_schedule's default builder does (`default_build`)."""
    tvm = import_tvm()
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    return tvm.compile(mod, target=tvm.target.Target(target))


def _read_line(fd: int, buffer: bytes) -> tuple[bytes | None, bytes]:
    """The next line on `fd` (None at end of file), and what is left of the buffer."""
    while b"\n" not in buffer:
        chunk = os.read(fd, 4096)
        if not chunk:
            return None, buffer
        buffer += chunk
    line, buffer = buffer.split(b"\n", 1)
    return line, buffer


def _serve(mods, target, paths, order_fd: int, report_fd: int) -> None:
    """Child: compile the modules whose indices arrive on `order_fd`, a line each, until it
    closes (writing each as LLVM IR to its path, if paths are given), and report each on
    `report_fd` as a JSON line {"i", "secs", "end", "error"?}."""
    try:
        buffer = b""
        while True:
            line, buffer = _read_line(order_fd, buffer)
            if line is None:
                break
            i = int(line)
            start = time.perf_counter()
            report = {"i": i}
            try:
                compiled = compile_module(mods[i], target)
                if paths is not None:
                    compiled.mod.write_to_file(paths[i], "ll")
            except BaseException as e:  # noqa: BLE001 - reported, the next program goes on
                report["error"] = f"{type(e).__name__}: {e}"[-4000:]
            report.update(secs=time.perf_counter() - start, end=time.monotonic())
            os.write(report_fd, (json.dumps(report) + "\n").encode())
    finally:
        os._exit(0)  # skip atexit handlers and TVM's destructors in the child


# Threads that fork at once would each hand its child the pipe ends the other has not closed
# yet: a child that died would then leave its report pipe open in its sibling, and be seen
# only at the time limit.
_FORK_LOCK = threading.Lock()


class _Compiler:
    """A forked child compiling the modules it is sent (`send`), read one report at a time."""

    def __init__(self, mods, target, paths):
        import_tvm()
        with _FORK_LOCK:
            order_read, order_write = os.pipe()
            read_fd, write_fd = os.pipe()
            self.pid = os.fork()
            if self.pid == 0:
                os.close(order_write)
                os.close(read_fd)
                _serve(mods, target, paths, order_read, write_fd)
            os.close(order_read)
            os.close(write_fd)
        self.order_fd, self.fd, self._buffer, self.alive = order_write, read_fd, b"", True
        self.pending = 0  # sent, not yet reported
        self.started = time.monotonic()  # when the program being compiled began
        self._poll = select.poll()  # poll, not select: any descriptor number
        self._poll.register(read_fd, select.POLLIN)

    def send(self, i: int) -> None:
        """Queue module `i`: the child compiles it after those sent before."""
        if self.pending == 0:  # an idle child starts on it now
            self.started = time.monotonic()
        self.pending += 1
        try:
            os.write(self.order_fd, f"{i}\n".encode())
        except BrokenPipeError:  # the child died: `next_report` says why
            pass

    def next_report(self, timeout_s: float) -> dict:
        """The report of the next module sent; {"error": "timeout: ..."} past `timeout_s`
        since that module began (the child is then killed), or why the child died."""
        self.pending -= 1
        while b"\n" not in self._buffer:
            remaining = self.started + timeout_s - time.monotonic()
            ready = self._poll.poll(remaining * 1e3) if remaining > 0 else []
            if not ready:
                elapsed = time.monotonic() - self.started
                self.kill()
                return {"secs": elapsed, "error": f"timeout: build took over {timeout_s:g} s"}
            chunk = os.read(self.fd, 1 << 16)
            if not chunk:  # the child died without reporting this program
                _, status = os.waitpid(self.pid, 0)
                self._close()
                why = (f"killed by signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status)
                       else f"exited with status {os.WEXITSTATUS(status)}")
                return {"secs": time.monotonic() - self.started,
                        "error": f"build process {why}"}
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        report = json.loads(line)
        if self.pending > 0:  # the child went straight on to the next one
            self.started = report["end"]
        return report

    def kill(self) -> None:
        if not self.alive:
            return
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(self.pid, 0)
        self._close()

    def _close(self) -> None:
        self.alive = False
        os.close(self.fd)
        os.close(self.order_fd)


_RUN_AHEAD = 64  # modules sent to a child before their reports are read


def compile_reports(mods, target, timeout_s: float, paths):
    """(index, report) of every module in order, compiled by as many children as time-outs and
    crashes need. A report holds "secs" and, for a failure, "error"; each compiled module is
    written as LLVM IR to its entry of `paths` (None: not written). The child runs ahead of
    the reports read, so it compiles the next modules while the caller uses one."""
    first, compiler = 0, None
    try:
        while first < len(mods):
            compiler = _Compiler(mods, target, paths)
            sent = first
            while first < len(mods) and compiler.alive:
                while sent < len(mods) and sent - first < _RUN_AHEAD:
                    compiler.send(sent)
                    sent += 1
                report = compiler.next_report(timeout_s)
                yield first, report
                first += 1
            compiler.kill()  # finished or dead: reaped either way
    finally:
        if compiler is not None:  # interrupted: leave no child behind
            compiler.kill()


def compile_from_queue(mods, target, timeout_s: float, paths, workers: int) -> list[dict]:
    """The report of every module (as `compile_reports`), compiled by `workers` children at
    once, each taking the next module of the batch as it finishes one: a module that takes
    long holds up one child, not a share of the batch."""
    from concurrent.futures import ThreadPoolExecutor

    reports: list = [None] * len(mods)
    queue = iter(range(len(mods)))
    queue_lock = threading.Lock()

    def take() -> int | None:
        with queue_lock:
            return next(queue, None)

    def child_loop() -> None:  # a thread per child, waiting on its reports
        compiler = None
        try:
            while (i := take()) is not None:
                if compiler is None or not compiler.alive:
                    compiler = _Compiler(mods, target, paths)
                compiler.send(i)
                reports[i] = compiler.next_report(timeout_s)
        finally:
            if compiler is not None:
                compiler.kill()

    n = max(1, min(workers, len(mods)))
    with ThreadPoolExecutor(max_workers=n, thread_name_prefix="cdmpp-build") as pool:
        for done in [pool.submit(child_loop) for _ in range(n)]:
            done.result()
    return reports


def compiles_in_time(mod, target, timeout_s: float) -> BuildResult:
    """Compile `mod` in a forked child; kill it after `timeout_s`. No module is returned."""
    (_, report), = compile_reports([mod], target, timeout_s, None)
    return BuildResult("error" not in report, report["secs"], report.get("error"))


def _load_built(guard: BuildResult, ir_path: str) -> BuildResult:
    """The runtime module the child compiled, machine code emitted, ready for timing."""
    if not guard.ok:
        return guard
    tvm = import_tvm()
    try:
        module = tvm.runtime.load_module(ir_path)
        # LLVM's JIT emits machine code at the first lookup of a function: do it now, while
        # the child compiles the next programs, not in the timing loop
        module.get_function(ENTRY)
    except Exception as e:  # noqa: BLE001 - reported as this program's build failure
        return BuildResult(False, guard.build_secs, f"{type(e).__name__}: {e}")
    finally:
        Path(ir_path).unlink(missing_ok=True)
    return BuildResult(True, guard.build_secs, None, module)


def build_guarded(mod, target, timeout_s: float) -> BuildResult:
    """The runtime module of `mod` for timing, or why there is none (error or time limit)."""
    return build_many([mod], target, timeout_s)[0]


_WORK_PREFIX = "cdmpp-build-"


def _remove_stale_work_dirs() -> None:
    """Remove the work directories of builds whose process is gone (killed with SIGKILL, as
    the collector may be: its next run cleans up)."""
    for path in Path(tempfile.gettempdir()).glob(f"{_WORK_PREFIX}*-*"):
        pid = path.name[len(_WORK_PREFIX):].split("-")[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)


def work_dir_prefix() -> str:
    """The prefix of a new build work directory (for `tempfile`): it names this process, so
    the next build after this one is killed removes what it left. Removes such leftovers."""
    _remove_stale_work_dirs()
    return f"{_WORK_PREFIX}{os.getpid()}-"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def build_many(mods: Sequence, target, timeout_s: float) -> list[BuildResult]:
    """`build_guarded` of each module, in order: a child compiles them one after the other
    while the parent loads those it has finished."""
    results: list[BuildResult] = []
    with tempfile.TemporaryDirectory(prefix=work_dir_prefix()) as work:
        paths = [os.path.join(work, f"{i}.ll") for i in range(len(mods))]
        for i, report in compile_reports(mods, target, timeout_s, paths):
            compiled = BuildResult("error" not in report, report["secs"], report.get("error"))
            results.append(_load_built(compiled, paths[i]))
    return results
