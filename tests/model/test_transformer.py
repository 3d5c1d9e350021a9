"""The network over ragged programs: padding to a longer program of the batch changes nothing."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from cdmpp.model.config import ModelConfig
from cdmpp.model.transformer import CDMPPNet
from cdmpp.train.batches import collate


@pytest.mark.parametrize("readout", ["pooled", "work_weighted"])
def test_a_program_is_read_out_alike_alone_and_padded_beside_a_longer_one(readout):
    torch.manual_seed(0)
    config = ModelConfig(d_model=16, n_heads=2, n_layers=1, d_ff=32, head_hidden=(16,),
                         stride_alignment=False, readout=readout)
    net = CDMPPNet(config).eval()
    rng = np.random.default_rng(0)
    short, longer = (rng.normal(size=(n, config.n_features)).astype(np.float32) for n in (2, 7))
    features, positions = [short, longer], [np.arange(2), np.arange(7)]
    with torch.no_grad():
        alone = net.program_embedding(*collate(features, positions, [0])[:3])
        x, p, m, _ = collate(features, positions, [0, 1])
        assert not m[0].all()  # the short program is padded
        batched = net.program_embedding(x, p, m)
        prediction_alone = net(*collate(features, positions, [0])[:3])[0]
        prediction_batched = net(x, p, m)[0]
    torch.testing.assert_close(batched[0], alone[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(prediction_batched[0], prediction_alone[0], rtol=1e-5, atol=1e-5)
