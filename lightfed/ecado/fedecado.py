"""FedECADO (Agarwal, Joshi, Pileggi, ICML 2025): federated learning as simulating an equivalent circuit.

Each client is a branch (inductor L, Thevenin resistance 1/G_i) between the server node x_c and the client's own
node; a round's clients simulate their nodes with their coupling currents frozen (``CouplingCurrent``), and the
server integrates x_c and the active branch currents with Backward Euler over [t, t + max T_i], clients' states
synchronised by linear interpolation/extrapolation (``lightfed.ecado.circuit``). Equations and the corrections to the paper's
printed ones: ``lightfed/ecado/circuit.py`` and the FedECADO spec.
"""

import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

import torch
from torch import Tensor

from lightfed.ecado.circuit import BeyondWindow, Branches, StepControl, WindowResult, integrate_window
from lightfed.errors import ConfigError
from lightfed.local.base import LocalRule
from lightfed.ecado.coupling import CouplingCurrent, CouplingScale
from lightfed.strategies.base import Strategy
from lightfed.core.sums import Sums
from lightfed.core.messages import ClientPlan, ClientUpdate

CURVATURES = ("trace", "diagonal")


@dataclass
class _Arrival:
    """One active client's result, kept until the round's circuit is solved."""

    client_id: int
    delta: Tensor
    window: float
    coupling: Tensor
    resistance: Tensor
    inductance: Tensor


def window_metrics(result: WindowResult, start: Tensor, total_current: Tensor, windows: Tensor) -> dict[str, float]:
    """Server steps taken, rejected and forced, max LTE of the accepted steps, step sizes, movement of x_c."""
    steps = [h for h, _ in result.accepted]
    return {
        "server_steps": float(len(steps)),
        "server_rejected": float(result.rejected),
        "server_forced": float(result.forced),
        "max_lte": max(error for _, error in result.accepted),
        "step_min": min(steps),
        "step_mean": sum(steps) / len(steps),
        "step_max": max(steps),
        "xc_move_norm": float((result.x_c - start).norm()),
        "current_sum_norm": float(total_current.norm()),
        "window_max": float(windows.max()),
        "window_min": float(windows.min()),
    }


class FedECADO(Strategy):
    """Backward-Euler aggregation with aggregate sensitivity G_i = 1/dt_G + H_i / beta_i and multi-rate integration.

    Per round: each active client trains from x_c with its frozen current I_i^k (the first time it is sampled, or
    every ``curvature_every`` rounds, it also estimates its Hessian H_i at the global model; the paper does so for
    all clients at x(0), but a client computes only when sampled) and reports its window T_i = beta_i x its summed
    learning rates. The server then integrates the circuit over [t, t + max T_i] with LTE <= ``tolerance`` and
    keeps the active currents; the inactive clients' currents stay frozen in the central node's equation.

    Memory: per client that has trained, its current I_i (d floats) and curvature (1 float, or d with
    ``curvature="diagonal"``) in ``client_states`` on the CPU; per round the active clients' deltas, currents and
    a few work arrays (about 6 x active clients x d floats) on the accelerator. Clients also receive their I_i^k, a
    second model-sized download.
    """

    keeps_client_state = True
    single_process = True  # the round's circuit couples every active client's state

    def __init__(
        self,
        inductance: float = 1.0,
        tolerance: float = 1e-2,
        sensitivity_step: float = 1e-2,
        initial_step: float | None = None,
        curvature: Literal["trace", "diagonal"] = "trace",
        curvature_batches: int = 4,
        curvature_probes: int = 8,
        curvature_every: int = 0,
        coupling: CouplingScale = "data_size",
        beyond_window: BeyondWindow = "extrapolate",
        max_growth: float = 2.0,
    ) -> None:
        """
        Args:
            inductance: L of every branch; it sets how fast x_c follows the clients (scale it with the square of
                the typical window T_i times the number of active clients).
            tolerance: Bound on the max-abs local truncation error of every accepted server step (delta).
            sensitivity_step: dt_G in G_i = 1/dt_G + H_i / beta_i, one constant for all clients (e.g. the client lr).
            initial_step: First server step; None: a tenth of the first round's window. Later rounds start from the
                step the previous round's control proposed.
            curvature: H_i as the Hutchinson trace / d (a scalar per client) or the Hutchinson diagonal.
            curvature_batches: Local batches the estimate averages over.
            curvature_probes: Rademacher probes per batch.
            curvature_every: Re-estimate a client's curvature when it is sampled this many rounds after its last
                estimate; 0: estimate once.
            coupling: "data_size": clients add (B/|D_i|) I_i to their gradient steps (the fixed point is the
                data-weighted optimum); "unit": they add I_i (the paper's Algorithm 2; equal client weights).
            beyond_window: Beyond T_i a client's state is extrapolated linearly ("extrapolate", the paper) or held.
            max_growth: Largest factor by which an accepted server step may grow the next one.
        """
        for name, value in [("inductance", inductance), ("sensitivity_step", sensitivity_step)]:
            if not value > 0:
                raise ConfigError(f"strategy.{name} must be > 0, got {value}")
        if initial_step is not None and not initial_step > 0:
            raise ConfigError(f"strategy.initial_step must be > 0 or null, got {initial_step}")
        if curvature not in CURVATURES:
            raise ConfigError(f"strategy.curvature must be one of {', '.join(CURVATURES)}, got {curvature!r}")
        if coupling not in ("data_size", "unit"):
            raise ConfigError(f"strategy.coupling must be 'data_size' or 'unit', got {coupling!r}")
        self._configure_circuit(tolerance, max_growth, beyond_window, curvature_batches, curvature_probes, curvature_every)
        self.inductance = inductance
        self.sensitivity_step = sensitivity_step
        self.initial_step = initial_step
        self.curvature = curvature
        self.coupling = coupling

    def _configure_circuit(
        self, tolerance: float, max_growth: float, beyond_window: str, batches: int, probes: int, every: int
    ) -> None:
        """The settings the server circuit and the curvature estimates share with ``AdaptiveFedECADO``."""
        if beyond_window not in ("extrapolate", "hold"):
            raise ConfigError(f"strategy.beyond_window must be 'extrapolate' or 'hold', got {beyond_window!r}")
        if batches < 1 or probes < 1 or every < 0:
            raise ConfigError("strategy.curvature_batches and curvature_probes must be >= 1, curvature_every >= 0")
        try:
            self.control = StepControl(tolerance, max_growth=max_growth)
        except ConfigError as error:
            raise ConfigError(f"strategy.tolerance / max_growth: {error}") from None
        self.beyond_window = beyond_window
        self.curvature_batches = batches
        self.curvature_probes = probes
        self.curvature_every = every

    def setup(self, params: Tensor, num_clients: int) -> None:
        super().setup(params, num_clients)
        self.total_current = torch.zeros_like(params)  # sum of every client's current
        self.step: float | None = None
        self.time = 0.0
        self._arrivals: list[_Arrival] = []
        self._estimate_round: dict[int, int] = {}
        self._metrics: dict[str, float] = {}

    def _current(self, client_id: int) -> Tensor:
        current = self.client_states.get(client_id, "current")
        return torch.zeros_like(self.total_current) if current is None else current.to(self.total_current.device)

    def _needs_curvature(self, plan: ClientPlan) -> bool:
        last = self.client_states.get(plan.client_id, "curvature_round")
        return last is None or (self.curvature_every > 0 and plan.round - int(last) >= self.curvature_every)

    def configure_client(self, plan: ClientPlan) -> ClientPlan:
        estimate = self._needs_curvature(plan)
        if estimate:
            self._estimate_round[plan.client_id] = plan.round
        return replace(plan, rule=self._rule(plan, self._current(plan.client_id), self.curvature_batches if estimate else 0))

    def _rule(self, plan: ClientPlan, current: Tensor, curvature_batches: int) -> LocalRule:
        """The client's local rule, given its current I_i^k and whether (on how many batches) to estimate H_i."""
        return CouplingCurrent(plan.client_id, current, self.coupling, curvature_batches, self.curvature_probes, plan.seed)

    def _store_curvature(self, client_id: int, diagonal: Tensor) -> None:
        self.client_states.set(client_id, "curvature", diagonal if self.curvature == "diagonal" else diagonal.mean())

    def _branch(self, update: ClientUpdate, curvature: Tensor) -> tuple[float, Tensor, Tensor]:
        """The client's window T_i = beta_i x summed lr, resistance 1/G_i and inductance L."""
        beta = update.report["time_scale"]
        resistance = 1 / (1 / self.sensitivity_step + curvature / beta)
        return beta * update.local_time, resistance, torch.full_like(resistance, self.inductance)

    def _first_step(self, windows: Tensor) -> float:
        return self.step or self.initial_step or float(windows.max()) / 10

    def sum_sizes(self) -> dict[str, int]:
        return {}

    def accumulate(self, sums: Sums, update: ClientUpdate) -> None:
        client_id, report = update.client_id, update.report
        if "curvature" in report:
            self._store_curvature(client_id, report["curvature"].clamp(min=0))  # non-convex: negative estimates
            self.client_states.set(client_id, "curvature_round", torch.tensor(self._estimate_round.pop(client_id)))
        curvature = self.client_states.get(client_id, "curvature").to(self.total_current.device)
        window, resistance, inductance = self._branch(update, curvature)
        self._arrivals.append(
            _Arrival(client_id, update.delta.clone(), window, self._current(client_id), resistance, inductance)
        )

    def aggregate(self, params: Tensor, sums: Mapping[str, Tensor], round: int) -> Tensor:
        began = time.perf_counter()
        arrivals, self._arrivals = self._arrivals, []
        windows = torch.tensor([a.window for a in arrivals], dtype=torch.float64, device=params.device)
        couplings = torch.stack([a.coupling for a in arrivals])
        branches = Branches(
            start=params,
            deltas=torch.stack([a.delta for a in arrivals]),
            windows=windows,
            couplings=couplings,
            resistance=torch.stack([a.resistance.reshape(-1) for a in arrivals]).to(params.dtype),
            inductance=torch.stack([a.inductance.reshape(-1) for a in arrivals]).to(params.dtype),
            beyond_window=self.beyond_window,
        )
        frozen = self.total_current - couplings.sum(0)
        result = integrate_window(params, frozen, branches, self._first_step(windows), self.control)
        for index, arrival in enumerate(arrivals):
            self.client_states.set(arrival.client_id, "current", result.currents[index])
        self.total_current = frozen + result.currents.sum(0)
        self.step = result.next_step
        self.time += float(windows.max())
        self._metrics = window_metrics(result, params, self.total_current, windows)
        self._metrics["server_seconds"] = time.perf_counter() - began
        return result.x_c

    def metrics(self) -> dict[str, float]:
        return {**self._metrics, "time": self.time}

    def state_dict(self) -> dict[str, Any]:
        return {"total_current": self.total_current, "step": self.step, "time": self.time}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.total_current.copy_(state["total_current"])
        self.step, self.time = state["step"], state["time"]
