"""VGG-11 with the CIFAR-style classifier."""

from typing import Any

from torch import nn
from torchvision.models.vgg import cfgs, make_layers

from lightfed.models.classifier import ClassificationModule


class VGG11(ClassificationModule):
    """torchvision's VGG-11 features (config "A") and a 512-512-classes classifier for 32x32 images.

    In a config:

    ```yaml
    model:
      class_path: lightfed.models.VGG11
      init_args: {num_classes: 10, batch_norm: false}
    ```

    Examples:
        >>> import torch
        >>> from lightfed.models import VGG11
        >>> with torch.device("meta"):  # shapes only, no weights drawn
        ...     model = VGG11(num_classes=10, in_channels=1)
        ...     logits = model(torch.zeros(2, 1, 32, 32))
        >>> logits.shape, model.net[0][0].in_channels
        (torch.Size([2, 10]), 1)
    """

    def __init__(
        self,
        num_classes: int = 10,
        in_channels: int = 3,
        batch_norm: bool = False,
        **kwargs: Any,
    ) -> None:
        """
        Args:
            num_classes: Number of classes.
            in_channels: Channels of the input images.
            batch_norm: Add BatchNorm after each conv.
            kwargs: `optimizer`, as for `ClassificationModule` (default SGD with lr 0.05).
        """
        super().__init__(num_classes=num_classes, **kwargs)
        features = make_layers(cfgs["A"], batch_norm=batch_norm)
        if in_channels != 3:  # make_layers always builds a 3-channel first conv
            features[0] = nn.Conv2d(in_channels, 64, kernel_size=3, padding=1)
        self.net = nn.Sequential(
            features,
            nn.Flatten(),
            nn.Linear(512, 512),
            nn.ReLU(inplace=True),
            nn.Linear(512, num_classes),
        )
