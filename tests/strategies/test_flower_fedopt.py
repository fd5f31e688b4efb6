"""With Flower's settings (deltas weighted by examples, v_0 = 0, FedAdam's bias correction), lightfed's FedAdam,
FedYogi and FedAdagrad give the weights of Flower's strategies on the same client results, to float32 rounding
(skipped without ``flwr``)."""

import numpy as np
import pytest
import torch

from lightfed.core.messages import ClientUpdate
from lightfed.core.sums import Sums
from lightfed.strategies import FedAdagrad, FedAdam, FedYogi
from lightfed.strategies.base import ServerContext

flwr_common = pytest.importorskip("flwr.common")
flwr_strategy = pytest.importorskip("flwr.server.strategy")

X = torch.tensor([0.5, -1.0, 2.0])
DELTAS = [  # per round, the two clients' deltas; they have 30 and 10 examples
    ([0.3, -0.2, 0.1], [-0.1, 0.4, 0.05]),
    ([0.2, 0.1, -0.3], [0.05, -0.2, 0.2]),
    ([-0.1, 0.3, 0.2], [0.25, 0.0, -0.15]),
]
EXAMPLES = (30, 10)
SETTINGS = dict(server_lr=0.1, beta1=0.9, beta2=0.99, tau=1e-3)


def _lightfed_round(strategy, params, deltas, round):
    sums = Sums(strategy.sum_sizes(), torch.device("cpu"))
    for client, (delta, examples) in enumerate(zip(deltas, EXAMPLES, strict=True)):
        update = ClientUpdate(client, torch.tensor(delta), torch.zeros(0), examples, 1, 0.1, torch.tensor(0.0))
        strategy.accumulate(sums, update)
    return strategy.aggregate(params, sums, round)


def _flower_round(strategy, params, deltas, server_round):
    ok = flwr_common.Status(code=flwr_common.Code.OK, message="")
    results = [
        (None, flwr_common.FitRes(ok, flwr_common.ndarrays_to_parameters([(params + torch.tensor(d)).numpy()]), n, {}))
        for d, n in zip(deltas, EXAMPLES, strict=True)
    ]
    aggregated, _ = strategy.aggregate_fit(server_round, results, [])
    (weights,) = flwr_common.parameters_to_ndarrays(aggregated)
    return weights


@pytest.mark.parametrize(
    ("lightfed_class", "flower_class", "bias_correction", "beta1"),
    [(FedAdam, "FedAdam", "flower", 0.9), (FedYogi, "FedYogi", "none", 0.9), (FedAdagrad, "FedAdagrad", "none", 0.0)],
)
def test_flower_compatible_settings_give_flowers_weights(lightfed_class, flower_class, bias_correction, beta1):
    """As in a Flower run, server_round counts from 1 (Flower's FedAdam corrects with t = server_round + 1, which
    ``bias_correction="flower"`` follows). Flower's FedAdagrad has no first moment (beta1 = 0)."""
    settings = {**SETTINGS, "beta1": beta1}
    ours = lightfed_class(**settings, weighting="examples", bias_correction=bias_correction, initial_v="zero")
    ours.setup(ServerContext(X, num_clients=2))
    betas = {} if flower_class == "FedAdagrad" else {"beta_1": beta1, "beta_2": SETTINGS["beta2"]}
    flower = getattr(flwr_strategy, flower_class)(
        initial_parameters=flwr_common.ndarrays_to_parameters([X.numpy()]),
        eta=SETTINGS["server_lr"],
        tau=SETTINGS["tau"],
        **betas,
    )
    params = X
    for round, deltas in enumerate(DELTAS):
        theirs = _flower_round(flower, params, deltas, server_round=round + 1)
        params = _lightfed_round(ours, params, deltas, round)
        np.testing.assert_allclose(params.numpy(), theirs, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(params, X, atol=1e-2)  # the three rounds moved the weights
