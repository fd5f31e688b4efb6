"""Client models: LightningModule classifiers, a next-token language model, and Hugging Face transformers with LoRA
adapters."""

from lightfed.models.causal_lm import CausalLM
from lightfed.models.classifier import ClassificationModule
from lightfed.models.cnn import SmallCNN
from lightfed.models.lora import LoRA
from lightfed.models.mlp import MLP
from lightfed.models.next_token_lstm import NextTokenLSTM
from lightfed.models.resnet import ResNet18GN, ResNet34GN, ResNet50GN
from lightfed.models.sequence_classifier import SequenceClassifier
from lightfed.models.vgg import VGG11

__all__ = [
    "CausalLM",
    "ClassificationModule",
    "LoRA",
    "MLP",
    "NextTokenLSTM",
    "ResNet18GN",
    "ResNet34GN",
    "ResNet50GN",
    "SequenceClassifier",
    "SmallCNN",
    "VGG11",
]
