"""Columns derived from TVM's per-store features, computed when a model reads them (the
feature store keeps the leaf features as extracted).

Stride alignment: for each of the five buffer slots, the number of trailing zero bits of the
buffer's innermost stride (in elements). A loop that walks a buffer with a stride of 2^t * odd
elements maps its accesses onto a share 2^-t of a cache's sets (set counts are powers of two), so
large t means conflict misses. Measured on untuned matmuls with the weight stored [K, N]
(`matmul_bias` sweep, docs/model.md): N = 768 runs at 1.1 ns per multiply-add, N = 512 and
N = 1024 at 2.3-3.0, though the stride column itself (log2(N + 1)) is nearly linear in between.
TVM keeps the stride as log2(stride + 1) in float32, which gives strides back exactly up to
about 10^5 elements; the count is capped at `MAX_BITS`.
"""

from __future__ import annotations

import numpy as np

from cdmpp.features.matching import COL_ACCESS

N_BUFFERS, ACCESS_WIDTH, STRIDE_OFFSET = 5, 18, 17
STRIDE_COLS = [COL_ACCESS + ACCESS_WIDTH * k + STRIDE_OFFSET for k in range(N_BUFFERS)]
MAX_BITS = 16
N_DERIVED = N_BUFFERS


def stride_alignment(leaf_features: np.ndarray) -> np.ndarray:
    """(n_leaves, 5) trailing zero bits of each buffer's innermost stride (0: no stride)."""
    logged = np.asarray(leaf_features)[:, STRIDE_COLS].astype(np.float64)  # slice, then widen
    stride = np.rint(np.exp2(np.clip(logged, 0, 40)) - 1).astype(np.int64)
    lowest_bit = stride & -stride  # 0 where the stride is 0
    bits = np.log2(np.maximum(lowest_bit, 1)).round()
    return np.minimum(bits, MAX_BITS).astype(np.float32)


def with_derived(leaf_features: np.ndarray) -> np.ndarray:
    """The leaf features with the derived columns appended: (n_leaves, F + N_DERIVED)."""
    f = np.asarray(leaf_features)
    return np.concatenate([f, stride_alignment(f).astype(f.dtype, copy=False)], axis=1)
