"""A client's local context around a three-weight quadratic, so that a local rule runs on real flat views with
gradients known by hand: F(w) = 0.5 ||w - t||^2 on a batch t, grad F(w) = w - t."""

from contextlib import nullcontext
from types import SimpleNamespace
from typing import Any

import torch
from lightning import LightningModule
from torch import Tensor

from lightfed.core.flat import FlatModule
from lightfed.core.local_context import LocalContext
from lightfed.core.local_rule import LocalRule
from lightfed.core.requirements import Requirements
from lightfed.core.workspace import Workspace


class Quadratic(LightningModule):
    """Weights ``w`` (3) and a float buffer ``b`` (2) that every training step adds 1 to; records each step's
    parameters and mode."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(3))
        self.register_buffer("b", torch.zeros(2))
        self.steps: list[tuple[list[float], bool]] = []

    def training_step(self, batch: Tensor, batch_idx: int) -> Tensor:
        self.steps.append((self.w.detach().tolist(), self.training))
        with torch.no_grad():
            self.b.add_(1.0)
        loss = 0.5 * ((self.w - batch) ** 2).sum()
        return loss


class Client:
    """A live ``Quadratic`` behind a ``LocalContext`` (SGD at ``lr``); ``batch`` is the step's batch, which
    ``recompute_gradient`` evaluates again (its gradient lands in ``flat.grads``), recording the parameters it saw."""

    def __init__(
        self, w: list[float], b: list[float] | None = None, lr: float = 0.1, batches: list[Tensor] | None = None
    ) -> None:
        self.module = Quadratic()
        self.flat = FlatModule(self.module, torch.device("cpu"))
        self.flat.load(torch.tensor(w), torch.tensor(b if b is not None else [0.0, 0.0]))
        self.batch = torch.zeros(3)
        self.recomputed_at: list[Tensor] = []
        self.batches_asked: list[tuple[int, torch.Generator, int | None, int | None]] = []
        self.batches = batches if batches is not None else []
        self.context = LocalContext(
            module=self.module,
            flat=self.flat,
            optimizer=torch.optim.SGD(self.module.parameters(), lr=lr),
            data=SimpleNamespace(client_batches=self._client_batches),  # type: ignore[arg-type]
            scales_gradients=False,
            autocast=nullcontext,
            backward=lambda loss: loss.backward(),
            recompute_gradient=self._recompute_gradient,
            workspace=Workspace(),
        )

    def _client_batches(self, client_id: int, generator: torch.Generator, epochs: int | None, steps: int | None):
        self.batches_asked.append((client_id, generator, epochs, steps))
        return iter(self.batches)

    def _recompute_gradient(self) -> Tensor:
        self.recomputed_at.append(self.flat.params.clone())
        self.flat.zero_grad()
        loss = self.module.training_step(self.batch, 0)
        loss.backward()
        return loss.detach()

    def gradient(self, batch: list[float]) -> Tensor:
        """The step's first gradient: ``batch`` becomes the step's batch, its gradient at the current weights is in
        ``flat.grads`` (not counted in ``recomputed_at``)."""
        self.batch = torch.tensor(batch)
        self._recompute_gradient()
        self.recomputed_at.pop()
        return self.flat.grads


class Recorder(LocalRule):
    """An inner rule that records its calls, adds ``add`` to the gradient, and reports ``{"inner": 1, "personal": -1}``."""

    requirements = Requirements(reads_each_update=True)
    takes_step = True
    gradients_per_step = 3

    def __init__(self, add: float = 0.0) -> None:
        self.add = add
        self.calls: list[tuple[str, Any]] = []

    def start(self, params: Tensor, context: LocalContext) -> None:
        self.calls.append(("start", params.clone()))

    def adjust(self, grad: Tensor, params: Tensor) -> None:
        self.calls.append(("adjust", grad.clone()))
        grad.add_(self.add)

    def observe(self, grad: Tensor) -> None:
        self.calls.append(("observe", grad.clone()))

    def report(self) -> dict[str, Any]:
        return {"inner": 1, "personal": -1}
