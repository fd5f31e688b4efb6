"""Norm bounding (Sun et al. 2019, "Can you really backdoor federated learning?"): every client's delta clipped in L2
before the strategy takes it."""

from collections.abc import Mapping
from dataclasses import replace

import torch
from torch import Tensor

from lightfed.core.messages import ClientUpdate
from lightfed.core.sums import Sums
from lightfed.core.transforms import Transform
from lightfed.errors import ConfigError

CLIPPED, CLIENTS = "norm_bounding/clipped", "norm_bounding/clients"


def bounded(delta: Tensor, max_norm: float) -> Tensor:
    """delta x min(1, max_norm / ||delta||_2) (``delta`` itself when it is within the bound)."""
    norm = float(torch.linalg.vector_norm(delta))
    return delta * (max_norm / norm) if norm > max_norm else delta


class NormBounding(Transform):
    """Each client's delta scaled to L2 norm at most ``max_norm``; logs the fraction of the round's clients whose delta
    was clipped (``norm_bounding/clipped_fraction``).

    In a config:

    ```yaml
    transforms:
      - class_path: lightfed.transforms.NormBounding
        init_args: {max_norm: 1.0}
    ```

    Examples:
        Of two clients, the one with a delta of norm 5 is clipped:

        >>> import torch
        >>> from lightfed import ClientUpdate, Sums
        >>> from lightfed.transforms import NormBounding
        >>> bounding = NormBounding(max_norm=1.0)
        >>> sums = Sums(bounding.sum_sizes(), torch.device("cpu"))
        >>> long = ClientUpdate(0, torch.tensor([3.0, 4.0]), torch.zeros(0), 10, 1, 1.0, torch.tensor(0.0))
        >>> short = ClientUpdate(1, torch.tensor([0.1, 0.0]), torch.zeros(0), 10, 1, 1.0, torch.tensor(0.0))
        >>> bounding.contribution(long, 0, sums).delta
        tensor([0.6000, 0.8000])
        >>> bounding.contribution(short, 0, sums).delta
        tensor([0.1000, 0.0000])
        >>> bounding.recovered(sums, 0)
        >>> bounding.metrics()
        {'clipped_fraction': 0.5}
    """

    bounds_norm = True

    def __init__(self, max_norm: float) -> None:
        """
        Args:
            max_norm: Largest L2 norm of a client's delta.

        Raises:
            ConfigError: ``max_norm`` is not positive.
        """
        if not max_norm > 0:
            raise ConfigError(f"NormBounding's max_norm must be > 0, got {max_norm}")
        self.max_norm = max_norm
        self.clipped_fraction = 0.0

    def sum_sizes(self) -> dict[str, int]:
        return {CLIPPED: 1, CLIENTS: 1}

    def contribution(self, update: ClientUpdate, round: int, sums: Sums) -> ClientUpdate:
        delta = bounded(update.delta, self.max_norm)
        sums.add(CLIPPED, float(delta is not update.delta))
        sums.add(CLIENTS, 1)
        return replace(update, delta=delta)

    def recovered(self, sums: Mapping[str, Tensor], round: int) -> None:
        self.clipped_fraction = float(sums[CLIPPED] / sums[CLIENTS])

    def metrics(self) -> dict[str, float]:
        return {"clipped_fraction": self.clipped_fraction}
