"""The shadow runs' federations: the target's, with a chosen half of its clients silent (the shadow models of
offline LiRA, trained without those clients' examples)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from lightfed.core.messages import ClientPlan, ClientUpdate
from lightfed.core.seeding import derived_rng
from lightfed.core.sums import Sums
from lightfed.core.transforms import Transform, TransformContext
from lightfed.errors import ConfigError
from lightfed.streams import Stream


def silent_half(num_clients: int, shadow: int, halves_seed: int) -> np.ndarray:
    """Whether each client is silent in shadow ``shadow``: shadows 2i and 2i + 1 silence complementary halves of one
    random permutation (drawn from ``halves_seed`` and i), so that every client is out of exactly half of an even
    number of shadows."""
    order = derived_rng(halves_seed, Stream.SHADOW_HALVES, shadow // 2).permutation(num_clients)
    silent = np.zeros(num_clients, dtype=bool)
    silent[order[: num_clients // 2]] = True
    return silent if shadow % 2 == 0 else ~silent


class SilentClients(Transform):
    """The clients of ``silent_half(shadow)`` take no local step and send nothing (first in ``transforms:``); the
    others train as in the target run.

    ``lightfed audit`` puts it first in each shadow run's ``transforms:``:

    ```yaml
    transforms:
      - class_path: lightfed.audit.SilentClients
        init_args: {shadow: 0, halves_seed: 0}
    ```

    Examples:
        Shadows 0 and 1 silence complementary halves of 6 clients; a silent client takes no step:

        >>> import torch
        >>> from lightfed import ClientPlan
        >>> from lightfed.audit import SilentClients
        >>> from lightfed.core.transforms import TransformContext
        >>> from lightfed.strategies import ServerContext
        >>> context = TransformContext(ServerContext(torch.zeros(1), num_clients=6), {})
        >>> first, second = SilentClients(shadow=0), SilentClients(shadow=1)
        >>> first.setup(context)
        >>> second.setup(context)
        >>> first.silent, second.silent
        (array([False,  True,  True, False,  True, False]), array([ True, False, False,  True, False,  True]))
        >>> second.plan(ClientPlan(client_id=0, round=0, seed=0, epochs=1)).steps
        0
    """

    def __init__(self, shadow: int, halves_seed: int = 0) -> None:
        """
        Args:
            shadow: Index of the shadow run (0, 1, ...).
            halves_seed: Seed of the halves' permutations (the same for every shadow of one audit).
        """
        if shadow < 0:
            raise ConfigError(f"SilentClients' shadow must be >= 0, got {shadow}")
        self.shadow, self.halves_seed = shadow, halves_seed

    def setup(self, context: TransformContext) -> None:
        self.silent = silent_half(context.server.num_clients, self.shadow, self.halves_seed)

    def plan(self, plan: ClientPlan) -> ClientPlan:
        """A silent client takes no step."""
        return replace(plan, epochs=None, steps=0) if self.silent[plan.client_id] else plan

    def contribution(self, update: ClientUpdate, round: int, sums: Sums) -> ClientUpdate | None:
        """Nothing from a silent client."""
        return None if self.silent[update.client_id] else update
