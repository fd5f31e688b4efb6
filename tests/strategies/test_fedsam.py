import pytest
import torch

from lightfed.core.messages import ClientPlan
from lightfed.errors import ConfigError
from lightfed.strategies import FedASAM, FedSAM
from lightfed.strategies.base import ServerContext
from tests.optim.test_sam import Quadratic, _client, grad_at, hand_sam_step


class PlainQuadratic(Quadratic):
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.2)


@pytest.mark.parametrize("strategy, adaptive", [(FedSAM(rho=0.3), False), (FedASAM(rho=0.3, eta=0.1), True)])
def test_fedsam_clients_take_the_hand_computed_sam_steps_with_their_own_optimizer(strategy, adaptive):
    client = _client(PlainQuadratic())
    strategy.setup(ServerContext(torch.zeros(3), 8))
    w0 = torch.tensor([2.0, 1.0, -1.0])
    plan = strategy.configure_client(ClientPlan(client_id=0, round=0, seed=0, steps=2))
    update = client.train(plan, w0, torch.zeros(0))
    w2 = hand_sam_step(hand_sam_step(w0, 0.2, 0.3, adaptive, 0.1), 0.2, 0.3, adaptive, 0.1)
    assert torch.allclose(update.delta, w2 - w0, atol=1e-6)
    w1 = w0 - 0.2 * grad_at(w0)
    assert not torch.allclose(update.delta, w1 - 0.2 * grad_at(w1) - w0, atol=1e-3)  # not plain gradient steps


def test_fedsam_refuses_a_negative_radius():
    with pytest.raises(ConfigError, match="rho must be >= 0"):
        FedSAM(rho=-0.1)
