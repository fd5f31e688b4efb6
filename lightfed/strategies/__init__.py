"""Server algorithms, one per file: the sums path (``Strategy``) and the sharded path (``ShardedStrategy``)."""

from lightfed.strategies.adamasfl import AdaMasFL
from lightfed.ecado.adaptive_fedecado import AdaptiveFedECADO
from lightfed.strategies.adaptfed import AdaptFed
from lightfed.strategies.async_base import AsyncSetting, AsyncStrategy
from lightfed.strategies.base import Strategy
from lightfed.strategies.ca2fl import CA2FL
from lightfed.strategies.fadas import FADAS
from lightfed.strategies.fedavg import FedAvg, fedavg_step
from lightfed.strategies.fedavgm import FedAvgM
from lightfed.ecado.fedecado import FedECADO
from lightfed.strategies.fedbuff import FedBuff
from lightfed.strategies.fedexp import FedExP
from lightfed.strategies.fednova import FedNova
from lightfed.strategies.fedopt import FedAdagrad, FedAdam, FedOpt, FedYogi
from lightfed.strategies.fedprox import FedProx
from lightfed.strategies.fedsam import FedASAM, FedSAM
from lightfed.strategies.masfl import MasFL
from lightfed.strategies.robust import CoordinateMedian, TrimmedMean
from lightfed.strategies.scaffold import Scaffold
from lightfed.strategies.sharded_base import ShardedRound, ShardedStrategy

__all__ = [
    "AdaMasFL",
    "AdaptiveFedECADO",
    "AdaptFed",
    "AsyncSetting",
    "AsyncStrategy",
    "CA2FL",
    "CoordinateMedian",
    "FADAS",
    "FedAdagrad",
    "FedAdam",
    "FedASAM",
    "FedAvg",
    "FedAvgM",
    "FedECADO",
    "FedBuff",
    "FedExP",
    "FedNova",
    "FedOpt",
    "FedProx",
    "FedSAM",
    "FedYogi",
    "MasFL",
    "Scaffold",
    "ShardedRound",
    "ShardedStrategy",
    "Strategy",
    "TrimmedMean",
    "fedavg_step",
]
