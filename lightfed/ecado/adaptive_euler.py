"""Adaptive FedECADO's client (Algorithm 1 of the paper): Forward-Euler steps whose size keeps the local truncation
error below one tolerance, starting from the passivity bound."""

import math
from collections.abc import Callable
from typing import Any, Literal, cast

import torch
from torch import Tensor

from lightfed.core.local_context import LocalContext
from lightfed.core.local_rule import LocalRule
from lightfed.core.requirements import Requirements, Sent
from lightfed.ecado.circuit import ErrorNorm
from lightfed.ecado.curvature import ClientCurvature, CurvatureEstimate
from lightfed.ecado.max_abs import max_abs
from lightfed.ecado.speed_decay import SpeedDecay
from lightfed.errors import ConfigError, DivergenceError

ErrorScale = Literal["absolute", "state", "step"]
StepLimit = Literal["none", "monotone", "descent", "stability"]


def passivity_bound(params: Tensor, velocity: Tensor) -> float:
    """Paper eq. 16, dt <= 2 x'(p grad - I) / ||p grad - I||^2 = -2 x'v / ||v||^2 for the client velocity v."""
    return float(-2 * (params @ velocity) / (velocity @ velocity))


class AdaptiveEuler(LocalRule):
    """Integrates the client ODE dx/dt = I_i^k - p_i grad f_i(x) (p_i = |D_i| / |D|) with error-controlled Forward
    Euler, taking the step itself: it replaces the step of the optimizer from ``configure_optimizers`` (plain FE steps,
    no momentum or weight decay; the step size chosen here).

    Each step, on the step's batch: v = I - p g(x). The first step of a round tries the passivity bound (eq. 16;
    ``fallback_step`` where it is not positive and finite), or with ``first_step="probe"`` the step a probe predicts
    (see ``_probe``; no fallback), later steps ``max_growth`` x the previous accepted step but, with
    ``cap_at_first_step``, never more than that first trial. With ``lte="trial_step"`` a trial x' = x + dt v is
    evaluated on the same batch, LTE = (dt/2) |v(x') - v(x)| (eq. 14, with p_i as in the ODE); while LTE > tolerance,
    dt <- 0.9 (tolerance / LTE) dt (``max_backtracks`` tries, then the step is forced): two gradients a step or more.
    With ``lte="retrospective"`` the error after the first step is estimated from the velocity change D over the
    previous step, dt^2 D / (2 dt_prev), and a step above the tolerance is cut in one shot: one gradient a step. The
    client's window T_i is the sum of its accepted dt.

    ``error_scale`` says what the tolerance is measured against ("absolute", "state": rms(x), "step": the step
    itself); ``error_norm`` whether |.| is the max over the coordinates ("max", eq. 15) or their root mean square
    ("rms"); ``step_limit`` bounds every step besides the tolerance ("monotone": no overshoot along its own direction,
    "descent": not past the minimum of the client's energy along it, "none"); ``fixed_lr`` replaces error control by
    SGD at that learning rate, dt = fixed_lr / p_i. What each does, measured: docs/corrections/adaptive-fedecado.md.

    Raises:
        ConfigError: ``tolerance`` or ``fallback_step`` not > 0; from ``start``, 16-mixed precision.
        DivergenceError: From ``adjust``, a retrospective step whose velocity change is not finite.
    """

    requirements = Requirements(
        chooses_client_steps=True,
        sends=frozenset(  # its error control picks steps, and how many private gradients to evaluate, from the data
            {Sent(name, "data") for name in ("window", "steps", "max_lte", "rejected", "forced", "passivity_bound")}
            | {Sent("weight", "size"), Sent("curvature", "data"), Sent("decay", "data")}
        ),
    )
    takes_step = True

    def __init__(
        self,
        client_id: int,
        current: Tensor,
        tolerance: float,
        fallback_step: float = 1.0,
        max_growth: float = 2.0,
        max_backtracks: int = 50,
        cap_at_first_step: bool = True,
        lte: Literal["trial_step", "retrospective"] = "trial_step",
        curvature_batches: int = 0,
        curvature_probes: int = 10,
        seed: int = 0,
        first_step: Literal["passivity", "probe"] = "passivity",
        error_scale: ErrorScale = "absolute",
        step_limit: StepLimit = "none",
        error_norm: ErrorNorm = "max",
        track_decay: bool = False,
        fixed_lr: float | None = None,
        curvature_examples: int | None = None,
        curvature_estimate: CurvatureEstimate = "hutchinson",
    ) -> None:
        if not tolerance > 0 or not fallback_step > 0:
            raise ConfigError(f"the LTE tolerance and fallback step must be > 0, got {tolerance} and {fallback_step}")
        self.error_norm = error_norm
        self.step_limit = step_limit
        self.error_scale = error_scale
        self.first_step = first_step
        self.lte = lte
        self.client_id = client_id
        self.current = current
        self.tolerance = tolerance
        self.fallback_step = fallback_step
        self.max_growth = max_growth
        self.max_backtracks = max_backtracks
        self.cap_at_first_step = cap_at_first_step
        self.curvature = ClientCurvature(
            curvature_batches, curvature_probes, curvature_examples, curvature_estimate, seed
        )
        self.track_decay = track_decay
        self.fixed_lr = fixed_lr

    def start(self, params: Tensor, context: LocalContext) -> None:
        if context.scales_gradients:  # 16-mixed
            raise ConfigError(
                "Adaptive FedECADO takes its own fp32 Forward-Euler steps; use trainer.precision 32-true or bf16-mixed"
            )
        data = context.data
        self.context = context
        self.weight = data.client_size(self.client_id) / data.num_train_examples
        self.current = self.current.to(params.device)
        self.steps: list[float] = []
        self.errors: list[float] = []
        self.rejected = self.forced = 0
        self.bound = math.nan
        self.first_trial = math.inf  # the round's first trial step, set by its first step
        self.velocity: Tensor | None = None
        self.alignment = 1.0
        self.decay = SpeedDecay() if self.track_decay else None
        self.curvature.start(context, self.client_id)

    def _allowed(self, dt: float, speed: float) -> float:
        """The largest LTE a step dt may have (``error_scale``, ``step_limit``); speed = max|v|."""
        allowed = self.tolerance * (dt * speed if self.error_scale == "step" else self.reference)
        return allowed if self.step_limit == "none" else min(allowed, dt * speed / self._limit())

    def _largest_step(self, rate: float, speed: float) -> float:
        """The step whose LTE, rate x dt^2 (rate = |x''| / 2), equals the allowed error."""
        if self.error_scale == "step":
            step = self.tolerance * speed / rate
        else:
            step = math.sqrt(self.tolerance * self.reference / rate)
        return step if self.step_limit == "none" else min(step, speed / (rate * self._limit()))

    def _limit(self) -> float:
        """k in the step limit LTE <= dt |v| / k, i.e. |dv| <= 2 |v| / k: 2 ("monotone": p dt |Hv| <= |v|, no
        overshoot along v), 2 cos ("descent"), 4/3 ("stability": p dt |Hv| <= 1.5 |v|, Forward Euler's amplification
        of the mode along v within +-1/2)."""
        return 4 / 3 if self.step_limit == "stability" else 2 * self._alignment()

    def _alignment(self) -> float:
        """1 ("monotone"), or with "descent" cos(v, -dv), the last measured velocity change's alignment against the
        step (v'Hv / (|v| |Hv|) for a quadratic) where it is positive: the limit |dv| <= |v| / cos is
        p dt v'Hv <= |v|^2, the step to the minimum of the client's energy p f - I'x along v."""
        return self.alignment if self.step_limit == "descent" and self.alignment > 0 else 1.0

    def _measure_alignment(self, direction: Tensor, sign: float) -> None:
        """With "descent": ``alignment`` = cos(direction, sign x the work array "change") (0 where either is 0)."""
        if self.step_limit != "descent":
            return
        change = self._array("change", direction)
        norms = float(torch.linalg.vector_norm(direction)) * float(torch.linalg.vector_norm(change))
        self.alignment = sign * float(direction @ change) / norms if norms > 0 else 0.0

    def adjust(self, grad: Tensor, params: Tensor) -> None:
        self.curvature.observe(grad)  # the step's gradient at its start, before any trial or correction
        self.reference = 1.0 if self.error_scale == "absolute" else float(params.norm()) / math.sqrt(params.numel())
        if self.fixed_lr is not None:  # no error to bound: the speed is measured only where the decay needs it
            dt, velocity = self.fixed_lr / self.weight, self._velocity(grad)
            params.add_(velocity, alpha=dt)
            self._accept(dt, 0.0, math.inf, velocity, lambda: self._norm(velocity))
            return
        if self.lte == "retrospective" and self.steps:
            self._retrospective_step(grad, params)
            return
        gradient, start = self._array("gradient", grad).copy_(grad), self._array("start", params).copy_(params)
        velocity = self._velocity(gradient)
        speed = self._norm(velocity)
        if self.steps:
            dt = self.max_growth * self.steps[-1]
            if self.cap_at_first_step:
                dt = min(dt, self.first_trial)
        elif self.first_step == "probe":
            dt = self.first_trial = self._probe(start, velocity, speed, gradient, grad, params)
        else:
            self.bound = passivity_bound(start, velocity)
            dt = self.first_trial = self.bound if math.isfinite(self.bound) and self.bound > 0 else self.fallback_step
        for attempt in range(self.max_backtracks + 1):
            params.copy_(start).add_(velocity, alpha=dt)
            self.context.recompute_gradient()  # grad now holds g(x') on the same batch
            error = self._change(grad, gradient) * self.weight * dt / 2
            self._measure_alignment(velocity, 1.0)  # dv = -p (g(x') - g(x))
            allowed = self._allowed(dt, speed)
            if error <= allowed or attempt == self.max_backtracks:
                break
            self.rejected += 1
            dt *= 0.9 * allowed / error if math.isfinite(error) else 0.1
        self._accept(dt, error, allowed, velocity, speed)

    def _array(self, name: str, like: Tensor) -> Tensor:
        """The client trainer's work array ``name`` shaped like ``like`` (kept from client to client)."""
        return self.context.workspace.get(f"adaptive_euler.{name}", like.shape, like)

    def _velocity(self, gradient: Tensor) -> Tensor:
        """v = I - p g into whichever of two work arrays does not hold the previous step's velocity."""
        spare = "velocity_b" if self.velocity is self._array("velocity_a", gradient) else "velocity_a"
        velocity = torch.mul(gradient, self.weight, out=self._array(spare, gradient))
        return torch.sub(self.current, velocity, out=velocity)

    def _norm(self, vector: Tensor) -> float:
        """|vector| in the ``error_norm``: max|v_j| or sqrt(mean v_j^2)."""
        if self.error_norm == "max":
            return float(max_abs(vector))
        return float(torch.linalg.vector_norm(vector)) / math.sqrt(vector.numel())

    def _change(self, new: Tensor, old: Tensor) -> float:
        """|new - old| in the ``error_norm``, through a work array."""
        return self._norm(torch.sub(new, old, out=self._array("change", new)))

    def _probe(
        self, start: Tensor, velocity: Tensor, speed: float, gradient: Tensor, grad: Tensor, params: Tensor
    ) -> float:
        """The round's first trial from the first gradients alone: a probe step dt_p = 0.01 rms(x) / rms(v), which
        moves the weights by 1 % of their own size (gamma-free, as SciPy's ``select_initial_step``), measures
        D = |v(x + dt_p v) - v(x)|, so the FE error (dt^2 / 2)|x''| of a step dt is about dt^2 D / (2 dt_p); returns
        0.9 x the step where that equals the allowed error: 0.9 sqrt(2 gamma r dt_p / D) (r = 1 with "absolute",
        rms(x) with "state"), or with "step" 0.9 x 2 gamma |v| dt_p / D (and at most the step limit). A loss c times
        larger gives steps 1/c times as long; proportional to sqrt(gamma) (to gamma with "step"). Where v does not
        change (a linear loss along v) the probe step itself."""
        size, rate = (float(torch.linalg.vector_norm(t)) for t in (start, velocity))
        probe = 0.01 * size / rate if size > 0 and rate > 0 else 1e-6
        params.copy_(start).add_(velocity, alpha=probe)
        self.context.recompute_gradient()
        change = self._change(grad, gradient) * self.weight
        self._measure_alignment(velocity, 1.0)
        return 0.9 * self._largest_step(change / (2 * probe), speed) if change > 0 else probe

    def _retrospective_step(self, grad: Tensor, params: Tensor) -> None:
        """x <- x + dt v, dt the proposal or, where its retrospective error exceeds the tolerance, the largest step
        whose estimate is 0.9^2 of it; no gradient is evaluated."""
        velocity = self._velocity(grad)
        previous = self.steps[-1]
        dt = self.max_growth * previous
        if self.cap_at_first_step:
            dt = min(dt, self.first_trial)
        speed = self._norm(velocity)
        if speed == 0:  # v = 0 exactly: this step moves nothing, whatever its size
            self._accept(dt, 0.0, self._allowed(dt, speed), velocity, speed)
            return
        last = cast(Tensor, self.velocity)  # set by the first step
        rate = self._change(velocity, last) / (2 * previous)
        if not math.isfinite(rate * speed):  # the step cut from it would be 0, and the next divided by it
            raise DivergenceError(
                f"client {self.client_id}'s local steps diverged (speed {speed:.3g}, velocity change rate "
                f"{rate:.3g}): lower strategy.tolerance"
            )
        self._measure_alignment(last, -1.0)
        error = rate * dt**2
        if error > self._allowed(dt, speed):
            dt = 0.9 * self._largest_step(rate, speed)
            error = rate * dt**2
            self.rejected += 1
        params.add_(velocity, alpha=dt)
        self._accept(dt, error, self._allowed(dt, speed), velocity, speed)

    def _accept(
        self, dt: float, error: float, allowed: float, velocity: Tensor, speed: float | Callable[[], float]
    ) -> None:
        """Records the step, its error in units of the tolerance's own (gamma x error / allowed error) and the speed
        |v| it started at (or how to measure it: ``velocity`` stays in its work array through the next step, the last
        step's until the report)."""
        self.forced += error > allowed
        if self.decay is not None:
            self.decay.observe(speed, dt)
        self.steps.append(dt)
        self.errors.append(error * self.tolerance / allowed if error else 0.0)
        self.velocity = velocity
        self.context.lr = dt

    def report(self) -> dict[str, Any]:
        """The window T_i, p_i, accepted steps and their largest LTE, rejected and forced trials, the passivity
        bound and first step, and the Hessian diagonal if estimated (before training, or from the steps' gradients with
        ``curvature_estimate="squared_gradients"``)."""
        report: dict[str, Any] = {
            "window": sum(self.steps),
            "weight": self.weight,
            "steps": self.steps,
            "max_lte": max(self.errors),
            "rejected": self.rejected,
            "forced": self.forced,
            "passivity_bound": self.bound,
        }
        curvature = self.curvature.result()
        if curvature is not None:
            report["curvature"] = curvature
        if self.decay is not None:
            report["decay"] = self.decay.ratio()
        return report
