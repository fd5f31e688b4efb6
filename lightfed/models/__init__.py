"""Client models: LightningModule classifiers and a next-token language model, trained with SGD."""

from lightfed.models.classifier import ClassificationModule
from lightfed.models.cnn import SmallCNN
from lightfed.models.mlp import MLP
from lightfed.models.next_token_lstm import NextTokenLSTM
from lightfed.models.resnet import ResNet18GN, ResNet34GN, ResNet50GN
from lightfed.models.vgg import VGG11

__all__ = [
    "ClassificationModule",
    "MLP",
    "NextTokenLSTM",
    "ResNet18GN",
    "ResNet34GN",
    "ResNet50GN",
    "SmallCNN",
    "VGG11",
]
