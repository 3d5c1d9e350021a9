"""`extract` of many kernels at once, on threads: TVM's passes and its per-store feature call,
most of an extraction, run in C++ with Python's lock released, so threads share the cores
without the fork a process pool needs (which the tuner's callback, or a caller holding a big
heap, would rather not pay). Same results as one `extract` after another (tests/features).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor


def default_threads() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0))


def extract_each(objs, target, *, threads: int | None = None) -> list:
    """`extract(obj, target)` of each object, in order: a `CompactAST`, or the exception that
    object raised (the caller reports, skips or re-raises it). `threads`: at most this many at
    once (default: the cores this process may use; 1 runs them one after another here).

    The workers run under a pass context with the caller's settings (opt level, config,
    required and disabled passes). A caller with pass instruments of its own gets every
    extraction on the calling thread, so its instruments see every pass, in order."""
    from cdmpp.features import extract

    objs = list(objs)
    n = min(threads or default_threads(), len(objs))

    def one(obj):
        try:
            return extract(obj, target)
        except Exception as e:  # noqa: BLE001 - handed back for the caller to name the object
            return e

    if n <= 1:
        return [one(obj) for obj in objs]
    from cdmpp.tvm_env import import_tvm

    tvm = import_tvm()
    outer = tvm.transform.PassContext.current()
    if len(outer.instruments):
        return [one(obj) for obj in objs]
    settings = dict(opt_level=outer.opt_level, required_pass=list(outer.required_pass),
                    disabled_pass=list(outer.disabled_pass), config=dict(outer.config))

    def in_context(obj):  # a thread starts with TVM's default context, not the caller's
        with tvm.transform.PassContext(**settings):
            return one(obj)

    with ThreadPoolExecutor(max_workers=n, thread_name_prefix="cdmpp-extract") as pool:
        return list(pool.map(in_context, objs))
