"""q-FedAvg and agnostic FL in tiny runs: q = 0 is FedAvg bit for bit, q > 0 and agnostic FL change the model."""

import torch

from lightfed.strategies import AgnosticFL, FedAvg, QFedAvg
from tests.conftest import small_data, small_model, small_trainer


def _final_weights(root, strategy) -> tuple[torch.Tensor, dict]:
    model = small_model()
    metrics = small_trainer(root, rounds=2, local_steps=3).fit(model, small_data(), strategy)
    return torch.cat([p.detach().flatten() for p in model.parameters()]), metrics


def test_q_zero_is_fedavg_bit_for_bit_and_q_one_is_not(tmp_path):
    fedavg, _ = _final_weights(tmp_path / "fedavg", FedAvg())
    q_zero, _ = _final_weights(tmp_path / "q0", QFedAvg(q=0.0))
    q_one, _ = _final_weights(tmp_path / "q1", QFedAvg(q=1.0))
    assert torch.equal(q_zero, fedavg)
    assert torch.isfinite(q_one).all() and not torch.allclose(q_one, fedavg)


def test_agnostic_fl_moves_its_mixture_off_uniform(tmp_path):
    weights, metrics = _final_weights(tmp_path, AgnosticFL(lambda_lr=0.1))
    assert torch.isfinite(weights).all()
    assert metrics["strategy/lambda_max"] > 1 / 8 > metrics["strategy/lambda_min"]  # 8 clients start at 1/8
