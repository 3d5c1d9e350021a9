"""Build programs for timing, with a hard time limit on code generation.

Some random schedules spend minutes in LLVM code generation, and an in-process call cannot be
interrupted. So a forked child (it inherits the imported TVM: no import cost, unlike
LocalBuilder's workers) compiles the program first, as a guard that can be killed at the time
limit; only when it finished in time does the parent compile the same module in-process and
keep it for timing. Compiling twice (~0.1 s each here) is cheaper than shipping the child's
result back: exporting a shared library and linking it with the system compiler costs ~0.3 s
per program (measured on dense schedules).

`build_many` overlaps the two compiles: while the parent compiles one program, the guard of
the next one runs in its child, on the other core (one compile uses one core). Measured on 47
programs of the ten operators of benchmarks/collect.py, two rounds: 0.228 and 0.201 s per
program, against 0.270 and 0.278 s one after the other (the two vCPUs do not double the speed).
The parent also asks the JIT for the program's entry function, which is when LLVM emits its
machine code (~80 ms per program here): done in the timing loop, that cost was paid with both
cores waiting; done here, it overlaps the next guard (56 programs, three alternated rounds:
0.227-0.273 s per program for build + lookup, against 0.250-0.324 s).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass

from cdmpp.tvm_env import import_tvm

_POLL_S = 0.005
ENTRY = "main"  # the function the timer times (the workloads' global symbol)


@dataclass(frozen=True)
class BuildResult:
    ok: bool
    build_secs: float  # the guard's compile time
    error: str | None = None  # "timeout: ..." or the compiler's error
    module: object = None  # the in-process runtime module (ready for time_evaluator) when ok


def compile_module(mod, target):
    """Compile as meta_schedule's default builder does (`default_build`)."""
    tvm = import_tvm()
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    return tvm.compile(mod, target=tvm.target.Target(target))


def _child(mod, target, write_fd: int) -> None:
    status = 1
    try:
        compile_module(mod, target)
        status = 0
    except BaseException as e:  # noqa: BLE001 - report everything to the parent
        os.write(write_fd, f"{type(e).__name__}: {e}".encode()[-4000:])
    finally:
        os.close(write_fd)
        os._exit(status)  # skip atexit handlers and TVM's destructors in the child


@dataclass(frozen=True)
class _Guard:
    """A guard child compiling one program."""

    pid: int
    read_fd: int
    start: float

    def kill(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass
        os.close(self.read_fd)


def _start_guard(mod, target) -> _Guard:
    import_tvm()
    read_fd, write_fd = os.pipe()
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        _child(mod, target, write_fd)
    os.close(write_fd)
    return _Guard(pid, read_fd, start)


def _finish_guard(guard: _Guard, timeout_s: float) -> BuildResult:
    """Wait for the guard until `timeout_s` after it started; kill it past that."""
    status = None
    while time.perf_counter() - guard.start < timeout_s:
        done, status = os.waitpid(guard.pid, os.WNOHANG)
        if done:
            break
        time.sleep(_POLL_S)
    else:
        guard.kill()
        return BuildResult(False, time.perf_counter() - guard.start,
                           f"timeout: build took over {timeout_s:g} s")
    elapsed = time.perf_counter() - guard.start
    with os.fdopen(guard.read_fd, "rb") as f:
        message = f.read().decode(errors="replace")
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
        return BuildResult(True, elapsed)
    if os.WIFSIGNALED(status):
        message = message or f"build process killed by signal {os.WTERMSIG(status)}"
    return BuildResult(False, elapsed, message or "build failed without a message")


def compiles_in_time(mod, target, timeout_s: float) -> BuildResult:
    """Compile `mod` in a forked child; kill it after `timeout_s`. No module is returned."""
    return _finish_guard(_start_guard(mod, target), timeout_s)


def _compile_guarded(guard: BuildResult, mod, target) -> BuildResult:
    if not guard.ok:
        return guard
    try:
        module = compile_module(mod, target).jit()
        # LLVM's JIT generates machine code at the first lookup of a function (~75 ms per
        # program here): do it now, while the next guard runs, not in the timing loop
        module.get_function(ENTRY)
    except Exception as e:  # noqa: BLE001 - e.g. a non-deterministic compiler failure
        return BuildResult(False, guard.build_secs, f"{type(e).__name__}: {e}")
    return BuildResult(True, guard.build_secs, None, module)


def build_guarded(mod, target, timeout_s: float) -> BuildResult:
    """The runtime module of `mod` for timing, or why there is none (error or time limit)."""
    return _compile_guarded(compiles_in_time(mod, target, timeout_s), mod, target)


def build_many(mods: Sequence, target, timeout_s: float) -> list[BuildResult]:
    """`build_guarded` of each module, in order; the guard of the next module runs while the
    parent compiles the current one."""
    results: list[BuildResult] = []
    pending = _start_guard(mods[0], target) if mods else None
    try:
        for i, mod in enumerate(mods):
            guard, pending = _finish_guard(pending, timeout_s), None
            if i + 1 < len(mods):
                pending = _start_guard(mods[i + 1], target)
            results.append(_compile_guarded(guard, mod, target))
    finally:
        if pending is not None:  # interrupted: leave no child behind
            pending.kill()
    return results
