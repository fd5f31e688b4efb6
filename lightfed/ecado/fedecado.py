"""FedECADO (Agarwal, Joshi, Pileggi, ICML 2025): federated learning as simulating an equivalent circuit.

Each client is a branch (inductor L, Thevenin resistance 1/G_i) between the server node x_c and the client's own
node; a round's clients simulate their nodes with their coupling currents frozen (``CouplingCurrent``), and the
server integrates x_c and the active branch currents with Backward Euler over [t, t + max T_i], clients' states
synchronised by linear interpolation/extrapolation (``lightfed.ecado.circuit``). Equations and the corrections to
the paper's printed ones: ``lightfed/ecado/circuit.py`` and the FedECADO spec.
"""

import math
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Literal, cast

import torch
from torch import Tensor

from lightfed.core.local_rule import LocalRule
from lightfed.core.messages import ClientPlan, ClientUpdate
from lightfed.core.requirements import Requirements
from lightfed.core.sharded_client_states import ShardedClientStates
from lightfed.core.sharding import CoordinateSums, sum_rows
from lightfed.core.workspace import Workspace
from lightfed.ecado.circuit import (
    BeyondWindow,
    Branches,
    ErrorNorm,
    StepControl,
    WindowResult,
    integrate_window,
    path_progress,
)
from lightfed.ecado.coupling import CouplingCurrent, CouplingScale
from lightfed.ecado.curvature import CurvatureEstimate
from lightfed.ecado.max_abs import max_abs
from lightfed.errors import ConfigError
from lightfed.strategies.base import NOTHING, ServerContext
from lightfed.strategies.sharded_base import ShardedRound, ShardedStrategy

StateDevice = Literal["accelerator", "cpu"]
InductanceRule = Literal["critical", "constant"]
WindowEnd = Literal["max", "mean"]


def critical_branch_inductance(resistance: Tensor, scale: float = 1.0) -> Tensor:
    """L_i = scale x R_i R_eq / 4 with R_eq = 1 / sum_i (1 / R_i), elementwise over ``resistance``'s rows (the
    round's branches): every branch the time constant R_eq / 4, x_c following the clients with damping ratio
    1 / sqrt(scale) (1: critical)."""
    equivalent = sum_rows(resistance.reciprocal()).reciprocal()
    return resistance * equivalent * (scale / 4)


def window_metrics(
    result: WindowResult, diagnostics: Tensor, windows: Tensor, coordinates: CoordinateSums
) -> dict[str, float]:
    """Server steps taken, rejected and forced, max LTE of the accepted steps, step sizes, and from ``diagnostics``
    (rows: x_c's move, the total current, the clients' data-weighted mean delta, the move times the mean delta) the
    norms of the move and of the total current and the ``progress_share``: how much of the clients' mean progress the
    move took this round, the projection <move, mean delta> / |mean delta|^2 (1: FedAvg's step; the rest stays in the
    branch currents). One reduction over every process's slice."""
    squares = coordinates.row_blocks(diagnostics[:3], squares=True)
    blocks = torch.cat([squares, coordinates.row_blocks(diagnostics[3:], squares=False)])
    move_square, current_square, mean_square, dot = coordinates.rows_total(blocks).tolist()
    steps = [h for h, _ in result.accepted]
    return {
        "server_steps": float(len(steps)),
        "server_rejected": float(result.rejected),
        "server_forced": float(result.forced),
        "max_lte": max(error for _, error in result.accepted),
        "step_min": min(steps),
        "step_mean": sum(steps) / len(steps),
        "step_max": max(steps),
        "xc_move_norm": math.sqrt(move_square),
        "current_sum_norm": math.sqrt(current_square),
        "window_max": float(windows.max()),
        "window_min": float(windows.min()),
        "progress_share": dot / mean_square if mean_square > 0 else 0.0,
    }


def data_weighted_mean(rows: Tensor, weights: Tensor, out: Tensor) -> Tensor:
    """sum_i w_i rows_i / sum_i w_i into ``out``, one row at a time (as ``sum_rows``: the same bits on any shard)."""
    out.zero_()
    for row, weight in zip(rows, (weights / weights.sum()).tolist(), strict=True):
        out.add_(row, alpha=weight)
    return out


def window_end(windows: Tensor, time_scale: Tensor, rule: str) -> float:
    """The round's integration end: the longest window ("max") or the data-weighted (1 / beta_i) mean ("mean")."""
    if rule == "max":
        return float(windows.max())
    weights = time_scale.double().reciprocal()
    return float((weights * windows.double()).sum() / weights.sum())


class FedECADO(ShardedStrategy):
    """Backward-Euler aggregation with aggregate sensitivity G_i = 1/dt_G + H_i / beta_i and multi-rate integration.

    Per round each active client trains from x_c with its frozen current I_i^k and reports its window T_i = beta_i x
    its summed learning rates; the first time it is sampled (or every ``curvature_every`` rounds) it also estimates its
    curvature H_i at the global model, unless ``curvature_cutoff`` has stopped the estimates. The server integrates the
    circuit to the round's ``window_end`` with LTE <= ``tolerance`` and keeps the active currents; the inactive
    clients' currents stay frozen in the central node's equation.

    Runs on the sharded server path: with N processes each integrates its slice of x_c and of the active currents,
    with one small all-reduce per trial step (``CoordinateSums``), and the weights are the same bits on any number of
    processes. Memory per process, kept from round to round: d / N floats of current per client that has trained, and
    1 float (d / N with ``curvature="diagonal"``) of its curvature, where ``state_device`` says; about 8 x active
    clients x d / N floats for the round. Clients receive their whole I_i^k, a second model-sized download.

    Departures from the paper and the measurements behind the defaults: docs/corrections/fedecado.md.

    In a config:

    ```yaml
    strategy:
      class_path: lightfed.strategies.FedECADO
      init_args: {tolerance: 0.01, curvature: trace}
    ```

    Examples:
        What clients send besides their update, with and without a curvature estimate:

        >>> from lightfed.strategies import FedECADO
        >>> sorted(sent.name for sent in FedECADO().requirements.sends)
        ['curvature', 'time_scale']
        >>> sorted(sent.name for sent in FedECADO(curvature="none").requirements.sends)
        ['time_scale']
        >>> FedECADO(inductance=0.0)
        Traceback (most recent call last):
        ...
        lightfed.errors.ConfigError: strategy.inductance must be > 0, got 0.0
    """

    report_scalars: tuple[str, ...] = ("time_scale", "curvature_mean")
    window_end = "max"

    def __init__(
        self,
        inductance: float = 1.0,
        tolerance: float = 1e-2,
        sensitivity_step: float | Literal["window"] = "window",
        inductance_rule: InductanceRule = "critical",
        initial_step: float | None = None,
        curvature: Literal["trace", "diagonal", "none"] = "trace",
        curvature_batches: int = 1,
        curvature_probes: int = 1,
        curvature_every: int = 0,
        coupling: CouplingScale = "data_size",
        beyond_window: BeyondWindow = "extrapolate",
        max_growth: float = 2.0,
        error_norm: ErrorNorm = "rms",
        min_step: float = 1e-2,
        state_device: StateDevice = "accelerator",
        window_end: WindowEnd = "mean",
        curvature_examples: int | None = 8,
        curvature_estimate: CurvatureEstimate | None = None,
        curvature_cutoff: float = 1e-2,
    ) -> None:
        """
        Args:
            inductance: With ``inductance_rule="critical"``: the factor on the critically damping inductances (1:
                critical, damping ratio 1 / sqrt(inductance)); with "constant": L of every branch (the paper).
            tolerance: Bound on the local truncation error of every accepted server step (delta), in ``error_norm``.
            sensitivity_step: dt_G in G_i = 1/dt_G + H_i / beta_i: "window": how long the client's modelled state at
                the window end has responded to its current, min(T_i, end) when held, the window end when
                extrapolated; a number: one constant for all clients (the paper).
            inductance_rule: "critical": each round, L_i = inductance x R_i R_eq / 4 (``critical_branch_inductance``);
                "constant": L_i = inductance (the paper).
            initial_step: First server step; None: a tenth of the first round's window. Later rounds start from the
                step the previous round's control proposed.
            curvature: H_i as its trace / d (a scalar per client), its diagonal, or "none" (G_i = 1/dt_G, no
                estimate).
            curvature_estimate: "loss_differences": the trace / d alone from second differences of the loss along
                Rademacher probes at the global model before the client trains (forward passes only,
                ``lightfed.ecado.curvature.loss_difference_curvature``); "hutchinson": Hessian-vector products there
                (the paper's; the diagonal too); both on ``curvature_batches`` whole batches or subsets of
                ``curvature_examples``; "squared_gradients": the diagonal empirical Fisher from the client's own
                training gradients of that round (``lightfed.ecado.curvature.SquaredGradients``; the three settings
                below unused). None: "loss_differences" with ``curvature="trace"``, "hutchinson" with "diagonal".
            curvature_batches: Local batches (or subsets) the estimate averages over.
            curvature_probes: Rademacher probes per batch.
            curvature_examples: None: the estimate runs on whole local batches; a number: on random subsets of that
                many of the client's examples instead (the paper's "smaller sample set").
            curvature_every: Re-estimate a client's curvature when it is sampled this many rounds after its last
                estimate; 0: estimate once.
            curvature_cutoff: When every estimate of the first round adds less than this share to its client's
                conductance (H_i dt_G / beta_i, its largest coordinate with "diagonal"; logged as
                ``curvature_share``), no client estimates again and every G_i is 1/dt_G, as with
                ``curvature="none"``. 0: every new client estimates (the paper).
            coupling: "data_size": clients add (B/|D_i|) I_i to their gradient steps (the fixed point is the
                data-weighted optimum); "unit": they add I_i (the paper's Algorithm 2; equal client weights).
            beyond_window: Beyond T_i a client's state is extrapolated linearly ("extrapolate", the paper), held
                ("hold"), or continued at a speed that keeps decaying as the client's did over its window ("decay",
                ``lightfed.ecado.circuit.path_progress``: a saturated client is held, a steady one extrapolated).
            max_growth: Largest factor by which an accepted server step may grow the next one.
            error_norm: "rms": the root mean square of the errors over the coordinates; "max": the largest error of
                any coordinate, the paper's (see ``lightfed.ecado.circuit.WindowSolver``).
            min_step: Shortest server step, as a fraction of the round's window; a step that short is accepted
                whatever its error (counted in ``server_forced``), so a round takes at most 1 / min_step steps.
            state_device: Where the per-client currents and curvatures live: "accelerator" (the round's device) or
                "cpu" (pinned host memory, for state larger than the accelerator's memory).
            window_end: The server integrates to the clients' mean window weighted by data size (1 / beta_i; "mean")
                or to the longest window ("max", the paper).

        Raises:
            ConfigError: A setting out of its range (``sensitivity_step``, ``inductance``, ``initial_step``,
                ``curvature_cutoff``, the curvature counts, the step control's), or
                ``curvature_estimate="loss_differences"`` with ``curvature="diagonal"``.
        """
        if sensitivity_step != "window" and not (isinstance(sensitivity_step, (int, float)) and sensitivity_step > 0):
            raise ConfigError(f"strategy.sensitivity_step must be > 0 or 'window', got {sensitivity_step!r}")
        if not inductance > 0:
            raise ConfigError(f"strategy.inductance must be > 0, got {inductance}")
        if initial_step is not None and not initial_step > 0:
            raise ConfigError(f"strategy.initial_step must be > 0 or null, got {initial_step}")
        if not curvature_cutoff >= 0:
            raise ConfigError(f"strategy.curvature_cutoff must be >= 0, got {curvature_cutoff}")
        control = {"tolerance": tolerance, "max_growth": max_growth, "min_step": min_step, "norm": error_norm}
        self._configure_circuit(
            control,
            beyond_window,
            curvature,
            (curvature_batches, curvature_probes, curvature_examples, curvature_estimate),
            curvature_every,
            state_device,
            curvature_cutoff,
        )
        self.inductance = inductance
        self.window_end = window_end
        self.inductance_rule = inductance_rule
        self.sensitivity_step: float | str = sensitivity_step
        self.initial_step = initial_step
        self.coupling = coupling

    @property
    def requirements(self) -> Requirements:  # type: ignore[override]
        """``CouplingCurrent``'s, less what these options keep clients from sending (curvature, decay)."""
        dropped = {"curvature"} if self.curvature == "none" else set()
        if self.beyond_window != "decay":
            dropped.add("decay")
        return CouplingCurrent.requirements.without(*dropped)

    def _configure_circuit(
        self,
        control: dict[str, Any],
        beyond_window: BeyondWindow,
        curvature: str,
        estimate: tuple[int, int, int | None, CurvatureEstimate | None],
        every: int,
        state_device: StateDevice,
        cutoff: float = 0.0,
    ) -> None:
        """The settings the server circuit and the curvature estimates share with ``AdaptiveFedECADO`` (whose
        estimates never stop: ``cutoff`` 0)."""
        self.state_device = state_device
        self.curvature = curvature
        self.report_vectors = ("curvature",) if curvature == "diagonal" else ()
        batches, probes, examples, chosen = estimate
        self.curvature_estimate = chosen or ("loss_differences" if curvature == "trace" else "hutchinson")
        if batches < 1 or probes < 1 or every < 0 or (examples is not None and examples < 1):
            raise ConfigError(
                "strategy.curvature_batches, curvature_probes and curvature_examples must be >= 1, curvature_every >= 0"
            )
        if curvature == "diagonal" and self.curvature_estimate == "loss_differences":
            raise ConfigError(
                "strategy.curvature_estimate 'loss_differences' gives the Hessian's mean alone; use curvature: trace, "
                "or curvature_estimate: hutchinson for the diagonal"
            )
        try:
            self.control = StepControl(**control)
        except ConfigError as error:
            raise ConfigError(f"strategy.tolerance / max_growth / min_step / error_norm: {error}") from None
        self.beyond_window = beyond_window
        if beyond_window == "decay":
            self.report_scalars = (*type(self).report_scalars, "decay")
        self.curvature_batches = batches
        self.curvature_probes = probes
        self.curvature_examples = examples
        self.curvature_every = every
        self.curvature_cutoff = cutoff

    def setup(self, context: ServerContext) -> None:
        super().setup(context)
        params = context.params
        on_host = self.state_device == "cpu"
        device, pinned = ("cpu", params.is_cuda) if on_host else (params.device, False)
        self.client_states = ShardedClientStates(self.shard, params.numel(), device, pin_memory=pinned)
        # this process's slice of every client's current, summed
        self.total_current = torch.zeros_like(params[self.shard])
        self.step: float | None = None
        self.time = 0.0
        self.curvature_share: float | None = None  # the first round's largest, once measured
        self._metrics: dict[str, float] = {}
        self._workspace = Workspace()

    def _current(self, client_id: int) -> Tensor:
        current = self.client_states.get(client_id, "current")
        return (
            torch.zeros_like(self.total_current)
            if current is None
            else current.to(self.total_current.device, non_blocking=True)
        )

    @property
    def curvature_negligible(self) -> bool | None:
        """Whether the first round's curvature share fell below ``curvature_cutoff`` (None: not measured)."""
        return None if self.curvature_share is None else self.curvature_share < self.curvature_cutoff

    @property
    def _estimating(self) -> bool:
        """Whether the branches take a curvature (and new clients estimate one)."""
        return self.curvature != "none" and not self.curvature_negligible

    def _needs_curvature(self, client_id: int, round: int) -> bool:
        if not self._estimating:
            return False
        last = self.client_states.get(client_id, "curvature_round")
        return last is None or (self.curvature_every > 0 and round - int(last) >= self.curvature_every)

    def client_vectors(self, client_ids: list[int]) -> dict[str, Tensor]:
        sent = self._workspace.get("sent_currents", (len(client_ids), self.total_current.numel()), self.total_current)
        return {"current": torch.stack([self._current(i) for i in client_ids], out=sent)}

    def configure_client(self, plan: ClientPlan, received: Mapping[str, Tensor] = NOTHING) -> ClientPlan:
        batches = self.curvature_batches if self._needs_curvature(plan.client_id, plan.round) else 0
        return replace(plan, rule=self._rule(plan, received["current"], batches))

    def _rule(self, plan: ClientPlan, current: Tensor, curvature_batches: int) -> LocalRule:
        """The client's local rule, given its current I_i^k and whether (on how many batches) to estimate H_i."""
        return CouplingCurrent(
            plan.client_id,
            current,
            self.coupling,
            curvature_batches,
            self.curvature_probes,
            plan.seed,
            track_decay=self.beyond_window == "decay",
            curvature_examples=self.curvature_examples,
            curvature_estimate=self.curvature_estimate,
        )

    def client_report(self, update: ClientUpdate) -> dict[str, float | Tensor]:
        report = {name: update.report[name] for name in self.report_scalars if name in update.report}
        if "curvature" in update.report:  # non-convex: negative estimates are clamped
            report["curvature"] = diagonal = update.report["curvature"].clamp(min=0)
            report["curvature_mean"] = float(diagonal.mean())
        return report

    def _store_curvature(self, client_id: int, row: int, updates: ShardedRound) -> None:
        reports = updates.reports
        curvature = reports["curvature"][row] if self.curvature == "diagonal" else reports["curvature_mean"][row]
        self.client_states.set(client_id, "curvature", curvature)
        self.client_states.set(client_id, "curvature_round", torch.tensor(updates.round))

    def _branches(self, updates: ShardedRound) -> tuple[Tensor, Tensor, Tensor]:
        """The round's windows T_i = beta_i x summed lr, resistances 1/G_i and inductances L, one row per client."""
        beta = updates.reports["time_scale"]
        windows = beta * updates.local_time
        if not self._estimating:
            curvature = torch.zeros(len(updates.client_ids), 1, dtype=torch.float64, device=self.total_current.device)
        else:
            curvature = torch.stack([self._curvature(i) for i in updates.client_ids]).double()
        dt: Tensor | float
        if self.sensitivity_step == "window":
            dt = self._window_sensitivity(windows, self._window_end(windows, updates), updates).to(curvature)[:, None]
        else:
            dt = float(self.sensitivity_step)
        conductance = curvature / beta.to(curvature)[:, None]
        if self.curvature != "none" and self.curvature_cutoff > 0 and self.curvature_share is None:
            self._measure_curvature_share(max_abs(conductance * dt), updates)
        resistance = 1 / (1 / dt + conductance)
        if self.inductance_rule == "critical":
            return windows, resistance, critical_branch_inductance(resistance, self.inductance)
        return windows, resistance, torch.full_like(resistance, self.inductance)

    def _measure_curvature_share(self, share: Tensor, updates: ShardedRound) -> None:
        """The first round's largest share of a conductance that its curvature term makes, over every process's
        coordinates (so every process decides alike whether later clients estimate)."""
        self.curvature_share = float(updates.all_reduce(share.reshape(1), "max"))

    def _window_end(self, windows: Tensor, updates: ShardedRound) -> float:
        """Where this round's window ends (see ``window_end``); clients weighted by data size, 1 / beta_i."""
        return window_end(windows, updates.reports["time_scale"], self.window_end)

    def _window_sensitivity(self, windows: Tensor, end: float, updates: ShardedRound) -> Tensor:
        """dt_G per client for ``sensitivity_step="window"``: min(T_i, end) when held, the window end when
        extrapolated, T_i r_i(end) along a decaying path (how long the modelled state at the end has responded to the
        current), float64."""
        if self.beyond_window == "decay":
            windows = windows.double()
            return windows * path_progress(end / windows, "decay", updates.reports["decay"])
        ends = torch.full_like(windows, end, dtype=torch.float64)
        return torch.minimum(windows.double(), ends) if self.beyond_window == "hold" else ends

    def _data_weights(self, updates: ShardedRound) -> Tensor:
        """The round's clients' data sizes, up to a common factor (1 / beta_i), float64."""
        return updates.reports["time_scale"].double().reciprocal()

    def _curvature(self, client_id: int) -> Tensor:
        curvature = cast(Tensor, self.client_states.get(client_id, "curvature"))  # stored when first sampled
        return curvature.to(self.total_current.device, non_blocking=True).reshape(-1)

    def _first_step(self, windows: Tensor) -> float:
        return self.step or self.initial_step or float(windows.max()) / 10

    def aggregate_shard(self, params: Tensor, updates: ShardedRound) -> Tensor:
        began = time.perf_counter()
        for row, client_id in enumerate(updates.client_ids):
            if self._needs_curvature(client_id, updates.round):
                self._store_curvature(client_id, row, updates)
        windows, resistance, inductance = self._branches(updates)
        couplings = self._workspace.get("couplings", updates.deltas.shape, self.total_current)
        torch.stack([self._current(i) for i in updates.client_ids], out=couplings)
        branches = Branches(
            start=params,
            deltas=updates.deltas,
            windows=windows.to(params.device),
            couplings=couplings,
            resistance=resistance.to(params),
            inductance=inductance.to(params),
            beyond_window=self.beyond_window,
            end=self._window_end(windows, updates),
            decay=updates.reports.get("decay"),
        )
        frozen = sum_rows(couplings, out=self._workspace.get("frozen", params.shape, self.total_current))
        torch.sub(self.total_current, frozen, out=frozen)  # the inactive clients' currents
        coordinates = CoordinateSums(self.num_params, self.shard, updates.all_reduce)
        result = integrate_window(
            params, frozen, branches, self._first_step(windows), self.control, coordinates, self._workspace
        )
        for row, client_id in enumerate(updates.client_ids):
            self.client_states.overwrite(client_id, "current", result.currents[row])
        sum_rows(result.currents, out=self.total_current).add_(frozen)
        self.step = result.next_step
        self.time += branches.window_end
        diagnostics = self._workspace.get("diagnostics", (4, *params.shape), params)  # see window_metrics
        move, mean = torch.sub(result.x_c, params, out=diagnostics[0]), diagnostics[2]
        diagnostics[1].copy_(self.total_current)
        data_weighted_mean(updates.deltas, self._data_weights(updates), out=mean)
        torch.mul(move, mean, out=diagnostics[3])
        self._metrics = window_metrics(result, diagnostics, windows, coordinates)
        self._metrics["server_seconds"] = time.perf_counter() - began
        return result.x_c

    def metrics(self) -> dict[str, float]:
        share = {} if self.curvature_share is None else {"curvature_share": self.curvature_share}
        return {**self._metrics, "time": self.time, **share}

    def state_dict(self) -> dict[str, Any]:
        return {"step": self.step, "time": self.time, "curvature_share": self.curvature_share}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step, self.time = state["step"], state["time"]
        self.curvature_share = state.get("curvature_share")  # None from before the cutoff: measured next round

    def sharded_state(self) -> dict[str, Tensor]:
        return {"total_current": self.total_current}
