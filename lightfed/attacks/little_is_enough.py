"""A little is enough (Baruch, Baruch and Goldberg, NeurIPS 2019): every malicious client sends the known updates'
coordinate-wise mean shifted by z standard deviations, small enough to pass as benign."""

from statistics import NormalDist

import torch
from torch import Tensor

from lightfed.attacks.collusion import ColludingAttack


def z_max(clients: int, malicious: int) -> float:
    """Baruch et al.'s z: s = floor(n/2 + 1) - m benign clients must seem further from the mean than the attackers,
    z = Phi^-1((n - s) / n); s is kept >= 1 when the attackers hold a majority of the round (and z = 0, the known
    mean, in a round of one client)."""
    supporters = max(1, clients // 2 + 1 - malicious)
    return NormalDist().inv_cdf((clients - supporters) / clients) if supporters < clients else 0.0


class LittleIsEnough(ColludingAttack):
    """The malicious clients of a round all send mu - z sigma, mu and sigma the coordinate-wise mean and (population)
    standard deviation of the benign updates they know (``knowledge``: their own benign updates of the round, or
    every client's), z Baruch et al.'s z_max for the round's n clients and m attackers unless set.

    In a config:

    ```yaml
    trainer:
      attack:
        class_path: lightfed.attacks.LittleIsEnough
        init_args: {fraction: 0.2, z: null, knowledge: malicious}
    ```

    Examples:
        Two attackers that know two updates, with mean [1, 2] and standard deviation [1, 2]:

        >>> import torch
        >>> from lightfed.attacks import LittleIsEnough
        >>> attack = LittleIsEnough(fraction=0.2, z=0.5)
        >>> known = torch.tensor([[0.0, 0.0], [2.0, 4.0]])
        >>> attack.collude(known, malicious=torch.tensor([True, True]), clients=10)
        tensor([[0.5000, 1.0000],
                [0.5000, 1.0000]])
    """

    def __init__(self, fraction: float, z: float | None = None, knowledge: str = "malicious") -> None:
        """
        Args:
            fraction: Share of all clients that is malicious.
            z: Standard deviations of the shift; null: z_max of the round's clients and attackers.
            knowledge: "malicious": the attackers' own benign updates of the round; "all": every client's.
        """
        super().__init__(fraction, knowledge)
        self.z = z

    def collude(self, known: Tensor, malicious: Tensor, clients: int) -> Tensor:
        count = int(malicious.sum())
        z = z_max(clients, count) if self.z is None else self.z
        std, mean = std_and_mean(known)
        return (mean - z * std).expand(count, -1)


def std_and_mean(rows: Tensor) -> tuple[Tensor, Tensor]:
    """Coordinate-wise population standard deviation and mean of ``rows``, computed in float64."""
    std, mean = torch.std_mean(rows.double(), 0, correction=0)
    return std.to(rows.dtype), mean.to(rows.dtype)
