"""Heterogeneous local work: per-client epochs, steps and learning rates drawn from distributions."""

import math
from dataclasses import dataclass

import numpy as np

from lightfed.errors import ConfigError
from lightfed.core.seeding import LOCAL_WORK, derived_rng

DISTRIBUTIONS = ("fixed", "randint", "uniform", "loguniform")


@dataclass(frozen=True)
class Distribution:
    """``fixed:v``, ``randint:a:b`` (integers a..b inclusive), ``uniform:a:b`` or ``loguniform:a:b``."""

    kind: str
    low: float
    high: float

    @classmethod
    def parse(cls, spec: str | int | float, setting: str) -> "Distribution":
        """Reads a spec such as ``randint:1:50``; a plain number is ``fixed``. Refuses bad specs with a reason."""
        if isinstance(spec, (int, float)):
            return cls("fixed", spec, spec)
        kind, *bounds = str(spec).split(":")
        if kind not in DISTRIBUTIONS:
            try:
                return cls("fixed", float(spec), float(spec))
            except ValueError:
                raise ConfigError(f"{setting}: unknown distribution {kind!r} in {spec!r}; use one of {', '.join(DISTRIBUTIONS)}") from None
        try:
            values = [float(b) for b in bounds]
        except ValueError:
            raise ConfigError(f"{setting}: bounds of {spec!r} must be numbers") from None
        if len(values) != (1 if kind == "fixed" else 2):
            raise ConfigError(f"{setting}: {kind} takes {'one value' if kind == 'fixed' else 'two bounds'}, got {spec!r}")
        low, high = values[0], values[-1]
        if low > high:
            raise ConfigError(f"{setting}: the lower bound of {spec!r} is above the upper bound")
        if kind == "loguniform" and low <= 0:
            raise ConfigError(f"{setting}: loguniform bounds must be > 0, got {spec!r}")
        if kind == "randint" and not (low.is_integer() and high.is_integer()):
            raise ConfigError(f"{setting}: randint bounds must be integers, got {spec!r}")
        return cls(kind, low, high)

    def sample(self, rng: np.random.Generator) -> float:
        if self.kind == "fixed":
            return self.low
        if self.kind == "randint":
            return float(rng.integers(int(self.low), int(self.high), endpoint=True))
        if self.kind == "uniform":
            return float(rng.uniform(self.low, self.high))
        return float(math.exp(rng.uniform(math.log(self.low), math.log(self.high))))


class LocalWork:
    """Each client's local epochs (or steps) and learning rate, drawn once per client or afresh each round.

    Draws come from the stream (seed, client) or (seed, client, round): the same on every process and on resume.
    """

    def __init__(
        self,
        epochs: int | str | None,
        steps: int | str | None,
        lr: float | str | None = None,
        redraw_each_round: bool = False,
    ) -> None:
        if (epochs is None) == (steps is None):
            raise ConfigError("set exactly one of trainer.local_epochs and trainer.local_steps (the other to null)")
        self.epochs = None if epochs is None else Distribution.parse(epochs, "trainer.local_epochs")
        self.steps = None if steps is None else Distribution.parse(steps, "trainer.local_steps")
        self.lr = None if lr is None else Distribution.parse(lr, "trainer.local_lr")
        for name, distribution in [("local_epochs", self.epochs), ("local_steps", self.steps)]:
            if distribution is not None and (distribution.low < 1 or not float(distribution.low).is_integer()):
                raise ConfigError(f"trainer.{name} must be whole numbers >= 1, got {distribution.low}")
        if self.lr is not None and self.lr.low <= 0:
            raise ConfigError(f"trainer.local_lr must be > 0, got {self.lr.low}")
        self.redraw_each_round = redraw_each_round

    def draw(self, seed: int, round: int, client_id: int) -> tuple[int | None, int | None, float | None]:
        """(epochs, steps, lr) of ``client_id`` in ``round``; lr None keeps the optimizer's own."""
        key = (LOCAL_WORK, client_id, round) if self.redraw_each_round else (LOCAL_WORK, client_id)
        rng = derived_rng(seed, *key)
        epochs = None if self.epochs is None else int(self.epochs.sample(rng))
        steps = None if self.steps is None else int(self.steps.sample(rng))
        lr = None if self.lr is None else self.lr.sample(rng)
        return epochs, steps, lr
