"""Server callback layer: one algorithm per file."""

from lightfed.strategies.base import Strategy
from lightfed.strategies.fedavg import FedAvg, fedavg_step

__all__ = ["FedAvg", "Strategy", "fedavg_step"]
