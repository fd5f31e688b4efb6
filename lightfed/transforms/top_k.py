"""Top-k sparsification with error feedback (Stich et al. 2018): each client sends its ``fraction`` largest values."""

import math

import torch
from torch import Tensor

from lightfed.core.transforms import TransformContext
from lightfed.errors import ConfigError
from lightfed.transforms.error_feedback import ErrorFeedback


class TopK(ErrorFeedback):
    """The k = ceil(``fraction`` x d) entries of largest magnitude of delta + residual, sent as (32-bit index, 32-bit
    value) pairs; the rest stays in the client's residual.

    In a config:

    ```yaml
    transforms:
      - class_path: lightfed.transforms.TopK
        init_args: {fraction: 0.1}
    ```

    Examples:
        A client sends its 2 largest of 4 values; the next round, what it left out comes first:

        >>> import torch
        >>> from lightfed import ClientUpdate
        >>> from lightfed.core.transforms import TransformContext
        >>> from lightfed.strategies import ServerContext
        >>> from lightfed.transforms import TopK
        >>> top_k = TopK(fraction=0.5)
        >>> top_k.setup(TransformContext(ServerContext(torch.zeros(4), num_clients=2), {}))
        >>> first = ClientUpdate(0, torch.tensor([1.0, -3.0, 0.5, 2.0]), torch.zeros(0), 10, 1, 1.0, torch.tensor(0.0))
        >>> top_k.contribution(first, 0, None).delta
        tensor([ 0., -3.,  0.,  2.])
        >>> second = ClientUpdate(0, torch.zeros(4), torch.zeros(0), 10, 1, 1.0, torch.tensor(0.0))
        >>> top_k.contribution(second, 1, None).delta
        tensor([1.0000, 0.0000, 0.5000, 0.0000])
    """

    def __init__(self, fraction: float = 0.01) -> None:
        """
        Args:
            fraction: Share of the delta's entries a client sends, in (0, 1].
        """
        if not 0 < fraction <= 1:
            raise ConfigError(f"transforms: TopK's fraction must be in (0, 1], got {fraction}")
        self.fraction = fraction

    def setup(self, context: TransformContext) -> None:
        super().setup(context)
        self.k = max(1, math.ceil(self.fraction * self.numel))

    def compressed(self, vector: Tensor) -> Tensor:
        kept = torch.zeros_like(vector)
        largest = vector.abs().topk(self.k).indices
        kept[largest] = vector[largest]
        return kept

    def delta_bytes(self) -> int:
        return 8 * self.k
