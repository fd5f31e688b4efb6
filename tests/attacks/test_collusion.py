"""lightfed.attacks.collusion: a colluding attack's knowledge, and HeldUpdates, which holds the round's updates the
attack needs, meets them through one all-reduce and releases them, the malicious ones crafted, in job order."""

import pytest
import torch

from lightfed.attacks import ColludingAttack, SignFlipping
from lightfed.attacks.collusion import HeldUpdates
from lightfed.core.messages import ClientUpdate
from lightfed.errors import ConfigError
from tests.conftest import same_weights_on_two_processes, trainer_options


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


class _SendsMinusTheSum(ColludingAttack):
    """The i-th malicious client (in row order) sends minus the sum of the known rows, plus i on every coordinate;
    records what ``collude`` was given."""

    def __init__(self, malicious: set[int], knowledge: str = "malicious") -> None:
        super().__init__(0.5, knowledge)
        self.malicious = frozenset(malicious)
        self.calls: list[tuple[torch.Tensor, torch.Tensor, int]] = []

    def collude(self, known, malicious, clients):
        self.calls.append((known.clone(), malicious.clone(), clients))
        count = int(malicious.sum())
        return -known.sum(0) + torch.arange(count, dtype=known.dtype)[:, None]


def _update(client_id: int) -> ClientUpdate:
    """Client c's update: delta (c, 10 c)."""
    delta = torch.tensor([float(client_id), 10.0 * client_id])
    return ClientUpdate(client_id, delta, torch.zeros(0), 5, 1, 0.1, torch.tensor(0.0))


def _no_reduce(rows: torch.Tensor, op: str) -> torch.Tensor:
    assert op == "sum"
    return rows


def test_the_knowledge_is_checked_and_a_colluding_attack_says_it_colludes():
    assert _SendsMinusTheSum(set()).colludes and not SignFlipping(0.1).colludes
    with pytest.raises(ConfigError, match="trainer.attack.knowledge must be one of malicious, all, got 'some'"):
        _SendsMinusTheSum(set(), knowledge="some")


def test_the_malicious_clients_own_updates_are_held_and_replaced_by_the_crafted_ones():
    """Clients 0..5, attackers 1 and 4 knowing their own updates (1, 10) and (4, 40): they send -(5, 50) and -(5, 50) + 1."""
    attack = _SendsMinusTheSum({1, 4})
    held = HeldUpdates(attack, [0, 1, 2, 3, 4, 5], torch.zeros(2))
    updates = [_update(c) for c in range(6)]
    taken = [held.takes(index, update) for index, update in enumerate(updates)]
    assert taken == [False, True, False, False, True, False]
    updates[1].delta.fill_(99.0)  # the client's buffer is reused: what was held is a copy
    released = held.released(_no_reduce)
    ((known, malicious, clients),) = attack.calls
    assert known.tolist() == [[1.0, 10.0], [4.0, 40.0]] and malicious.tolist() == [True, True] and clients == 6
    assert [(index, update.client_id) for index, update in released] == [(1, 1), (4, 4)]
    assert released[0][1].delta.tolist() == [-5.0, -50.0] and released[1][1].delta.tolist() == [-4.0, -49.0]
    assert released[0][1].num_examples == 5 and released[0][1].local_time == 0.1  # the rest of the update is kept


def test_an_omniscient_attack_holds_every_update_and_releases_the_benign_ones_unchanged_in_job_order():
    attack = _SendsMinusTheSum({2}, knowledge="all")
    held = HeldUpdates(attack, [0, 2, 3], torch.zeros(2))
    for index, client_id in [(1, 2), (2, 0), (0, 3)]:  # delivered out of job order, jobs not in client id order
        assert held.takes(index, _update(client_id))
    released = held.released(_no_reduce)
    ((known, malicious, clients),) = attack.calls
    assert known.tolist() == [[0.0, 0.0], [2.0, 20.0], [3.0, 30.0]] and malicious.tolist() == [False, True, False]
    assert clients == 3 and [(index, update.client_id) for index, update in released] == [(0, 3), (1, 2), (2, 0)]
    assert [update.delta.tolist() for _, update in released] == [[3.0, 30.0], [-5.0, -50.0], [0.0, 0.0]]


def test_each_process_holds_its_own_rows_and_the_all_reduce_gives_every_process_all_of_them():
    """Two processes, clients 0..3 known to the omniscient attackers 1 and 2; process 0 trains 0 and 2, process 1 trains
    1 and 3. Each row of the reduced matrix comes from the one process that trained the client."""
    ids = [0, 1, 2, 3]
    mine = HeldUpdates(_SendsMinusTheSum({1, 2}, "all"), ids, torch.zeros(2))
    theirs = HeldUpdates(_SendsMinusTheSum({1, 2}, "all"), ids, torch.zeros(2))
    for index, client_id in enumerate([0, 2]):
        mine.takes(index, _update(client_id))
    for index, client_id in enumerate([1, 3]):
        theirs.takes(index, _update(client_id))
    sent: list[torch.Tensor] = []

    def all_reduce(rows: torch.Tensor, op: str) -> torch.Tensor:
        sent.append(rows.clone())
        return sent[0] + sent[1] if len(sent) == 2 else rows

    theirs.released(all_reduce)  # its rows go first; process 0's call adds them to its own
    released = mine.released(all_reduce)
    assert sent[1].tolist() == [[0.0, 0.0], [0.0, 0.0], [2.0, 20.0], [0.0, 0.0]]  # only its own rows, zeros elsewhere
    (known, malicious, clients) = mine.attack.calls[0]
    assert known.tolist() == [[0.0, 0.0], [1.0, 10.0], [2.0, 20.0], [3.0, 30.0]] and clients == 4
    assert [(index, update.client_id, update.delta.tolist()) for index, update in released] == [
        (0, 0, [0.0, 0.0]),
        (1, 2, [-5.0, -59.0]),  # the second attacker: -(6, 60) + 1
    ]


@pytest.mark.parametrize(
    ("attack", "ids"), [(None, [0, 1]), (SignFlipping(1.0), [0, 1]), (_SendsMinusTheSum({5}, "all"), [0, 1])]
)
def test_nothing_is_held_without_a_colluding_attack_or_without_an_attacker_in_the_round(attack, ids):
    if isinstance(attack, SignFlipping):
        attack.draw(2, 0)
    held = HeldUpdates(attack, ids, torch.zeros(2))

    def never(rows: torch.Tensor, op: str) -> torch.Tensor:
        raise AssertionError("no collective call is needed")

    assert not held.takes(0, _update(0)) and not held.takes(1, _update(1))
    assert held.released(never) == []
