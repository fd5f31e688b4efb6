"""Datasets held in memory and partitioners that split them across clients."""

from lightfed.data.datasets import (
    CIFAR10,
    CIFAR100,
    MNIST,
    DatasetSource,
    Digits,
    FashionMNIST,
    Synthetic,
    TensorSplits,
)
from lightfed.data.partitioners import DirichletPartitioner, IIDPartitioner, Partitioner, ShardPartitioner

__all__ = [
    "CIFAR10",
    "CIFAR100",
    "MNIST",
    "DatasetSource",
    "Digits",
    "DirichletPartitioner",
    "FashionMNIST",
    "IIDPartitioner",
    "Partitioner",
    "ShardPartitioner",
    "Synthetic",
    "TensorSplits",
]
