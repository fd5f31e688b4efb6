"""beyond_window="decay": a client's path continued beyond its window at the speed decay it showed over it."""

import numpy as np
import pytest
import torch

from lightfed.ecado.circuit import path_progress
from lightfed.ecado.speed_decay import SpeedDecay
from lightfed.strategies import AdaptiveFedECADO, FedECADO
from tests.ecado.ecado_quadratics import dense_quadratics, diagonal_quadratics, run_rounds

F64 = torch.float64


def test_the_progress_along_a_decaying_path_by_hand():
    """r(s) = s / T within the window; beyond it 1 + rho (1 - rho^u) / (1 - rho) at s = (1 + u) T: rho = 0.5, s = 3T
    gives 1 + 0.5 x 0.75 / 0.5 = 1.75, and never more than 1 / (1 - rho) = 2; rho = 0 holds, rho = 1 extrapolates."""
    ratio = torch.tensor([0.5, 3.0, 3.0, 3.0, 1e6], dtype=F64)
    decay = torch.tensor([0.5, 0.5, 0.0, 1.0, 0.5], dtype=F64)
    expected = torch.tensor([0.5, 1.75, 1.0, 3.0, 2.0], dtype=F64)
    torch.testing.assert_close(path_progress(ratio, "decay", decay), expected)
    torch.testing.assert_close(path_progress(ratio, "hold"), ratio.clamp(max=1))
    torch.testing.assert_close(path_progress(ratio, "extrapolate"), ratio)


def test_speed_decay_by_hand():
    """Speeds 4 and 2 at the starts of two unit steps: over t_last = 1 the speed halved, so over T = 2 it fell to
    (1/2)^2 = 0.25. One step gives no evidence (0: held); a path that sped up counts as steady (1)."""
    tracker = SpeedDecay()
    tracker.observe(4.0, 1.0)
    assert tracker.ratio() == 0.0
    tracker.observe(2.0, 1.0)
    assert tracker.ratio() == pytest.approx(0.25)
    faster = SpeedDecay()
    for speed in (1.0, 3.0):
        faster.observe(speed, 0.5)
    assert faster.ratio() == 1.0


def test_a_speed_given_as_a_measurement_is_taken_for_the_first_and_the_last_step_alone():
    """Speeds 4, 3, 2 as functions: only the first is measured while the steps run, the last when the ratio is
    asked for, and the ratio is the one of the numbers, (2/4)^(3/2)."""
    measured: list[float] = []

    def measure(speed: float):
        return lambda: measured.append(speed) or speed

    lazy, eager = SpeedDecay(), SpeedDecay()
    for speed in (4.0, 3.0, 2.0):
        lazy.observe(measure(speed), 1.0)
        eager.observe(speed, 1.0)
    assert measured == [4.0]
    assert lazy.ratio() == eager.ratio() == pytest.approx(0.5**1.5)
    assert measured == [4.0, 2.0]


@pytest.mark.parametrize("steps", [2, 5, 20])
def test_a_geometric_client_path_is_continued_to_the_clients_own_optimum_and_not_past_it(steps):
    """Forward Euler on F = h x^2 / 2 from x0: x_n = q^n x0 with q = 1 - dt h, speeds q^n h |x0|, so the tracked
    decay over T = n dt is exactly q^n, and the decaying path's limit start + delta / (1 - q^n) is 0, the client's
    optimum. Linear extrapolation to 3 T overshoots it where the client had covered a third of the way; holding stops
    at x_n."""
    h, dt, x0 = 2.0, 0.1, 1.0
    q = 1 - dt * h
    tracker, x = SpeedDecay(), x0
    for _ in range(steps):
        tracker.observe(h * abs(x), dt)
        x -= dt * h * x
    rho = tracker.ratio()
    assert rho == pytest.approx(q**steps)
    delta = x - x0
    far = path_progress(torch.tensor([1e9], dtype=F64), "decay", torch.tensor([rho], dtype=F64)).item()
    assert x0 + far * delta == pytest.approx(0.0, abs=1e-12)
    three = torch.tensor([3.0], dtype=F64)
    decayed = x0 + path_progress(three, "decay", torch.tensor([rho], dtype=F64)).item() * delta
    assert 0 < decayed < x  # beyond x_n, towards the optimum, never past it
    assert (x0 + 3 * delta < 0) == (q**steps < 2 / 3)  # linear extrapolation to 3 T overshoots past a third of the way


def test_decay_converges_on_the_toys_where_linear_extrapolation_diverges():
    """Adaptive FedECADO's toy (windows up to 1000x apart in a round): to the mean window, linear extrapolation
    diverges and the decaying continuation converges. FedECADO's toy (25 % participation) converges with it too."""
    problem = diagonal_quadratics()
    rng = np.random.default_rng(1)
    steps = rng.integers(1, 51, size=(40, 16))
    x0 = torch.tensor(rng.normal(size=20))
    errors = {}
    for mode in ("extrapolate", "decay"):
        strategy = AdaptiveFedECADO(
            tolerance=1e-2, window_end="mean", beyond_window=mode, step_control="every_round", curvature="diagonal"
        )
        errors[mode] = problem.relative_error(run_rounds(strategy, problem, 40, 16, steps, np.ones(16), x0))
    assert errors["decay"] < 1e-4 < 1.0 < errors["extrapolate"]
    dense = dense_quadratics()
    rng = np.random.default_rng(1)
    time_steps, work = rng.uniform(1e-2, 1e-1, size=20), rng.integers(1, 11, size=20)
    lrs = time_steps * dense.sizes / int(round(dense.sizes.mean()))
    x = run_rounds(
        FedECADO(tolerance=1e-2, beyond_window="decay"), dense, 100, 5, work, lrs, torch.zeros(20, dtype=F64)
    )
    assert dense.relative_error(x) < 1e-3
