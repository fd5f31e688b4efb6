"""Base LightningModule for the classifiers that lightfed clients train."""

from typing import Any

import torch
import torch.nn.functional as F
from lightning import LightningModule
from lightning.pytorch.cli import OptimizerCallable
from torch import Tensor, nn
from torchmetrics.classification import MulticlassAccuracy


class ClassificationModule(LightningModule):
    """Classifier of `(x, y)` batches (others through `logits_and_targets`): cross-entropy loss, the optimizer it is
    given (SGD with lr 0.05 by default), accuracy on val and test.

    Subclasses call `super().__init__(...)` first and then build `self.net`, the module
    mapping inputs to logits. `save_hyperparameters()` here also records the subclass's
    constructor arguments, all but the optimizer (a callable; a config records it as
    `optimizer: {class_path, init_args}`).

    A model of your own subclasses it, and a config names it under ``model``:

    ```yaml
    model:
      class_path: my_project.models.Linear
      init_args: {in_features: 4, num_classes: 3, optimizer: {class_path: torch.optim.SGD, init_args: {lr: 0.1}}}
    ```

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> from lightfed.models import ClassificationModule
        >>> class Linear(ClassificationModule):
        ...     def __init__(self, in_features=4, num_classes=3, **kwargs):
        ...         super().__init__(num_classes=num_classes, **kwargs)
        ...         self.net = nn.Linear(in_features, num_classes)
        >>> model = Linear()
        >>> dict(model.hparams)  # the subclass's arguments, recorded by the base
        {'num_classes': 3, 'in_features': 4}
        >>> logits, targets, batch_size = model.logits_and_targets((torch.zeros(2, 4), torch.tensor([0, 2])))
        >>> logits.shape, batch_size
        (torch.Size([2, 3]), 2)
        >>> optimizer = model.configure_optimizers()
        >>> type(optimizer).__name__, optimizer.defaults["lr"]
        ('SGD', 0.05)
    """

    net: nn.Module

    def __init__(
        self,
        num_classes: int,
        optimizer: OptimizerCallable = lambda params: torch.optim.SGD(params, lr=0.05),
    ) -> None:
        """
        Args:
            num_classes: Number of classes.
            optimizer: Builds the clients' optimizer from the parameters, e.g.
                `functools.partial(torch.optim.SGD, lr=0.1, momentum=0.9)`; in a config
                `{class_path: torch.optim.SGD, init_args: {lr: 0.1, momentum: 0.9}}`.
        """
        super().__init__()
        self.save_hyperparameters(ignore=["optimizer"])
        self.optimizer = optimizer
        self.val_acc = MulticlassAccuracy(num_classes, average="micro")
        self.test_acc = MulticlassAccuracy(num_classes, average="micro")

    def forward(self, x: Tensor) -> Tensor:
        """Return the logits of `x`."""
        return self.net(x)

    def logits_and_targets(self, batch: Any) -> tuple[Tensor, Tensor, int]:
        """The batch's logits `(n, num_classes)`, class targets `(n,)` and number of examples.

        Here `batch` is an `(x, y)` tuple; a subclass with another batch structure overrides this alone.
        """
        x, y = batch
        return self(x), y, y.size(0)

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        """Return the cross-entropy loss of the batch and log it as `train_loss`."""
        logits, targets, batch_size = self.logits_and_targets(batch)
        loss = F.cross_entropy(logits, targets)
        self.log("train_loss", loss, batch_size=batch_size)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        """Log `val_loss` and `val_acc`."""
        self._evaluate(batch, "val", self.val_acc)

    def test_step(self, batch: Any, batch_idx: int) -> None:
        """Log `test_loss` and `test_acc`."""
        self._evaluate(batch, "test", self.test_acc)

    def _evaluate(self, batch: Any, prefix: str, accuracy: MulticlassAccuracy) -> None:
        """Log `{prefix}_loss` and update and log the `{prefix}_acc` metric."""
        logits, targets, batch_size = self.logits_and_targets(batch)
        self.log(f"{prefix}_loss", F.cross_entropy(logits, targets), batch_size=batch_size)
        accuracy.update(logits, targets)
        self.log(f"{prefix}_acc", accuracy, batch_size=batch_size)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        """The configured optimizer over the parameters that train (a frozen base is left out)."""
        return self.optimizer([p for p in self.parameters() if p.requires_grad])
