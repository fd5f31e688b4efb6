"""Min-Max (Shejwalkar and Houmansadr, NDSS 2021, aggregation-agnostic): the known updates' mean pushed along a
perturbation as far as keeps it no further from any known update than the known updates are from each other."""

import torch
from torch import Tensor

from lightfed.attacks.collusion import ColludingAttack
from lightfed.attacks.little_is_enough import std_and_mean
from lightfed.errors import ConfigError

PERTURBATIONS = ("unit_vec", "std", "sign")


class MinMax(ColludingAttack):
    """The malicious clients of a round all send mu - gamma p, mu the mean of the benign updates they know, p the
    perturbation ("unit_vec": mu / ||mu||, "std": the coordinate-wise population standard deviation, "sign":
    sign(mu)), gamma the largest with max_i ||mu - gamma p - u_i|| <= max_{i,j} ||u_i - u_j|| over the known u, found
    as the authors' code does: from ``gamma_init``, steps halved until they are below ``tolerance``.

    In a config:

    ```yaml
    trainer:
      attack:
        class_path: lightfed.attacks.MinMax
        init_args: {fraction: 0.2, perturbation: unit_vec, knowledge: malicious}
    ```

    Examples:
        Two known updates at distance sqrt(2): the crafted one stays within sqrt(2) of both.

        >>> import torch
        >>> from lightfed.attacks import MinMax
        >>> attack = MinMax(fraction=0.2)
        >>> known = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
        >>> crafted = attack.collude(known, malicious=torch.tensor([True, False]), clients=10)
        >>> crafted.round(decimals=3)
        tensor([[-0.3660, -0.3660]])
        >>> torch.cdist(crafted, known).round(decimals=3)
        tensor([[1.4140, 1.4140]])
    """

    def __init__(
        self,
        fraction: float,
        perturbation: str = "unit_vec",
        knowledge: str = "malicious",
        gamma_init: float = 10.0,
        tolerance: float = 1e-5,
    ) -> None:
        """
        Args:
            fraction: Share of all clients that is malicious.
            perturbation: "unit_vec", "std" or "sign".
            knowledge: "malicious": the attackers' own benign updates of the round; "all": every client's.
            gamma_init: The search's first gamma (and first step, halved).
            tolerance: The search stops when its step is below this.
        """
        super().__init__(fraction, knowledge)
        if perturbation not in PERTURBATIONS:
            raise ConfigError(
                f"trainer.attack.perturbation must be one of {', '.join(PERTURBATIONS)}, got {perturbation!r}"
            )
        self.perturbation, self.gamma_init, self.tolerance = perturbation, gamma_init, tolerance

    def direction(self, known: Tensor) -> Tensor:
        std, mean = std_and_mean(known)
        if self.perturbation == "unit_vec":
            return mean / mean.norm()
        return std if self.perturbation == "std" else mean.sign()

    def gamma(self, known: Tensor, p: Tensor) -> float:
        """The search for the largest gamma within the known updates' largest pairwise distance."""
        rows = known.double()
        mean, p = rows.mean(0), p.double()
        bound = torch.cdist(rows, rows).max()
        gamma, step, found = self.gamma_init, self.gamma_init / 2, 0.0
        while abs(found - gamma) > self.tolerance:
            if (rows - (mean - gamma * p)).norm(dim=1).max() <= bound:
                found, gamma = gamma, gamma + step
            else:
                gamma -= step
            step /= 2
        return found

    def collude(self, known: Tensor, malicious: Tensor, clients: int) -> Tensor:
        p = self.direction(known)
        crafted = known.double().mean(0) - self.gamma(known, p) * p.double()
        return crafted.to(known.dtype).expand(int(malicious.sum()), -1)
