"""Losses on the transformed target (standardized Box-Cox of latency)."""

from __future__ import annotations

import torch


def inverse_boxcox(z: torch.Tensor, lam: float, mean: float, std: float) -> torch.Tensor:
    """Latency (s) from the standardized Box-Cox target, differentiably."""
    t = z * std + mean
    if abs(lam) < 1e-8:
        return torch.exp(t)
    return torch.clamp(lam * t + 1.0, min=1e-12) ** (1.0 / lam)


def make_loss(kind: str, mape_weight: float = 0.0, target=None):
    """`kind`: "mse" or "paper" (upstream CDMPP: 1000*MSE + MAPE, both on the transformed
    target). `mape_weight` adds MAPE on latency itself; `target` = (lambda, mean, std)."""
    if kind not in ("mse", "paper"):
        raise ValueError(f"unknown loss {kind!r}: use mse or paper")

    def loss(pred: torch.Tensor, z: torch.Tensor, weight: torch.Tensor | None = None
             ) -> torch.Tensor:
        def mean(e):  # weighted by the samples' weights when given (a batch of weight 0: 0)
            if weight is None:
                return torch.mean(e)
            return torch.sum(weight * e) / torch.clamp(torch.sum(weight), min=1e-12)

        mse = mean((pred - z) ** 2)
        value = mse if kind == "mse" else 1000.0 * mse + mean(
            torch.abs(pred - z) / torch.clamp(torch.abs(z), min=1e-6))
        if mape_weight:
            lam, mu, std = target
            y_hat, y = inverse_boxcox(pred, lam, mu, std), inverse_boxcox(z, lam, mu, std)
            value = value + mape_weight * mean(torch.abs(y_hat - y) / y)
        return value

    return loss


def pairwise_rank_loss(pred: torch.Tensor, z: torch.Tensor, group: torch.Tensor) -> torch.Tensor:
    """RankNet loss over the pairs of a batch that share a group (task on one device): for each
    pair with z_i > z_j, softplus(-(pred_i - pred_j)), weighted by z_i - z_j so that pairs whose
    labels differ by little (within the timing noise) hardly count. Zero (with a gradient
    path) when the batch holds no such pair."""
    dz = z[:, None] - z[None, :]
    same = group[:, None] == group[None, :]
    weight = torch.where(same & (dz > 0), dz, torch.zeros_like(dz))
    total = weight.sum()
    if not total > 0:
        return pred.sum() * 0.0
    dp = pred[:, None] - pred[None, :]
    return torch.sum(weight * torch.nn.functional.softplus(-dp)) / total
