"""Round-wise learning-rate schedules: a client's learning rate in round r is its base rate x factor(r).

The base rate is the optimizer's, or the client's ``trainer.local_lr`` draw, or the strategy's; the factor is a pure
function of the round, so a resumed run continues the schedule exactly. Set as ``trainer.lr_schedule``.
"""

import math
from abc import ABC, abstractmethod

from lightfed.errors import ConfigError


class RoundSchedule(ABC):
    @abstractmethod
    def factor(self, round: int, rounds: int) -> float:
        """The factor of round ``round`` (0-based) of a run of ``rounds`` rounds."""


class StepDecay(RoundSchedule):
    """gamma ** (round // step_rounds): the rate falls by ``gamma`` every ``step_rounds`` rounds."""

    def __init__(self, step_rounds: int, gamma: float = 0.1) -> None:
        if step_rounds < 1 or not 0 < gamma <= 1:
            raise ConfigError(f"StepDecay needs step_rounds >= 1 and 0 < gamma <= 1, got {step_rounds}, {gamma}")
        self.step_rounds, self.gamma = step_rounds, gamma

    def factor(self, round: int, rounds: int) -> float:
        return self.gamma ** (round // self.step_rounds)


class ExponentialDecay(RoundSchedule):
    """gamma ** round (FedDyn's and FedSAM's 0.998 a round, for instance)."""

    def __init__(self, gamma: float) -> None:
        if not 0 < gamma <= 1:
            raise ConfigError(f"ExponentialDecay needs 0 < gamma <= 1, got {gamma}")
        self.gamma = gamma

    def factor(self, round: int, rounds: int) -> float:
        return self.gamma**round


class CosineDecay(RoundSchedule):
    """From 1 in round 0 down a half cosine to ``min_factor`` in the run's last round (``trainer.rounds``)."""

    def __init__(self, min_factor: float = 0.0) -> None:
        if not 0 <= min_factor <= 1:
            raise ConfigError(f"CosineDecay needs 0 <= min_factor <= 1, got {min_factor}")
        self.min_factor = min_factor

    def factor(self, round: int, rounds: int) -> float:
        progress = round / max(rounds - 1, 1)
        return self.min_factor + (1 - self.min_factor) * (1 + math.cos(math.pi * progress)) / 2
