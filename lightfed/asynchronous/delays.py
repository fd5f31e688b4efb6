"""How long a client's job takes on the asynchronous simulation's virtual clock."""

from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np

from lightfed.errors import ConfigError


class DelayModel(ABC):
    """Durations of client jobs in virtual time units; per-client traits are drawn once in ``setup``."""

    def setup(self, num_clients: int, rng: np.random.Generator) -> None:  # noqa: B027 (an optional hook)
        """Draws each client's fixed traits (e.g. its speed) from ``rng``."""

    @abstractmethod
    def duration(self, client_id: int, rng: np.random.Generator) -> float:
        """The duration of one job of ``client_id``, drawn from ``rng`` (a fresh stream per job)."""


class SpeedTiers(DelayModel):
    """FADAS's tiers: client i's tier is the argmax of a Dirichlet(``tier_weights``) draw (so the first is the most
    common); each job of a client in tier j lasts Uniform(``bounds[j]``)."""

    def __init__(
        self,
        bounds: Sequence[Sequence[float]] = ((1.0, 2.0), (3.0, 5.0), (5.0, 8.0)),
        tier_weights: Sequence[float] = (3.0, 2.0, 1.0),
    ) -> None:
        """
        Args:
            bounds: (low, high) duration of a job in each tier; FADAS's "large delay" setting uses (50, 80) last.
            tier_weights: Dirichlet concentration of the tier draw, one per tier.
        """
        if len(bounds) != len(tier_weights) or not bounds:
            raise ConfigError(f"delays: give as many tier_weights as bounds, got {len(tier_weights)} and {len(bounds)}")
        for low_high in bounds:
            if len(low_high) != 2 or not 0 < low_high[0] <= low_high[1]:
                raise ConfigError(f"delays.bounds: each tier needs 0 < low <= high, got {list(low_high)}")
        if min(tier_weights) <= 0:
            raise ConfigError(f"delays.tier_weights must be > 0, got {list(tier_weights)}")
        self.bounds = [tuple(map(float, b)) for b in bounds]
        self.tier_weights = [float(w) for w in tier_weights]

    def setup(self, num_clients: int, rng: np.random.Generator) -> None:  # noqa: B027 (an optional hook)
        self.tiers = rng.dirichlet(self.tier_weights, size=num_clients).argmax(axis=1)

    def duration(self, client_id: int, rng: np.random.Generator) -> float:
        return float(rng.uniform(*self.bounds[self.tiers[client_id]]))


class Exponential(DelayModel):
    """Every job lasts Exponential(``mean``), whatever the client (memoryless, homogeneous clients)."""

    def __init__(self, mean: float = 1.0) -> None:
        """
        Args:
            mean: Mean duration of a job.
        """
        if mean <= 0:
            raise ConfigError(f"delays.mean must be > 0, got {mean}")
        self.mean = mean

    def duration(self, client_id: int, rng: np.random.Generator) -> float:
        return float(rng.exponential(self.mean))


class LogNormal(DelayModel):
    """Client i is exp(N(0, ``client_sigma``)) times slower than typical; each of its jobs lasts that factor times
    LogNormal(``mu``, ``sigma``)."""

    def __init__(self, mu: float = 0.0, sigma: float = 0.5, client_sigma: float = 0.5) -> None:
        """
        Args:
            mu: Mean of the log-duration of a typical client's job.
            sigma: Spread of the log-duration from job to job.
            client_sigma: Spread of the clients' log-speed (0: all clients alike).
        """
        if sigma < 0 or client_sigma < 0:
            raise ConfigError(f"delays.sigma and delays.client_sigma must be >= 0, got {sigma}, {client_sigma}")
        self.mu, self.sigma, self.client_sigma = mu, sigma, client_sigma

    def setup(self, num_clients: int, rng: np.random.Generator) -> None:  # noqa: B027 (an optional hook)
        self.slowness = np.exp(rng.normal(0.0, self.client_sigma, size=num_clients))

    def duration(self, client_id: int, rng: np.random.Generator) -> float:
        return float(self.slowness[client_id] * rng.lognormal(self.mu, self.sigma))
