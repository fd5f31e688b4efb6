"""lightfed.attacks.label_flipping: a malicious client trains on labels y -> C - 1 - y; evaluation is left alone."""

import pytest
import torch

from lightfed.attacks import LabelFlipping
from lightfed.core.messages import ClientPlan
from lightfed.errors import ConfigError
from lightfed.strategies import FedAvg
from tests.attacks.conftest import attacked
from tests.conftest import small_trainer
from tests.personalization.conftest import linear_net, pathological_data


def test_label_flipping_maps_y_to_c_minus_1_minus_y_for_malicious_clients_only():
    attack, bad, good = attacked(LabelFlipping(0.3, num_classes=10))
    batch = (torch.zeros(4, 1, 8, 8), torch.tensor([0, 3, 9, 5]))
    ((x, y),) = attack.batches(iter([batch]), ClientPlan(bad, 0, seed=0))
    assert torch.equal(y, torch.tensor([9, 6, 0, 4])) and x is batch[0]
    assert next(attack.batches(iter([batch]), ClientPlan(good, 0, seed=0))) is batch
    with pytest.raises(ConfigError, match="trainer.attack LabelFlipping needs \\(inputs, labels\\) batches"):
        list(attack.batches(iter([{"x": 1}]), ClientPlan(bad, 0, seed=0)))


def test_two_classes_swap_and_the_callers_labels_are_left_as_they_were():
    attack, bad, _ = attacked(LabelFlipping(0.5, num_classes=2), num_clients=2)
    labels = torch.tensor([0, 1, 1, 0])
    ((_, flipped),) = attack.batches(iter([[torch.zeros(4, 2), labels]]), ClientPlan(bad, 0, seed=0))
    assert flipped.tolist() == [1, 0, 0, 1] and labels.tolist() == [0, 1, 1, 0]


class _KeepsTheModel(FedAvg):
    def aggregate(self, params: torch.Tensor, sums, round: int) -> torch.Tensor:
        return params


def test_evaluation_fine_tunes_a_malicious_client_as_a_benign_one(tmp_path):
    """A server that keeps the global model whatever clients send: the fine-tuned metrics of a run where every client
    flips its labels equal those of a benign run (evaluation measures, it does not attack)."""

    def finetuned(attack) -> dict[str, float]:
        trainer = small_trainer(
            tmp_path / str(attack is None),
            rounds=1,
            clients_per_round=3,
            attack=attack,
            client_eval_interval=1,
            client_eval_finetune_steps=2,
        )
        metrics = trainer.fit(linear_net(), pathological_data(6, client_val_fraction=0.3), _KeepsTheModel())
        return {key: value for key, value in metrics.items() if key.startswith("clients/finetuned/")}

    benign = finetuned(None)
    assert benign and finetuned(LabelFlipping(1.0, num_classes=10)) == benign
