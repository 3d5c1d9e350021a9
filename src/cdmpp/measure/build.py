"""Build programs for timing, with a hard time limit on code generation.

Some random schedules spend minutes in LLVM code generation, and an in-process call cannot be
interrupted. So a forked child (it inherits the imported TVM: no import cost, unlike
LocalBuilder's workers) compiles each program, and is killed at the time limit. The child
writes the compiled module as LLVM IR text (`write_to_file(..., "ll")`, ~1 ms); the parent
loads it (~4 ms) and asks for its entry function, which is when LLVM emits the machine code
(60-100 ms per program here). The loaded module gives the same assembly as the compiled one
(29 of 29 programs of the ten operators of benchmarks/collect.py) and the same outputs.
Shipping a shared library instead costs ~0.3 s per program (exporting and linking with the
system compiler); compiling the program again in the parent ~0.1 s.

`build_many` overlaps the two sides: while the parent loads one program and emits its machine
code, the child of the next one compiles on the other core.
"""

from __future__ import annotations

import os
import signal
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

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


def _child(mod, target, write_fd: int, ir_path: str | None) -> None:
    status = 1
    try:
        compiled = compile_module(mod, target)
        if ir_path is not None:
            compiled.mod.write_to_file(ir_path, "ll")
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


def _start_guard(mod, target, ir_path: str | None = None) -> _Guard:
    """Fork a child that compiles `mod` (and writes it to `ir_path` as LLVM IR, if given)."""
    import_tvm()
    read_fd, write_fd = os.pipe()
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        _child(mod, target, write_fd, ir_path)
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


def _load_built(guard: BuildResult, ir_path: str) -> BuildResult:
    """The runtime module the guard child compiled, machine code emitted, ready for timing."""
    if not guard.ok:
        return guard
    tvm = import_tvm()
    try:
        module = tvm.runtime.load_module(ir_path)
        # LLVM's JIT emits machine code at the first lookup of a function: do it now, while
        # the next child compiles, not in the timing loop
        module.get_function(ENTRY)
    except Exception as e:  # noqa: BLE001 - reported as this program's build failure
        return BuildResult(False, guard.build_secs, f"{type(e).__name__}: {e}")
    finally:
        Path(ir_path).unlink(missing_ok=True)
    return BuildResult(True, guard.build_secs, None, module)


def build_guarded(mod, target, timeout_s: float) -> BuildResult:
    """The runtime module of `mod` for timing, or why there is none (error or time limit)."""
    return build_many([mod], target, timeout_s)[0]


def build_many(mods: Sequence, target, timeout_s: float) -> list[BuildResult]:
    """`build_guarded` of each module, in order; the child of the next module compiles while
    the parent loads the current one."""
    results: list[BuildResult] = []
    with tempfile.TemporaryDirectory(prefix="cdmpp-build-") as work:
        paths = [os.path.join(work, f"{i}.ll") for i in range(len(mods))]
        pending = _start_guard(mods[0], target, paths[0]) if mods else None
        try:
            for i in range(len(mods)):
                guard, pending = _finish_guard(pending, timeout_s), None
                if i + 1 < len(mods):
                    pending = _start_guard(mods[i + 1], target, paths[i + 1])
                results.append(_load_built(guard, paths[i]))
        finally:
            if pending is not None:  # interrupted: leave no child behind
                pending.kill()
    return results
