"""A local rule that takes the step itself replaces the optimizer's step in the client loop."""

from dataclasses import replace

import torch
from torch import Tensor

from lightfed.core.local_context import LocalContext
from lightfed.core.local_rule import LocalRule
from lightfed.core.messages import ClientPlan
from lightfed.strategies import FedAvg
from tests.conftest import small_data, small_model, small_trainer


class HalfGradientStep(LocalRule):
    """Moves the parameters by -0.5 x the gradient itself and reports the step as the context's lr."""

    takes_step = True

    def start(self, params: Tensor, context: LocalContext) -> None:
        self.context = context

    def adjust(self, grad: Tensor, params: Tensor) -> None:
        params.sub_(grad, alpha=0.5)
        self.context.lr = 0.5


class WithRule(FedAvg):
    def configure_client(self, plan: ClientPlan, received=None) -> ClientPlan:
        return replace(plan, rule=HalfGradientStep())


def test_the_rule_step_replaces_the_optimizer_step(tmp_path):
    """small_model's SGD (lr 0.1, momentum 0.5) stepping as well would give different weights."""
    ruled = small_model()
    small_trainer(tmp_path / "rule", rounds=1, local_steps=3).fit(ruled, small_data(), WithRule())
    plain = small_model(lr=0.5, momentum=0.0)
    small_trainer(tmp_path / "sgd", rounds=1, local_steps=3).fit(plain, small_data(), FedAvg())
    for a, b in zip(ruled.parameters(), plain.parameters(), strict=False):
        torch.testing.assert_close(a, b)
