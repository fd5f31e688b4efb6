"""Datasets (in memory, or map-style read on demand), partitioners that split them across clients, augmentation."""

from lightfed.data.augmentation import Augmentation
from lightfed.data.datasets import (
    CIFAR10,
    CIFAR100,
    MNIST,
    DatasetSource,
    DatasetSplits,
    Digits,
    FashionMNIST,
    Synthetic,
    TensorSplits,
)
from lightfed.data.flower_partitioner import FlowerPartitioner
from lightfed.data.hugging_face import HuggingFace
from lightfed.data.lightning_datamodule import DataModuleSource
from lightfed.data.map_dataset import MapDataset
from lightfed.data.markov_text import MarkovText
from lightfed.data.next_token_dataset import NextTokenDataset
from lightfed.data.partitioners import (
    BalancedDirichletPartitioner,
    DirichletPartitioner,
    IIDPartitioner,
    NaturalIdPartitioner,
    Partitioner,
    PathologicalPartitioner,
    QuantitySkewPartitioner,
    ShardPartitioner,
    SizeSkewPartitioner,
)

__all__ = [
    "CIFAR10",
    "CIFAR100",
    "MNIST",
    "Augmentation",
    "BalancedDirichletPartitioner",
    "DataModuleSource",
    "DatasetSource",
    "DatasetSplits",
    "Digits",
    "DirichletPartitioner",
    "FashionMNIST",
    "FlowerPartitioner",
    "HuggingFace",
    "IIDPartitioner",
    "MapDataset",
    "MarkovText",
    "NaturalIdPartitioner",
    "NextTokenDataset",
    "Partitioner",
    "PathologicalPartitioner",
    "QuantitySkewPartitioner",
    "ShardPartitioner",
    "SizeSkewPartitioner",
    "Synthetic",
    "TensorSplits",
]
