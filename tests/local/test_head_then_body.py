"""lightfed.local.head_then_body: FedRep's schedule, the first head_steps steps move only the personal head (the
body's gradient zeroed), the others only the body."""

import torch

from lightfed.core.requirements import Requirements
from lightfed.local.head_then_body import HeadThenBody
from tests.local.conftest import Client, Recorder

HEAD = torch.tensor([True, False, True])


def test_the_head_moves_for_head_steps_then_the_body_after_the_inner_rules_adjustment():
    client = Client([1.0, -2.0, 0.5], b=[0.0, 0.0])
    rule = HeadThenBody(
        HEAD, torch.tensor([False, True]), torch.tensor([4.0, 5.0]), None, head_steps=2, inner=Recorder(add=1.0)
    )
    rule.start(client.flat.params.clone(), client.context)
    assert client.flat.params.tolist() == [4.0, -2.0, 5.0]  # the personal head is loaded as PersonalLayers does
    grads = []
    for _ in range(4):
        grad = torch.tensor([1.0, 2.0, 3.0])
        rule.adjust(grad, client.flat.params)
        grads.append(grad.tolist())
    assert grads == [[2.0, 0.0, 4.0], [2.0, 0.0, 4.0], [0.0, 3.0, 0.0], [0.0, 3.0, 0.0]]


def test_no_head_steps_trains_the_body_from_the_first_step():
    rule = HeadThenBody(HEAD, torch.tensor([True, False]), None, None, head_steps=0)
    grad = torch.tensor([1.0, 2.0, 3.0])
    rule.adjust(grad, torch.zeros(3))
    assert grad.tolist() == [0.0, 2.0, 0.0]


def test_it_needs_plain_sgd_without_weight_decay_besides_the_inner_rules_needs():
    assert HeadThenBody(HEAD, HEAD[:2], None, None, 1).requirements == Requirements(
        plain_sgd=True, no_weight_decay=True
    )
    with_inner = HeadThenBody(HEAD, HEAD[:2], None, None, 1, inner=Recorder()).requirements
    assert with_inner == Requirements(plain_sgd=True, no_weight_decay=True, reads_each_update=True)
