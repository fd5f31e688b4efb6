"""The server half of the ECADO equivalent circuit: Backward-Euler steps over one round's window, LTE-controlled.

Canonical signs (FedECADO ICML appendix A; corrections to the paper: docs/corrections/fedecado.md), I_i = current
from the server to client i, R_i = 1/G_i (the client's aggregate sensitivity, a Thevenin resistance)::

    dx_c/dt = -sum_i I_i
    L_i dI_i/dt = x_c - R_i (I_i - I_i^k) - Gamma_i(t)

Only the active clients' currents are integrated; the inactive clients' currents stay frozen inside the sum of the
first equation. Gamma_i is the line from the client's start (x_c at the start of the window) to its final state at
its own window end T_i, continued beyond T_i as ``path_progress`` says. R_i and L_i are per-client scalars or
per-coordinate vectors; every operation is elementwise, O(active clients x d) per step.
"""

import math
from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import Tensor

from lightfed.core.sharding import CoordinateSums, sum_rows
from lightfed.core.workspace import Workspace
from lightfed.ecado.max_abs import max_abs
from lightfed.errors import ConfigError, DivergenceError

BeyondWindow = Literal["extrapolate", "hold", "decay"]
ErrorNorm = Literal["max", "rms"]


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
    end: float | None = None  # where the window ends; None: at max T_i
    decay: Tensor | None = None  # (a,) with "decay": each path's speed at T_i over its speed at the start

    @property
    def window_end(self) -> float:
        """The time the server integrates to: ``end``, or the longest client window."""
        return float(self.windows.max()) if self.end is None else float(self.end)

    def progress(self, s: float) -> Tensor:
        """r_i(s) with Gamma_i(s) = start + r_i(s) delta_i: how far along its own path each client is, (a,)."""
        return path_progress(s / self.windows, self.beyond_window, self.decay)


def path_progress(ratio: Tensor, beyond_window: BeyondWindow, decay: Tensor | None = None) -> Tensor:
    """r(s), the share of its window's change a client's path has made at s, for s / T = ``ratio`` (per client):
    s / T within the window; beyond it, at s = (1 + u) T, s / T ("extrapolate"), 1 ("hold") or with "decay"
    1 + rho (1 - rho^u) / (1 - rho), at most 1 / (1 - rho): the path goes on at a speed that keeps decaying as it did
    over the window, rho = ``decay`` (its speed at T over its speed at 0). Raises ValueError for "decay" without
    ``decay``."""
    if beyond_window == "extrapolate":
        return ratio
    if beyond_window == "hold":
        return ratio.clamp(max=1.0)
    if decay is None:
        raise ValueError("beyond_window='decay' needs each client's reported decay")
    rho = decay.to(ratio).clamp(0.0, 1.0)
    beyond = (ratio - 1).clamp(min=0.0)
    steady = rho > 1 - 1e-9
    tail = torch.where(steady, beyond, rho * (1 - rho.pow(beyond)) / (1 - rho).clamp(min=1e-9))
    return torch.where(ratio <= 1, ratio, 1 + tail)


class WindowSolver:
    """Backward-Euler trial steps over one window, fused into a few passes over the (a, d) arrays, in place.

    One step from s to s + h in closed form (Schur complement of the arrowhead system):
    (L_i + h R_i) I_i' = L_i I_i + h (x_c' - Gamma_i(s + h) + R_i I_i^k) and x_c' = x_c - h (sum_i I_i' + frozen),
    so with a_i = (L_i I_i + h (R_i I_i^k - Gamma_i)) / (L_i + h R_i) and b_i = h / (L_i + h R_i),
    x_c' = (x_c - h sum_i a_i - h frozen) / (1 + h sum_i b_i) and I_i' = a_i + b_i x_c'.

    Local truncation error, (h/2)|d/dt change| of x_c and of every active current: for x_c, (h/2)|sum_i (I_i' - I_i)|
    (frozen currents cancel); for the inductor currents, (h / 2L)|q' - q| with the inductor voltage
    q = x_c - R (I - I^k) - Gamma, which the BE equation makes q' = L (I' - I) / h, so (1/2)|dI - (h / h_prev) dI_prev|
    with dI the step's current change (q = 0 at the window start, where x_c = Gamma = start and I = I^k).

    ``norm``: the error is the largest of these over every coordinate ("max", the paper), or the larger of the root
    mean squares of the x_c errors and of the current errors ("rms"), which does not grow with the number of
    coordinates. ``coordinates`` combines every process's slice (one small
    all-reduce per trial; the rms in blocks, the same bits on any number of processes). Work arrays: two for the
    currents, the change and the previous step's change, the error (a, d each; from ``workspace`` when given, where
    the currents of the result are overwritten by the next solve that uses it); the caller's x_c and I^k are read,
    never written, and serve as the first step's state.
    """

    def __init__(
        self,
        x_c: Tensor,
        frozen: Tensor,
        branches: Branches,
        norm: ErrorNorm = "max",
        coordinates: CoordinateSums | None = None,
        workspace: Workspace | None = None,
    ) -> None:
        self.branches, self.frozen, self.norm = branches, frozen, norm
        self.coordinates = coordinates or CoordinateSums(x_c.numel())
        self._x_buffers = (torch.empty_like(x_c), torch.empty_like(x_c))
        self.s, self.x_c, self.x_next = 0.0, x_c, self._x_buffers[0]
        workspace = workspace or Workspace()
        self._array = lambda name: workspace.get(name, branches.couplings.shape, branches.couplings)
        self.currents, self.next = branches.couplings, self._array("next")
        self.change: Tensor = self._array("change")
        self.previous_change: Tensor | None = None
        self.previous_h = 0.0
        self.error = self._array("error")
        self._central = workspace.get("central", x_c.shape, branches.couplings)  # the change's row sum
        shape = (len(branches.couplings), max(branches.inductance.shape[-1], branches.resistance.shape[-1]))
        self._inverse = workspace.get("inverse", shape, branches.couplings)

    def trial(self, h: float) -> float:
        """Solves the step from s to s + h into ``x_next`` and ``next`` (the currents); returns its error."""
        branches, L, R = self.branches, self.branches.inductance, self.branches.resistance
        inverse = torch.add(L, R, alpha=h, out=self._inverse).reciprocal_()  # b / h
        progress = branches.progress(self.s + h).to(self.next.dtype)[:, None]
        a = torch.mul(branches.deltas, progress, out=self.next).add_(branches.start)  # Gamma(s + h)
        a.addcmul_(R, branches.couplings, value=-1).mul_(-h).addcmul_(L, self.currents).mul_(inverse)
        x_next = sum_rows(a, out=self.x_next).mul_(-h).add_(self.x_c).sub_(self.frozen, alpha=h)
        x_next.div_(sum_rows(inverse).mul_(h * h).add_(1))
        a.addcmul_(inverse, x_next, value=h)  # I' = a + b x_c'
        change = torch.sub(a, self.currents, out=self.change)
        central = sum_rows(change, out=self._central).mul_(h / 2)
        inductors = change
        if self.previous_change is not None:
            inductors = torch.sub(change, self.previous_change, alpha=h / self.previous_h, out=self.error)
        return self._norm(central, inductors)

    def _norm(self, central: Tensor, inductors: Tensor) -> float:
        """The error of a step: the larger of its x_c part's and its currents' part's max-norms ("max") or root mean
        squares ("rms") over every process's slice, the currents' part halved."""
        if self.norm == "max":
            return float(
                self.coordinates.all_reduce(torch.stack([max_abs(central), max_abs(inductors) / 2]), "max").max()
            )
        size = self.coordinates.size
        central_square, inductors_square = self.coordinates.squares(central, inductors).tolist()
        return max(math.sqrt(central_square / size), math.sqrt(inductors_square / (4 * len(inductors) * size)))

    def accept(self, h: float) -> None:
        """Moves to the solution of the last trial (step h); the caller's x_c and I^k are never written."""
        self.s, self.previous_h = self.s + h, h
        self.x_c = self.x_next
        self.x_next = self._x_buffers[1] if self.x_c is self._x_buffers[0] else self._x_buffers[0]
        previous = self.currents
        self.currents = self.next
        self.next = self._array("currents") if previous is self.branches.couplings else previous
        if self.previous_change is None:
            self.previous_change = self._array("previous_change")
        self.change, self.previous_change = self.previous_change, self.change


@dataclass(frozen=True)
class StepControl:
    """LTE step-size control: reject while the LTE (its ``norm``, see ``WindowSolver``) > tolerance, shrinking h by
    safety * tolerance / LTE; after an accepted step grow h by that ratio, at most ``max_growth`` times. No step is
    shorter than ``min_step`` x the window: one that short is accepted whatever its error (counted as forced), so a
    round takes at most 1 / min_step steps."""

    tolerance: float
    safety: float = 0.9
    max_growth: float = 2.0
    min_step: float = 1e-2
    norm: ErrorNorm = "max"

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
    x_c: Tensor,
    frozen: Tensor,
    branches: Branches,
    step: float,
    control: StepControl,
    coordinates: CoordinateSums | None = None,
    workspace: Workspace | None = None,
) -> WindowResult:
    """Integrates the circuit from the window start (currents = I^k) to ``branches.window_end`` (default max T_i);
    ``step`` is the first h to try.

    The last step is cut to land on the window end; a cut step does not shrink the next round's first step. On a
    slice of the coordinates, ``coordinates`` takes each trial's error over every slice (one small all-reduce), so
    every process takes the same steps. ``workspace``: see ``WindowSolver``.
    """
    end = branches.window_end
    if not math.isfinite(end) or end <= 0:  # nothing to integrate, no step to report
        raise DivergenceError(f"a client's simulated time is {end}: its steps diverged (or no client took a step)")
    floor = control.min_step * end
    solver = WindowSolver(x_c, frozen, branches, control.norm, coordinates, workspace)
    result = WindowResult(x_c, solver.currents, step)
    h = step
    while solver.s < end * (1 - 1e-12):
        proposal, trial, cut = h, min(h, end - solver.s), h > end - solver.s
        while True:
            error = solver.trial(trial)
            if error <= control.tolerance or trial <= floor:
                break
            result.trials.append((trial, error, False))
            shrink = control.safety * control.tolerance / error if math.isfinite(error) else 0.1
            trial, cut = max(trial * shrink, floor), False
        result.trials.append((trial, error, True))
        result.forced += error > control.tolerance
        solver.accept(trial)
        growth = (
            control.max_growth if error == 0 else min(control.max_growth, control.safety * control.tolerance / error)
        )
        h = max(trial * growth, proposal if cut else floor)  # a cut at the window end is not the error's
    result.x_c, result.currents, result.next_step = solver.x_c, solver.currents, h
    return result
