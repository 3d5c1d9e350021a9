"""Build a program in a forked child that can be killed at a time limit.

Some random schedules spend minutes in LLVM code generation, and an in-process call cannot be
interrupted. A forked child inherits the already-imported TVM (no import cost, unlike
LocalBuilder's workers), compiles exactly as meta_schedule's default builder does, and exports
a shared library that the parent loads for timing.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from cdmpp.tvm_env import import_tvm

_POLL_S = 0.005


@dataclass(frozen=True)
class BuildResult:
    ok: bool
    path: str | None  # the exported library
    build_secs: float
    error: str | None = None  # "timeout after 30 s" or the compiler's error


def compile_module(mod, target):
    """Compile as meta_schedule's default builder does (`default_build`)."""
    tvm = import_tvm()
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    return tvm.compile(mod, target=tvm.target.Target(target))


def _child(mod, target, path: str, write_fd: int) -> None:
    status = 1
    try:
        compile_module(mod, target).export_library(path)
        status = 0
    except BaseException as e:  # noqa: BLE001 - report everything to the parent
        os.write(write_fd, f"{type(e).__name__}: {e}".encode()[-4000:])
    finally:
        os.close(write_fd)
        os._exit(status)  # skip atexit handlers and TVM's destructors in the child


def build_in_child(mod, target, path: str | Path, timeout_s: float) -> BuildResult:
    """Compile `mod` for `target` into the shared library `path`, giving up after `timeout_s`."""
    import_tvm()
    path = str(path)
    read_fd, write_fd = os.pipe()
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        _child(mod, target, path, write_fd)
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
        return BuildResult(False, None, time.perf_counter() - start,
                           f"timeout: build took over {timeout_s:g} s")
    elapsed = time.perf_counter() - start
    with os.fdopen(read_fd, "rb") as f:
        message = f.read().decode(errors="replace")
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0 and os.path.exists(path):
        return BuildResult(True, path, elapsed)
    if os.WIFSIGNALED(status):
        message = message or f"build process killed by signal {os.WTERMSIG(status)}"
    return BuildResult(False, None, elapsed, message or "build failed without a message")
