"""Sign flipping: a malicious client sends its benign update negated (and scaled)."""

from torch import Tensor

from lightfed.attacks.base import Attack
from lightfed.core.messages import ClientPlan


class SignFlipping(Attack):
    """delta <- -scale x delta for the malicious clients (scale 1: the plain sign flip; Li et al.'s RSA used 4).

    In a config:

    ```yaml
    trainer:
      attack:
        class_path: lightfed.attacks.SignFlipping
        init_args: {fraction: 0.2, scale: 1.0}
    ```

    Examples:
        >>> import torch
        >>> from lightfed import ClientPlan
        >>> from lightfed.attacks import SignFlipping
        >>> attack = SignFlipping(fraction=1.0, scale=2.0)
        >>> attack.draw(num_clients=4, seed=0)
        >>> delta = torch.tensor([1.0, -0.5])
        >>> attack.update(delta, ClientPlan(client_id=0, round=0, seed=0))
        >>> delta
        tensor([-2.,  1.])
    """

    def __init__(self, fraction: float, scale: float = 1.0) -> None:
        """
        Args:
            fraction: Share of all clients that is malicious.
            scale: The negated update's factor.
        """
        super().__init__(fraction)
        self.scale = scale

    def poison_update(self, delta: Tensor, plan: ClientPlan) -> None:
        delta.mul_(-self.scale)
