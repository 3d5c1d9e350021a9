"""CMD and MMD: zero for identical batches, growing with a shift."""

from __future__ import annotations

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
