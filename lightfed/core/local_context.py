"""What local rules and privacy sessions may use of the client that trains."""

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass

from lightning import LightningModule
from torch import Tensor
from torch.optim import Optimizer

from lightfed.core.flat import FlatModule
from lightfed.core.workspace import Workspace
from lightfed.data.module import FederatedDataModule


@dataclass
class LocalContext:
    """One client trainer's local training, narrowed to what local rules and privacy sessions use.

    ``module`` is the live module, its parameters and gradients viewed flat by ``flat``; ``optimizer`` is the user's
    torch optimizer (not Fabric's wrapper); ``data`` gives the client's batches and sizes. ``autocast()`` is the
    trainer's precision context for forward passes and ``backward(loss)`` its backward pass (loss-scaled under
    16-bit mixed precision, see ``scales_gradients``). ``recompute_gradient()`` evaluates the current step's batch
    again at the current parameters: its gradient (private under privacy) lands in ``flat.grads`` and it returns the
    loss; under differential privacy every call releases one more private gradient of the batch. ``workspace`` keeps
    a rule's work arrays from client to client (one client trainer runs one client at a time).
    """

    module: LightningModule
    flat: FlatModule
    optimizer: Optimizer
    data: FederatedDataModule
    scales_gradients: bool
    autocast: Callable[[], AbstractContextManager]
    backward: Callable[[Tensor], None]
    recompute_gradient: Callable[[], Tensor]
    workspace: Workspace

    @property
    def lr(self) -> float:
        """This step's size: the optimizer's learning rate (its first group's), which the client adds to its local time."""
        return self.optimizer.param_groups[0]["lr"]

    @lr.setter
    def lr(self, value: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = value

    def scale_lr(self, factor: float) -> None:
        """Multiplies the learning rate of every parameter group by ``factor``."""
        for group in self.optimizer.param_groups:
            group["lr"] *= factor
