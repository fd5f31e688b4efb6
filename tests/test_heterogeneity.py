import numpy as np
import pytest

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


@pytest.mark.parametrize(
    "spec, message",
    [
        ("gaussian:0:1", "unknown distribution 'gaussian'"),
        ("uniform:1e-3:1e-4", "lower bound of 'uniform:1e-3:1e-4' is above the upper bound"),
        ("loguniform:0:1", "loguniform bounds must be > 0"),
        ("randint:1.5:3", "randint bounds must be integers"),
        ("uniform:1", "uniform takes two bounds"),
    ],
)
def test_bad_specs_are_refused_with_the_reason(spec, message):
    with pytest.raises(ConfigError, match=message):
        Distribution.parse(spec, "trainer.local_lr")


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
