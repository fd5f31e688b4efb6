"""Scaling (boosting): a malicious client sends its update multiplied by a factor."""

from torch import Tensor

from lightfed.attacks.base import Attack
from lightfed.core.messages import ClientPlan


class Scaling(Attack):
    """delta <- factor x delta for the malicious clients (with a data attack trained first, Bagdasaryan et al.'s
    model replacement boosts by about clients / malicious).

    In a config:

    ```yaml
    trainer:
      attack:
        class_path: lightfed.attacks.Scaling
        init_args: {fraction: 0.1, factor: 10.0}
    ```

    Examples:
        >>> import torch
        >>> from lightfed import ClientPlan
        >>> from lightfed.attacks import Scaling
        >>> attack = Scaling(fraction=1.0, factor=10.0)
        >>> attack.draw(num_clients=4, seed=0)
        >>> delta = torch.tensor([0.5, -0.25])
        >>> attack.update(delta, ClientPlan(client_id=2, round=0, seed=0))
        >>> delta
        tensor([ 5.0000, -2.5000])
    """

    def __init__(self, fraction: float, factor: float = 10.0) -> None:
        """
        Args:
            fraction: Share of all clients that is malicious.
            factor: The update's factor.
        """
        super().__init__(fraction)
        self.factor = factor

    def poison_update(self, delta: Tensor, plan: ClientPlan) -> None:
        delta.mul_(self.factor)
