"""FedECADO: the circuit solver by hand, LTE control, the steady state, and convergence on heterogeneous quadratics."""

import math

import numpy as np
import pytest
import torch

from lightfed.core.messages import ClientPlan
from lightfed.core.saved_client_states import saved_client_states
from lightfed.ecado.circuit import Branches, StepControl, WindowSolver, integrate_window
from lightfed.errors import ConfigError, DivergenceError
from lightfed.strategies import FedECADO
from lightfed.strategies.base import ServerContext
from tests.conftest import small_data, small_model, small_trainer
from tests.ecado.ecado_quadratics import dense_quadratics, diagonal_quadratics, run_rounds, sharded_round, train_client

TOY = dict(inductance=0.3, inductance_rule="constant", window_end="max", tolerance=1e-2, beyond_window="extrapolate")


def _branches(a: int = 3, d: int = 5, seed: int = 0, dtype=torch.float64, **overrides) -> Branches:
    g = torch.Generator().manual_seed(seed)
    fields = dict(
        start=torch.randn(d, generator=g, dtype=dtype),
        deltas=torch.randn(a, d, generator=g, dtype=dtype),
        windows=torch.rand(a, generator=g, dtype=torch.float64) + 0.2,
        couplings=torch.randn(a, d, generator=g, dtype=dtype),
        resistance=torch.rand(a, 1, generator=g, dtype=dtype) + 0.1,
        inductance=torch.rand(a, d, generator=g, dtype=dtype) + 0.1,
    )
    return Branches(**{**fields, **overrides})


def test_one_step_by_hand():
    """One client, d = 1: start 0, final state 1 at T = 1, R = L = 1, I^k = 0, h = 1 (worked in the docstring).

    den = L + hR = 2, b = 1/2, a = (0 + (0 - Gamma(1) = 1)) / 2 = -1/2; x_c' = (0 + 1/2) / (1 + 1/2) = 1/3,
    I' = -1/2 + 1/6 = -1/3. LTE: x_c: (1/2)|0 - (-1/3)| = 1/6; q = x_c - R(I - I^k) - Gamma goes from 0 to
    1/3 + 1/3 - 1 = -1/3, so (h / 2L)|-1/3| = 1/6.
    """
    one = torch.ones(1, 1, dtype=torch.float64)
    branches = Branches(
        torch.zeros(1, dtype=torch.float64),
        one[0:1].clone(),
        torch.ones(1, dtype=torch.float64),
        torch.zeros(1, 1, dtype=torch.float64),
        one,
        one,
    )
    solver = WindowSolver(torch.zeros(1, dtype=torch.float64), torch.zeros(1, dtype=torch.float64), branches)
    error = solver.trial(1.0)
    assert solver.x_next.item() == pytest.approx(1 / 3) and solver.next.item() == pytest.approx(-1 / 3)
    assert error == pytest.approx(1 / 6)
    # with one coordinate the root mean square of each part is its absolute value
    assert WindowSolver(
        torch.zeros(1, dtype=torch.float64), torch.zeros(1, dtype=torch.float64), branches, "rms"
    ).trial(1.0) == pytest.approx(1 / 6)


def _voltages(branches: Branches, x_c, currents, s: float):
    """q_i = x_c - R_i (I_i - I_i^k) - Gamma_i(s), straight from the circuit's equations."""
    gamma = branches.start + branches.deltas * branches.progress(s)[:, None]
    return x_c - branches.resistance * (currents - branches.couplings) - gamma


@pytest.mark.parametrize("beyond_window", ["extrapolate", "hold"])
def test_the_fused_steps_solve_the_backward_euler_equations_and_estimate_their_error(beyond_window):
    """Two steps from the window start (the second beyond the shortest windows), checked against the BE equations
    and the LTE computed from the inductor voltages directly."""
    branches = _branches(beyond_window=beyond_window)
    g = torch.Generator().manual_seed(1)
    x_c, frozen = branches.start.clone(), torch.randn(5, generator=g, dtype=torch.float64)
    solver = WindowSolver(x_c, frozen, branches)
    L = branches.inductance
    currents, s = branches.couplings.clone(), 0.0
    for h in (0.3, 0.7):
        error = solver.trial(h)
        x_next, i_next = solver.x_next, solver.next
        gamma = branches.start + branches.deltas * branches.progress(s + h)[:, None]
        torch.testing.assert_close(
            L * (i_next - currents), h * (x_next - branches.resistance * (i_next - branches.couplings) - gamma)
        )
        torch.testing.assert_close(x_next - x_c, -h * (i_next.sum(0) + frozen))
        voltage_change = _voltages(branches, x_next, i_next, s + h) - _voltages(branches, x_c, currents, s)
        expected = max(
            float((currents.sum(0) - i_next.sum(0)).abs().max() * h / 2),
            float((voltage_change.abs() * h / 2 / L).max()),
        )
        assert error == pytest.approx(expected, rel=1e-9)
        x_c, currents, s = x_next.clone(), i_next.clone(), s + h
        solver.accept(h)
    expected_ratio = torch.tensor(1.0) / branches.windows
    assert torch.equal(
        branches.progress(1.0), expected_ratio.clamp(max=1) if beyond_window == "hold" else expected_ratio
    )


def test_the_solver_never_writes_the_callers_state_or_couplings():
    """Accepted and rejected steps rotate the solver's own buffers; x_c and I^k (the first step's state) stay put."""
    branches = _branches(a=3, d=10, seed=5)
    x_c, frozen = branches.start.clone(), torch.zeros(10, dtype=torch.float64)
    x_c_before, couplings = x_c.clone(), branches.couplings.clone()
    result = integrate_window(x_c, frozen, branches, 1.0, StepControl(tolerance=1e-3, min_step=1e-6))
    assert result.rejected > 0 and len(result.accepted) > 3
    assert torch.equal(x_c, x_c_before) and torch.equal(branches.couplings, couplings)
    assert result.x_c.data_ptr() != x_c.data_ptr() and result.currents.data_ptr() != couplings.data_ptr()


@pytest.mark.parametrize("window", [0.0, math.nan])
def test_a_round_whose_windows_did_not_advance_stops_with_a_divergence_error(window):
    """Clients whose steps diverged report zero or NaN windows (a step cut to 0 by an infinite rate): a
    DivergenceError, not a solve with no step (whose metrics took max() of nothing)."""
    branches = _branches(windows=torch.full((3,), window, dtype=torch.float64))
    with pytest.raises(DivergenceError, match="simulated time"):
        integrate_window(
            torch.zeros(5, dtype=torch.float64),
            torch.zeros(5, dtype=torch.float64),
            branches,
            1.0,
            StepControl(tolerance=1e-3),
        )


def test_accepted_steps_meet_the_tolerance_and_rejected_steps_shrink():
    branches = _branches(a=4, d=50, seed=3)
    control = StepControl(tolerance=1e-3, min_step=1e-6)
    result = integrate_window(
        torch.zeros(50, dtype=torch.float64), torch.zeros(50, dtype=torch.float64), branches, step=1.0, control=control
    )
    assert result.rejected > 0 and len(result.accepted) > 3 and result.forced == 0  # the control did work
    assert all(error <= control.tolerance for _, error in result.accepted)
    for (h, error, ok), (h_next, _, _) in zip(result.trials, result.trials[1:], strict=False):
        if not ok:
            assert h_next == pytest.approx(h * control.safety * control.tolerance / error) and h_next < h
    assert sum(h for h, _ in result.accepted) == pytest.approx(float(branches.windows.max()))
    # a step grows by at most max_growth after an accepted one
    accepted = [h for h, _ in result.accepted]
    assert all(b <= control.max_growth * a * (1 + 1e-12) for a, b in zip(accepted[:-2], accepted[1:-1], strict=False))


def test_a_tighter_tolerance_takes_more_and_smaller_steps():
    branches = _branches(a=4, d=50, seed=3)
    loose, tight = [
        integrate_window(
            torch.zeros(50, dtype=torch.float64),
            torch.zeros(50, dtype=torch.float64),
            branches,
            1.0,
            StepControl(tol, min_step=1e-6),
        )
        for tol in (1e-2, 1e-4)
    ]
    assert len(tight.accepted) > 3 * len(loose.accepted)
    assert max(h for h, _ in tight.accepted) < max(h for h, _ in loose.accepted)


def _toy_setup(problem, seed=1):
    """The toy check's client work: lr_i ~ U[0.01, 0.1] per unit of time, e_i ~ U{1..10} full-gradient steps."""
    n = len(problem.sizes)
    rng = np.random.default_rng(seed)
    time_steps, steps = rng.uniform(1e-2, 1e-1, size=n), rng.integers(1, 11, size=n)
    batch = int(round(problem.sizes.mean()))
    return time_steps, steps, time_steps * problem.sizes / batch  # the optimizer lr whose FE step lasts time_steps


@pytest.mark.parametrize("world", [1, 2])
@pytest.mark.parametrize("curvature", ["trace", "diagonal"])
def test_converges_to_the_data_weighted_optimum_of_heterogeneous_quadratics(curvature, world):
    """The spec's toy problem, 25% participation, unequal local work, through the strategy and its client rule; on
    one process and with the server solve sharded over two."""
    problem = dense_quadratics()
    time_steps, steps, lrs = _toy_setup(problem)
    errors, lte = [], []

    def record(round, params, strategy):
        errors.append(problem.relative_error(params))
        lte.append(strategy.metrics()["max_lte"])

    strategy = FedECADO(
        **TOY,
        sensitivity_step=float(time_steps.mean()),
        initial_step=1e-2,
        curvature=curvature,
    )
    run_rounds(
        strategy, problem, 250, 5, steps, lrs, torch.zeros(20, dtype=torch.float64), on_round=record, world=world
    )
    assert errors[-1] < 1e-6 and errors[0] > 0.5
    assert max(lte) <= 1e-2
    # every client that trained keeps its current; together they sum to zero at the fixed point (server KCL)
    for rank_strategy in run_rounds.strategies:  # each process its slice
        states = rank_strategy.client_states
        assert len(states) == 20
        assert rank_strategy.total_current.norm() < 1e-5 * max(states.get(i, "current").norm() for i in range(20))


def test_without_the_data_size_coupling_the_fixed_point_weighs_clients_equally():
    problem = dense_quadratics()
    time_steps, steps, _ = _toy_setup(problem)
    strategy = FedECADO(
        **TOY,
        sensitivity_step=float(time_steps.mean()),
        coupling="unit",
    )
    x = run_rounds(strategy, problem, 250, 5, steps, time_steps, torch.zeros(20, dtype=torch.float64))
    unweighted = np.linalg.solve(problem.A.sum(0), np.einsum("nij,nj->i", problem.A, problem.b))
    assert np.linalg.norm(x.numpy() - unweighted) / np.linalg.norm(unweighted) < 1e-6
    assert problem.relative_error(x) > 1e-2


def test_holding_short_clients_converges_more_slowly_than_extrapolating_them():
    """The FedECADO toy's finding (hold: 1e-1 after 300 rounds at L = 1, extrapolate: 4e-4)."""
    problem = dense_quadratics()
    time_steps, steps, lrs = _toy_setup(problem)
    errors = {}
    for mode in ("extrapolate", "hold"):
        strategy = FedECADO(
            inductance=0.3,
            inductance_rule="constant",
            window_end="max",
            tolerance=1e-2,
            sensitivity_step=float(time_steps.mean()),
            beyond_window=mode,
        )
        errors[mode] = problem.relative_error(
            run_rounds(strategy, problem, 100, 5, steps, lrs, torch.zeros(20, dtype=torch.float64))
        )
    assert errors["extrapolate"] < 1e-2 < errors["hold"] < 1.0


def test_full_participation_and_equal_work_give_the_steady_state_average():
    """One BE step over the whole window (I^k = 0): x_c' = (x_c + sum_i c_i y_i) / (1 + sum_i c_i) with
    c_i = h^2 / (L + h R_i), per coordinate; as L/h -> 0 and h sum G -> inf this is sum G_i y_i / sum G_i, the
    spec's steady state. Diagonal quadratics make the Hutchinson diagonal exact: G_i = 1/dt_G + (|D_i| / B) h_i."""
    problem = diagonal_quadratics(n=6, d=4)
    batch = int(round(problem.sizes.mean()))
    x0 = torch.full((4,), 0.5, dtype=torch.float64)
    for inductance, dt_g, lr, exact in [(0.7, 0.5, 0.01, True), (1e-15, 1e-8, 0.01, False)]:
        strategy = FedECADO(
            inductance=inductance,
            inductance_rule="constant",
            window_end="max",
            tolerance=1e30,
            sensitivity_step=dt_g,
            initial_step=1e6,
            curvature="diagonal",
        )
        strategy.setup(ServerContext(x0.clone(), 6))
        updates = []
        for i in range(6):
            lr_i = lr * problem.sizes[i] / batch  # equal work: every window lasts 3 lr
            updates.append(train_client(strategy, problem, ClientPlan(i, 0, seed=i, steps=3), x0, lr_i))
        finals = [x0 + update.delta for update in updates]
        x = sharded_round(strategy, 0, updates, x0)
        assert strategy.metrics()["server_steps"] == 1
        y = torch.stack(finals)
        G = torch.tensor(1 / dt_g + problem.sizes[:, None] / batch * np.diagonal(problem.A, axis1=1, axis2=2))
        h = 3 * lr
        if exact:
            c = h**2 / (inductance + h / G)
            torch.testing.assert_close(x, (x0 + (c * y).sum(0)) / (1 + c.sum(0)))
        else:
            torch.testing.assert_close(x, (G * y).sum(0) / G.sum(0), rtol=1e-5, atol=1e-8)


def test_bad_settings_are_refused_in_one_line():
    for kwargs, message in [
        (dict(inductance=0), "strategy.inductance must be > 0"),
        (dict(tolerance=-1), "LTE tolerance must be > 0"),
        (dict(initial_step=0.0), "strategy.initial_step must be > 0"),
    ]:
        with pytest.raises(ConfigError, match=message) as error:
            FedECADO(**kwargs)
        assert "\n" not in str(error.value)


def _weights(model) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).clone()


def test_trains_through_the_engine_and_resumes_with_its_currents(tmp_path):
    def strategy():
        return FedECADO(
            inductance=0.5,
            inductance_rule="constant",
            window_end="max",
            tolerance=1e-2,
            sensitivity_step=0.1,
            curvature_batches=1,
            curvature_probes=2,
        )

    model = small_model()
    metrics = small_trainer(tmp_path / "full", rounds=3).fit(model, small_data(), strategy())
    assert metrics["strategy/max_lte"] <= 1e-2 and metrics["strategy/server_steps"] >= 1
    assert metrics["strategy/current_sum_norm"] > 0
    small_trainer(tmp_path / "cut", rounds=2).fit(small_model(), small_data(), strategy())
    resumed = small_model()
    trainer = small_trainer(tmp_path / "cut", rounds=3)
    trainer.fit(resumed, small_data(), strategy(), ckpt_path="last")
    assert torch.equal(_weights(resumed), _weights(model))
    states = saved_client_states(trainer.log_dir / "checkpoints" / "last.ckpt")
    assert states and all({"current", "curvature", "curvature_round"} <= set(s) for s in states.values())
