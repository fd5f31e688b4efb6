"""torchvision ResNets (18, 34, 50) with GroupNorm and the CIFAR stem."""

from functools import partial
from typing import Any

from torch import nn
from torchvision.models import resnet18, resnet34, resnet50

from lightfed.models.classifier import ClassificationModule


class ResNet18GN(ClassificationModule):
    """torchvision ResNet-18 with GroupNorm instead of BatchNorm, for 32x32 images.

    GroupNorm keeps no running statistics, so averaging client models stays meaningful
    under non-IID data. The CIFAR stem replaces the 7x7 stride-2 conv with a 3x3
    stride-1 conv and drops the max-pool.

    In a config:

    ```yaml
    model:
      class_path: lightfed.models.ResNet18GN
      init_args: {num_classes: 10, optimizer: {class_path: torch.optim.SGD, init_args: {lr: 0.01}}}
    ```

    Examples:
        >>> import torch
        >>> from lightfed.models import ResNet18GN
        >>> with torch.device("meta"):  # shapes only, no weights drawn
        ...     model = ResNet18GN(num_classes=10)
        >>> model.net.conv1.stride, model.net.maxpool, model.net.bn1  # the CIFAR stem, GroupNorm
        ((1, 1), Identity(), GroupNorm(2, 64, eps=1e-05, affine=True, bias=True))
    """

    constructor = staticmethod(resnet18)

    def __init__(
        self,
        num_classes: int = 10,
        in_channels: int = 3,
        groups: int = 2,
        **kwargs: Any,
    ) -> None:
        """
        Args:
            num_classes: Number of classes.
            in_channels: Channels of the input images.
            groups: GroupNorm groups; must divide 64.
            kwargs: `optimizer`, as for `ClassificationModule` (default SGD with lr 0.05).
        """
        super().__init__(num_classes=num_classes, **kwargs)
        self.net = self.constructor(weights=None, num_classes=num_classes, norm_layer=partial(nn.GroupNorm, groups))
        self.net.conv1 = nn.Conv2d(in_channels, 64, kernel_size=3, stride=1, padding=1, bias=False)
        nn.init.kaiming_normal_(self.net.conv1.weight, mode="fan_out", nonlinearity="relu")
        self.net.maxpool = nn.Identity()


class ResNet34GN(ResNet18GN):
    """torchvision ResNet-34 with GroupNorm and the CIFAR stem (arguments as ``ResNet18GN``).

    In a config:

    ```yaml
    model:
      class_path: lightfed.models.ResNet34GN
      init_args: {num_classes: 100, groups: 2}
    ```

    Examples:
        >>> import torch
        >>> from lightfed.models import ResNet34GN
        >>> with torch.device("meta"):  # shapes only, no weights drawn
        ...     model = ResNet34GN(num_classes=100)
        >>> f"{sum(parameter.numel() for parameter in model.parameters()):,}"
        '21,328,292'
    """

    constructor = staticmethod(resnet34)


class ResNet50GN(ResNet18GN):
    """torchvision ResNet-50 (bottleneck blocks) with GroupNorm and the CIFAR stem (arguments as ``ResNet18GN``).

    In a config:

    ```yaml
    model:
      class_path: lightfed.models.ResNet50GN
      init_args: {num_classes: 100, groups: 2}
    ```

    Examples:
        >>> import torch
        >>> from lightfed.models import ResNet50GN
        >>> with torch.device("meta"):  # shapes only, no weights drawn
        ...     model = ResNet50GN(num_classes=100)
        >>> model.net.fc
        Linear(in_features=2048, out_features=100, bias=True)
    """

    constructor = staticmethod(resnet50)
