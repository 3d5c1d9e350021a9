"""The within-task ranking term: which pairs count, and which way it pushes."""

from __future__ import annotations

import torch

from cdmpp.model.losses import pairwise_rank_loss


def test_only_pairs_of_one_group_count():
    z = torch.tensor([0.0, 1.0, 0.5, 2.0])
    group = torch.tensor([0, 0, 1, 2])
    right = torch.tensor([0.0, 1.0, 9.0, -9.0])  # group 0 in order; others have no pair
    wrong = torch.tensor([1.0, 0.0, -9.0, 9.0])
    assert pairwise_rank_loss(right, z, group) < pairwise_rank_loss(wrong, z, group)
    # the lone programs of groups 1 and 2 do not change it, however they are predicted
    assert torch.isclose(pairwise_rank_loss(right, z, group),
                         pairwise_rank_loss(torch.tensor([0.0, 1.0, -5.0, 5.0]), z, group))


def test_no_pair_gives_zero_with_a_gradient():
    pred = torch.tensor([0.3, 0.7], requires_grad=True)
    loss = pairwise_rank_loss(pred, torch.tensor([1.0, 1.0]), torch.tensor([0, 0]))  # a tie
    loss.backward()
    assert loss.item() == 0.0 and torch.all(pred.grad == 0)


def test_gradient_orders_the_pair_and_weights_it_by_the_label_gap():
    def grad(gap):
        pred = torch.zeros(2, requires_grad=True)
        pairwise_rank_loss(pred, torch.tensor([0.0, gap]), torch.tensor([0, 0])).backward()
        return pred.grad

    g = grad(1.0)
    assert g[1] < 0 < g[0]  # descent raises the slower program's prediction, lowers the other
    # one pair: normalized by its own weight, so its size does not depend on the gap
    assert torch.allclose(grad(0.01), g)


def test_a_small_gap_counts_less_beside_a_large_one():
    pred = torch.zeros(3, requires_grad=True)
    z = torch.tensor([0.0, 0.02, 2.0])
    pairwise_rank_loss(pred, z, torch.tensor([0, 0, 0])).backward()
    # program 1 is 0.02 above program 0 and 1.98 below program 2: pushed down, not up
    assert pred.grad[1] > 0


def test_a_batch_whose_weights_are_all_zero_adds_nothing():
    from cdmpp.model.losses import make_loss

    loss = make_loss("paper")
    pred = torch.tensor([0.5, 1.0], requires_grad=True)
    value = loss(pred, torch.tensor([0.0, 2.0]), torch.zeros(2))
    value.backward()
    assert value.item() == 0.0 and torch.all(pred.grad == 0)
    weighted = loss(pred, torch.tensor([0.0, 2.0]), torch.tensor([1.0, 0.0]))
    assert torch.isclose(weighted, loss(pred[:1], torch.tensor([0.0])))  # the other ignored
