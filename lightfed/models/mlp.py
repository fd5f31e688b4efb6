"""Multilayer perceptron; with no hidden layers, multinomial logistic regression."""

from torch import nn

from lightfed.models.classifier import ClassificationModule


class MLP(ClassificationModule):
    """Flatten, then Linear+ReLU per hidden size, then a linear layer to the logits.

    With `hidden=[]` it is multinomial logistic regression, the model of FedProx's Synthetic data.
    """

    def __init__(
        self,
        in_features: int = 60,
        num_classes: int = 10,
        hidden: list[int] = [],
        lr: float = 0.05,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
    ) -> None:
        """
        Args:
            in_features: Number of input features after flattening.
            num_classes: Number of classes.
            hidden: Sizes of the hidden layers; empty for logistic regression.
            lr: SGD learning rate.
            momentum: SGD momentum.
            weight_decay: SGD weight decay (L2 penalty).
        """
        super().__init__(num_classes=num_classes, lr=lr, momentum=momentum, weight_decay=weight_decay)
        sizes = [in_features, *hidden]
        layers: list[nn.Module] = [nn.Flatten()]
        for size_in, size_out in zip(sizes, sizes[1:]):
            layers += [nn.Linear(size_in, size_out), nn.ReLU()]
        layers.append(nn.Linear(sizes[-1], num_classes))
        self.net = nn.Sequential(*layers)
