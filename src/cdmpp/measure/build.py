"""Build programs for timing, with a hard time limit on code generation.

Some random schedules spend minutes in LLVM code generation, and an in-process call cannot be
interrupted. So a forked child (it inherits the imported TVM: no import cost, unlike
LocalBuilder's workers) compiles the program first, as a guard that can be killed at the time
limit; only when it finished in time does the parent compile the same module in-process and
keep it for timing. Compiling twice (~0.1 s each here) is cheaper than shipping the child's
result back: exporting a shared library and linking it with the system compiler costs ~0.3 s
per program (measured on dense schedules).
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass

from cdmpp.tvm_env import import_tvm

_POLL_S = 0.005


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


def compiles_in_time(mod, target, timeout_s: float) -> BuildResult:
    """Compile `mod` in a forked child; kill it after `timeout_s`. No module is returned."""
    import_tvm()
    read_fd, write_fd = os.pipe()
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        _child(mod, target, write_fd)
    os.close(write_fd)
    status = None
    while time.perf_counter() - start < timeout_s:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(_POLL_S)
    else:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(read_fd)
        return BuildResult(False, time.perf_counter() - start,
                           f"timeout: build took over {timeout_s:g} s")
    elapsed = time.perf_counter() - start
    with os.fdopen(read_fd, "rb") as f:
        message = f.read().decode(errors="replace")
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
        return BuildResult(True, elapsed)
    if os.WIFSIGNALED(status):
        message = message or f"build process killed by signal {os.WTERMSIG(status)}"
    return BuildResult(False, elapsed, message or "build failed without a message")


def build_guarded(mod, target, timeout_s: float) -> BuildResult:
    """The runtime module of `mod` for timing, or why there is none (error or time limit)."""
    guard = compiles_in_time(mod, target, timeout_s)
    if not guard.ok:
        return guard
    try:
        module = compile_module(mod, target).jit()
    except Exception as e:  # noqa: BLE001 - e.g. a non-deterministic compiler failure
        return BuildResult(False, guard.build_secs, f"{type(e).__name__}: {e}")
    return BuildResult(True, guard.build_secs, None, module)
