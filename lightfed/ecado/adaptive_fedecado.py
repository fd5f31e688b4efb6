"""Adaptive FedECADO (Agarwal, Pileggi, Joshi 2025): the FedECADO circuit with critically damped branches and every
step size, on clients and server, chosen by one local-truncation-error tolerance gamma."""

from typing import Literal

import torch
from torch import Tensor

from lightfed.ecado.circuit import BeyondWindow
from lightfed.errors import ConfigError
from lightfed.ecado.adaptive_euler import AdaptiveEuler
from lightfed.local.base import LocalRule
from lightfed.ecado.fedecado import FedECADO
from lightfed.core.sums import Sums
from lightfed.core.messages import ClientPlan, ClientUpdate

SensitivityStep = Literal["window", "first_step"]
Damping = Literal["collective", "branch"]


def critical_inductance(conductance: Tensor, branches: int = 1) -> Tensor:
    """L = 1 / (4 n G^2): n alike branches (R = 1/G) that share the unit central capacitor are critically damped in the
    mode where all their currents charge it, L s^2 + R s + n = 0 with R^2 = 4 n L (their other modes, currents
    circulating between branches, only decay). n = 1 is the paper's eq. 24, zeta = (R/2) sqrt(C/L) = 1 for one branch;
    with n branches eq. 24 leaves zeta = 1/sqrt(n). Elementwise for a diagonal G."""
    return 1 / (4 * branches * conductance**2)


class AdaptiveFedECADO(FedECADO):
    """Clients integrate dx/dt = I_i^k - p_i grad f_i with LTE-controlled Forward Euler (``AdaptiveEuler``, which
    replaces the model's optimizer); the server integrates the FedECADO circuit with Backward Euler under the same
    tolerance, the active branches critically damped by L_i = 1 / (4 n G_i^2), G_i = 1/dt_G + p_i diag(H_i).

    Corrections to the paper as printed (its spec, sections 3.1, 13, 14): canonical signs (the client adds +I_i);
    eq. 24's L_i critically damps one branch on the central capacitor, but a round's n active branches share it and
    were left damped by 1/sqrt(n), so L_i = 1 / (4 n G_i^2) (``damping="collective"``; eq. 24 is "branch");
    backtracking rejects only while LTE > gamma and the server step can grow again (at most 2x per step); a client's
    steps grow back after backtracking but never above its round's first trial, the passivity bound (eq. 16 is an
    upper bound; the spec's toy found it erratic when re-evaluated every step, and a client whose loss saturates
    otherwise doubles its steps without end, since any step then passes the LTE test); dt_G is the
    client's window T_i ("the client step-size" is undefined for adaptive steps; the literal reading, the client's
    first step, is ``sensitivity_step="first_step"``), so G_i and L_i are recomputed each round from the frozen
    Hessian diagonal; a client's state is held at its final value beyond T_i (``beyond_window="hold"``; the
    paper extrapolates, which diverged on the spec's quadratics); clients restart from x_c each round and
    inactive currents stay frozen in the central node's equation. H_i is a Hutchinson diagonal at the global model
    from one local batch, estimated the first time a client is sampled.

    Memory per client that has trained: I_i and diag(H_i), 2 d floats in ``client_states`` on the CPU.
    """

    def __init__(
        self,
        tolerance: float = 1e-2,
        sensitivity_step: SensitivityStep = "window",
        beyond_window: BeyondWindow = "hold",
        curvature_batches: int = 1,
        curvature_probes: int = 10,
        fallback_step: float = 1.0,
        cap_client_steps: bool = True,
        damping: Damping = "collective",
    ) -> None:
        """
        Args:
            tolerance: gamma, the bound on every accepted client and server step's max-abs local truncation error.
            sensitivity_step: dt_G in G_i: the client's window T_i ("window") or its first step ("first_step").
            beyond_window: Beyond T_i a client's state is held ("hold") or extrapolated ("extrapolate", the paper).
            curvature_batches: Local batches of the Hessian-diagonal estimate.
            curvature_probes: Rademacher probes per batch.
            fallback_step: A client's first step where the passivity bound is not positive (backtracking shrinks it).
            cap_client_steps: No client step exceeds its round's first trial step (the passivity bound or
                ``fallback_step``); False: steps may double while the LTE test passes (diverges where a loss saturates).
            damping: "collective": L_i = 1 / (4 n G_i^2) with n the round's active clients, so that the n branches
                together with the central capacitor are critically damped; "branch": L_i = 1 / (4 G_i^2), the paper's
                eq. 24, which damps each branch alone (zeta = 1/sqrt(n) for n alike active branches).
        """
        if sensitivity_step not in ("window", "first_step"):
            raise ConfigError(f"strategy.sensitivity_step must be 'window' or 'first_step', got {sensitivity_step!r}")
        if not fallback_step > 0:
            raise ConfigError(f"strategy.fallback_step must be > 0, got {fallback_step}")
        if damping not in ("collective", "branch"):
            raise ConfigError(f"strategy.damping must be 'collective' or 'branch', got {damping!r}")
        self._configure_circuit(tolerance, 2.0, beyond_window, curvature_batches, curvature_probes, 0)
        self.tolerance = tolerance
        self.sensitivity_step = sensitivity_step
        self.fallback_step = fallback_step
        self.cap_client_steps = cap_client_steps
        self.damping = damping

    def setup(self, params: Tensor, num_clients: int) -> None:
        super().setup(params, num_clients)
        self._reports: list[dict] = []

    def _rule(self, plan: ClientPlan, current: Tensor, curvature_batches: int) -> LocalRule:
        return AdaptiveEuler(plan.client_id, current, self.tolerance, self.fallback_step,
                             cap_at_first_step=self.cap_client_steps, curvature_batches=curvature_batches,
                             curvature_probes=self.curvature_probes, seed=plan.seed)

    def _store_curvature(self, client_id: int, diagonal: Tensor) -> None:
        self.client_states.set(client_id, "curvature", diagonal)

    def _branch(self, update: ClientUpdate, curvature: Tensor) -> tuple[float, Tensor, Tensor]:
        report = update.report
        dt = report["window"] if self.sensitivity_step == "window" else report["steps"][0]
        conductance = 1 / dt + report["weight"] * curvature
        return report["window"], 1 / conductance, critical_inductance(conductance)

    def _first_step(self, windows: Tensor) -> float:
        return self.step or float(windows.max())

    def accumulate(self, sums: Sums, update: ClientUpdate) -> None:
        super().accumulate(sums, update)
        self._reports.append(update.report)

    def aggregate(self, params: Tensor, sums, round: int) -> Tensor:
        if self.damping == "collective":
            for arrival in self._arrivals:
                arrival.inductance = arrival.inductance / len(self._arrivals)
        inductances = torch.cat([arrival.inductance.reshape(-1) for arrival in self._arrivals])
        x_c = super().aggregate(params, sums, round)
        reports, self._reports = self._reports, []
        steps = [dt for r in reports for dt in r["steps"]]
        self._metrics.update({
            "client_step_min": min(steps),
            "client_step_mean": sum(steps) / len(steps),
            "client_step_max": max(steps),
            "client_steps": float(len(steps)),
            "client_rejected": float(sum(r["rejected"] for r in reports)),
            "client_forced": float(sum(r["forced"] for r in reports)),
            "client_max_lte": max(r["max_lte"] for r in reports),
            "inductance_min": float(inductances.min()),
            "inductance_mean": float(inductances.mean()),
            "inductance_max": float(inductances.max()),
        })
        return x_c
