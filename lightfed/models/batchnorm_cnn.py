"""SmallCNN with a BatchNorm layer after each convolution, for FedBN and the personalization studies."""

from torch import nn

from lightfed.models.cnn import SmallCNN


class SmallBNCNN(SmallCNN):
    """Two 3x3 convs, each followed by BatchNorm and ReLU, a 2x2 max-pool, a 4x4 adaptive average pool and a linear
    head ``net.9``: SmallCNN with BatchNorm. Its personal head for FedPer and FedRep is ``personal_parameters``."""

    personal_parameters = ["net.9.*"]

    def conv(self, in_channels: int, out_channels: int) -> list[nn.Module]:
        """A 3x3 convolution followed by BatchNorm."""
        return [*super().conv(in_channels, out_channels), nn.BatchNorm2d(out_channels)]
