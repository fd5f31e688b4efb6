import pytest
import torch

from lightfed.core.messages import ClientUpdate
from lightfed.core.sums import Sums
from lightfed.errors import ConfigError
from lightfed.strategies import FedAvg
from lightfed.strategies.base import ServerContext


def _update(client_id: int, delta: list[float], examples: int) -> ClientUpdate:
    return ClientUpdate(client_id, torch.tensor(delta), torch.zeros(0), examples, 1, 0.1, torch.tensor(0.0))


@pytest.mark.parametrize("server_lr", [1.0, 0.5])
def test_fedavg_is_the_example_weighted_average(server_lr):
    params = torch.tensor([1.0, 2.0, 3.0])
    strategy = FedAvg(server_lr=server_lr)
    strategy.setup(ServerContext(params, 3))
    sums = Sums(strategy.sum_sizes(), torch.device("cpu"))
    for update in [_update(0, [1.0, 0.0, -1.0], 10), _update(1, [4.0, 2.0, 2.0], 30), _update(2, [0.0, 0.0, 0.0], 60)]:
        strategy.accumulate(sums, update)
    # weights 0.1, 0.3, 0.6: average delta = [0.1 + 1.2, 0.6, -0.1 + 0.6] = [1.3, 0.6, 0.5]
    expected = params + server_lr * torch.tensor([1.3, 0.6, 0.5])
    assert torch.allclose(strategy.aggregate(params, sums, round=0), expected, atol=1e-6)


def test_fedavg_rejects_non_positive_server_lr():
    with pytest.raises(ConfigError, match="server_lr"):
        FedAvg(server_lr=0.0)
