"""What a simulated attack is: a fixed set of malicious clients, drawn from the run's seed, whose local training it
changes (their batches, their update)."""

from collections.abc import Iterator, Sequence

import torch
from torch import Tensor

from lightfed.core.messages import ClientPlan, ClientUpdate
from lightfed.core.sums import Sums
from lightfed.core.transforms import Transform, TransformContext
from lightfed.data.module import Batch
from lightfed.errors import ConfigError


def malicious_clients(num_clients: int, fraction: float, seed: int) -> frozenset[int]:
    """round(fraction x num_clients) client ids, a uniform draw that depends only on ``seed`` (and the count)."""
    count = round(fraction * num_clients)
    return frozenset(torch.randperm(num_clients, generator=torch.Generator().manual_seed(seed))[:count].tolist())


def labelled(batch: Batch, attack: str) -> tuple[Tensor, Tensor]:
    """The (inputs, labels) of a batch; refuses batches of another form."""
    if not (isinstance(batch, (tuple, list)) and len(batch) == 2 and isinstance(batch[1], Tensor)):
        raise ConfigError(f"trainer.attack {attack} needs (inputs, labels) batches, got {type(batch).__name__}")
    return batch[0], batch[1]


class Attack(Transform):
    """A ``fraction`` of the clients (drawn once from the run's seed) is malicious; their local training runs as
    usual through ``batches`` (data poisoning: ``poison_batch``) and what they send is then changed in place
    (``poison_update``): the attack is the first transform of the run, so every other transform sees what the attacker
    sends. Benign clients are untouched. ``callbacks`` observe the run (e.g. an attack's success).

    In a config, an attack is the trainer's:

    ```yaml
    trainer:
      attack:
        class_path: lightfed.attacks.SignFlipping
        init_args: {fraction: 0.2}
    ```

    Examples:
        The malicious clients depend only on the client count and the seed:

        >>> from lightfed.attacks import Attack
        >>> attack = Attack(fraction=0.25)
        >>> attack.draw(num_clients=8, seed=0)
        >>> sorted(attack.malicious)
        [0, 4]
        >>> attack.is_malicious(1)
        False
        >>> Attack(fraction=1.5)
        Traceback (most recent call last):
        ...
        lightfed.errors.ConfigError: trainer.attack.fraction must be in [0, 1], got 1.5
    """

    colludes = False  # the malicious updates depend on other updates of the round (``lightfed.attacks.collusion``)

    def __init__(self, fraction: float) -> None:
        """
        Args:
            fraction: Share of all clients that is malicious, in [0, 1] (rounded to a whole number of clients).
        """
        if not 0 <= fraction <= 1:
            raise ConfigError(f"trainer.attack.fraction must be in [0, 1], got {fraction}")
        self.fraction = fraction
        self.malicious: frozenset[int] = frozenset()
        self._plans: dict[int, ClientPlan] = {}  # a malicious client's plan of its latest round

    def setup(self, context: TransformContext) -> None:
        """Draws the malicious clients (the same on every process and on a resume)."""
        self.draw(context.server.num_clients, context.server.seed)

    def draw(self, num_clients: int, seed: int) -> None:
        """The malicious clients of ``num_clients`` clients, drawn from ``seed``."""
        self.malicious = malicious_clients(num_clients, self.fraction, seed)

    def is_malicious(self, client_id: int) -> bool:
        return client_id in self.malicious

    def batches(self, batches: Iterator[Batch], plan: ClientPlan) -> Iterator[Batch]:
        """The batches the client trains on: a malicious client's through ``poison_batch``."""
        if not self.is_malicious(plan.client_id):
            return batches
        return (self.poison_batch(batch) for batch in batches)

    def plan(self, plan: ClientPlan) -> ClientPlan:
        if self.is_malicious(plan.client_id):
            self._plans[plan.client_id] = plan
        return plan

    def passes(self, client_ids: Sequence[int]) -> bool:
        return not any(self.is_malicious(client_id) for client_id in client_ids)

    def contribution(self, update: ClientUpdate, round: int, sums: Sums) -> ClientUpdate:
        """A malicious client's update, its delta changed in place by ``poison_update``."""
        if self.is_malicious(update.client_id):
            self.update(update.delta, self._plans[update.client_id])
        return update

    def update(self, delta: Tensor, plan: ClientPlan) -> None:
        """Changes a malicious client's update (its delta, in place) after its local training."""
        if self.is_malicious(plan.client_id):
            self.poison_update(delta, plan)

    def poison_batch(self, batch: Batch) -> Batch:
        """A malicious client's training batch. Default: unchanged."""
        return batch

    def poison_update(self, delta: Tensor, plan: ClientPlan) -> None:
        """Changes a malicious client's delta in place. Default: nothing."""

    def callbacks(self) -> list[object]:
        """Callbacks the trainer runs for this attack. Default: none."""
        return []


class NoAttack(Attack):
    """No malicious client (the default ``trainer.attack``).

    Examples:
        >>> from lightfed.attacks import NoAttack
        >>> attack = NoAttack()
        >>> attack.draw(num_clients=100, seed=0)
        >>> attack.malicious
        frozenset()
        >>> attack.passes([0, 1, 2])
        True
    """

    def __init__(self) -> None:
        super().__init__(0.0)


NO_ATTACK = NoAttack()  # no malicious client whatever its set-up: one for every run
