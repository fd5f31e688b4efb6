import math
import random

import numpy as np
import pytest

from lightfed import distributions, heterogeneity
from lightfed.errors import ConfigError
from lightfed.heterogeneity import Distribution, LocalWork


def test_specs_parse_and_sample_within_their_bounds():
    rng = np.random.default_rng(0)
    assert Distribution.parse(3, "x").sample(rng) == 3
    assert Distribution.parse("0.5", "x").sample(rng) == 0.5
    ints = [Distribution.parse("randint:1:50", "x").sample(rng) for _ in range(2000)]
    assert min(ints) == 1 and max(ints) == 50 and all(float(i).is_integer() for i in ints)
    logs = np.array([Distribution.parse("loguniform:1e-4:1e-1", "x").sample(rng) for _ in range(4000)])
    assert logs.min() >= 1e-4 and logs.max() <= 1e-1
    # log-uniform: a third of the mass in each decade
    assert abs(np.mean(logs < 1e-3) - 1 / 3) < 0.03 and abs(np.mean(logs < 1e-2) - 2 / 3) < 0.03


def test_one_parser_serves_local_work_and_the_comparison_tool():
    assert heterogeneity.Distribution is distributions.Distribution
    choice = Distribution.parse("choice:sgd, adam,x:y", "--random opt", ("uniform", "choice"))
    assert choice == Distribution("choice", choices=("sgd", "adam", "x:y"))
    assert {choice.sample_argument(random.Random(seed)) for seed in range(50)} == {"sgd", "adam", "x:y"}
    randint = Distribution.parse("randint:2:4", "x", ("randint",))
    assert randint.sample_argument(random.Random(0)) == str(random.Random(0).randint(2, 4))
    local_work = "fixed:VALUE, randint:MIN:MAX, uniform:MIN:MAX or loguniform:MIN:MAX"
    with pytest.raises(ConfigError, match=f"^trainer.local_lr: unknown distribution 'choice'; use {local_work}$"):
        Distribution.parse("choice:0.1,0.2", "trainer.local_lr")  # local work draws numbers only
    with pytest.raises(
        ConfigError, match=r"^--random lr: unknown distribution '0.5'; use uniform:MIN:MAX or choice:A,B,...$"
    ):
        Distribution.parse("0.5", "--random lr", ("uniform", "choice"))  # a plain number is fixed only where fixed is
    with pytest.raises(
        ConfigError, match="^--random opt: expected choice:A,B,... with no empty choice, got 'choice:a,,b'$"
    ):
        Distribution.parse("choice:a,,b", "--random opt", ("choice",))


def test_local_work_draws_are_unchanged_by_hand():
    """The numpy calls of each (seed, client) or (seed, client, round) stream: the project's results do not move."""
    once = LocalWork("randint:1:50", None, "loguniform:1e-4:1e-1")
    fresh = LocalWork(None, "randint:5:9", "uniform:1e-3:1e-2", redraw_each_round=True)
    for seed, round, client in [(0, 0, 0), (0, 3, 5), (7, 2, 1)]:
        rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(2, client)))  # LOCAL_WORK = 2
        epochs = int(rng.integers(1, 50, endpoint=True))
        lr = float(math.exp(rng.uniform(math.log(1e-4), math.log(1e-1))))
        assert once.draw(seed, round, client) == (epochs, None, lr)
        rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(2, client, round)))
        steps = int(rng.integers(5, 9, endpoint=True))
        assert fresh.draw(seed, round, client) == (None, steps, float(rng.uniform(1e-3, 1e-2)))
    assert LocalWork(3, None, "fixed:0.05").draw(0, 0, 0) == (3, None, 0.05)


@pytest.mark.parametrize(
    "spec, message",
    [
        ("gaussian:0:1", "unknown distribution 'gaussian'"),
        ("uniform:1e-3:1e-4", "lower bound of 'uniform:1e-3:1e-4' is above the upper bound"),
        ("loguniform:0:1", "loguniform bounds must be > 0"),
        ("randint:1.5:3", "randint bounds must be integers"),
        ("uniform:1", "uniform takes two bounds: expected uniform:MIN:MAX, got 'uniform:1'"),
        ("fixed:1:2", "fixed takes one value"),
        ("uniform:0:inf", "the bounds of 'uniform:0:inf' must be finite"),
        ("uniform:a:1", "the bounds of 'uniform:a:1' must be numbers"),
    ],
)
def test_bad_specs_are_refused_with_the_reason(spec, message):
    with pytest.raises(ConfigError, match=message) as error:
        Distribution.parse(spec, "trainer.local_lr")
    assert str(error.value).startswith("trainer.local_lr: ") and "\n" not in str(error.value)


def test_local_work_is_drawn_once_per_client_or_afresh_each_round():
    once = LocalWork("randint:1:50", None, "uniform:1e-4:1e-3")
    assert once.draw(0, round=0, client_id=3) == once.draw(0, round=7, client_id=3)
    draws = {once.draw(0, 0, i) for i in range(20)}
    assert len(draws) == 20  # clients differ
    fresh = LocalWork("randint:1:50", None, "uniform:1e-4:1e-3", redraw_each_round=True)
    assert len({fresh.draw(0, r, 3) for r in range(10)}) > 1
    assert fresh.draw(0, 4, 3) == fresh.draw(0, 4, 3)


@pytest.mark.parametrize(
    "args, message",
    [
        ((1, 5), "exactly one of trainer.local_epochs and trainer.local_steps"),
        (("randint:0:5", None), "local_epochs must be whole numbers >= 1"),
        ((1, None, "uniform:-1:1"), "local_lr must be > 0"),
    ],
)
def test_bad_local_work_is_refused(args, message):
    with pytest.raises(ConfigError, match=message):
        LocalWork(*args)


@pytest.mark.parametrize(
    ("work", "fixed"),
    [
        (LocalWork(2, None), (2, None, None)),
        (LocalWork(None, 5, 0.05), (None, 5, 0.05)),
        (LocalWork("randint:1:3", None), None),
        (LocalWork(1, None, "uniform:0.01:0.1"), None),
    ],
)
def test_work_that_draws_nothing_is_every_clients_draw_once_and_plans_take_it(work, fixed):
    from lightfed.run.rounds import client_plans

    assert work.fixed == fixed and work.drawn == (fixed is None)
    plans = client_plans(7, work, 3, [4, 9, 11])
    assert [(p.epochs, p.steps, p.lr) for p in plans] == [work.draw(7, 3, c) for c in (4, 9, 11)]
