"""ADAPT-FED's client: a learning rate set each round from the client's relative progress (RP), then SAM steps."""

import math
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import torch
from lightning.pytorch.utilities.data import extract_batch_size
from torch import Tensor

from lightfed.core.local_context import LocalContext
from lightfed.core.logged_values import LoggedValues
from lightfed.core.requirements import Requirements, Sent
from lightfed.core.training_loss import training_loss
from lightfed.local.sharpness import SharpnessAware

RPForm = Literal["product", "ratio"]
LOG_LIMIT = 700.0  # exp(+-700) is a finite, positive float64
RP_LIMIT = 1e300  # RP values beyond (and inf, NaN) are treated as this large: finite arithmetic in log space


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
        self.beta, self.window, self.form, self.rp_max, self.bounds = beta, window, form, rp_max, bounds

    def start(self, params: Tensor, context: LocalContext) -> None:
        super().start(params, context)
        self.probe = probe_loss(context, self.client_id)
        self.rp = None
        if self.previous is not None:
            lr, grad_sq, loss = self.previous
            change = self.probe - loss if self.loss_change is None else self.loss_change
            self.rp = relative_progress(lr, grad_sq, change, self.form)
            self.history = (self.history + [self.rp])[-self.window :] if self.window else self.history + [self.rp]
        scale = lr_scale(self.history, self.beta, self.rp_max, self.bounds) if self.history else 1.0
        context.scale_lr(scale)
        self.lr = context.lr
        self.steps = 0
        self.grad_sq_sum = torch.zeros((), device=params.device)  # sum of ||step gradient||^2 over the steps

    def adjust(self, grad: Tensor, params: Tensor) -> None:
        super().adjust(grad, params)
        self.steps += 1

    def observe(self, grad: Tensor) -> None:
        self.grad_sq_sum += torch.linalg.vector_norm(grad).square()

    def report(self) -> dict[str, Any]:
        grad_sq = float(self.grad_sq_sum) / max(self.steps, 1)
        return {"probe_loss": self.probe, "lr": self.lr, "grad_sq": grad_sq, "rp": self.rp, "history": self.history}
