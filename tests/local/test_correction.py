"""lightfed.local.correction: factor x vector added to every step's gradient (SCAFFOLD's c - c_i)."""

import torch

from lightfed.local import GradientCorrection


def test_the_correction_adds_exactly_c_minus_c_i_to_the_gradient_and_leaves_the_parameters():
    c, c_i = torch.tensor([0.5, -1.0, 2.0]), torch.tensor([1.5, 0.25, 2.0])
    rule = GradientCorrection(c - c_i)
    grad, params = torch.tensor([1.0, 2.0, -3.0]), torch.tensor([4.0, 5.0, 6.0])
    rule.adjust(grad, params)
    assert grad.tolist() == [0.0, 0.75, -3.0] and params.tolist() == [4.0, 5.0, 6.0]
    rule.adjust(grad, params)  # every step: the same vector again
    assert grad.tolist() == [-1.0, -0.5, -3.0]


def test_the_factor_scales_the_vector_and_the_rule_is_one_plain_gradient_a_step():
    rule = GradientCorrection(torch.tensor([1.0, -2.0]), factor=-0.5)
    grad = torch.tensor([3.0, 3.0])
    storage = grad.data_ptr()
    rule.adjust(grad, torch.zeros(2))
    assert grad.tolist() == [2.5, 4.0] and grad.data_ptr() == storage  # in place
    assert rule.gradients_per_step == 1 and not rule.takes_step and rule.report() == {}
