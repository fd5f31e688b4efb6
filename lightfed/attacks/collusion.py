"""Colluding attacks: the malicious updates of a round are computed together, from updates the attackers know, after
every client of the round has trained and before the server aggregates (a stage of the round engine)."""

from abc import abstractmethod
from collections.abc import Callable
from dataclasses import replace

import torch
from torch import Tensor

from lightfed.attacks.base import Attack
from lightfed.core.messages import ClientUpdate
from lightfed.errors import ConfigError

KNOWLEDGE = ("malicious", "all")


class ColludingAttack(Attack):
    """An attack whose malicious clients send updates crafted together from the round's benign updates they know:
    with ``knowledge`` "malicious", the benign updates the malicious clients of the round trained themselves (each
    trains honestly first); with "all" (omniscient), every client's update of the round.

    A colluding attack is set as any attack, ``trainer.attack`` (see ``LittleIsEnough`` and ``MinMax``).

    Examples:
        A subclass writes ``collude``; here every attacker sends the known updates' mean:

        >>> import torch
        >>> from lightfed.attacks import ColludingAttack
        >>> class KnownMean(ColludingAttack):
        ...     def collude(self, known, malicious, clients):
        ...         return known.mean(0).expand(int(malicious.sum()), -1)
        >>> attack = KnownMean(fraction=0.5, knowledge="all")
        >>> attack.collude(torch.tensor([[1.0, 0.0], [3.0, 2.0]]), torch.tensor([False, True]), clients=2)
        tensor([[2., 1.]])
        >>> KnownMean(fraction=0.5, knowledge="server")
        Traceback (most recent call last):
        ...
        lightfed.errors.ConfigError: trainer.attack.knowledge must be one of malicious, all, got 'server'
    """

    colludes = True

    def __init__(self, fraction: float, knowledge: str = "malicious") -> None:
        """
        Args:
            fraction: Share of all clients that is malicious.
            knowledge: "malicious": the malicious clients' own benign updates of the round; "all": every client's.
        """
        super().__init__(fraction)
        if knowledge not in KNOWLEDGE:
            raise ConfigError(f"trainer.attack.knowledge must be one of {', '.join(KNOWLEDGE)}, got {knowledge!r}")
        self.knowledge = knowledge

    @abstractmethod
    def collude(self, known: Tensor, malicious: Tensor, clients: int) -> Tensor:
        """The malicious updates (``[malicious.sum(), d]``, in the order of their rows) from the ``known`` updates
        ``[k, d]`` (rows in increasing client id order; ``malicious``: which rows are malicious clients'), in a round
        of ``clients`` clients."""


class HeldUpdates:
    """The updates of one round that a colluding attack needs, held back from the server path until every process's
    clients have trained; then one all-reduce gives every process all of them, the attack turns the malicious ones
    into its crafted updates (the same on every process) and they go to the server path in job order. A no-op
    without a colluding attack or without a malicious client in the round."""

    def __init__(self, attack: Attack | None, client_ids: list[int], params: Tensor) -> None:
        """``client_ids``: the round's clients (every process's, in increasing id order); ``params``: the global
        parameters (a delta's length and device)."""
        self.attack = attack if isinstance(attack, ColludingAttack) else None
        malicious = [] if self.attack is None else [c for c in client_ids if self.attack.is_malicious(c)]
        everyone = self.attack is not None and self.attack.knowledge == "all"
        self.known = (client_ids if everyone else malicious) if malicious else []
        self.clients, self.params = len(client_ids), params
        self.held: dict[int, tuple[int, ClientUpdate]] = {}  # client id -> (job index on this process, update)

    def takes(self, index: int, update: ClientUpdate) -> bool:
        """Holds a copy of the update of this process's ``index``-th job when the attack needs it."""
        if update.client_id not in self.known:
            return False
        self.held[update.client_id] = (index, replace(update, delta=update.delta.clone()))
        return True

    def released(self, all_reduce: Callable[[Tensor, str], Tensor]) -> list[tuple[int, ClientUpdate]]:
        """(job index, update) of the held updates, the malicious ones replaced, in job order: a collective call."""
        if self.attack is None or not self.known:
            return []
        rows = self.params.new_zeros(len(self.known), self.params.numel())
        for client_id, (_, update) in self.held.items():
            rows[self.known.index(client_id)] = update.delta
        rows = all_reduce(rows, "sum")  # each row is one process's, the others add zeros
        malicious = torch.tensor([self.attack.is_malicious(c) for c in self.known], device=rows.device)
        attackers = [c for c in self.known if self.attack.is_malicious(c)]
        crafted = dict(zip(attackers, self.attack.collude(rows, malicious, self.clients), strict=True))
        return sorted(
            (
                (index, replace(update, delta=crafted[client_id]) if client_id in crafted else update)
                for client_id, (index, update) in self.held.items()
            ),
            key=lambda job: job[0],
        )
