"""Batches of ragged programs, padded to the longest program of each batch."""

from __future__ import annotations

import numpy as np
import torch


def length_bucketed(n_leaves: np.ndarray, batch_size: int, rng: np.random.Generator) -> list:
    """Shuffled batches of indices of similar leaf counts (little padding, random order)."""
    noisy = n_leaves + rng.random(len(n_leaves))  # random order within a leaf count
    order = np.argsort(noisy, kind="stable")
    batches = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    rng.shuffle(batches)
    return batches


def in_order(n_leaves: np.ndarray, batch_size: int) -> list:
    """Batches sorted by leaf count (for prediction); the caller restores the order."""
    order = np.argsort(n_leaves, kind="stable")
    return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]


def collate(features: list, positions: list, rows, device: np.ndarray | None = None):
    """Tensors for the programs `rows`: (B, L, F) features, (B, L) positions, (B, L) mask."""
    rows = list(rows)
    width = max(len(features[i]) for i in rows)
    n_feat = features[rows[0]].shape[1]
    x = np.zeros((len(rows), width, n_feat), dtype=np.float32)
    p = np.zeros((len(rows), width), dtype=np.int64)
    m = np.zeros((len(rows), width), dtype=bool)
    for b, i in enumerate(rows):
        n = len(features[i])
        x[b, :n], p[b, :n], m[b, :n] = features[i], positions[i], True
    d = None if device is None else torch.from_numpy(device[rows].astype(np.float32))
    return torch.from_numpy(x), torch.from_numpy(p), torch.from_numpy(m), d
