"""Server callback layer: one algorithm per file."""

from lightfed.strategies.base import Strategy
from lightfed.strategies.fedavg import FedAvg, fedavg_step
from lightfed.strategies.fedavgm import FedAvgM
from lightfed.strategies.fedexp import FedExP
from lightfed.strategies.fednova import FedNova
from lightfed.strategies.fedopt import FedAdagrad, FedAdam, FedOpt, FedYogi
from lightfed.strategies.fedprox import FedProx
from lightfed.strategies.scaffold import Scaffold

__all__ = [
    "FedAdagrad",
    "FedAdam",
    "FedAvg",
    "FedAvgM",
    "FedExP",
    "FedNova",
    "FedOpt",
    "FedProx",
    "FedYogi",
    "Scaffold",
    "Strategy",
    "fedavg_step",
]
