"""Keep Python's cyclic garbage collector from walking the heap TVM and torch leave behind.

With both imported (and a model loaded) the heap holds ~240,000 long-lived objects, and every
oldest-generation collection walks all of them. Parsing a few hundred database lines and
building their rows allocates enough to trigger such collections: they were about a third of
`predict`'s main-process CPU on nine databases (0.13 of 0.37 s; docs/features.md).
"""

from __future__ import annotations

import gc
from contextlib import contextmanager

_depth = 0


@contextmanager
def heap_frozen():
    """Inside the block, collections leave out every object that existed when it began, in
    this process and in processes forked inside it (whose collections then neither walk nor
    copy-on-write the parent's heap). Objects allocated inside are collected as usual.
    Re-entrant: only the outermost block freezes and unfreezes."""
    global _depth
    if _depth == 0:
        gc.freeze()
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if _depth == 0:
            gc.unfreeze()
