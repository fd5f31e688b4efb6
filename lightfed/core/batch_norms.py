"""The BatchNorm layers of ``torch.nn``: they mix the examples of a batch and keep running statistics as buffers."""

from torch import nn

BATCH_NORMS = (
    nn.BatchNorm1d,
    nn.BatchNorm2d,
    nn.BatchNorm3d,
    nn.SyncBatchNorm,
    nn.LazyBatchNorm1d,
    nn.LazyBatchNorm2d,
    nn.LazyBatchNorm3d,
)
