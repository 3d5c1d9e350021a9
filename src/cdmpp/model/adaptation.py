"""Domain-adaptation distances between two batches of embeddings (CDMPP's cross-device loss).

loss = task loss + alpha * D(Z_source, Z_target), with Z the program embeddings of a labeled
training batch and of unlabeled programs of the target device.
"""

from __future__ import annotations

import torch

MMD_BANDWIDTHS = (1.0, 0.1, 0.001)  # kernel e^{-d^2} + e^{-0.1 d^2} + e^{-0.001 d^2}


def mmd(x: torch.Tensor, y: torch.Tensor, bandwidths=MMD_BANDWIDTHS) -> torch.Tensor:
    """Maximum mean discrepancy with a sum of Gaussian kernels. x (n, d), y (m, d)."""
    def kernel(a, b):
        d2 = torch.cdist(a, b) ** 2  # (n, m)
        return sum(torch.exp(-g * d2) for g in bandwidths)

    return kernel(x, x).mean() + kernel(y, y).mean() - 2 * kernel(x, y).mean()


def cmd(x: torch.Tensor, y: torch.Tensor, moments: int = 5) -> torch.Tensor:
    """Central moment discrepancy: ||mu_x - mu_y|| + sum_k ||E[(x-mu_x)^k] - E[(y-mu_y)^k]||."""
    mx, my = x.mean(0), y.mean(0)
    cx, cy = x - mx, y - my
    total = torch.linalg.vector_norm(mx - my)
    for k in range(2, moments + 1):
        total = total + torch.linalg.vector_norm((cx ** k).mean(0) - (cy ** k).mean(0))
    return total


def distance(kind: str):
    """The adaptation distance by name: "mmd" or "cmd"."""
    kinds = {"mmd": mmd, "cmd": cmd}
    if kind not in kinds:
        raise ValueError(f"unknown adaptation distance {kind!r}: use one of {sorted(kinds)}")
    return kinds[kind]
