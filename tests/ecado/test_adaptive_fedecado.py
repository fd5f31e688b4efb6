"""Adaptive FedECADO: critical damping, the client's error-controlled Forward Euler, convergence for every gamma."""

import numpy as np
import pytest
import torch

from lightfed.core.messages import ClientPlan
from lightfed.ecado.adaptive_euler import AdaptiveEuler, passivity_bound
from lightfed.ecado.adaptive_fedecado import critical_inductance
from lightfed.ecado.circuit import Branches, WindowSolver
from lightfed.errors import ConfigError
from lightfed.strategies import AdaptiveFedECADO
from lightfed.strategies.base import ServerContext
from tests.conftest import small_data, small_model, small_trainer
from tests.ecado.ecado_quadratics import (
    QuadraticContext,
    Quadratics,
    diagonal_quadratics,
    run_rounds,
    sharded_round,
    train_client,
)

ROUNDS = 40
PAPER_CLIENT = dict(first_step="passivity", client_norm="max")  # eq. 16 on the raw weights, max-abs errors
PAPER_CONTROL = dict(step_control="every_round", curvature="diagonal")  # every step error-controlled, Hutchinson H_i


@pytest.mark.parametrize("conductance", [0.5, 2.0, 10.0])
def test_the_critical_inductance_gives_a_repeated_real_eigenvalue(conductance):
    """One branch, x_c' = -I, L I' = x_c - R I (R = 1/G): Jacobian [[0, -1], [1/L, -R/L]]."""
    G = torch.tensor(conductance, dtype=torch.float64)

    def eigenvalues(L):
        return torch.linalg.eigvals(torch.tensor([[0.0, -1.0], [1 / L, -1 / (G * L)]], dtype=torch.float64))

    L = critical_inductance(G)
    assert L == pytest.approx(1 / (4 * conductance**2))
    low, high = eigenvalues(L)
    scale = 2 * conductance  # the repeated eigenvalue is -R / 2L = -2G
    assert abs(low.imag) < 1e-6 * scale and abs(high.imag) < 1e-6 * scale
    assert low.real == pytest.approx(-scale, rel=1e-6) and high.real == pytest.approx(-scale, rel=1e-6)
    assert abs(eigenvalues(4 * L)[0].imag) > 0.4 * scale  # under-damped: G (-1 +- i sqrt 3) / 2
    assert torch.all(eigenvalues(L / 4).imag == 0) and abs(eigenvalues(L / 4)[0] - eigenvalues(L / 4)[1]) > scale


def _step_response(conductance: float, inductance: float, n: int = 1) -> torch.Tensor:
    """x_c of n alike branches whose clients jump from 0 to 1, through the real Backward-Euler step (small fixed h)."""
    one = torch.ones(n, 1, dtype=torch.float64)
    branches = Branches(
        torch.zeros(1, dtype=torch.float64),
        one.clone(),
        torch.full((n,), 1e-12, dtype=torch.float64),
        torch.zeros(n, 1, dtype=torch.float64),
        one / conductance,
        one * inductance,
        beyond_window="hold",
    )
    solver, h = (
        WindowSolver(torch.zeros(1, dtype=torch.float64), torch.zeros(1, dtype=torch.float64), branches),
        1e-2 / (n * conductance),
    )
    trajectory = []
    for _ in range(2000):
        solver.trial(h)
        solver.accept(h)
        trajectory.append(solver.x_c.item())
    return torch.tensor(trajectory)


@pytest.mark.parametrize("conductance", [0.5, 4.0])
def test_a_critically_damped_step_response_does_not_overshoot_where_four_times_the_inductance_does(conductance):
    critical = _step_response(conductance, float(critical_inductance(torch.tensor(conductance))))
    assert critical.max() <= 1.0 and critical[-1] > 0.999
    assert torch.all(critical[1:] >= critical[:-1])  # monotone rise
    four_times = _step_response(conductance, 4 * float(critical_inductance(torch.tensor(conductance))))
    assert four_times.max() > 1.1  # zeta = 1/2: about 16% overshoot


@pytest.mark.parametrize("n", [4, 10])
def test_the_collective_inductance_critically_damps_n_branches_that_share_the_capacitor(n):
    """State (x_c, I_1..I_n), x_c' = -sum I, L I_i' = x_c - R I_i. The mode where all currents charge the capacitor
    solves L s^2 + R s + n = 0: with L = R^2 / 4n a double root -2nG; the n - 1 modes of currents circulating between
    branches decay at -R/L = -4nG. With eq. 24's L = R^2 / 4 the first pair is complex, imaginary part 2G sqrt(n - 1)."""
    G = 2.0

    def eigenvalues(L: float) -> torch.Tensor:
        J = torch.zeros(n + 1, n + 1, dtype=torch.float64)
        J[0, 1:], J[1:, 0] = -1.0, 1 / L
        J[1:, 1:] = torch.eye(n, dtype=torch.float64) * (-1 / (G * L))
        return torch.linalg.eigvals(J)

    collective = eigenvalues(float(critical_inductance(torch.tensor(G), n)))
    assert collective.imag.abs().max() < 1e-3 * n * G  # a double root: perturbed by ~sqrt(machine eps) numerically
    values = collective.real.sort().values
    torch.testing.assert_close(values[: n - 1], torch.full((n - 1,), -4.0 * n * G, dtype=torch.float64))
    torch.testing.assert_close(values[n - 1 :], torch.full((2,), -2.0 * n * G, dtype=torch.float64), rtol=1e-6, atol=0)
    branch = eigenvalues(float(critical_inductance(torch.tensor(G))))
    assert branch.imag.abs().max() == pytest.approx(2 * G * (n - 1) ** 0.5)

    L = float(critical_inductance(torch.tensor(G), n))
    critical = _step_response(G, L, n)
    assert critical.max() <= 1.0 and critical[-1] > 0.999 and torch.all(critical[1:] >= critical[:-1])
    assert _step_response(G, n * L, n).max() > 1.15  # eq. 24: zeta = 1/sqrt(n) <= 1/2, 16% overshoot or more


def _problem_and_work(seed: int = 1):
    problem = diagonal_quadratics()
    rng = np.random.default_rng(seed)
    steps = rng.integers(1, 51, size=(ROUNDS, len(problem.sizes)))  # e_i ~ U{1..50}, drawn afresh each round
    return problem, steps, torch.tensor(rng.normal(size=20))


def test_one_client_step_is_forward_euler_from_the_passivity_bound_within_the_tolerance():
    problem, _, x0 = _problem_and_work()
    strategy = AdaptiveFedECADO(tolerance=1e-3, **PAPER_CLIENT)
    strategy.setup(ServerContext(x0.clone(), len(problem.sizes)))
    update = train_client(strategy, problem, ClientPlan(3, 0, seed=3, steps=1), x0, lr=1.0)
    report = update.report
    p = problem.sizes[3] / problem.sizes.sum()
    gradient = torch.tensor(problem.A[3] @ (x0.numpy() - problem.b[3]))
    (dt,) = report["steps"]
    assert report["window"] == dt == update.local_time  # the optimizer's lr is set to the step taken
    torch.testing.assert_close(update.delta, -dt * p * gradient)  # x + dt (I - p g) with I = 0
    assert report["passivity_bound"] == pytest.approx(passivity_bound(x0, -p * gradient))
    assert report["rejected"] > 0 and dt < report["passivity_bound"]  # the bound was tried first, then cut back
    assert report["max_lte"] <= 1e-3 and report["forced"] == 0
    # the estimate by hand: the quadratic's gradient change over the step is A (dt v), so LTE = dt^2 p |A v| / 2
    v = -p * gradient
    assert report["max_lte"] == pytest.approx(dt**2 / 2 * p * float((torch.tensor(problem.A[3]) @ v).abs().max()))


def test_fixed_lr_clients_take_sgd_steps_at_that_learning_rate():
    """fixed_lr = 0.05: every step is dt = 0.05 / p_i, x + dt (I - p g) = x - 0.05 g with I = 0, no trial."""
    problem, _, x0 = _problem_and_work()
    strategy = AdaptiveFedECADO(fixed_lr=0.05)
    strategy.setup(ServerContext(x0.clone(), len(problem.sizes)))
    update = train_client(strategy, problem, ClientPlan(3, 0, seed=3, steps=2), x0, lr=1.0)
    p = problem.sizes[3] / problem.sizes.sum()
    A, b = torch.tensor(problem.A[3]), torch.tensor(problem.b[3])
    x = x0 - 0.05 * (A @ (x0 - b))
    x = x - 0.05 * (A @ (x - b))
    torch.testing.assert_close(update.delta, x - x0)
    assert update.report["steps"] == pytest.approx([0.05 / p] * 2) and update.report["rejected"] == 0


def test_the_clients_mean_learning_rate_is_their_mean_p_dt_over_all_steps():
    """With fixed_lr every step has p_i dt_i = fixed_lr, whatever the client's size and its number of steps."""
    problem, steps, x0 = _problem_and_work()
    strategy = AdaptiveFedECADO(fixed_lr=0.05)
    run_rounds(strategy, problem, 1, 16, steps, np.ones(16), x0)
    metrics = strategy.metrics()
    assert metrics["client_lr_mean"] == pytest.approx(0.05)


def test_constant_damping_gives_every_branch_the_given_inductance():
    problem, steps, x0 = _problem_and_work()
    strategy = AdaptiveFedECADO(damping="constant", inductance=3.0)
    run_rounds(strategy, problem, 1, 16, steps, np.ones(16), x0)
    metrics = strategy.metrics()
    assert metrics["inductance_min"] == metrics["inductance_mean"] == metrics["inductance_max"] == 3.0


def test_shared_damping_gives_every_branch_the_time_constant_of_the_parallel_resistance():
    """damping="shared": L_i / R_i = R_eq / 4 (R_eq = 1 / sum_i G_i) in every branch and coordinate, however the
    G_i differ (windows of 1-50 steps); "collective" (1 / 4 n G_i^2) gives unlike branches unlike time constants."""
    problem, steps, x0 = _problem_and_work()
    time_constants = {}
    for damping in ("shared", "collective"):
        strategy = AdaptiveFedECADO(damping=damping)
        run_rounds(strategy, problem, 1, 16, steps, np.ones(16), x0)
        inductance = strategy._inductance
        resistance = strategy._workspace.get("conductance", inductance.shape, inductance)  # 1 / G_i, in place
        time_constants[damping] = inductance / resistance
        if damping == "shared":
            quarter_parallel = (resistance.reciprocal().sum(0) * 4).reciprocal()
    shared = time_constants["shared"]
    torch.testing.assert_close(shared, quarter_parallel.expand_as(shared))
    spread = time_constants["collective"].amax(0) / time_constants["collective"].amin(0)
    assert float(spread.max()) > 2


def test_a_nonpositive_passivity_bound_falls_back_and_is_cut_back_to_the_tolerance():
    problem, _, _ = _problem_and_work()
    x0 = torch.zeros(20, dtype=torch.float64)  # x'v = 0: the bound is 0
    strategy = AdaptiveFedECADO(tolerance=1e-2, fallback_step=50.0, **PAPER_CLIENT)
    strategy.setup(ServerContext(x0.clone(), len(problem.sizes)))
    report = train_client(strategy, problem, ClientPlan(0, 0, seed=0, steps=5), x0, lr=1.0).report
    assert report["passivity_bound"] == 0 and report["steps"][0] <= 50.0
    assert report["max_lte"] <= 1e-2 and report["forced"] == 0
    assert all(
        b <= 2 * a for a, b in zip(report["steps"], report["steps"][1:], strict=False)
    )  # growth at most 2x a step
    assert max(report["steps"]) <= 50.0  # and never above the round's first trial


@pytest.mark.parametrize("cap", [True, False])
def test_a_client_on_a_flat_loss_drifts_with_steps_capped_at_the_passivity_bound(cap):
    """A saturated client (gradient 0) moves along its current I alone and every step passes the LTE test (LTE 0).
    x0 = -1, I = 0.1 (d = 20): the bound is -2 x'I / |I|^2 = 2 * 2 / 0.2 = 20. Capped, 12 steps of 20 give T = 240;
    uncapped, the steps double: T = 20 (2^12 - 1) = 81,900."""
    problem = Quadratics(np.zeros((2, 20, 20)), np.zeros((2, 20)), np.array([100, 100]))
    x0, current = -torch.ones(20, dtype=torch.float64), torch.full((20,), 0.1, dtype=torch.float64)
    strategy = AdaptiveFedECADO(tolerance=1e-3, cap_client_steps=cap, **PAPER_CLIENT)
    strategy.setup(ServerContext(x0.clone(), 2))
    strategy.client_states.set(0, "current", current)
    update = train_client(strategy, problem, ClientPlan(0, 0, seed=0, steps=12), x0, lr=1.0)
    report = update.report
    assert report["passivity_bound"] == pytest.approx(20.0) and report["max_lte"] == 0
    expected = [20.0] * 12 if cap else [20.0 * 2**k for k in range(12)]
    assert report["steps"] == pytest.approx(expected)
    assert report["window"] == pytest.approx(240.0 if cap else 81_900.0)
    torch.testing.assert_close(update.delta, report["window"] * current)  # x(T) = x0 + T I


@pytest.mark.parametrize("world", [1, 2])
@pytest.mark.parametrize("tolerance", [1e-4, 1e-3, 1e-2, 1e-1])
@pytest.mark.slow
def test_converges_to_the_weighted_optimum_for_every_tolerance(tolerance, world):
    """The spec's toy: 16 clients, diagonal quadratics, e_i ~ U{1..50}; gamma is the only setting. On one process
    and with the server solve sharded over two."""
    problem, steps, x0 = _problem_and_work()
    errors, client_lte, client_rejected = [], [], 0

    def record(round, params, strategy):
        nonlocal client_rejected
        errors.append(problem.relative_error(params))
        metrics = strategy.metrics()
        client_lte.append(metrics["client_max_lte"])
        client_rejected += metrics["client_rejected"]
        assert metrics["client_forced"] == 0 and metrics["inductance_min"] > 0

    run_rounds(
        AdaptiveFedECADO(tolerance=tolerance, **PAPER_CONTROL),
        problem,
        ROUNDS,
        16,
        steps,
        np.ones(16),
        x0,
        on_round=record,
        world=world,
    )
    assert errors[-1] < 1e-2 and problem.relative_error(x0) > 0.3
    assert max(client_lte) <= tolerance and client_rejected > 0  # the control bound, every accepted step


def test_converges_under_partial_participation():
    problem, steps, x0 = _problem_and_work()
    x = run_rounds(AdaptiveFedECADO(tolerance=1e-2, **PAPER_CONTROL), problem, ROUNDS, 4, steps, np.ones(16), x0)
    assert problem.relative_error(x) < 0.1


def test_extrapolating_short_clients_diverges_where_holding_them_converges():
    """The spec's toy finding: windows differ by up to 1e4 here, so extrapolation amplifies short clients."""
    problem, steps, x0 = _problem_and_work()
    errors = {}
    for mode in ("hold", "extrapolate"):
        x = run_rounds(AdaptiveFedECADO(tolerance=1e-2, beyond_window=mode), problem, 1, 16, steps, np.ones(16), x0)
        errors[mode] = problem.relative_error(x)
    assert errors["hold"] < problem.relative_error(x0) < 100 < errors["extrapolate"]


def test_the_literal_sensitivity_step_makes_branches_stiffer():
    """dt_G = the client's first step (the paper's "client step-size") instead of its window T_i: larger G_i,
    smaller L_i = 1 / 4 G_i^2."""
    problem, steps, x0 = _problem_and_work()
    inductance = {}
    for mode in ("window", "first_step"):
        strategy = AdaptiveFedECADO(tolerance=1e-2, sensitivity_step=mode)
        run_rounds(strategy, problem, 1, 16, steps, np.ones(16), x0)
        inductance[mode] = strategy.metrics()["inductance_mean"]
    assert inductance["first_step"] < 0.1 * inductance["window"]


def test_bad_settings_are_refused_in_one_line():
    for kwargs, message in [
        (dict(tolerance=0.0), "LTE tolerance must be > 0"),
        (dict(fallback_step=-1.0), "strategy.fallback_step must be > 0"),
        (dict(fixed_lr=0.0), "strategy.inductance and fixed_lr must be > 0"),
        (dict(curvature="full"), "strategy.curvature must be 'diagonal' or 'none'"),
        (dict(step_control="never"), "strategy.step_control must be 'every_round' or 'first_round'"),
        (dict(curvature="diagonal", curvature_estimate="loss_differences"), "gives the Hessian's mean alone"),
    ]:
        with pytest.raises(ConfigError, match=message) as error:
            AdaptiveFedECADO(**kwargs)
        assert "\n" not in str(error.value)
    context = QuadraticContext(diagonal_quadratics(), 0, torch.zeros(20), lr=1.0)
    context.scales_gradients = True  # 16-mixed: the loss is scaled
    with pytest.raises(ConfigError, match="precision 32-true"):
        AdaptiveEuler(0, torch.zeros(20), tolerance=1e-2).start(torch.zeros(20), context)


def test_trains_through_the_client_loop_with_its_own_steps(tmp_path):
    strategy = AdaptiveFedECADO(tolerance=1e-2, curvature_probes=2)
    metrics = small_trainer(tmp_path, rounds=2).fit(small_model(), small_data(), strategy)
    assert metrics["strategy/client_max_lte"] <= 1e-2 and metrics["strategy/client_forced"] == 0
    assert metrics["strategy/client_steps"] == 4 * 5  # 4 clients x 5 local steps
    assert 0 < metrics["strategy/client_step_min"] <= metrics["strategy/client_step_max"]
    assert metrics["strategy/window_min"] <= metrics["strategy/window_max"]


def test_the_mean_window_end_advances_by_the_data_weighted_mean_window():
    """window_end="mean": the server integrates to sum p_i T_i / sum p_i of the round's windows (p_i = data share),
    between the shortest and the longest; "max" to the longest."""
    problem, steps, x0 = _problem_and_work()
    for rule in ("mean", "max"):
        strategy = AdaptiveFedECADO(tolerance=1e-2, window_end=rule, beyond_window="extrapolate")
        strategy.setup(ServerContext(x0.clone(), len(problem.sizes)))
        updates = [
            train_client(strategy, problem, ClientPlan(i, 0, seed=i, steps=int(steps[0, i])), x0, lr=1.0)
            for i in range(6)
        ]
        sharded_round(strategy, 0, updates, x0)
        windows = np.array([u.report["window"] for u in updates])
        p = problem.sizes[:6] / problem.sizes.sum()
        expected = (p * windows).sum() / p.sum() if rule == "mean" else windows.max()
        assert strategy.metrics()["time"] == pytest.approx(expected)
        assert windows.min() < strategy.metrics()["time"] <= windows.max()


def test_the_strategy_hands_its_clients_the_squared_gradients_estimate(monkeypatch):
    def no_hutchinson(*args, **kwargs):
        raise AssertionError("the squared-gradient estimate takes no Hessian-vector product")

    monkeypatch.setattr("lightfed.ecado.curvature.client_hessian_diagonal", no_hutchinson)
    problem, x0 = diagonal_quadratics(n=2, d=3), torch.zeros(3, dtype=torch.float64)
    strategy = AdaptiveFedECADO(curvature="diagonal", curvature_estimate="squared_gradients")
    strategy.setup(ServerContext(x0.clone(), 2))
    update = train_client(strategy, problem, ClientPlan(0, 0, seed=0, steps=3), x0, 1.0)
    assert update.report["curvature"].shape == (3,) and bool((update.report["curvature"] > 0).all())


def test_without_curvature_each_branch_is_its_window_alone_and_no_client_estimates(monkeypatch):
    """curvature="none": G_i = 1 / T_i with the window held, so the collective inductance is T_i^2 / (4 n), the
    largest and smallest from the longest and shortest windows, one number a branch (not one a coordinate); no client
    estimates, none sends a curvature."""

    def no_hutchinson(*args, **kwargs):
        raise AssertionError("curvature='none' estimates nothing")

    monkeypatch.setattr("lightfed.ecado.curvature.client_hessian_diagonal", no_hutchinson)
    problem, steps, x0 = _problem_and_work()
    strategy = AdaptiveFedECADO(curvature="none", beyond_window="hold")
    assert "curvature" not in {sent.name for sent in strategy.requirements.sends}
    assert "curvature" in {sent.name for sent in AdaptiveFedECADO(curvature="diagonal").requirements.sends}
    run_rounds(strategy, problem, 1, 16, steps, np.ones(16), x0)
    metrics = strategy.metrics()
    assert metrics["inductance_max"] == pytest.approx(metrics["window_max"] ** 2 / (4 * 16))
    assert metrics["inductance_min"] == pytest.approx(metrics["window_min"] ** 2 / (4 * 16))
    assert strategy._inductance.shape == (16, 1)
    assert metrics["inductance_min"] < metrics["inductance_mean"] < metrics["inductance_max"]


def test_a_curvature_estimated_every_two_rounds_is_estimated_again_two_rounds_later(monkeypatch):
    import lightfed.ecado.curvature as curvature

    calls, estimate = [], curvature.client_hessian_diagonal

    def counted(context, client_id, *args, **kwargs):
        calls.append(client_id)
        return estimate(context, client_id, *args, **kwargs)

    monkeypatch.setattr("lightfed.ecado.curvature.client_hessian_diagonal", counted)
    problem, steps, x0 = _problem_and_work()
    for every, expected in ((0, 16), (2, 32)):  # 16 clients in each of 4 rounds: rounds 0 (and 2)
        calls.clear()
        run_rounds(
            AdaptiveFedECADO(curvature="diagonal", curvature_every=every), problem, 4, 16, steps, np.ones(16), x0
        )
        assert len(calls) == expected and sorted(set(calls)) == list(range(16))


def test_first_round_step_control_learns_the_first_rounds_mean_lr_and_then_takes_sgd_steps_at_it():
    """step_control="first_round": round 0 is error-controlled (its steps differ); from round 1 every
    client step is dt = lr / p_i with lr the mean p_i dt_i of round 0, in every rank's copy; the lr is resumed from
    the state."""
    problem, steps, x0 = _problem_and_work()
    rounds: list[dict] = []
    run_rounds(
        AdaptiveFedECADO(tolerance=1e-2, step_control="first_round"),
        problem,
        3,
        16,
        steps,
        np.ones(16),
        x0,
        on_round=lambda round, params, strategy: rounds.append(dict(strategy.metrics())),
        world=2,
    )
    learned = rounds[0]["client_lr_mean"]
    assert rounds[0]["learned_lr"] == learned  # set by the round it was learned in
    assert rounds[0]["client_step_min"] < rounds[0]["client_step_max"]
    for metrics in rounds[1:]:
        assert metrics["learned_lr"] == learned and metrics["client_rejected"] == 0
        assert metrics["client_lr_mean"] == pytest.approx(learned)  # p_i dt_i = lr at every step
    assert all(rank.learned_lr == learned for rank in run_rounds.strategies)
    resumed = AdaptiveFedECADO(step_control="first_round")
    resumed.setup(ServerContext(x0.clone(), len(problem.sizes)))
    resumed.load_state_dict(run_rounds.strategies[0].state_dict())
    update = train_client(resumed, problem, ClientPlan(3, 3, seed=3, steps=2), x0, lr=1.0)
    p = problem.sizes[3] / problem.sizes.sum()
    assert update.report["steps"] == pytest.approx([learned / p] * 2)


@pytest.mark.parametrize("tolerance, curvature", [(1e-2, "diagonal"), (1.0, "diagonal"), (1e-2, "none")])
def test_first_round_step_control_converges_on_the_quadratics(tolerance, curvature):
    """The learned step is the first round's error-controlled one, inside every client's stability bound here."""
    problem, steps, x0 = _problem_and_work()
    x = run_rounds(
        AdaptiveFedECADO(tolerance=tolerance, curvature=curvature), problem, ROUNDS, 16, steps, np.ones(16), x0
    )
    assert problem.relative_error(x) < 1e-6
