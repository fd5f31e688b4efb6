"""Each attack on its defining property: the malicious set, sign flipping, scaling, Gaussian updates, label flipping,
a little is enough (LIE), min-max, and the backdoor's trigger on the malicious clients' batches only."""

from pathlib import Path

import pytest
import torch

from lightfed.attacks import (
    Backdoor,
    GaussianUpdates,
    LabelFlipping,
    LittleIsEnough,
    MinMax,
    Scaling,
    SignFlipping,
    malicious_clients,
)
from lightfed.attacks.little_is_enough import z_max
from lightfed.callbacks import Callback
from lightfed.core.messages import ClientPlan
from lightfed.errors import ConfigError
from lightfed.models import SmallCNN
from lightfed.strategies import CoordinateMedian, FedAvg
from lightfed.strategies.sharded_base import ShardedRound
from tests.conftest import same_weights_on_two_processes, small_data, small_model, small_trainer, trainer_options
from tests.personalization.conftest import linear_net, pathological_data

ROOT = Path(__file__).resolve().parents[2]
KNOWN = torch.tensor([[1.0, -2.0, 0.5], [3.0, 0.0, 0.5], [2.0, 4.0, -1.0], [0.0, 1.0, 2.0]])


def _attacked(attack, num_clients: int = 10, seed: int = 0):
    attack.setup(num_clients, seed)
    return attack, min(attack.malicious), min(set(range(num_clients)) - attack.malicious)


def test_the_malicious_set_has_the_configured_size_and_depends_only_on_the_seed():
    assert len(malicious_clients(20, 0.3, 7)) == 6 and malicious_clients(20, 0.3, 7) == malicious_clients(20, 0.3, 7)
    assert malicious_clients(20, 0.3, 7) != malicious_clients(20, 0.3, 8)
    assert malicious_clients(20, 0.0, 7) == frozenset() and malicious_clients(10, 1.0, 0) == frozenset(range(10))
    assert malicious_clients(20, 0.1, 7) <= set(range(20)) and len(malicious_clients(20, 0.1, 7)) == 2
    with pytest.raises(ConfigError, match=r"trainer.attack.fraction must be in \[0, 1\], got 1.5"):
        SignFlipping(1.5)


@pytest.mark.parametrize(
    ("attack", "expected"),
    [
        (SignFlipping(0.3), lambda d: -d),
        (SignFlipping(0.3, scale=4.0), lambda d: -4 * d),
        (Scaling(0.3, factor=10.0), lambda d: 10 * d),
    ],
)
def test_sign_flipping_negates_and_scaling_scales_only_malicious_updates(attack, expected):
    attack, bad, good = _attacked(attack)
    delta = torch.tensor([1.0, -2.0, 0.25])
    poisoned, untouched = delta.clone(), delta.clone()
    attack.update(poisoned, ClientPlan(bad, 0, seed=1))
    attack.update(untouched, ClientPlan(good, 0, seed=1))
    assert torch.equal(poisoned, expected(delta)) and torch.equal(untouched, delta)


def test_gaussian_updates_replace_the_update_with_noise_drawn_from_the_clients_seed():
    attack, bad, _ = _attacked(GaussianUpdates(0.3, std=2.0))
    first, second, other = torch.ones(20000), torch.ones(20000), torch.ones(20000)
    attack.update(first, ClientPlan(bad, 0, seed=5))
    attack.update(second, ClientPlan(bad, 0, seed=5))
    attack.update(other, ClientPlan(bad, 1, seed=6))
    assert torch.equal(first, second) and not torch.equal(first, other)
    assert abs(float(first.mean())) < 0.05 and abs(float(first.std()) - 2.0) < 0.05


def test_label_flipping_maps_y_to_c_minus_1_minus_y_for_malicious_clients_only():
    attack, bad, good = _attacked(LabelFlipping(0.3, num_classes=10))
    batch = (torch.zeros(4, 1, 8, 8), torch.tensor([0, 3, 9, 5]))
    ((x, y),) = attack.batches(iter([batch]), ClientPlan(bad, 0, seed=0))
    assert torch.equal(y, torch.tensor([9, 6, 0, 4])) and x is batch[0]
    assert next(attack.batches(iter([batch]), ClientPlan(good, 0, seed=0))) is batch
    with pytest.raises(ConfigError, match="trainer.attack LabelFlipping needs \\(inputs, labels\\) batches"):
        list(attack.batches(iter([{"x": 1}]), ClientPlan(bad, 0, seed=0)))


def test_lie_z_max_by_hand_and_its_update_stays_within_mean_plus_minus_z_std():
    # n = 10, m = 3: s = 6 - 3 = 3, z = Phi^-1(7 / 10) = 0.5244; m = 1: s = 5, Phi^-1(0.5) = 0
    assert z_max(10, 3) == pytest.approx(0.52440, abs=1e-5) and z_max(10, 1) == 0.0 and z_max(1, 1) == 0.0
    crafted = LittleIsEnough(0.3).collude(KNOWN, torch.tensor([True, True, False, False]), clients=10)
    std, mean = torch.std_mean(KNOWN, 0, correction=0)
    z = z_max(10, 2)
    assert crafted.shape == (2, 3) and torch.equal(crafted[0], crafted[1])
    assert torch.allclose(crafted[0], mean - z * std)
    assert bool(((crafted >= mean - z * std - 1e-6) & (crafted <= mean + z * std + 1e-6)).all())
    fixed = LittleIsEnough(0.3, z=1.5).collude(KNOWN, torch.tensor([True, False, False, False]), clients=10)
    assert torch.allclose(fixed, (mean - 1.5 * std)[None])


@pytest.mark.parametrize("perturbation", ["unit_vec", "std", "sign"])
def test_min_max_stays_within_the_largest_benign_distance_and_goes_as_far_as_that_allows(perturbation):
    attack = MinMax(0.3, perturbation=perturbation)
    crafted = attack.collude(KNOWN, torch.tensor([True, False, True, False]), clients=10)
    assert crafted.shape == (2, 3) and torch.equal(crafted[0], crafted[1])
    bound = torch.cdist(KNOWN.double(), KNOWN.double()).max()
    assert (KNOWN.double() - crafted[0].double()).norm(dim=1).max() <= bound + 1e-5
    p = attack.direction(KNOWN).double()
    gamma = attack.gamma(KNOWN, p)
    further = KNOWN.double().mean(0) - (gamma + 1e-3) * p
    assert gamma > 0 and (KNOWN.double() - further).norm(dim=1).max() > bound


def test_the_backdoor_triggers_only_malicious_batches_and_relabels_them():
    attack, bad, good = _attacked(Backdoor(0.3, target=7, size=2, poison_fraction=0.5))
    x, y = torch.rand(6, 1, 8, 8) * 0.5, torch.tensor([0, 1, 2, 3, 4, 5])
    ((px, py),) = attack.batches(iter([(x, y)]), ClientPlan(bad, 0, seed=0))
    assert bool((px[:3, :, -2:, -2:] == 1.0).all()) and torch.equal(py[:3], torch.tensor([7, 7, 7]))
    assert torch.equal(px[3:], x[3:]) and torch.equal(py[3:], y[3:]) and torch.equal(px[:3, :, :6], x[:3, :, :6])
    assert not bool((x[..., -2:, -2:] == 1.0).any())  # the caller's batch is left as it was
    assert next(attack.batches(iter([(x, y)]), ClientPlan(good, 0, seed=0)))[0] is x


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


class _RecordsRounds(CoordinateMedian):
    def __init__(self) -> None:
        super().__init__()
        self.rounds: list[tuple[list[int], torch.Tensor]] = []

    def aggregate_shard(self, params: torch.Tensor, updates: ShardedRound) -> torch.Tensor:
        self.rounds.append((list(updates.client_ids), updates.deltas.clone()))
        return super().aggregate_shard(params, updates)


class _BenignUpdates(Callback):
    def __init__(self) -> None:
        self.deltas: list[dict[int, torch.Tensor]] = [{}, {}]

    def on_client_end(self, trainer, update) -> None:
        self.deltas[trainer.round][update.client_id] = update.delta.clone()


@pytest.mark.parametrize("knowledge", ["malicious", "all"])
def test_lie_replaces_the_malicious_rows_from_the_benign_updates_the_attackers_know(tmp_path, knowledge):
    """Through the round engine: the server receives, for every malicious client of a round, mu - z sigma of the
    benign updates the attackers know (their own, or every client's), and every benign client's own update."""
    attack, strategy, benign = LittleIsEnough(0.5, knowledge=knowledge), _RecordsRounds(), _BenignUpdates()
    trainer = small_trainer(tmp_path, rounds=2, clients_per_round=6, attack=attack, callbacks=[benign])
    trainer.fit(small_model(), small_data(), strategy)
    for (client_ids, deltas), trained in zip(strategy.rounds, benign.deltas, strict=True):
        bad = [c for c in client_ids if c in attack.malicious]
        known = torch.stack([trained[c] for c in (bad if knowledge == "malicious" else client_ids)]).double()
        std, mean = torch.std_mean(known, 0, correction=0)
        expected = (mean - z_max(len(client_ids), len(bad)) * std).float()
        assert bad and len(bad) < len(client_ids)
        for row, client_id in enumerate(client_ids):
            if client_id in attack.malicious:
                assert torch.allclose(deltas[row], expected, atol=1e-6)
            else:
                assert torch.equal(deltas[row], trained[client_id])


@pytest.mark.slow
def test_a_colluding_attack_gives_the_same_model_on_one_and_two_processes(tmp_path):
    """The held updates meet through one all-reduce; the crafted updates are the same on every process."""

    assert same_weights_on_two_processes(
        tmp_path,
        "--strategy",
        "lightfed.strategies.Krum",
        "--strategy.num_byzantine",
        "2",
        *trainer_options(attack="lightfed.attacks.MinMax"),
        "--trainer.attack.fraction",
        "0.3",
        *trainer_options(rounds=2, local_epochs=1, client_eval_interval=0),
    )


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
