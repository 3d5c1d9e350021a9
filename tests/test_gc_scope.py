"""heap_frozen: objects alive at entry are left out of collections until the outermost exit."""

from __future__ import annotations

import gc

from cdmpp.gc_scope import heap_frozen


def test_frozen_until_the_outermost_block_ends():
    assert gc.get_freeze_count() == 0
    with heap_frozen():
        frozen = gc.get_freeze_count()
        assert frozen > 0
        fresh = [[] for _ in range(1000)]  # noqa: F841 - tracked objects made inside the block
        with heap_frozen():
            # no second freeze inside: `fresh` stays out. The count is not compared for
            # equality: a frozen object that dies (another thread may drop the last
            # reference) leaves the frozen set, so the count can only fall.
            assert gc.get_freeze_count() <= frozen
        assert gc.get_freeze_count() > frozen // 2  # the inner exit does not unfreeze
    assert gc.get_freeze_count() == 0


def test_unfrozen_after_an_error_and_usable_as_a_decorator():
    @heap_frozen()
    def fails():
        assert gc.get_freeze_count() > 0
        raise ValueError("boom")

    try:
        fails()
    except ValueError:
        pass
    assert gc.get_freeze_count() == 0
    with heap_frozen():
        garbage = []
        garbage.append(garbage)  # a cycle made inside the block is still collected
        del garbage
        assert gc.collect() >= 1
