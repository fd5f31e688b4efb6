"""Small two-convolution CNN for digits, MNIST and CIFAR-shaped images."""

from typing import Any

from torch import nn

from lightfed.models.classifier import ClassificationModule


class SmallCNN(ClassificationModule):
    """Two 3x3 convs with ReLU, a 2x2 max-pool, a 4x4 adaptive average pool and a linear layer.

    The adaptive pool fixes the classifier's input size, so one model fits 8x8 digits,
    28x28 MNIST and 32x32 CIFAR. On 8x8 inputs it keeps the whole 4x4 max-pooled map.

    In a config:

    ```yaml
    model:
      class_path: lightfed.models.SmallCNN
      init_args: {num_classes: 10, in_channels: 1, optimizer: {class_path: torch.optim.SGD, init_args: {lr: 0.05}}}
    ```

    Examples:
        >>> import torch
        >>> from lightfed.models import SmallCNN
        >>> model = SmallCNN(num_classes=10, in_channels=1, width=4)
        >>> model(torch.zeros(2, 1, 8, 8)).shape, model(torch.zeros(2, 1, 28, 28)).shape  # digits and MNIST alike
        (torch.Size([2, 10]), torch.Size([2, 10]))
    """

    def __init__(
        self,
        num_classes: int = 10,
        in_channels: int = 1,
        width: int = 32,
        **kwargs: Any,
    ) -> None:
        """
        Args:
            num_classes: Number of classes.
            in_channels: Channels of the input images (1 for grayscale, 3 for RGB).
            width: Channels of the first conv; the second has twice as many.
            kwargs: `optimizer`, as for `ClassificationModule` (default SGD with lr 0.05).
        """
        super().__init__(num_classes=num_classes, **kwargs)
        self.net = nn.Sequential(
            *self.conv(in_channels, width),
            nn.ReLU(),
            *self.conv(width, 2 * width),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.AdaptiveAvgPool2d(4),
            nn.Flatten(),
            nn.Linear(2 * width * 4 * 4, num_classes),
        )

    def conv(self, in_channels: int, out_channels: int) -> list[nn.Module]:
        """A 3x3 convolution keeping the image size."""
        return [nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1)]
