"""ADAPT-FED: FedSAM whose clients set their learning rate each round from their relative progress (RP)."""

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np
import torch
from lightning.pytorch.utilities.data import extract_batch_size
from torch import Tensor

from lightfed.core.local_context import LocalContext
from lightfed.core.logged_values import LoggedValues
from lightfed.core.messages import ClientPlan, ClientUpdate
from lightfed.core.requirements import Requirements, Sent
from lightfed.core.sums import Sums
from lightfed.core.training_loss import training_loss
from lightfed.errors import ConfigError
from lightfed.local.sharpness import SharpnessAware
from lightfed.strategies.base import NOTHING, ServerContext
from lightfed.strategies.fedavg import FedAvg

RPForm = Literal["product", "ratio"]
LOG_LIMIT = 700.0  # exp(+-700) is a finite, positive float64
RP_LIMIT = 1e300  # RP values beyond (and inf, NaN) are treated as this large: finite arithmetic in log space
HISTORY, PREVIOUS = "adaptfed/rp", "adaptfed/previous"  # the names of its per-client state


def relative_progress(lr: float, grad_sq: float, loss_change: float, form: RPForm = "product") -> float:
    """RP of one participation: lr * E||g~||^2 * dF (ADAPT-FED, Eq. 3 and Algorithm 1), or the ratio
    dF / (lr * E||g~||^2) of Ahn et al. (2022), about -1 for a small step that decreases the loss as predicted."""
    if form == "product":
        return lr * grad_sq * loss_change
    return loss_change / (lr * grad_sq + 1e-12)


def lr_scale(
    rps: Sequence[float], beta: float = 2.0, rp_max: float | None = None, bounds: tuple[float, float] | None = None
) -> float:
    """eta_k / eta_0 = beta / mean_i exp(RP_i), computed as exp(log beta - logsumexp(RP) + log n): never NaN, Inf or
    <= 0 whatever the RPs. ``rp_max`` clamps each RP to [-rp_max, rp_max]; ``bounds`` clamps the result."""
    rp = np.clip(np.nan_to_num(np.asarray(rps, dtype=np.float64), nan=np.inf), -RP_LIMIT, RP_LIMIT)
    if rp_max is not None:
        rp = np.clip(rp, -rp_max, rp_max)
    top = rp.max()
    log_mean_exp = top + math.log(np.exp(rp - top).sum()) - math.log(len(rp))
    scale = math.exp(min(max(math.log(beta) - log_mean_exp, -LOG_LIMIT), LOG_LIMIT))
    return scale if bounds is None else min(max(scale, bounds[0]), bounds[1])


@dataclass(frozen=True)
class RateSettings:
    """The constants of ADAPT-FED's learning-rate rule."""

    beta: float = 2.0  # with RP = 0 the client steps with beta * eta_0
    window: int | None = None  # RPs averaged, the last ones; None: all
    form: RPForm = "product"  # the form of ``relative_progress``
    rp_max: float | None = None  # clamp every RP to [-rp_max, rp_max]; None: no clamp
    bounds: tuple[float, float] | None = None  # clamp eta_k / eta_0; None: no clamp


def relative_progress_lr(
    history: Sequence[float],
    previous: tuple[float, float, float] | None,
    probe: float,
    loss_change: float | None,
    settings: RateSettings,
) -> tuple[float, float | None, list[float]]:
    """ADAPT-FED's learning-rate rule for one participation of a client.

    Args:
        history: The RPs of the client's earlier participations.
        previous: (learning rate, mean squared step gradient, probe loss) of its last participation; None: none yet.
        probe: Its probe loss now (the received model on its data).
        loss_change: The loss change the RP pairs with ``previous``; None: ``probe`` minus the probe loss then.
        settings: The rule's constants.

    Returns:
        (eta_k / eta_0, the previous participation's RP or None, the history with it, cut to the last ``window``):
        eta_k / eta_0 is ``lr_scale`` of that history, or 1 while it is empty (warm-up).
    """
    history, rp = list(history), None
    if previous is not None:
        lr, grad_sq, loss = previous
        change = probe - loss if loss_change is None else loss_change
        rp = relative_progress(lr, grad_sq, change, settings.form)
        history = (history + [rp])[-settings.window :] if settings.window else history + [rp]
    scale = lr_scale(history, settings.beta, settings.rp_max, settings.bounds) if history else 1.0
    return scale, rp, history


def welford_step(state: Sequence[float], value: float) -> tuple[float, float, float]:
    """Welford's running (count, mean, sum of squared deviations) with ``value`` added; the variance is the third
    over the first."""
    count, mean, squares = state
    count += 1
    delta = value - mean
    mean += delta / count
    squares += delta * (value - mean)
    return count, mean, squares


def probe_loss(context: LocalContext, client_id: int) -> float:
    """Mean training loss of the client's current (received) model over its own data, in eval mode."""
    module, data = context.module, context.data
    module.eval()
    total, count = 0.0, 0
    with torch.no_grad(), LoggedValues().attached(module):
        for batch_idx, batch in enumerate(data.client_eval_batches(client_id)):
            with context.autocast():
                loss = training_loss(module, batch, batch_idx)
            size = extract_batch_size(batch)
            total += float(loss) * size
            count += size
    module.train()
    return total / count


class RelativeProgressRule(SharpnessAware):
    """Sets this round's learning rate eta_0 * lr_scale(RP history) (eta_0: the optimizer's rate), then takes SAM
    steps. The RP of the previous participation is computed first, from its learning rate and mean squared step
    gradient and from ``loss_change`` (given, e.g. the server's lagged global-loss change) or, when that is None,
    the change of this client's probe loss since then. Warm-up (no RP yet): eta_0."""

    requirements = Requirements(
        sends=frozenset({Sent(name, "data") for name in ("probe_loss", "lr", "rp", "history")})
        | {Sent("grad_sq", "gradients")}
    )
    vectorizes = True  # its start probes the live module at the received weights and sets the client's step size

    def __init__(
        self,
        client_id: int,
        history: list[float],
        previous: tuple[float, float, float] | None,
        loss_change: float | None,
        beta: float = 2.0,
        window: int | None = None,
        form: RPForm = "product",
        rp_max: float | None = None,
        bounds: tuple[float, float] | None = None,
        rho: float = 0.05,
        adaptive: bool = False,
        eta: float = 0.01,
    ) -> None:
        """``previous``: (learning rate, mean squared step gradient, probe loss) of the client's last participation."""
        super().__init__(rho, adaptive, eta)
        self.client_id = client_id
        self.history, self.previous, self.loss_change = list(history), previous, loss_change
        self.rate = RateSettings(beta, window, form, rp_max, bounds)

    def start(self, params: Tensor, context: LocalContext) -> None:
        super().start(params, context)
        self.probe = probe_loss(context, self.client_id)
        scale, self.rp, self.history = relative_progress_lr(
            self.history, self.previous, self.probe, self.loss_change, self.rate
        )
        context.scale_lr(scale)
        self.lr = context.lr
        self.steps = 0
        self.grad_sq_sum = torch.zeros((), device=params.device)  # sum of ||step gradient||^2 over the steps

    def observe(self, grad: Tensor) -> None:
        self.grad_sq_sum += torch.linalg.vector_norm(grad).square()
        self.steps += 1

    def report(self) -> dict[str, Any]:
        grad_sq = float(self.grad_sq_sum) / max(self.steps, 1)
        return {"probe_loss": self.probe, "lr": self.lr, "grad_sq": grad_sq, "rp": self.rp, "history": self.history}


class AdaptFed(FedAvg):
    """Clients take SAM steps with eta_k = eta_0 beta / mean(exp(RP)) over their last ``window`` RPs (all when
    null), eta_0 being the model optimizer's learning rate; FedAvg on the server. RP = eta E||g~||^2 dF of the
    client's previous participation, g~ the (private) step gradient.

    ``loss_change``: "local" pairs that participation's eta and ||g~||^2 with the change it was followed by, of the
    client's own probe loss (received model on its data) since then; "global_lagged" is Algorithm 1 line 6 as
    printed: the change F(theta^{t-1}) - F(theta^{t-2}) of the server's example-weighted probe losses.

    Logs RP's mean over the round's clients and its variance over rounds, the learning rates' mean and spread, and
    the global probe loss. Per-client state: the RP history and the last (eta, E||g~||^2, probe loss).

    In a config:

    ```yaml
    strategy:
      class_path: lightfed.strategies.AdaptFed
      init_args: {beta: 2.0, window: null, rho: 0.05, loss_change: local}
    ```

    Examples:
        A client's first plan has no RP yet: it steps with the optimizer's own rate.

        >>> import torch
        >>> from lightfed import ClientPlan
        >>> from lightfed.strategies import AdaptFed, ServerContext
        >>> strategy = AdaptFed(beta=2.0, rho=0.05)
        >>> strategy.setup(ServerContext(torch.zeros(3), num_clients=4))
        >>> rule = strategy.configure_client(ClientPlan(client_id=0, round=0, seed=0)).rule
        >>> type(rule).__name__, rule.history, rule.previous
        ('RelativeProgressRule', [], None)
        >>> AdaptFed(lr_bounds=(2.0, 1.0))
        Traceback (most recent call last):
        ...
        lightfed.errors.ConfigError: strategy.lr_bounds must be [low, high] with 0 < low <= high, got [2.0, 1.0]
    """

    requirements = Requirements(client_state=True) | RelativeProgressRule.requirements

    def __init__(
        self,
        beta: float = 2.0,
        window: int | None = None,
        rho: float = 0.05,
        adaptive: bool = False,
        eta: float = 0.01,
        rp_form: RPForm = "product",
        loss_change: Literal["local", "global_lagged"] = "local",
        rp_max: float | None = None,
        lr_bounds: tuple[float, float] | None = None,
        server_lr: float = 1.0,
    ) -> None:
        """
        Args:
            beta: Scale of the rate: with RP = 0 the client steps with beta * eta_0.
            window: RPs averaged (the paper's N); null: the whole history.
            rho: SAM radius (0: plain local SGD with the adaptive rate).
            adaptive: ASAM instead of SAM.
            eta: ASAM's offset of the scale |w| + eta.
            rp_form: "product" (the paper's RP) or "ratio" (Ahn et al. 2022: dF / (eta E||g~||^2)).
            loss_change: "local" or "global_lagged" (see the class documentation).
            rp_max: Clamp every RP to [-rp_max, rp_max] (null: no clamp).
            lr_bounds: Clamp eta_k / eta_0 to [low, high] (null: no clamp; the rate is always finite and > 0).
            server_lr: Scale of the averaged delta applied to the global model.

        Raises:
            ConfigError: ``beta``, ``rp_max`` or ``server_lr`` is not positive, ``window`` is below 1, ``lr_bounds``
                is not 0 < low <= high, or ``rho`` or ``eta`` is negative.
        """
        super().__init__(server_lr=server_lr)
        if beta <= 0:
            raise ConfigError(f"strategy.beta must be > 0, got {beta}")
        if window is not None and window < 1:
            raise ConfigError(f"strategy.window must be >= 1 or null (the whole history), got {window}")
        if rp_max is not None and rp_max <= 0:
            raise ConfigError(f"strategy.rp_max must be > 0, got {rp_max}")
        if lr_bounds is not None and not 0 < lr_bounds[0] <= lr_bounds[1]:
            raise ConfigError(f"strategy.lr_bounds must be [low, high] with 0 < low <= high, got {list(lr_bounds)}")
        self.settings: dict[str, Any] = {
            "beta": beta,
            "window": window,
            "form": rp_form,
            "rp_max": rp_max,
            "bounds": lr_bounds,
            "rho": rho,
            "adaptive": adaptive,
            "eta": eta,
        }
        RelativeProgressRule(0, [], None, None, **self.settings)  # refuses bad SAM settings now
        self.loss_change = loss_change

    def setup(self, context: ServerContext) -> None:
        super().setup(context)
        self.global_losses: list[float] = []  # example-weighted probe losses of the last two global models
        self.rp_rounds = [0.0, 0.0, 0.0]  # Welford: rounds with an RP, mean and sum of squares of the round means
        self._metrics: dict[str, float] = {}

    def configure_client(self, plan: ClientPlan, received: Mapping[str, Tensor] = NOTHING) -> ClientPlan:
        saved_history = self.client_states.get(plan.client_id, HISTORY)
        saved_previous = self.client_states.get(plan.client_id, PREVIOUS)
        previous = None if saved_previous is None else tuple(saved_previous.tolist())
        change = None
        if self.loss_change == "global_lagged":
            if len(self.global_losses) < 2:
                previous = None  # no RP before two global losses are known
            else:
                change = self.global_losses[-1] - self.global_losses[-2]
        history = [] if saved_history is None else saved_history.tolist()
        return replace(plan, rule=RelativeProgressRule(plan.client_id, history, previous, change, **self.settings))

    def sum_sizes(self) -> dict[str, int]:
        names = ["clients", "probe_loss", "probe_weight", "rp", "rp_sq", "rp_count", "lr", "lr_sq"]
        return {**super().sum_sizes(), **{name: 1 for name in names}}

    def accumulate(self, sums: Sums, update: ClientUpdate) -> None:
        super().accumulate(sums, update)
        report = update.report
        self.client_states.set(update.client_id, HISTORY, torch.tensor(report["history"], dtype=torch.float64))
        previous = [report["lr"], report["grad_sq"], report["probe_loss"]]
        self.client_states.set(update.client_id, PREVIOUS, torch.tensor(previous, dtype=torch.float64))
        sums.add("clients", 1)
        sums.add("probe_loss", report["probe_loss"], weight=update.num_examples)
        sums.add("probe_weight", update.num_examples)
        sums.add("lr", report["lr"])
        sums.add("lr_sq", report["lr"] ** 2)
        if report["rp"] is not None:
            sums.add("rp", report["rp"])
            sums.add("rp_sq", report["rp"] ** 2)
            sums.add("rp_count", 1)

    def aggregate(self, params: Tensor, sums: Mapping[str, Tensor], round: int) -> Tensor:
        self.global_losses = (self.global_losses + [float(sums["probe_loss"] / sums["probe_weight"])])[-2:]
        clients = float(sums["clients"])
        lr_mean = float(sums["lr"]) / clients
        self._metrics = {
            "global_probe_loss": self.global_losses[-1],
            "lr_mean": lr_mean,
            "lr_std": math.sqrt(max(float(sums["lr_sq"]) / clients - lr_mean**2, 0.0)),
        }
        with_rp = float(sums["rp_count"])
        if with_rp:
            rp_mean = float(sums["rp"]) / with_rp
            self._metrics["rp_mean"] = rp_mean
            self._metrics["rp_client_var"] = max(float(sums["rp_sq"]) / with_rp - rp_mean**2, 0.0)
            count, mean, squares = welford_step(self.rp_rounds, rp_mean)
            self.rp_rounds = [count, mean, squares]
            self._metrics["rp_var"] = squares / count
        return super().aggregate(params, sums, round)

    def metrics(self) -> dict[str, float]:
        return dict(self._metrics)

    def state_dict(self) -> dict[str, Any]:
        return {"global_losses": list(self.global_losses), "rp_rounds": list(self.rp_rounds)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.global_losses, self.rp_rounds = list(state["global_losses"]), list(state["rp_rounds"])
