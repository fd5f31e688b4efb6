"""The place where an algorithm changes a client's local steps."""

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from torch import Tensor

from lightfed.core.local_context import LocalContext
from lightfed.core.requirements import Requirements


@dataclass(frozen=True)
class PriorSteps:
    """Plain SGD steps a rule takes on another model of the client before its own training (Ditto's personal model):
    ``params <- params - lr g`` over the client's batches (``epochs`` passes or ``steps`` batches, shuffled with
    ``seed``, which also seeds torch's generator), g the gradient of ``training_step`` as ``rule`` adjusts it (Ditto:
    ``lightfed.local.proximal.ProximalTerm``), unclipped, nothing logged; ``buffers`` None: the client's; ``lr``
    None: the client's step size."""

    params: Tensor
    buffers: Tensor | None
    rule: "LocalRule"
    seed: int
    epochs: int | None
    steps: int | None
    lr: float | None


class LocalRule(ABC):
    """Changes every local step of one client: applied to the flat gradient between the backward pass and the step
    of the user's own optimizer. A strategy builds one per client in ``configure_client``.

    Rules that need more than the gradient keep the ``LocalContext`` given to ``start``, which is all they see of the
    client: its live ``module`` and ``flat`` views, its torch ``optimizer``, the federated ``data`` (the client's
    batches and sizes), ``autocast()``, ``scales_gradients``, this step's size ``lr`` (get or set; ``scale_lr``) and
    ``recompute_gradient()``, which evaluates the current batch again at the current parameters.

    A rule with ``takes_step = True`` moves the parameters itself in ``adjust`` (and sets ``context.lr`` to the step
    it took, which the client sums into its local time); the user's optimizer is then not stepped.

    ``requirements`` declares what the rule needs of the run (plain SGD, setting every step size, what it reports),
    part of its strategy's requirements.

    ``gradients_per_step`` counts the gradient evaluations of one step (2 for a rule that calls
    ``recompute_gradient()`` once): differential privacy sizes its noise and accounting by it.

    Examples:
        >>> import torch
        >>> from lightfed.local import LocalRule
        >>> class ScaledGradient(LocalRule):
        ...     vectorizes = True  # adjust is elementwise
        ...
        ...     def __init__(self, factor: float) -> None:
        ...         self.factor = factor
        ...
        ...     def adjust(self, grad, params):
        ...         grad.mul_(self.factor)
        >>> grad = torch.tensor([1.0, -2.0])
        >>> ScaledGradient(0.5).adjust(grad, params=torch.zeros(2))
        >>> grad
        tensor([ 0.5000, -1.0000])
    """

    requirements = Requirements()
    vectorizes = False  # runs on a client's row of stacked clients: adjust is elementwise and start and report use
    # no more of the context than ``flat.params`` and ``flat.buffers`` (the row)
    takes_step = False
    gradients_per_step = 1
    keeps_second_statistics = False  # the running statistics of the second pass a step stay (``second_point``)

    def start(self, params: Tensor, context: LocalContext) -> None:  # noqa: B027 (an optional hook)
        """Called with the global parameters (flat, read-only) and the client's local context before the first step."""

    @abstractmethod
    def adjust(self, grad: Tensor, params: Tensor) -> None:
        """Changes the flat gradient ``grad`` in place; ``params`` are the client's current flat parameters."""

    def prior_steps(self, params: Tensor) -> PriorSteps | None:
        """The steps ``start`` takes on another model from the global ``params`` (None: none), which vectorized training
        takes for many clients at once instead, handing their end back through ``prior_stepped`` before ``start``."""
        return None

    def prior_stepped(self, params: Tensor, buffers: Tensor) -> None:  # noqa: B027 (an optional hook)
        """The parameters and buffers ``prior_steps`` end with, taken for this rule: ``start`` does not take them."""

    def second_point(self, params: Tensor, grad: Tensor) -> Tensor | None:
        """Where this step wants a second gradient of its batch, from the client's current ``params`` and the step's
        gradient ``grad`` (None: nowhere): a vectorized trainer evaluates it for many clients at once and hands it to
        ``at_second_point`` instead of calling ``adjust``; one client at a time, the rule's ``adjust`` calls
        ``context.recompute_gradient()``. The running statistics that pass moves stay with
        ``keeps_second_statistics``, else the step's own pass's are restored."""
        return None

    def at_second_point(self, grad: Tensor, params: Tensor, lr: float) -> Tensor | None:
        """Takes ``grad``, the batch's gradient at ``second_point``; ``params``: the client's parameters (where its
        step's own gradient was taken), ``lr``: its step size. Returns the gradient the step takes instead of its own
        (None: its own)."""
        return None

    def observe(self, grad: Tensor) -> None:  # noqa: B027 (an optional hook)
        """Sees the flat gradient the step will use (private and noised under differential privacy), read-only."""

    def report(self) -> dict[str, Any]:
        """What the client sends back besides its delta (``ClientUpdate.report``), read after its last step."""
        return {}
