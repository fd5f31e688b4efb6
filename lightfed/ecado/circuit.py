"""The server half of the ECADO equivalent circuit: Backward-Euler steps over one round's window, LTE-controlled.

Canonical signs (FedECADO ICML appendix A; the main text's signs give an unstable circuit), I_i = current from the
server to client i, R_i = 1/G_i (the client's aggregate sensitivity, a Thevenin resistance)::

    dx_c/dt = -sum_i I_i
    L_i dI_i/dt = x_c - R_i (I_i - I_i^k) - Gamma_i(t)

Only the active clients' currents are integrated; the inactive clients' currents stay frozen inside the sum of the
first equation (dropping them does not converge). Gamma_i is the line through the client's start (x_c at the start of
the window) and its final state at its own window end T_i, extrapolated (or held) beyond T_i. R_i and L_i are
per-client scalars or per-coordinate vectors; every operation is elementwise, O(active clients x d) per step.
"""

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import Tensor

from lightfed.errors import ConfigError, DivergenceError

BeyondWindow = Literal["extrapolate", "hold"]


@dataclass
class Branches:
    """The active clients' branches, stacked one row per client."""

    start: Tensor  # (d,) x_c at the start of the window, where every active client started
    deltas: Tensor  # (a, d) final client state minus start
    windows: Tensor  # (a,) each client's simulated time T_i > 0
    couplings: Tensor  # (a, d) I_i^k: the currents the clients trained with
    resistance: Tensor  # (a, 1) or (a, d): R_i = 1 / G_i
    inductance: Tensor  # (a, 1) or (a, d): L_i
    beyond_window: BeyondWindow = "extrapolate"

    def synchronised(self, s: float) -> Tensor:
        """Gamma_i at time s after the start of the window, (a, d)."""
        ratio = s / self.windows
        if self.beyond_window == "hold":
            ratio = ratio.clamp(max=1.0)
        return torch.addcmul(self.start, self.deltas, ratio.to(self.deltas.dtype)[:, None])

    def voltages(self, x_c: Tensor, currents: Tensor, s: float, synchronised: Tensor | None = None) -> Tensor:
        """Inductor voltages q_i = x_c - R_i (I_i - I_i^k) - Gamma_i(s), (a, d) (``synchronised``: Gamma(s) if known)."""
        gamma = self.synchronised(s) if synchronised is None else synchronised
        return x_c - self.resistance * (currents - self.couplings) - gamma


def backward_euler_step(
    x_c: Tensor, currents: Tensor, frozen: Tensor, branches: Branches, s: float, h: float, synchronised: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """One BE step from s to s + h in closed form (Schur complement of the arrowhead system).

    (L_i + h R_i) I_i' = L_i I_i + h (x_c' - Gamma_i(s + h) + R_i I_i^k) and x_c' = x_c - h (sum_i I_i' + frozen),
    so x_c' = (x_c - h sum_i a_i - h frozen) / (1 + h sum_i b_i) and I_i' = a_i + b_i x_c'. ``synchronised``:
    Gamma(s + h) if already computed.
    """
    L, R = branches.inductance, branches.resistance
    gamma = branches.synchronised(s + h) if synchronised is None else synchronised
    denominator = L + h * R
    b = h / denominator
    a = (L * currents + h * (R * branches.couplings - gamma)) / denominator
    x_next = (x_c - h * a.sum(0) - h * frozen) / (1 + h * b.sum(0))
    return x_next, a + b * x_next


def truncation_error(
    currents: Tensor, currents_next: Tensor, voltages: Tensor, voltages_next: Tensor, branches: Branches, h: float,
    reduce_max: Callable[[Tensor], Tensor] = lambda error: error,
) -> float:
    """max |LTE| of the step: (h/2)|d/dt change| of x_c and of every active current (frozen currents cancel).
    ``reduce_max``: the maximum over every process's slice of the coordinates."""
    central = (currents.sum(0) - currents_next.sum(0)).abs().max() * (h / 2)
    inductors = ((voltages_next - voltages).abs() * (h / 2) / branches.inductance).max()
    return float(reduce_max(torch.maximum(central, inductors)))


@dataclass(frozen=True)
class StepControl:
    """LTE step-size control: reject while max|LTE| > tolerance, shrinking h by safety * tolerance / LTE; after an
    accepted step grow h by that ratio, at most ``max_growth`` times. No step is shorter than ``min_step`` x the
    window: one that short is accepted whatever its error (counted as forced), so a round takes at most
    1 / min_step steps."""

    tolerance: float
    safety: float = 0.9
    max_growth: float = 2.0
    min_step: float = 1e-2

    def __post_init__(self) -> None:
        if not self.tolerance > 0:
            raise ConfigError(f"the LTE tolerance must be > 0, got {self.tolerance}")
        if not 0 < self.safety <= 1 or self.max_growth < 1 or not 0 < self.min_step < 1:
            raise ConfigError("step control needs 0 < safety <= 1, max_growth >= 1 and 0 < min_step < 1")


@dataclass
class WindowResult:
    """What integrating one window did. ``trials``: (h, max|LTE|, accepted) for every BE solve, in order."""

    x_c: Tensor
    currents: Tensor
    next_step: float
    trials: list[tuple[float, float, bool]] = field(default_factory=list)
    forced: int = 0

    @property
    def accepted(self) -> list[tuple[float, float]]:
        return [(h, error) for h, error, ok in self.trials if ok]

    @property
    def rejected(self) -> int:
        return sum(not ok for _, _, ok in self.trials)


def integrate_window(
    x_c: Tensor, frozen: Tensor, branches: Branches, step: float, control: StepControl,
    reduce_max: Callable[[Tensor], Tensor] = lambda error: error,
) -> WindowResult:
    """Integrates the circuit from the window start (currents = I^k) to max T_i; ``step`` is the first h to try.

    The last step is cut to land on the window end; a cut step does not shrink the next round's first step. On a
    slice of the coordinates, ``reduce_max`` takes each trial's error over every slice (one scalar all-reduce), so
    every process takes the same steps.
    """
    end = float(branches.windows.max())
    if not math.isfinite(end):
        raise DivergenceError(f"a client's simulated time is {end}: its steps diverged")
    floor = control.min_step * end
    currents = branches.couplings.clone()
    result = WindowResult(x_c, currents, step)
    s, h = 0.0, step
    voltages = branches.voltages(x_c, currents, s)
    while s < end * (1 - 1e-12):
        proposal, trial, cut = h, min(h, end - s), h > end - s
        while True:
            gamma = branches.synchronised(s + trial)
            x_next, currents_next = backward_euler_step(x_c, currents, frozen, branches, s, trial, gamma)
            voltages_next = branches.voltages(x_next, currents_next, s + trial, gamma)
            error = truncation_error(currents, currents_next, voltages, voltages_next, branches, trial, reduce_max)
            if error <= control.tolerance or trial <= floor:
                break
            result.trials.append((trial, error, False))
            shrink = control.safety * control.tolerance / error if math.isfinite(error) else 0.1
            trial, cut = max(trial * shrink, floor), False
        result.trials.append((trial, error, True))
        result.forced += error > control.tolerance
        x_c, currents, voltages, s = x_next, currents_next, voltages_next, s + trial
        growth = control.max_growth if error == 0 else min(control.max_growth, control.safety * control.tolerance / error)
        h = max(trial * growth, proposal if cut else floor)  # a cut at the window end is not the error's
    result.x_c, result.currents, result.next_step = x_c, currents, h
    return result
