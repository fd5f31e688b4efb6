"""Scaled sign compression with error feedback (EF-SignSGD, Karimireddy et al. 2019): a bit a value and one scale."""

import math

import torch
from torch import Tensor

from lightfed.transforms.error_feedback import ErrorFeedback


class SignCompression(ErrorFeedback):
    """Sends ||v||_1 / d x sign(v) of v = delta + residual (one bit a value and a 32-bit scale); the rest stays in the
    client's residual.

    In a config:

    ```yaml
    transforms:
      - class_path: lightfed.transforms.SignCompression
    ```

    Examples:
        The mean magnitude of [1, -3, 0.5, 2.5] is 1.75:

        >>> import torch
        >>> from lightfed import ClientUpdate
        >>> from lightfed.core.transforms import TransformContext
        >>> from lightfed.strategies import ServerContext
        >>> from lightfed.transforms import SignCompression
        >>> compression = SignCompression()
        >>> compression.setup(TransformContext(ServerContext(torch.zeros(4), num_clients=2), {}))
        >>> update = ClientUpdate(0, torch.tensor([1.0, -3.0, 0.5, 2.5]), torch.zeros(0), 10, 1, 1.0, torch.tensor(0.0))
        >>> compression.contribution(update, 0, None).delta
        tensor([ 1.7500, -1.7500,  1.7500,  1.7500])
    """

    def compressed(self, vector: Tensor) -> Tensor:
        return torch.sign(vector) * (vector.abs().sum() / vector.numel())

    def delta_bytes(self) -> int:
        return math.ceil(self.numel / 8) + 4
