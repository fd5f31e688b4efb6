"""The settings a sweep tries: ``--set``, ``--grid`` and ``--random`` specs parsed, the grid expanded and the random
samples drawn."""

import itertools
import random
import re

from lightfed.distributions import Distribution
from lightfed.errors import ConfigError

KEY = re.compile(r"([\w.-]+:)?[A-Za-z_][\w-]*(\.[A-Za-z_][\w-]*)*")  # an optional "config-name:" scope
MANAGED = {"trainer.root_dir": "--out", "trainer.name": "the run name", "seed_everything": "--seeds"}
RANDOM_KINDS = ("loguniform", "uniform", "randint", "choice")  # the distributions --random takes
Setting = dict[str, str]  # override key -> value, as passed to the lightfed command line


class SpecError(ValueError):
    """A malformed --set/--grid/--random spec or plan; the message is one line for parser.error."""


def _split(spec: str, option: str) -> tuple[str, str]:
    key, sep, value = spec.partition("=")
    key = key.strip().removeprefix("--")
    if not sep or not KEY.fullmatch(key) or not value.strip():
        raise SpecError(f"{option} {spec!r}: expected KEY=VALUE with a dotted key, e.g. model.init_args.lr=0.01")
    bare = key.rpartition(":")[2]  # without a config-name scope
    if bare in MANAGED:
        raise SpecError(f"{option} {spec!r}: {bare} is set by lightfed compare (use {MANAGED[bare]})")
    return key, value.strip()


def parse_set(spec: str) -> tuple[str, str]:
    """``key=value`` -> (key, value)."""
    return _split(spec, "--set")


def parse_grid(spec: str) -> tuple[str, list[str]]:
    """``key=v1,v2,v3`` -> (key, [v1, v2, v3])."""
    key, values = _split(spec, "--grid")
    items = [v.strip() for v in values.split(",")]
    if not all(items):
        raise SpecError(f"--grid {spec!r}: empty value in the comma-separated list")
    if len(set(items)) != len(items):
        raise SpecError(f"--grid {spec!r}: a value is listed twice")
    return key, items


def parse_random(spec: str) -> tuple[str, Distribution]:
    """``key=loguniform:1e-4:1e-1`` / ``uniform:a:b`` / ``randint:a:b`` / ``choice:a,b,c`` -> (key, distribution)."""
    key, value = _split(spec, "--random")
    try:
        return key, Distribution.parse(value, f"--random {key}", RANDOM_KINDS)
    except ConfigError as error:
        raise SpecError(str(error)) from None


def expand_grid(grid: list[tuple[str, list[str]]]) -> list[Setting]:
    """Cartesian product of the grid's values, first key varying slowest; [{}] without a grid."""
    keys = [key for key, _ in grid]
    return [dict(zip(keys, values, strict=True)) for values in itertools.product(*(values for _, values in grid))]


def sample_random(specs: list[tuple[str, Distribution]], samples: int, sweep_seed: int) -> list[Setting]:
    """``samples`` settings drawn from ``specs``, the same for the same sweep seed; [{}] without specs."""
    if not specs:
        return [{}]
    rng = random.Random(sweep_seed)
    return [{key: distribution.sample_argument(rng) for key, distribution in specs} for _ in range(samples)]


def plan_settings(
    grid: list[tuple[str, list[str]]],
    randoms: list[tuple[str, Distribution]],
    samples: int = 1,
    sweep_seed: int = 0,
) -> list[Setting]:
    """Every grid point combined with every random sample; duplicates (e.g. repeated choices) are dropped."""
    keys = [key for key, _ in grid] + [key for key, _ in randoms]
    repeated = sorted({key for key in keys if keys.count(key) > 1})
    if repeated:
        raise SpecError(f"{repeated[0]} is swept twice (--grid/--random); give each key once")
    samples_drawn = sample_random(randoms, samples, sweep_seed)
    settings = [{**point, **sample} for point in expand_grid(grid) for sample in samples_drawn]
    unique = {tuple(setting.items()): setting for setting in settings}
    return list(unique.values())
