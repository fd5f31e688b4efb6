"""Adaptive FedECADO (Agarwal, Pileggi, Joshi 2025): the FedECADO circuit with critically damped branches and every
step size, on clients and server, chosen by one local-truncation-error tolerance gamma."""

from typing import Any, Literal

import torch
from torch import Tensor

from lightfed.core.local_rule import LocalRule
from lightfed.core.messages import ClientPlan, ClientUpdate
from lightfed.core.requirements import Requirements
from lightfed.core.sharding import CoordinateSums, sum_rows
from lightfed.ecado.adaptive_euler import AdaptiveEuler, ErrorScale, StepLimit
from lightfed.ecado.circuit import BeyondWindow, ErrorNorm
from lightfed.ecado.curvature import CurvatureEstimate
from lightfed.ecado.fedecado import FedECADO, StateDevice, WindowEnd, window_end
from lightfed.errors import ConfigError
from lightfed.strategies.base import ServerContext
from lightfed.strategies.sharded_base import ShardedRound

SensitivityStep = Literal["window", "first_step"]
ClientLTE = Literal["trial_step", "retrospective"]
Damping = Literal["collective", "shared", "branch", "constant"]
ClientStepControl = Literal["every_round", "first_round"]


def critical_inductance(conductance: Tensor, branches: int = 1, out: Tensor | None = None) -> Tensor:
    """L = 1 / (4 n G^2) for n = ``branches``, elementwise (into ``out`` when given): critically damps n alike
    branches (R = 1/G) sharing the unit central capacitor, in the mode where all their currents charge it (n = 1: the
    paper's eq. 24)."""
    return torch.mul(conductance, conductance, out=out).mul_(4 * branches).reciprocal_()


class AdaptiveFedECADO(FedECADO):
    """Clients integrate dx/dt = I_i^k - p_i grad f_i with LTE-controlled Forward Euler (``AdaptiveEuler``, which
    replaces the model's optimizer); the server integrates the FedECADO circuit with Backward Euler under the same
    tolerance, the active branches critically damped by L_i = 1 / (4 n G_i^2), G_i = 1/dt_G + p_i diag(H_i), dt_G the
    client's window T_i. With the defaults the clients' error control runs in the run's first round and sets the
    learning rate of every later client step (``step_control="first_round"``), and G_i = 1/dt_G (``curvature="none"``);
    the paper's settings are ``step_control="every_round"`` and ``curvature="diagonal"``.

    Memory per process, per client that has trained: d / N floats of I_i, and d / N of diag(H_i) with
    ``curvature="diagonal"`` (N processes; where they live: ``FedECADO``). Departures from the paper and the
    measurements behind the defaults: docs/corrections/adaptive-fedecado.md.

    In a config:

    ```yaml
    strategy:
      class_path: lightfed.strategies.AdaptiveFedECADO
      init_args: {tolerance: 0.01, step_control: first_round}
    ```

    Examples:
        Its clients choose their own steps, in place of the model's optimizer:

        >>> from lightfed.strategies import AdaptiveFedECADO
        >>> strategy = AdaptiveFedECADO(tolerance=0.01)
        >>> strategy.requirements.chooses_client_steps, strategy.learned_lr
        (True, None)
        >>> AdaptiveFedECADO(curvature="trace")
        Traceback (most recent call last):
        ...
        lightfed.errors.ConfigError: strategy.curvature must be 'diagonal' or 'none', got 'trace'
    """

    learned_lr: float | None = None  # with step_control="first_round", from the first round on

    report_scalars = (
        "window",
        "weight",
        "first_step",
        "step_min",
        "step_max",
        "step_count",
        "rejected",
        "forced",
        "max_lte",
    )

    @property
    def requirements(self) -> Requirements:  # type: ignore[override]
        """``AdaptiveEuler``'s, less the curvature with ``curvature="none"``."""
        return AdaptiveEuler.requirements.without(*(() if self.curvature == "diagonal" else ("curvature",)))

    def __init__(
        self,
        tolerance: float = 1e-2,
        sensitivity_step: SensitivityStep = "window",
        beyond_window: BeyondWindow = "decay",
        curvature_batches: int = 1,
        curvature_probes: int = 10,
        fallback_step: float = 1.0,
        cap_client_steps: bool = True,
        client_lte: ClientLTE = "trial_step",
        damping: Damping = "collective",
        error_norm: ErrorNorm = "rms",
        min_step: float = 1e-2,
        state_device: StateDevice = "accelerator",
        first_step: Literal["passivity", "probe"] = "probe",
        window_end: WindowEnd = "max",
        error_scale: ErrorScale = "absolute",
        step_limit: StepLimit = "monotone",
        client_norm: ErrorNorm = "rms",
        inductance: float = 1.0,
        fixed_lr: float | None = None,
        curvature_examples: int | None = None,
        curvature_estimate: CurvatureEstimate = "hutchinson",
        curvature: Literal["diagonal", "none"] = "none",
        curvature_every: int = 0,
        step_control: ClientStepControl = "first_round",
    ) -> None:
        """
        Args:
            tolerance: gamma, the bound on every accepted client and server step's local truncation error (in
                ``client_norm`` and ``error_norm``).
            sensitivity_step: dt_G in G_i: the client's window T_i ("window") or its first step ("first_step").
            beyond_window: Beyond T_i a client's state is held ("hold"), extrapolated ("extrapolate", the paper) or
                continued along its own deceleration ("decay", see ``FedECADO``).
            curvature_estimate: "hutchinson" (Hessian-vector products before the client's first training) or
                "squared_gradients" (the diagonal empirical Fisher from the first round's own step gradients, no extra
                pass; see ``FedECADO``).
            curvature_batches: Local batches of the Hessian-diagonal estimate.
            curvature_probes: Rademacher probes per batch.
            curvature_examples: None: the estimate runs on whole local batches; a number: on random subsets of that
                many of the client's examples (see ``FedECADO``).
            curvature: "none" (default): G_i = 1/dt_G, no estimate; "diagonal": G_i = 1/dt_G + p_i diag(H_i) with
                the client's Hutchinson diagonal (the paper).
            curvature_every: Re-estimate a client's diagonal when it is sampled this many rounds after its last
                estimate; 0: once, the first time it is sampled (the paper).
            fallback_step: With ``first_step="passivity"``: a client's first step where the passivity bound is not
                positive (backtracking shrinks it).
            cap_client_steps: No client step exceeds its round's first trial step; False: steps may double while the
                LTE test passes.
            client_lte: How a client estimates a step's error: "trial_step" (the gradient again at the trial point,
                the paper's loop) or "retrospective" (from the velocity change over the previous step; see
                ``AdaptiveEuler``).
            damping: "collective": L_i = 1 / (4 n G_i^2), n the round's active clients (``critical_inductance``);
                "branch": L_i = 1 / (4 G_i^2), the paper's eq. 24; "shared": L_i = R_i R_eq / 4 (R_eq = 1 /
                sum_j G_j), FedECADO's rule; "constant": every L_i = ``inductance``.
            error_norm: The server's error norm, "rms" or "max" (the paper; see ``FedECADO``); the clients' is
                ``client_norm``.
            min_step: Shortest server step as a fraction of the round's window (see ``FedECADO``).
            state_device: Where the per-client currents and curvatures live: "accelerator" or "cpu" (pinned).
            first_step: A client's first trial step each round: "probe" (default: the step a probe step predicts,
                see ``AdaptiveEuler``) or "passivity" (eq. 16 on the raw weights, else ``fallback_step``; the paper).
            window_end: The server integrates to the longest window ("max", the paper) or to the data-weighted mean
                window ("mean"; see ``FedECADO``).
            error_scale: What a client's tolerance is measured against (see ``AdaptiveEuler``): "absolute" (the paper,
                LTE <= gamma in weight units), "state" (LTE <= gamma rms(x)) or "step" (LTE <= gamma max|dt v|). The
                server's error stays absolute.
            step_limit: What bounds a client step besides the tolerance: "monotone" (default; no overshoot along its
                own direction, LTE <= |dt v| / 2), "descent" (not past the minimum of the client's energy along its
                direction, p dt v'Hv <= |v|^2), "stability" (p dt |Hv| <= 1.5 |v|) or "none" (the paper).
            client_norm: The norm of a client's errors and velocities: "rms" (default, the root mean square over the
                coordinates) or "max" (the paper's, eq. 15).
            inductance: L_i of every branch with ``damping="constant"``.
            fixed_lr: None (default): LTE-controlled client steps; a number: every client step is plain SGD at this
                learning rate, dt = fixed_lr / p_i, no error control (FedECADO's clients).
            step_control: "first_round" (default): the clients' error control runs in the run's first round only,
                then every client step is plain SGD (as with ``fixed_lr``) at that round's mean learning rate p_i dt_i
                (logged as ``strategy/client_lr_mean``, then ``strategy/learned_lr``); "every_round": every client
                step error-controlled (the paper).

        Raises:
            ConfigError: A setting out of its range (``fallback_step``, ``inductance``, ``fixed_lr``, the curvature
                counts, the step control's) or an unknown ``curvature`` or ``step_control``.
        """
        if not fallback_step > 0:
            raise ConfigError(f"strategy.fallback_step must be > 0, got {fallback_step}")
        if curvature not in ("diagonal", "none"):
            raise ConfigError(f"strategy.curvature must be 'diagonal' or 'none', got {curvature!r}")
        if step_control not in ("every_round", "first_round"):
            raise ConfigError(f"strategy.step_control must be 'every_round' or 'first_round', got {step_control!r}")
        if not inductance > 0 or (fixed_lr is not None and not fixed_lr > 0):
            raise ConfigError(f"strategy.inductance and fixed_lr must be > 0, got {inductance} and {fixed_lr}")
        control = {"tolerance": tolerance, "max_growth": 2.0, "min_step": min_step, "norm": error_norm}
        estimate = (curvature_batches, curvature_probes, curvature_examples, curvature_estimate)
        self._configure_circuit(control, beyond_window, curvature, estimate, curvature_every, state_device)
        self.tolerance = tolerance
        self.sensitivity_step = sensitivity_step
        self.fallback_step = fallback_step
        self.cap_client_steps = cap_client_steps
        self.client_lte = client_lte
        self.damping = damping
        self.first_step = first_step
        self.window_end = window_end
        self.error_scale = error_scale
        self.step_limit = step_limit
        self.client_norm = client_norm
        self.inductance = inductance
        self.fixed_lr = fixed_lr
        self.step_control = step_control

    def setup(self, context: ServerContext) -> None:
        super().setup(context)
        self.learned_lr = None

    def _rule(self, plan: ClientPlan, current: Tensor, curvature_batches: int) -> LocalRule:
        return AdaptiveEuler(
            plan.client_id,
            current,
            self.tolerance,
            self.fallback_step,
            cap_at_first_step=self.cap_client_steps,
            lte=self.client_lte,
            curvature_batches=curvature_batches,
            curvature_probes=self.curvature_probes,
            seed=plan.seed,
            first_step=self.first_step,
            error_scale=self.error_scale,
            step_limit=self.step_limit,
            error_norm=self.client_norm,
            track_decay=self.beyond_window == "decay",
            fixed_lr=self.fixed_lr if self.fixed_lr is not None else self.learned_lr,
            curvature_examples=self.curvature_examples,
            curvature_estimate=self.curvature_estimate,
        )

    def client_report(self, update: ClientUpdate) -> dict[str, float | Tensor]:
        report, steps = update.report, update.report["steps"]
        summary = {
            name: report[name]
            for name in ("window", "weight", "rejected", "forced", "max_lte", "decay")
            if name in report
        }
        summary.update(first_step=steps[0], step_min=min(steps), step_max=max(steps), step_count=len(steps))
        if "curvature" in report:
            summary["curvature"] = report["curvature"].clamp(min=0)
        return summary

    def _branches(self, updates: ShardedRound) -> tuple[Tensor, Tensor, Tensor]:
        reports = updates.reports
        windows = dt = reports["window"]  # "max" end, held or extrapolated: T_i as before
        if self.sensitivity_step == "first_step":
            dt = reports["first_step"]
        elif self.window_end == "mean" or self.beyond_window == "decay":
            dt = self._window_sensitivity(windows, self._window_end(windows, updates), updates)
        # (a, d) in the model's dtype, kept between rounds; (a, 1) without a curvature, every coordinate of a branch alike
        shape = (len(updates.client_ids), 1) if self.curvature == "none" else updates.deltas.shape
        workspace = self._workspace
        curvature = workspace.get("conductance", shape, self.total_current)
        if self.curvature == "none":
            curvature.zero_()
        else:
            torch.stack([self._curvature(i) for i in updates.client_ids], out=curvature)
        conductance = curvature.mul_(reports["weight"].to(curvature)[:, None]).add_(1 / dt.to(curvature)[:, None])
        inductance = workspace.get("inductance", shape, conductance)
        if self.damping == "constant":
            inductance.fill_(self.inductance)
        elif self.damping == "shared":  # L_i = R_i R_eq / 4 = 1 / (4 G_i sum_j G_j)
            torch.mul(conductance, sum_rows(conductance), out=inductance).mul_(4).reciprocal_()
        else:
            branches = len(updates.client_ids) if self.damping == "collective" else 1
            critical_inductance(conductance, branches, out=inductance)
        self._inductance = inductance
        return reports["window"], conductance.reciprocal_(), inductance

    def _first_step(self, windows: Tensor) -> float:
        return self.step or float(windows.max())

    def _window_end(self, windows: Tensor, updates: ShardedRound) -> float:
        return window_end(windows, updates.reports["weight"].reciprocal(), self.window_end)

    def _data_weights(self, updates: ShardedRound) -> Tensor:
        return updates.reports["weight"].double()

    def aggregate_shard(self, params: Tensor, updates: ShardedRound) -> Tensor:
        x_c = super().aggregate_shard(params, updates)
        reports, inductance = updates.reports, self._inductance
        extremes = updates.all_reduce(torch.stack([-inductance.min(), inductance.max()]), "max")
        if self.curvature == "none":  # one column, the same on every process
            mean = float(inductance.double().mean())
        else:
            total = CoordinateSums(self.num_params, self.shard, updates.all_reduce).sums(inductance)
            mean = float(total) / (len(inductance) * self.num_params)
        self._metrics.update(
            {
                "client_step_min": float(reports["step_min"].min()),
                "client_step_mean": float(reports["window"].sum() / reports["step_count"].sum()),
                "client_lr_mean": float((reports["weight"] * reports["window"]).sum() / reports["step_count"].sum()),
                "client_step_max": float(reports["step_max"].max()),
                "client_steps": float(reports["step_count"].sum()),
                "client_rejected": float(reports["rejected"].sum()),
                "client_forced": float(reports["forced"].sum()),
                "client_max_lte": float(reports["max_lte"].max()),
                "inductance_min": -float(extremes[0]),
                "inductance_mean": mean,
                "inductance_max": float(extremes[1]),
            }
        )
        if self.step_control == "first_round" and self.learned_lr is None:
            self.learned_lr = self._metrics["client_lr_mean"]
        return x_c

    def metrics(self) -> dict[str, float]:
        learned = {} if self.learned_lr is None else {"learned_lr": self.learned_lr}
        return {**super().metrics(), **learned}

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "learned_lr": self.learned_lr}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.learned_lr = state.get("learned_lr")
