"""A backdoor (Gu et al.'s BadNets trigger, trained in by malicious clients as in Bagdasaryan et al. 2020): a patch in
the corner of an image makes the model predict a target label; its success rate is logged each evaluation."""

from typing import Any, cast

import torch
from torch import Tensor

from lightfed.attacks.attack_success_rate import AttackSuccessRate
from lightfed.attacks.base import Attack, labelled
from lightfed.data.module import Batch
from lightfed.errors import ConfigError


class Backdoor(Attack):
    """The malicious clients train with the trigger (a ``size`` x ``size`` square of ``value`` in the bottom-right
    corner of every channel) stamped on the first ``poison_fraction`` of each batch, those examples labelled
    ``target``. After each validation, ``attack/success_rate`` is logged: the share of the validation inputs not of
    the target class that the global model, triggered, classifies as the target (the model's forward returns class
    scores). Images are ``[batch, ..., height, width]``.

    In a config:

    ```yaml
    trainer:
      attack:
        class_path: lightfed.attacks.Backdoor
        init_args: {fraction: 0.1, target: 0, size: 2, poison_fraction: 0.5}
    ```

    Examples:
        Half of a malicious batch gets the trigger and the target label:

        >>> import torch
        >>> from lightfed.attacks import Backdoor
        >>> attack = Backdoor(fraction=0.1, target=7, size=1)
        >>> inputs, labels = attack.poison_batch((torch.zeros(2, 1, 3, 3), torch.tensor([1, 2])))
        >>> labels
        tensor([7, 2])
        >>> inputs[0, 0]
        tensor([[0., 0., 0.],
                [0., 0., 0.],
                [0., 0., 1.]])
        >>> Backdoor(fraction=0.1, poison_fraction=0.0)
        Traceback (most recent call last):
        ...
        lightfed.errors.ConfigError: trainer.attack.poison_fraction must be in (0, 1], got 0.0
    """

    def __init__(
        self, fraction: float, target: int = 0, size: int = 2, value: float = 1.0, poison_fraction: float = 0.5
    ) -> None:
        """
        Args:
            fraction: Share of all clients that is malicious.
            target: The label the trigger should produce.
            size: Side of the square trigger, in pixels.
            value: The trigger's pixel value.
            poison_fraction: Share of each malicious batch that is triggered and relabelled, in (0, 1].
        """
        super().__init__(fraction)
        if not 0 < poison_fraction <= 1:
            raise ConfigError(f"trainer.attack.poison_fraction must be in (0, 1], got {poison_fraction}")
        self.target, self.size, self.value, self.poison_fraction = target, size, value, poison_fraction

    def triggered(self, inputs: Tensor) -> Tensor:
        """A copy of the images with the trigger stamped on."""
        stamped = inputs.clone()
        stamped[..., -self.size :, -self.size :] = self.value
        return stamped

    def poison_batch(self, batch: Batch) -> Batch:
        inputs, labels = labelled(batch, "Backdoor")
        count = max(1, round(self.poison_fraction * len(labels)))
        inputs, labels = inputs.clone(), labels.clone()
        inputs[:count] = self.triggered(inputs[:count])
        labels[:count] = self.target
        return inputs, labels

    def success_rate(self, module: torch.nn.Module, batches: Any) -> tuple[float, float]:
        """(hits, count) over ``batches``: triggered inputs not of the target class classified as the target."""
        hits = count = 0.0
        with torch.no_grad():
            for batch in batches:
                inputs, labels = labelled(batch, "Backdoor")
                other = labels != self.target
                scores = cast(Tensor, module(self.triggered(inputs[other])))
                hits += float((scores.argmax(-1) == self.target).sum())
                count += float(other.sum())
        return hits, count

    def callbacks(self) -> list[object]:
        return [AttackSuccessRate(self.success_rate)]
