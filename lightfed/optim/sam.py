"""SAM (Foret et al. 2021) and ASAM (Kwon et al. 2021) as a wrapper around any torch optimizer."""

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import Tensor
from torch.optim import Optimizer

from lightfed.errors import ConfigError

EPS = 1e-12


def sam_perturbation(grad: Tensor, params: Tensor, rho: float, adaptive: bool = False, eta: float = 0.01) -> Tensor:
    """The ascent step e(w) on flat vectors: rho g / ||g|| (SAM), or rho T^2 g / ||T g|| with T = |w| + eta (ASAM)."""
    if not adaptive:
        return grad * (rho / (grad.norm() + EPS))
    scale = params.abs() + eta
    scaled = grad * scale
    return scaled * scale * (rho / (scaled.norm() + EPS))


def check_sam_settings(rho: float, eta: float) -> None:
    if rho < 0:
        raise ConfigError(f"SAM's rho must be >= 0, got {rho}")
    if eta < 0:
        raise ConfigError(f"ASAM's eta must be >= 0, got {eta}")


class SAM(Optimizer):
    """Sharpness-aware minimisation around ``base_optimizer``: move to w + e(w), take the gradient there, restore w
    and let the base optimizer step with that gradient.

    ``step(closure)`` expects the gradient at w in ``.grad``; ``closure`` zeroes the gradients and recomputes them
    (lightfed's client loop passes one when ``configure_optimizers`` returns a ``SAM``). ``first_step`` and
    ``second_step`` are the two halves for loops that evaluate the model themselves.

    A module's ``configure_optimizers`` returns one; a config gives the same steps to any model with
    ``strategy: {class_path: lightfed.strategies.FedSAM}`` (``lightfed.local.SharpnessAware``).

    Examples:
        >>> import torch
        >>> from lightfed.optim import SAM
        >>> w = torch.nn.Parameter(torch.tensor([3.0, 4.0]))
        >>> optimizer = SAM([w], torch.optim.SGD, rho=0.5, lr=0.1)
        >>> def closure():
        ...     optimizer.zero_grad()
        ...     loss = (w**2).sum() / 2  # its gradient is w
        ...     loss.backward()
        ...     return loss
        >>> closure().item()  # the gradient at w, in .grad
        12.5
        >>> optimizer.step(closure)  # SGD's step with the gradient at w + e(w) = [3.3, 4.4]
        >>> w.detach()
        tensor([2.6700, 3.5600])
    """

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict[str, Any]],
        base_optimizer: Callable[..., Optimizer],
        rho: float = 0.05,
        adaptive: bool = False,
        eta: float = 0.01,
        **kwargs: Any,
    ) -> None:
        """
        Args:
            params: Parameters (or parameter groups) to optimise.
            base_optimizer: Class (or factory) of the optimizer that takes the step, e.g. ``torch.optim.SGD``.
            rho: Radius of the ascent step.
            adaptive: ASAM: scale the ascent step element-wise by |w| + eta.
            eta: ASAM's offset of the scale.
            kwargs: Arguments of the base optimizer (lr, momentum, ...).
        """
        check_sam_settings(rho, eta)
        self.base_optimizer = base_optimizer(params, **kwargs)
        super().__init__(self.base_optimizer.param_groups, self.base_optimizer.defaults)
        self.param_groups = self.base_optimizer.param_groups
        self.state = self.base_optimizer.state  # momentum and the like: clearing one clears both
        self.rho, self.adaptive, self.eta = rho, adaptive, eta
        self._saved: list[tuple[Tensor, Tensor]] = []

    def _with_grads(self) -> list[tuple[Tensor, Tensor]]:
        """(parameter, its gradient) of each parameter that has one."""
        return [(p, p.grad) for group in self.param_groups for p in group["params"] if p.grad is not None]

    @torch.no_grad()
    def first_step(self) -> None:
        """w <- w + e(w) from the gradients in ``.grad`` (one e over all parameters), then zeroes the gradients."""
        pairs = self._with_grads()
        flat_grad = torch.cat([grad.reshape(-1) for _, grad in pairs])
        flat_params = torch.cat([p.reshape(-1) for p, _ in pairs])
        ascent = sam_perturbation(flat_grad, flat_params, self.rho, self.adaptive, self.eta)
        self._saved = [(p, p.detach().clone()) for p, _ in pairs]
        for (p, grad), e in zip(pairs, ascent.split([p.numel() for p, _ in pairs]), strict=True):
            p.add_(e.view_as(p))
            grad.zero_()

    @torch.no_grad()
    def second_step(self) -> None:
        """Restores w and steps the base optimizer with the gradients now in ``.grad`` (those at w + e(w))."""
        for p, saved in self._saved:
            p.copy_(saved)
        self._saved = []
        self.base_optimizer.step()

    def step(self, closure: Callable[[], Any] | None = None) -> None:  # type: ignore[override]  # a closure is needed
        if closure is None:
            raise ConfigError("SAM.step needs a closure that recomputes the loss and the gradients")
        self.first_step()
        with torch.enable_grad():
            closure()
        self.second_step()
