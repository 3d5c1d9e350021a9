"""CMD and MMD: zero for identical batches, growing with a shift."""

from __future__ import annotations

import math

import pytest
import torch

from cdmpp.model.adaptation import cmd, distance, mmd


@pytest.mark.parametrize("fn", [cmd, mmd])
def test_zero_for_identical_and_growing_with_shift(fn):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(256, 8, generator=g)
    assert float(fn(x, x.clone())) == pytest.approx(0.0, abs=1e-5)
    values = [float(fn(x, x + shift)) for shift in (0.1, 0.5, 2.0)]
    assert 0 < values[0] < values[1] < values[2]


def test_unknown_distance_is_a_clear_error():
    with pytest.raises(ValueError, match="cmd"):
        distance("wasserstein")


@pytest.mark.parametrize("fn", [cmd, mmd])
def test_a_change_of_spread_alone_is_a_distance(fn):
    """Equal means, different variances: not only the means are compared."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(512, 4, generator=g)
    x = x - x.mean(0)
    assert float(fn(x, 3 * x)) > 0.1
    assert float(fn(x, 3 * x)) > float(fn(x, 1.5 * x)) > 0


def test_cmd_compares_every_central_moment_up_to_its_order():
    """Two samples with the same mean (0) and variance (1) whose third moments differ
    (0 and 1.5): invisible to the first two moments, seen from the third on."""
    x = torch.tensor([-1.0, 1.0] * 10)[:, None]
    y = torch.tensor([2.0, -0.5, -0.5, -0.5, -0.5] * 4)[:, None]
    assert float(x.mean()) == float(y.mean()) == 0.0
    assert float((x ** 2).mean()) == float((y ** 2).mean()) == 1.0
    assert float(cmd(x, y, moments=2)) == pytest.approx(0.0, abs=1e-6)
    assert float(cmd(x, y, moments=3)) == pytest.approx(1.5, rel=1e-5)  # |0 - 1.5|
    # fourth: E[x^4] = 1, E[y^4] = (16 + 4 * 0.0625) / 5 = 3.25; fifth: 0 vs (32 - 4/32) / 5
    assert float(cmd(x, y, moments=4)) == pytest.approx(1.5 + 2.25, rel=1e-5)
    assert float(cmd(x, y)) == pytest.approx(1.5 + 2.25 + 6.375, rel=1e-5)


def test_mmd_sums_the_three_documented_kernel_widths():
    """Between two points d apart: 2 * sum_g (1 - e^{-g d^2}) with g = 1, 0.1, 0.001
    (../shared/RESEARCH.md: kernel e^{-d^2} + e^{-0.1 d^2} + e^{-0.001 d^2})."""
    for d in (0.5, 3.0, 30.0):
        x, y = torch.zeros(1, 2), torch.tensor([[d, 0.0]])
        expected = 2 * sum(1 - math.exp(-g * d * d) for g in (1.0, 0.1, 0.001))
        assert float(mmd(x, y)) == pytest.approx(expected, rel=1e-4)


def test_mmd_keeps_growing_where_the_narrow_kernel_saturates():
    """Beyond a few units apart e^{-d^2} is 0 for every cross pair, so one narrow kernel cannot
    tell a shift of 4 from one of 40; the wider kernels still can (and a wide kernel alone
    would hardly see a small change of spread, which the narrow one does)."""
    g = torch.Generator().manual_seed(1)
    x = 0.05 * torch.randn(64, 3, generator=g)
    near, far = float(mmd(x, x + 4.0)), float(mmd(x, x + 40.0))
    assert far > 1.3 * near
    narrow_only = (1.0,)
    assert float(mmd(x, x + 40.0, narrow_only)) == pytest.approx(
        float(mmd(x, x + 4.0, narrow_only)), rel=1e-3)
    spread = 0.5 * torch.randn(64, 3, generator=g)
    assert float(mmd(spread, 2 * spread)) > 10 * float(mmd(spread, 2 * spread, (0.001,)))
