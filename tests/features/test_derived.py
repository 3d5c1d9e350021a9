"""Derived leaf columns: the stride alignment read back from TVM's log-scaled stride."""

from __future__ import annotations

import numpy as np

from cdmpp.features.derived import (
    MAX_BITS,
    N_DERIVED,
    STRIDE_COLS,
    stride_alignment,
    with_derived,
)
from cdmpp.features.matching import N_TVM_FEATURES, slog


def _leaves(strides_of_first_buffer, second=None):
    f = np.zeros((len(strides_of_first_buffer), N_TVM_FEATURES), dtype=np.float32)
    f[:, STRIDE_COLS[0]] = [slog(s) for s in strides_of_first_buffer]
    if second is not None:
        f[:, STRIDE_COLS[1]] = [slog(s) for s in second]
    return f


def test_trailing_zero_bits_of_each_stride():
    strides = [0, 1, 3, 256, 512, 768, 1024, 3072, 4096, 12288, 98304]
    bits = stride_alignment(_leaves(strides))
    assert bits.shape == (len(strides), N_DERIVED)
    assert bits[:, 0].tolist() == [0, 0, 0, 8, 9, 8, 10, 10, 12, 12, 15]
    assert not bits[:, 1:].any()  # buffers without a stride


def test_every_buffer_slot_and_the_cap():
    bits = stride_alignment(_leaves([2**20, 6], second=[64, 2**3 * 5]))
    assert bits[:, 0].tolist() == [MAX_BITS, 1]
    assert bits[:, 1].tolist() == [6, 3]


def test_with_derived_appends_and_keeps_the_features():
    f = _leaves([768, 1024])
    out = with_derived(f)
    assert out.shape == (2, N_TVM_FEATURES + N_DERIVED) and out.dtype == f.dtype
    np.testing.assert_array_equal(out[:, :N_TVM_FEATURES], f)
    assert out[:, N_TVM_FEATURES].tolist() == [8, 10]
