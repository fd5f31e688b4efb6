"""ADAPT-FED's client mechanism: each step's whole gradient clipped to norm C plus N(0, sigma^2 C^2 / m) noise."""

import math

import torch
from torch import Tensor

from lightfed.core.local_context import LocalContext
from lightfed.core.local_session import LocalSession
from lightfed.core.messages import ClientPlan
from lightfed.errors import ConfigError
from lightfed.privacy.base import ClientPrivacy


class ClippedGaussianNoise(ClientPrivacy):
    """The mechanism of ADAPT-FED's Algorithm 1 (line 14): g <- g min(1, C / ||g||) + N(0, sigma^2 C^2 / m I), applied
    to the final gradient of every local step (after a sharpness-aware rule), m = clients per round.

    It clips the batch gradient, not each example's, and keeps no accountant: it gives no example-level guarantee
    comparable to ``DPSGD`` (see docs/corrections/adaptfed.md); it is here to reproduce the paper.

    In a config:

    ```yaml
    trainer:
      privacy:
        class_path: lightfed.privacy.ClippedGaussianNoise
        init_args: {sigma2: 0.01, max_grad_norm: 1.0}
    ```

    Examples:
        With sigma^2 = 0.04, C = 1 and 4 clients a round, the noise std is 0.2 / sqrt(4):

        >>> from lightfed.privacy import ClippedGaussianNoise
        >>> privacy = ClippedGaussianNoise(sigma2=0.04, max_grad_norm=1.0)
        >>> privacy.setup(data=None, clients_per_round=4, planned=list)
        >>> privacy.noise_std()
        0.1
        >>> ClippedGaussianNoise(sigma2=-1.0)
        Traceback (most recent call last):
        ...
        lightfed.errors.ConfigError: trainer.privacy.sigma2 must be >= 0, got -1.0
    """

    accounts = False  # no epsilon: what clients send besides their gradient steps is not checked against one

    def __init__(self, sigma2: float = 0.01, max_grad_norm: float = 1.0, noise_scales_with_clip: bool = True) -> None:
        """
        Args:
            sigma2: The paper's "DP noise variance" sigma^2 (0.01, 0.02, 0.03 in its tables).
            max_grad_norm: Clipping bound C of the step gradient.
            noise_scales_with_clip: Noise std sigma C / sqrt(m) as written; false gives sigma / sqrt(m), which is what
                the paper's C = 100 results imply.
        """
        if sigma2 < 0:
            raise ConfigError(f"trainer.privacy.sigma2 must be >= 0, got {sigma2}")
        if max_grad_norm <= 0:
            raise ConfigError(f"trainer.privacy.max_grad_norm must be > 0, got {max_grad_norm}")
        self.sigma2 = sigma2
        self.max_grad_norm = max_grad_norm
        self.noise_scales_with_clip = noise_scales_with_clip

    def noise_std(self) -> float:
        """Per-coordinate noise std: sigma C / sqrt(m)."""
        scale = self.max_grad_norm if self.noise_scales_with_clip else 1.0
        return math.sqrt(self.sigma2) * scale / math.sqrt(self.clients_per_round)

    def session(self, context: LocalContext, plan: ClientPlan, generator: torch.Generator) -> LocalSession:
        return ClippedGaussianSession(self.max_grad_norm, self.noise_std(), context, plan, generator)


class ClippedGaussianSession(LocalSession):
    def __init__(self, clip: float, std: float, context: LocalContext, plan: ClientPlan, generator: torch.Generator):
        super().__init__(context, plan, generator)
        self.clip, self.std = clip, std

    def before_step(self, grad: Tensor) -> None:
        """Clips ``grad`` to norm C and adds the noise (from the client's seeded torch RNG), in place."""
        with torch.no_grad():
            grad.mul_((self.clip / (grad.norm() + 1e-12)).clamp(max=1.0))
            grad.add_(torch.randn_like(grad), alpha=self.std)
