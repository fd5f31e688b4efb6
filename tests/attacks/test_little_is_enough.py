"""lightfed.attacks.little_is_enough: every malicious client sends mu - z sigma of the benign updates it knows, z
Baruch et al.'s z_max unless set."""

import pytest
import torch

from lightfed.attacks import LittleIsEnough
from lightfed.attacks.little_is_enough import std_and_mean, z_max
from lightfed.callbacks import Callback
from lightfed.strategies import CoordinateMedian
from lightfed.strategies.sharded_base import ShardedRound
from tests.attacks.conftest import KNOWN
from tests.conftest import small_data, small_model, small_trainer


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


@pytest.mark.parametrize(
    ("clients", "malicious", "z"),
    [
        (10, 2, 0.2533471031),  # s = floor(10/2 + 1) - 2 = 4: Phi^-1(6/10)
        (4, 3, 0.6744897502),  # s = 3 - 3 = 0, kept at 1: Phi^-1(3/4)
        (5, 1, 0.2533471031),  # s = floor(5/2 + 1) - 1 = 2: Phi^-1(3/5)
        (2, 1, 0.0),  # s = 1: Phi^-1(1/2)
        (3, 0, -0.4307272993),  # s = floor(3/2 + 1) = 2: Phi^-1(1/3)
    ],
)
def test_z_max_by_hand(clients, malicious, z):
    assert z_max(clients, malicious) == pytest.approx(z, abs=1e-9)


def test_lie_by_hand_on_the_known_updates():
    """KNOWN's columns: means (1.5, 0.75, 0.5), population variances (1.25, 4.6875, 1.125); z_max(10, 2) = 0.2533."""
    z = 0.2533471031
    expected = torch.tensor([1.5 - z * 1.25**0.5, 0.75 - z * 4.6875**0.5, 0.5 - z * 1.125**0.5])
    crafted = LittleIsEnough(0.2).collude(KNOWN, torch.tensor([False, True, False, True]), clients=10)
    assert crafted.dtype == torch.float32 and crafted.shape == (2, 3)
    torch.testing.assert_close(crafted, expected.expand(2, 3), rtol=0, atol=1e-6)
    zero = LittleIsEnough(0.2, z=0.0).collude(KNOWN, torch.tensor([True, False, False, False]), clients=4)
    assert zero.tolist() == [[1.5, 0.75, 0.5]]  # z = 0: the known mean itself


def test_std_and_mean_are_the_population_ones_in_the_rows_dtype():
    std, mean = std_and_mean(KNOWN)
    assert std.dtype == mean.dtype == torch.float32
    torch.testing.assert_close(mean, torch.tensor([1.5, 0.75, 0.5]))
    torch.testing.assert_close(std, torch.tensor([1.25, 4.6875, 1.125]).sqrt())
    std64, mean64 = std_and_mean(KNOWN.double())
    assert std64.dtype == mean64.dtype == torch.float64


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
