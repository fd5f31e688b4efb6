"""Distributions of a setting: ``fixed:v``, ``randint:a:b``, ``uniform:a:b``, ``loguniform:a:b``, ``choice:A,B,...``."""

import contextlib
import math
import random
from dataclasses import dataclass

import numpy as np

from lightfed.errors import ConfigError

USAGE = {
    "fixed": "fixed:VALUE",
    "randint": "randint:MIN:MAX",
    "uniform": "uniform:MIN:MAX",
    "loguniform": "loguniform:MIN:MAX",
    "choice": "choice:A,B,...",
}
NUMERIC = ("fixed", "randint", "uniform", "loguniform")


def usage(kinds: tuple[str, ...]) -> str:
    """``loguniform:MIN:MAX, uniform:MIN:MAX or choice:A,B,...`` for those three kinds."""
    forms = [USAGE[kind] for kind in kinds]
    return " or ".join([", ".join(forms[:-1]), forms[-1]]) if len(forms) > 1 else forms[0]


@dataclass(frozen=True)
class Distribution:
    """``fixed:v``, ``randint:a:b`` (integers a..b inclusive), ``uniform:a:b``, ``loguniform:a:b`` or
    ``choice:A,B,...`` (command-line values, for the comparison tool)."""

    kind: str
    low: float = 0.0
    high: float = 0.0
    choices: tuple[str, ...] = ()

    @classmethod
    def parse(cls, spec: str | int | float, setting: str, kinds: tuple[str, ...] = NUMERIC) -> "Distribution":
        """Reads a spec such as ``randint:1:50`` of one of ``kinds``; a plain number is ``fixed`` where that is one
        of them. Refuses bad specs with a one-line reason that starts with ``setting``."""
        if isinstance(spec, (int, float)) and "fixed" in kinds:
            return cls("fixed", spec, spec)
        kind, _, args = str(spec).partition(":")
        if kind not in kinds:
            if "fixed" in kinds:
                with contextlib.suppress(ValueError):  # a plain number
                    return cls("fixed", float(spec), float(spec))
            raise ConfigError(f"{setting}: unknown distribution {kind!r}; use {usage(kinds)}")
        if kind == "choice":
            choices = tuple(choice.strip() for choice in args.split(","))
            if not all(choices):
                raise ConfigError(f"{setting}: expected {USAGE[kind]} with no empty choice, got {spec!r}")
            return cls(kind, choices=choices)
        low, high = _bounds(kind, args, spec, setting)
        return cls(kind, low, high)

    def sample(self, rng: np.random.Generator | None) -> float:
        """One number drawn with numpy (heterogeneous local work; ``rng`` may be None for a fixed one); not for
        ``choice``."""
        if self.kind == "fixed":
            return self.low
        assert rng is not None, f"a {self.kind} distribution draws from a generator"
        if self.kind == "randint":
            return float(rng.integers(int(self.low), int(self.high), endpoint=True))
        if self.kind == "uniform":
            return float(rng.uniform(self.low, self.high))
        return float(math.exp(rng.uniform(math.log(self.low), math.log(self.high))))

    def sample_argument(self, rng: random.Random) -> str:
        """One value drawn with Python's ``random``, as a command-line string (the comparison tool's sweeps);
        numbers are rounded to 4 significant digits, kept within the bounds."""
        if self.kind == "choice":
            return rng.choice(self.choices)
        if self.kind == "randint":
            return str(rng.randint(int(self.low), int(self.high)))
        if self.kind == "loguniform":
            value = math.exp(rng.uniform(math.log(self.low), math.log(self.high)))
        else:
            value = rng.uniform(self.low, self.high)
        return repr(min(max(float(f"{value:.4g}"), self.low), self.high))


def _bounds(kind: str, args: str, spec: str | int | float, setting: str) -> tuple[float, float]:
    """The bounds ``args`` of a spec of ``kind`` (one value for ``fixed``), checked."""
    bounds = args.split(":") if args else []
    if len(bounds) != (1 if kind == "fixed" else 2):
        count = "one value" if kind == "fixed" else "two bounds"
        raise ConfigError(f"{setting}: {kind} takes {count}: expected {USAGE[kind]}, got {spec!r}")
    try:
        low, high = float(bounds[0]), float(bounds[-1])
    except ValueError:
        raise ConfigError(f"{setting}: the bounds of {spec!r} must be numbers") from None
    if not (math.isfinite(low) and math.isfinite(high)):
        raise ConfigError(f"{setting}: the bounds of {spec!r} must be finite")
    if low > high:
        raise ConfigError(f"{setting}: the lower bound of {spec!r} is above the upper bound")
    if kind == "loguniform" and low <= 0:
        raise ConfigError(f"{setting}: loguniform bounds must be > 0, got {spec!r}")
    if kind == "randint" and not (low.is_integer() and high.is_integer()):
        raise ConfigError(f"{setting}: randint bounds must be integers, got {spec!r}")
    return low, high
