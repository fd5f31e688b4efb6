"""lightfed.attacks.backdoor: the trigger stamped on the first poison_fraction of each malicious batch, relabelled to
the target, and the success rate of the trigger on inputs not of the target class."""

import pytest
import torch

from lightfed.attacks import Backdoor
from lightfed.attacks.attack_success_rate import AttackSuccessRate
from lightfed.core.messages import ClientPlan
from lightfed.errors import ConfigError
from lightfed.models import SmallCNN
from lightfed.strategies import CoordinateMedian
from tests.attacks.conftest import attacked
from tests.conftest import small_data, small_trainer


def test_the_backdoor_triggers_only_malicious_batches_and_relabels_them():
    attack, bad, good = attacked(Backdoor(0.3, target=7, size=2, poison_fraction=0.5))
    x, y = torch.rand(6, 1, 8, 8) * 0.5, torch.tensor([0, 1, 2, 3, 4, 5])
    ((px, py),) = attack.batches(iter([(x, y)]), ClientPlan(bad, 0, seed=0))
    assert bool((px[:3, :, -2:, -2:] == 1.0).all()) and torch.equal(py[:3], torch.tensor([7, 7, 7]))
    assert torch.equal(px[3:], x[3:]) and torch.equal(py[3:], y[3:]) and torch.equal(px[:3, :, :6], x[:3, :, :6])
    assert not bool((x[..., -2:, -2:] == 1.0).any())  # the caller's batch is left as it was
    assert next(attack.batches(iter([(x, y)]), ClientPlan(good, 0, seed=0)))[0] is x


def test_the_trigger_is_a_size_by_size_square_of_value_in_the_bottom_right_corner_of_every_channel():
    images = torch.zeros(2, 3, 5, 4)
    stamped = Backdoor(0.1, size=3, value=-2.0).triggered(images)
    expected = torch.zeros(2, 3, 5, 4)
    expected[:, :, 2:5, 1:4] = -2.0
    assert torch.equal(stamped, expected) and not bool(images.any())  # a copy: the images are left as they were


@pytest.mark.parametrize(("poison_fraction", "count"), [(0.1, 1), (0.25, 1), (0.5, 2), (0.7, 3), (1.0, 4)])
def test_max_1_and_round_poison_fraction_times_the_batch_examples_are_poisoned(poison_fraction, count):
    """Of a batch of 4: round(0.1 x 4) = 0, at least 1; round(1.0) = 1; round(2.0) = 2; round(2.8) = 3; all 4."""
    x, y = torch.zeros(4, 1, 3, 3), torch.tensor([1, 2, 3, 4])
    px, py = Backdoor(0.1, target=9, size=1, poison_fraction=poison_fraction).poison_batch((x, y))
    assert py.tolist() == [9] * count + [1, 2, 3, 4][count:]
    assert px[:, 0, -1, -1].tolist() == [1.0] * count + [0.0] * (4 - count)


def test_the_poison_fraction_must_be_in_0_exclusive_to_1_and_batches_must_be_labelled():
    for poison_fraction in (0.0, 1.5):
        with pytest.raises(
            ConfigError, match=f"trainer.attack.poison_fraction must be in \\(0, 1\\], got {poison_fraction}"
        ):
            Backdoor(0.1, poison_fraction=poison_fraction)
    with pytest.raises(ConfigError, match="trainer.attack Backdoor needs \\(inputs, labels\\) batches, got dict"):
        Backdoor(0.1).poison_batch({"x": torch.zeros(1)})


def test_its_callback_logs_its_own_success_rate():
    attack = Backdoor(0.1, target=3)
    (callback,) = attack.callbacks()
    assert isinstance(callback, AttackSuccessRate) and callback.success_rate == attack.success_rate


class _SeesTheTrigger(torch.nn.Module):
    """Scores class 7 highest exactly when the bottom-right pixel is 1, else class 0."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scores = torch.zeros(len(x), 10)
        scores[:, 0] = 1.0
        scores[x[:, 0, -1, -1] == 1.0, 7] = 2.0
        return scores


def test_the_success_rate_counts_triggered_inputs_not_of_the_target_class_classified_as_the_target():
    x, y = torch.zeros(5, 1, 8, 8), torch.tensor([7, 1, 2, 7, 3])
    assert Backdoor(0.1, target=7).success_rate(_SeesTheTrigger(), [(x, y)]) == (3.0, 3.0)
    # a trigger the model does not react to: no hit, the target's own examples still left out
    assert Backdoor(0.1, target=7, value=0.5).success_rate(_SeesTheTrigger(), [(x, y), (x, y)]) == (0.0, 6.0)


class _SeesBatches(SmallCNN):
    """Records, per client, whether each training batch carries the trigger and its labels."""

    def __init__(self) -> None:
        torch.manual_seed(0)
        super().__init__(width=8)
        self.seen: dict[int, list[tuple[torch.Tensor, torch.Tensor]]] = {}

    def training_step(self, batch, batch_idx):
        x, y = batch
        stamped = (x[..., -2:, -2:] == 1.0).flatten(1).all(1)
        self.seen.setdefault(self.trainer.client_id, []).append((stamped, y.clone()))
        return super().training_step(batch, batch_idx)


def test_in_a_run_the_trigger_reaches_only_malicious_clients_and_the_success_rate_is_logged(tmp_path):
    model, attack = _SeesBatches(), Backdoor(0.25, target=0, size=2, poison_fraction=0.5)
    trainer = small_trainer(tmp_path, rounds=2, clients_per_round=8, attack=attack, clients_in_parallel=1)
    metrics = trainer.fit(model, small_data(), CoordinateMedian())
    assert len(attack.malicious) == 2 and set(model.seen) == set(range(8))
    for client_id, batches in model.seen.items():
        for stamped, labels in batches:
            half = max(1, round(0.5 * len(labels)))
            if client_id in attack.malicious:
                assert bool(stamped[:half].all()) and bool((labels[:half] == 0).all())
            assert not bool(stamped[half if client_id in attack.malicious else 0 :].any())
    assert 0.0 <= metrics["attack/success_rate"] <= 1.0
