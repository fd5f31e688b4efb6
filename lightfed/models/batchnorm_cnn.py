"""SmallCNN with a BatchNorm layer after each convolution, for FedBN and the personalization studies."""

from typing import Any

from torch import nn

from lightfed.models.classifier import ClassificationModule


class SmallBNCNN(ClassificationModule):
    """Two 3x3 convs, each followed by BatchNorm and ReLU, a 2x2 max-pool, a 4x4 adaptive average pool and a linear
    head ``net.9``: SmallCNN with BatchNorm. Its personal head for FedPer and FedRep is ``personal_parameters``."""

    personal_parameters = ["net.9.*"]

    def __init__(self, num_classes: int = 10, in_channels: int = 1, width: int = 32, **kwargs: Any) -> None:
        """
        Args:
            num_classes: Number of classes.
            in_channels: Channels of the input images (1 for grayscale, 3 for RGB).
            width: Channels of the first conv; the second has twice as many.
            kwargs: `optimizer`, as for `ClassificationModule` (default SGD with lr 0.05).
        """
        super().__init__(num_classes=num_classes, **kwargs)
        self.net = nn.Sequential(
            nn.Conv2d(in_channels, width, kernel_size=3, padding=1),
            nn.BatchNorm2d(width),
            nn.ReLU(),
            nn.Conv2d(width, 2 * width, kernel_size=3, padding=1),
            nn.BatchNorm2d(2 * width),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.AdaptiveAvgPool2d(4),
            nn.Flatten(),
            nn.Linear(2 * width * 4 * 4, num_classes),
        )
