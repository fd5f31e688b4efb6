"""QSGD (Alistarh et al. 2017): each client's delta stochastically quantized to ``bits`` bits a value, unbiased."""

import math
from dataclasses import replace

import torch
from torch import Tensor

from lightfed.core.messages import ClientUpdate
from lightfed.core.seeding import derived_seed
from lightfed.core.sums import Sums
from lightfed.core.transforms import TransformContext
from lightfed.errors import ConfigError
from lightfed.streams import Stream
from lightfed.transforms.compressor import Compressor


def quantized(delta: Tensor, levels: int, generator: torch.Generator) -> Tensor:
    """||v|| sign(v_i) xi_i / s, xi_i = floor(s |v_i| / ||v||) + Bernoulli(the remainder), s = ``levels``: E = v."""
    norm = torch.linalg.vector_norm(delta)
    if norm == 0:
        return delta.clone()
    scaled = delta.abs() / norm * levels
    lower = scaled.floor()
    up = torch.rand(delta.shape, generator=generator, dtype=scaled.dtype).to(delta.device) < scaled - lower
    return torch.sign(delta) * (lower + up) * (norm / levels)


class QSGD(Compressor):
    """Each client's delta quantized to 2^bits - 1 levels of its norm (a sign bit each, and the norm: 32 bits), with
    rounding drawn from (seed, round, client): an unbiased compressor. Logs nothing of its own; what a client sends is
    in ``communication/sent_bytes``.

    In a config:

    ```yaml
    transforms:
      - class_path: lightfed.transforms.QSGD
        init_args: {bits: 2}
    ```

    Examples:
        At 2 bits, each value is 0, 1/3, 2/3 or 1 of the delta's norm 0.5, with its sign:

        >>> import torch
        >>> from lightfed import ClientUpdate
        >>> from lightfed.core.transforms import TransformContext
        >>> from lightfed.strategies import ServerContext
        >>> from lightfed.transforms import QSGD
        >>> qsgd = QSGD(bits=2)
        >>> qsgd.setup(TransformContext(ServerContext(torch.zeros(4), num_clients=2), {}))
        >>> update = ClientUpdate(0, torch.tensor([0.3, -0.4, 0.0, 0.0]), torch.zeros(0), 10, 1, 1.0, torch.tensor(0.0))
        >>> qsgd.contribution(update, 0, None).delta
        tensor([ 0.3333, -0.5000,  0.0000,  0.0000])
        >>> qsgd.delta_bytes()  # 3 bits for each of 4 values, and a 32-bit norm
        6
    """

    def __init__(self, bits: int = 4) -> None:
        """
        Args:
            bits: Bits of a value's magnitude (its sign is one more).
        """
        if not 1 <= bits <= 16:
            raise ConfigError(f"transforms: QSGD's bits must be in [1, 16], got {bits}")
        self.bits, self.levels = bits, 2**bits - 1

    def setup(self, context: TransformContext) -> None:
        super().setup(context)
        self.seed = context.server.seed

    def contribution(self, update: ClientUpdate, round: int, sums: Sums) -> ClientUpdate:
        key = derived_seed(self.seed, Stream.QUANTIZATION, round, update.client_id)
        return replace(update, delta=quantized(update.delta, self.levels, torch.Generator().manual_seed(key)))

    def delta_bytes(self) -> int:
        """bits + 1 a value, and the norm."""
        return math.ceil(self.numel * (self.bits + 1) / 8) + 4
