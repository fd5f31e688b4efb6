"""Adaptive FedECADO's client: the retrospective LTE (one gradient a step) against the trial step (two or more)."""

import math

import numpy as np
import pytest
import torch

from lightfed.ecado.adaptive_euler import AdaptiveEuler
from lightfed.errors import DivergenceError
from lightfed.strategies import AdaptiveFedECADO
from tests.ecado.ecado_quadratics import QuadraticContext, Quadratics, diagonal_quadratics, run_rounds

EVERY_STEP = dict(step_control="every_round", curvature="diagonal")  # the paper's: the client rule in every round


class CountingContext(QuadraticContext):
    evaluations = 0

    def recompute_gradient(self):
        self.evaluations += 1
        return super().recompute_gradient()


def _steps(rule: AdaptiveEuler, context: QuadraticContext, steps: int) -> None:
    rule.start(context.flat.params, context)
    for _ in range(steps):
        context.recompute_gradient()
        rule.adjust(context.flat.grads, context.flat.params)


def test_by_hand_on_a_one_dimensional_quadratic():
    """F = h (x - b)^2 / 2 with h = 4, b = 0, one client (p = 1), I = 0, x0 = 1, tolerance 0.01, fallback step 1.

    Step 1 (trial step, as variant A): v = -4; the bound -2 x v / v^2 = 0.5; trial x' = 1 - 2 = -1, v' = 4,
    LTE = (0.5/2) * 8 = 2 > 0.01, cut to 0.9 * 0.01 / 2 * 0.5 = 0.00225, LTE = (0.00225/2) * 4 * 4 * 0.00225 = 4.05e-5.
    Step 2 (retrospective): x1 = 1 - 4 * 0.00225 = 0.991, v = -3.964, D = |v - v0| = 0.036; proposal 2 x 0.00225
    = 0.0045 (under the cap 0.5), eps = 0.0045^2 * 0.036 / (2 * 0.00225) = 1.62e-4 <= 0.01: accepted.
    """
    problem = Quadratics(np.array([[[4.0]]]), np.array([[0.0]]), np.array([10]))
    x0 = torch.ones(1, dtype=torch.float64)
    context = CountingContext(problem, 0, x0, lr=1.0)
    rule = AdaptiveEuler(0, torch.zeros(1, dtype=torch.float64), tolerance=0.01, lte="retrospective")
    _steps(rule, context, 2)
    first = 0.9 * 0.01 / 2 * 0.5
    assert rule.steps == pytest.approx([first, 2 * first])
    x1 = 1 - 4 * first
    assert rule.errors[1] == pytest.approx((2 * first) ** 2 * 4 * (1 - x1) / (2 * first))
    assert context.flat.params.item() == pytest.approx(x1 * (1 - 4 * 2 * first))


def test_a_proposal_over_the_tolerance_is_cut_in_one_shot_to_the_largest_step_under_it():
    """F = h x^2 / 2, h = 100, x0 = 1: after a tiny first step the doubled proposal's estimate is too large."""
    problem = Quadratics(np.array([[[100.0]]]), np.array([[0.0]]), np.array([10]))
    context = CountingContext(problem, 0, torch.ones(1, dtype=torch.float64), lr=1.0)
    rule = AdaptiveEuler(
        0,
        torch.zeros(1, dtype=torch.float64),
        tolerance=1e-4,
        fallback_step=1.0,
        cap_at_first_step=False,
        lte="retrospective",
    )
    _steps(rule, context, 20)
    assert max(rule.errors) <= 1e-4
    assert all(dt <= 2 * previous for previous, dt in zip(rule.steps, rule.steps[1:], strict=False))
    # a cut step is 0.9 x the step whose estimate equals the tolerance: its estimate is 0.81 x the tolerance
    cut = sum(error == pytest.approx(0.81e-4) for error in rule.errors[1:])
    assert cut > 0 and cut == rule.rejected - 1  # the first step's trial was cut back once


def test_after_the_first_step_no_gradient_is_evaluated_twice():
    problem = diagonal_quadratics()
    x0 = torch.tensor(np.random.default_rng(0).normal(size=20))
    counts = {}
    for lte in ("trial_step", "retrospective"):
        context = CountingContext(problem, 3, x0, lr=1.0)
        _steps(AdaptiveEuler(3, torch.zeros(20, dtype=torch.float64), tolerance=1e-3, lte=lte), context, 20)
        counts[lte] = context.evaluations - 20  # beyond the one gradient of each step
    assert counts["trial_step"] >= 20
    first_step_trials = counts["retrospective"]
    assert 1 <= first_step_trials < 10  # only the first step's trial and its backtracking


@pytest.mark.parametrize("option", [{"client_lte": "retrospective"}, {"first_step": "probe"}])
def test_the_strategy_converges_on_quadratics_with_the_retrospective_client_error_or_the_probe_first_step(option):
    problem = diagonal_quadratics()
    rng = np.random.default_rng(0)
    steps = rng.integers(1, 51, size=(40, 16))
    x0 = torch.tensor(rng.normal(size=20))
    errors = []

    def record(round, params, strategy):
        errors.append(problem.relative_error(params))

    strategy = AdaptiveFedECADO(tolerance=1e-2, **option, **EVERY_STEP)
    run_rounds(strategy, problem, 40, 16, steps, np.ones(16), x0, on_round=record)
    assert errors[0] > 0.3 and errors[-1] < 1e-2


def test_the_retrospective_error_estimate_is_a_setting():
    assert math.isfinite(AdaptiveFedECADO(client_lte="retrospective").tolerance)


def test_the_probe_first_step_by_hand_and_its_scale_with_gamma():
    """F = 4 x^2 / 2, x0 = 1, p = 1, I = 0, gamma = 0.01: v = -4, probe dt_p = 0.01 |x| / |v| = 0.0025 moves x to 0.99,
    v' = -3.96, D = 0.04, dt = 0.9 sqrt(2 x 0.01 x 0.0025 / 0.04) = 0.9 sqrt(0.00125); its LTE is exactly
    (dt / 2) 4 |v| dt = 0.81 gamma, so it is accepted. The step goes as sqrt(gamma) and as 1 / (loss scale)."""

    def first(gamma: float, h: float = 4.0) -> AdaptiveEuler:
        problem = Quadratics(np.array([[[h]]]), np.array([[0.0]]), np.array([10]))
        rule = AdaptiveEuler(0, torch.zeros(1, dtype=torch.float64), tolerance=gamma, first_step="probe")
        _steps(rule, QuadraticContext(problem, 0, torch.ones(1, dtype=torch.float64), lr=1.0), 1)
        return rule

    rule = first(0.01)
    assert rule.steps == pytest.approx([0.9 * math.sqrt(0.00125)]) and rule.rejected == 0
    assert rule.errors[0] == pytest.approx(0.81 * 0.01)
    assert math.isnan(rule.bound)  # no passivity bound and no fallback step involved
    steps = [first(gamma).steps[0] for gamma in (1e-4, 1e-2, 1.0)]
    assert steps[1] / steps[0] == pytest.approx(10) and steps[2] / steps[1] == pytest.approx(10, rel=0.05)
    assert first(1e-4, h=400.0).steps[0] == pytest.approx(steps[0] / 100)


@pytest.mark.parametrize("gamma", [1e-4, 1e-2, 1.0])
def test_the_probe_on_a_flat_loss_steps_one_hundredth_of_the_weights_whatever_gamma(gamma):
    """A saturated client (gradient 0), x0 = -1 (d = 20), I = 0.1: v = I does not change, so the first step is the
    probe itself, dt_p = 0.01 rms(x) / rms(v) = 0.01 / 0.1 = 0.1 (1 % of the weights' size), for every gamma; later
    steps are capped there: 12 steps give T = 1.2. No fallback step is involved (the paper's passivity bound would
    give 20 here, and a fallback where it is not positive)."""
    problem = Quadratics(np.zeros((1, 20, 20)), np.zeros((1, 20)), np.array([100]))
    rule = AdaptiveEuler(
        0,
        torch.full((20,), 0.1, dtype=torch.float64),
        tolerance=gamma,
        first_step="probe",
        step_limit="monotone",
        error_norm="rms",
    )
    _steps(rule, QuadraticContext(problem, 0, -torch.ones(20, dtype=torch.float64), lr=1.0), 12)
    assert rule.steps == pytest.approx([0.1] * 12) and sum(rule.steps) == pytest.approx(1.2)
    assert math.isnan(rule.bound) and rule.rejected == 0


@pytest.mark.parametrize("norm", ["max", "rms"])
def test_the_client_error_norm_by_hand(norm):
    """F = (x1^2 + 3 x2^2) / 2, x0 = (1, 1), p = 1, I = 0, gamma = 1e-3: v = -(1, 3), the step's velocity change is
    dt A v = -dt (1, 9), so LTE = dt^2 |A v| / 2 with |A v| = 9 (max) or sqrt((1 + 81) / 2) = sqrt(41) (rms); the probe
    predicts it exactly and the first step is 0.9 sqrt(2 gamma / |A v|), its LTE 0.81 gamma (the monotone limit
    |v| / |A v|, 1/3 or sqrt(5 / 41), does not bind)."""
    problem = Quadratics(np.array([np.diag([1.0, 3.0])]), np.zeros((1, 2)), np.array([10]))
    rule = AdaptiveEuler(
        0,
        torch.zeros(2, dtype=torch.float64),
        tolerance=1e-3,
        first_step="probe",
        step_limit="monotone",
        error_norm=norm,
    )
    _steps(rule, QuadraticContext(problem, 0, torch.ones(2, dtype=torch.float64), lr=1.0), 1)
    stiffness = 9.0 if norm == "max" else math.sqrt(41)
    assert rule.steps == pytest.approx([0.9 * math.sqrt(2e-3 / stiffness)]) and rule.rejected == 0
    assert rule.errors == pytest.approx([0.81e-3])


def test_the_step_relative_error_by_hand():
    """error_scale="step": LTE <= gamma max|dt v|. F = 4 x^2 / 2, x0 = 1, p = 1, I = 0, gamma = 0.01: the passivity
    bound 0.5 is tried, LTE (0.5 / 2) |4 - (-4)| = 2 against 0.01 x 0.5 x 4 = 0.02: cut to 0.5 x 0.9 x 0.02 / 2 =
    0.0045, where dt h / 2 = 0.009 = 0.9 gamma: LTE 0.00225 x 0.072 = 1.62e-4 against 1.8e-4, recorded as 0.9 gamma.
    The doubled proposal 0.009 (dt h / 2 = 1.8 gamma) is cut back to 0.0045 again. gamma is the step's fraction of the
    stability limit 2 / h: the accepted step is 0.9 x 2 gamma / h for any gamma."""

    def first(gamma: float, lte: str = "trial_step") -> AdaptiveEuler:
        problem = Quadratics(np.array([[[4.0]]]), np.array([[0.0]]), np.array([10]))
        rule = AdaptiveEuler(0, torch.zeros(1, dtype=torch.float64), tolerance=gamma, error_scale="step", lte=lte)
        _steps(rule, QuadraticContext(problem, 0, torch.ones(1, dtype=torch.float64), lr=1.0), 2)
        return rule

    rule = first(0.01)
    assert rule.steps == pytest.approx([0.0045, 0.0045]) and rule.rejected == 2 and rule.forced == 0
    assert rule.errors[0] == pytest.approx(0.9 * 0.01)
    for gamma in (1e-4, 1e-3, 1e-1):
        assert first(gamma).steps[0] == pytest.approx(0.9 * 2 * gamma / 4)
    # retrospective: D = |v1 - v0| = 4 x 4 x 0.0045, curvature D / (2 dt_prev) = 8; the doubled proposal 0.009 has
    # LTE 8 x 0.009^2 = 6.48e-4 against 0.01 x 0.009 x |v1| = 3.5352e-4: cut to 0.9 x 0.01 |v1| / 8
    retro = first(0.01, "retrospective")
    v1 = 4 * (1 - 4 * 0.0045)
    assert retro.steps[1] == pytest.approx(0.9 * 0.01 * v1 / 8) and retro.rejected == 2
    assert retro.errors[1] == pytest.approx(0.9 * 0.01)


@pytest.mark.parametrize("first_step", ["passivity", "probe"])
def test_relative_error_scales_take_the_same_steps_when_the_weights_are_scaled(first_step):
    """Quadratics centred at 0, x0 and x0 x 100: the same ODE scaled, so a scale-free control takes the same steps.
    The absolute tolerance does not (its error is 100 times larger in the scaled problem)."""
    problem = diagonal_quadratics()
    problem = Quadratics(problem.A, np.zeros_like(problem.b), problem.sizes)
    x0 = torch.tensor(np.random.default_rng(0).normal(size=20))
    steps = {}
    for scale in ("absolute", "state", "step"):
        for factor in (1.0, 100.0):
            rule = AdaptiveEuler(
                3, torch.zeros(20, dtype=torch.float64), tolerance=1e-3, error_scale=scale, first_step=first_step
            )
            _steps(rule, QuadraticContext(problem, 3, x0 * factor, lr=1.0), 10)
            steps[scale, factor] = rule.steps
            assert max(rule.errors) <= 1e-3 and rule.forced == 0
    for scale in ("state", "step"):
        assert steps[scale, 100.0] == pytest.approx(steps[scale, 1.0], rel=1e-9)
    assert steps["absolute", 100.0][0] < 0.5 * steps["absolute", 1.0][0]


def _converged(strategy: AdaptiveFedECADO) -> tuple[float, float]:
    """The relative error of the 16-client diagonal quadratics after 40 rounds of ``strategy`` (each client's steps
    U{1..50} per round, x0 ~ N(0, 1), seed 1), and at x0."""
    problem = diagonal_quadratics()
    rng = np.random.default_rng(1)
    steps = rng.integers(1, 51, size=(40, 16))
    x0 = torch.tensor(rng.normal(size=20))
    x = run_rounds(strategy, problem, 40, 16, steps, np.ones(16), x0)
    return problem.relative_error(x), problem.relative_error(x0)


@pytest.mark.parametrize("tolerance", [1e-4, 1e-2, 1.0])
def test_the_state_relative_error_converges_on_quadratics_for_every_tolerance(tolerance):
    final, start = _converged(AdaptiveFedECADO(tolerance=tolerance, error_scale="state", **EVERY_STEP))
    assert final < 1e-2 < 0.3 < start


def test_with_the_step_relative_error_the_simulated_time_goes_as_gamma():
    """gamma sets every step as a fraction of the stability limit, so a round's window (and the progress of a fixed
    number of steps) is proportional to gamma: the quadratics converge in 40 rounds for gamma >= 1e-2, not below.
    Held clients: a continued path would also move the rounds' start points, and with them the windows."""
    problem = diagonal_quadratics()
    rng = np.random.default_rng(1)
    steps = rng.integers(1, 51, size=(40, 16))
    x0 = torch.tensor(rng.normal(size=20))
    times, errors = [], []
    for gamma in (1e-4, 1e-3, 1e-2):
        strategy = AdaptiveFedECADO(tolerance=gamma, error_scale="step", beyond_window="hold", **EVERY_STEP)
        x = run_rounds(strategy, problem, 40, 16, steps, np.ones(16), x0)
        times.append(strategy.metrics()["time"])
        errors.append(problem.relative_error(x))
    assert times[1] / times[0] == pytest.approx(10, rel=0.05) and times[2] / times[1] == pytest.approx(10, rel=0.05)
    assert errors[0] > 1 and errors[2] < 1e-3


def test_the_monotone_step_limit_by_hand():
    """F = 4 x^2 / 2, x0 = 1, p = 1, I = 0, gamma = 10 (absolute). The passivity bound 0.5 = 2 / h is the stability
    limit: LTE (0.5 / 2) x 8 = 2 <= 10 passes, and the step lands on x = -1. step_limit="monotone" also asks for
    LTE <= max|dt v| / 2 = 0.5 x 4 / 2 = 1: cut to 0.5 x 0.9 x 1 / 2 = 0.225 (dt h = 0.9 <= 1), x = 0.1, LTE
    0.1125 x 3.6 = 0.405 against 0.225 x 4 / 2 = 0.45."""
    problem = Quadratics(np.array([[[4.0]]]), np.array([[0.0]]), np.array([10]))
    for limit, dt, x in [("none", 0.5, -1.0), ("monotone", 0.225, 0.1)]:
        context = QuadraticContext(problem, 0, torch.ones(1, dtype=torch.float64), lr=1.0)
        rule = AdaptiveEuler(0, torch.zeros(1, dtype=torch.float64), tolerance=10.0, step_limit=limit)
        _steps(rule, context, 1)
        assert rule.steps == pytest.approx([dt]) and context.flat.params.item() == pytest.approx(x)
    assert rule.errors[0] == pytest.approx(10 * 0.405 / 0.45)  # in units of the tolerance: 0.9 gamma


def test_the_stability_step_limit_by_hand():
    """F = 4 (x - 0.5)^2 / 2, x0 = 1, p = 1, I = 0, gamma = 10: v = -2, the passivity trial 2 x'(-v) / |v|^2 = 1 (dt h = 4,
    past FE's stability bound 2) has LTE (1 / 2) x 8 = 4 <= 10 and lands on x = -1 with "none". "stability" allows
    LTE <= 3 dt |v| / 4 = 1.5: cut to 0.9 x 1.5 / 4 = 0.3375 (dt h = 1.35: x = 0.325, overshooting the minimum, LTE
    0.16875 x 2.7 = 0.456 against 0.506); "monotone" allows dt |v| / 2 = 1: cut to 0.225 (dt h = 0.9: x = 0.55, short
    of it)."""
    problem = Quadratics(np.array([[[4.0]]]), np.array([[0.5]]), np.array([10]))
    for limit, dt, x in [("none", 1.0, -1.0), ("stability", 0.3375, 0.325), ("monotone", 0.225, 0.55)]:
        context = QuadraticContext(problem, 0, torch.ones(1, dtype=torch.float64), lr=1.0)
        rule = AdaptiveEuler(0, torch.zeros(1, dtype=torch.float64), tolerance=10.0, step_limit=limit)
        _steps(rule, context, 1)
        assert rule.steps == pytest.approx([dt]) and context.flat.params.item() == pytest.approx(x)


@pytest.mark.parametrize("tolerance", [1e-4, 1e-2, 1.0, 100.0])
def test_the_stability_step_limit_converges_on_quadratics_for_every_tolerance(tolerance):
    final, start = _converged(AdaptiveFedECADO(tolerance=tolerance, step_limit="stability", **EVERY_STEP))
    assert final < 1e-3 < 0.3 < start


def test_the_descent_step_limit_by_hand():
    """F = (x1^2 + 9 x2^2) / 2, x0 = (9, 1), p = 1, I = 0, gamma = 10, rms norms: v = -(9, 9). The minimum of F along
    v is at dt = |v|^2 / v'Hv = 162 / 810 = 0.2; "monotone" stops at |v| / |Hv| = 12.73 / 81.50 = 0.156. From the
    passivity trial 2 x'(-v) / |v|^2 = 180 / 162 the error over the allowed error is dt / 0.2 ("descent") or
    dt / 0.156, so one backtrack lands on 0.9 x each limit."""
    problem = Quadratics(np.array([[[1.0, 0.0], [0.0, 9.0]]]), np.zeros((1, 2)), np.array([10]))
    monotone = 0.9 * math.sqrt(162) / math.sqrt(81**2 + 9**2)
    for limit, dt in [("descent", 0.9 * 0.2), ("monotone", monotone)]:
        context = QuadraticContext(problem, 0, torch.tensor([9.0, 1.0], dtype=torch.float64), lr=1.0)
        rule = AdaptiveEuler(0, torch.zeros(2, dtype=torch.float64), tolerance=10.0, step_limit=limit, error_norm="rms")
        _steps(rule, context, 1)
        assert rule.rejected == 1 and rule.steps == pytest.approx([dt], rel=1e-9)
        assert context.flat.params.tolist() == pytest.approx([9 - 9 * dt, 1 - 9 * dt])


@pytest.mark.parametrize("first_step", ["passivity", "probe"])
@pytest.mark.parametrize("tolerance", [1e-4, 1e-2, 1.0, 100.0])
def test_the_monotone_step_limit_converges_on_quadratics_for_every_tolerance(tolerance, first_step):
    final, start = _converged(
        AdaptiveFedECADO(tolerance=tolerance, step_limit="monotone", first_step=first_step, **EVERY_STEP)
    )
    assert final < 1e-3 < 0.3 < start


def test_a_retrospective_step_at_a_zero_velocity_keeps_its_proposal():
    """F = x^2 / 2, p = 1, I = 0.5: at x = 0.5 the velocity v = I - x is exactly 0. The step there moves nothing, so
    it keeps the proposal (twice the previous step) instead of the zero step the monotone limit (LTE <= dt max|v| / 2
    = 0) would force, after which the next step divided by it."""
    problem = Quadratics(np.array([[[1.0]]]), np.array([[0.0]]), np.array([10]))
    context = CountingContext(problem, 0, torch.ones(1, dtype=torch.float64), lr=1.0)
    rule = AdaptiveEuler(
        0,
        torch.full((1,), 0.5, dtype=torch.float64),
        tolerance=1e-2,
        lte="retrospective",
        step_limit="monotone",
        cap_at_first_step=False,
    )
    _steps(rule, context, 1)
    context.flat.params.fill_(0.5)
    for _ in range(2):
        context.recompute_gradient()
        rule.adjust(context.flat.grads, context.flat.params)
    assert rule.steps[1] == 2 * rule.steps[0] and rule.errors[1] == 0.0
    assert context.flat.params.item() == 0.5 and rule.steps[2] == 2 * rule.steps[1]


def test_a_client_whose_retrospective_steps_diverge_stops_with_a_divergence_error():
    """Weights that became infinite give an infinite error estimate; the step cut from it was 0 and the next step
    divided by it (ZeroDivisionError) before."""
    problem = Quadratics(np.array([[[4.0]]]), np.array([[0.0]]), np.array([10]))
    context = CountingContext(problem, 0, torch.ones(1, dtype=torch.float64), lr=1.0)
    rule = AdaptiveEuler(0, torch.zeros(1, dtype=torch.float64), tolerance=0.01, lte="retrospective")
    _steps(rule, context, 1)
    context.flat.params.fill_(math.inf)
    with pytest.raises(DivergenceError, match="client 0's local steps diverged"):
        for _ in range(2):
            context.recompute_gradient()
            rule.adjust(context.flat.grads, context.flat.params)


def test_the_squared_gradients_curvature_uses_each_steps_first_gradient_not_its_trials(monkeypatch):
    """As ``test_by_hand_on_a_one_dimensional_quadratic`` with trial steps (step 1: trials at x = -1 and 0.991, step
    2: one at 0.991 - 0.0045 x 3.964): the steps start at x = 1 and 0.991, gradients 4 and 3.964, so the estimate is
    B x their mean square, 10 (16 + 3.964^2) / 2; no Hessian-vector product."""

    def no_hutchinson(*args, **kwargs):
        raise AssertionError("the squared-gradient estimate takes no Hessian-vector product")

    monkeypatch.setattr("lightfed.ecado.curvature.client_hessian_diagonal", no_hutchinson)
    problem = Quadratics(np.array([[[4.0]]]), np.array([[0.0]]), np.array([10]))
    context = CountingContext(problem, 0, torch.ones(1, dtype=torch.float64), lr=1.0)
    rule = AdaptiveEuler(
        0,
        torch.zeros(1, dtype=torch.float64),
        tolerance=0.01,
        curvature_batches=1,
        curvature_estimate="squared_gradients",
    )
    _steps(rule, context, 2)
    assert context.evaluations == 2 + 3  # the two steps' gradients and three trials
    expected = 10 * (4.0**2 + (4 * 0.991) ** 2) / 2
    assert rule.report()["curvature"].item() == pytest.approx(expected)
