"""lightfed.local.around_inner: the strategy's own rule run unchanged (None: plain steps)."""

import torch

from lightfed.core.requirements import Requirements
from lightfed.local.around_inner import AroundInner
from tests.local.conftest import Recorder


def test_without_an_inner_rule_the_steps_are_plain():
    rule = AroundInner(None)
    grad = torch.tensor([1.0, -2.0])
    rule.adjust(grad, torch.zeros(2))
    rule.observe(grad)
    assert grad.tolist() == [1.0, -2.0] and rule.report() == {}
    assert rule.requirements == Requirements() and not rule.takes_step and rule.gradients_per_step == 1


def test_the_inner_rule_is_run_unchanged_its_steps_requirements_and_report():
    inner = Recorder(add=0.5)
    rule = AroundInner(inner)
    grad, params = torch.tensor([1.0, -2.0]), torch.tensor([3.0, 4.0])
    rule.adjust(grad, params)
    rule.observe(grad)
    assert grad.tolist() == [1.5, -1.5] and params.tolist() == [3.0, 4.0]
    assert [name for name, _ in inner.calls] == ["adjust", "observe"] and inner.calls[1][1].tolist() == [1.5, -1.5]
    assert rule.report() == {"inner": 1, "personal": -1}
    assert (
        rule.requirements == Requirements(reads_each_update=True) and rule.takes_step and rule.gradients_per_step == 3
    )
