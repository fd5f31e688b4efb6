"""Multilayer perceptron; with no hidden layers, multinomial logistic regression."""

from collections.abc import Sequence
from itertools import pairwise
from typing import Any

from torch import nn

from lightfed.models.classifier import ClassificationModule


class MLP(ClassificationModule):
    """Flatten, then Linear+ReLU per hidden size, then a linear layer to the logits.

    With no `hidden` layers it is multinomial logistic regression, the model of FedProx's Synthetic data.

    In a config (logistic regression on FedProx's Synthetic data):

    ```yaml
    model:
      class_path: lightfed.models.MLP
      init_args: {in_features: 60, num_classes: 10, optimizer: {class_path: torch.optim.SGD, init_args: {lr: 0.01}}}
    ```

    Examples:
        >>> import torch
        >>> from lightfed.models import MLP
        >>> model = MLP(in_features=4, num_classes=3, hidden=[8])
        >>> [type(layer).__name__ for layer in model.net]
        ['Flatten', 'Linear', 'ReLU', 'Linear']
        >>> model(torch.zeros(2, 4)).shape
        torch.Size([2, 3])
    """

    def __init__(
        self,
        in_features: int = 60,
        num_classes: int = 10,
        hidden: Sequence[int] = (),
        **kwargs: Any,
    ) -> None:
        """
        Args:
            in_features: Number of input features after flattening.
            num_classes: Number of classes.
            hidden: Sizes of the hidden layers; empty for logistic regression.
            kwargs: `optimizer`, as for `ClassificationModule` (default SGD with lr 0.05).
        """
        super().__init__(num_classes=num_classes, **kwargs)
        sizes = [in_features, *hidden]
        layers: list[nn.Module] = [nn.Flatten()]
        for size_in, size_out in pairwise(sizes):
            layers += [nn.Linear(size_in, size_out), nn.ReLU()]
        layers.append(nn.Linear(sizes[-1], num_classes))
        self.net = nn.Sequential(*layers)
