"""Label flipping: a malicious client trains on its data with every label y replaced by C - 1 - y."""

from lightfed.attacks.base import Attack, labelled
from lightfed.data.module import Batch


class LabelFlipping(Attack):
    """The malicious clients train honestly on labels y -> num_classes - 1 - y (Fang et al. 2020; Tolpegin et al.
    2020 flip one source class only).

    In a config:

    ```yaml
    trainer:
      attack:
        class_path: lightfed.attacks.LabelFlipping
        init_args: {fraction: 0.2, num_classes: 10}
    ```

    Examples:
        >>> import torch
        >>> from lightfed.attacks import LabelFlipping
        >>> attack = LabelFlipping(fraction=0.2, num_classes=10)
        >>> inputs, labels = attack.poison_batch((torch.zeros(3, 4), torch.tensor([0, 3, 9])))
        >>> labels
        tensor([9, 6, 0])
    """

    def __init__(self, fraction: float, num_classes: int) -> None:
        """
        Args:
            fraction: Share of all clients that is malicious.
            num_classes: Number of classes C of the labels.
        """
        super().__init__(fraction)
        self.num_classes = num_classes

    def poison_batch(self, batch: Batch) -> Batch:
        inputs, labels = labelled(batch, "LabelFlipping")
        return inputs, self.num_classes - 1 - labels
