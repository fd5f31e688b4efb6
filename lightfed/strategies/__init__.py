"""Server algorithms, one per file, on one of three server paths: ``SumsStrategy``, ``ShardedStrategy`` and
``AsyncStrategy`` (all ``Strategy``); what changes an update before the strategy takes it is a transform
(``lightfed.core.transforms``)."""

from lightfed.ecado.adaptive_fedecado import AdaptiveFedECADO
from lightfed.ecado.fedecado import FedECADO
from lightfed.strategies.adamasfl import AdaMasFL
from lightfed.strategies.adaptfed import AdaptFed
from lightfed.strategies.agnostic_fl import AgnosticFL
from lightfed.strategies.async_base import AsyncSetting, AsyncStrategy
from lightfed.strategies.base import ServerContext, Strategy, SumsStrategy
from lightfed.strategies.bulyan import Bulyan
from lightfed.strategies.ca2fl import CA2FL
from lightfed.strategies.centered_clipping import CenteredClipping
from lightfed.strategies.fadas import FADAS
from lightfed.strategies.fedavg import FedAvg, fedavg_step
from lightfed.strategies.fedavgm import FedAvgM
from lightfed.strategies.fedbuff import FedBuff
from lightfed.strategies.fedexp import FedExP
from lightfed.strategies.fednova import FedNova
from lightfed.strategies.fedopt import FedAdagrad, FedAdam, FedOpt, FedYogi
from lightfed.strategies.fedprox import FedProx
from lightfed.strategies.fedsam import FedASAM, FedSAM
from lightfed.strategies.geometric_median import GeometricMedian
from lightfed.strategies.krum import Krum, MultiKrum
from lightfed.strategies.masfl import MasFL
from lightfed.strategies.qfedavg import QFedAvg
from lightfed.strategies.robust import CoordinateMedian, TrimmedMean
from lightfed.strategies.scaffold import Scaffold
from lightfed.strategies.sharded_base import ShardedRound, ShardedStrategy

__all__ = [
    "CA2FL",
    "FADAS",
    "AdaMasFL",
    "AdaptFed",
    "AdaptiveFedECADO",
    "AgnosticFL",
    "AsyncSetting",
    "AsyncStrategy",
    "Bulyan",
    "CenteredClipping",
    "CoordinateMedian",
    "FedASAM",
    "FedAdagrad",
    "FedAdam",
    "FedAvg",
    "FedAvgM",
    "FedBuff",
    "FedECADO",
    "FedExP",
    "FedNova",
    "FedOpt",
    "FedProx",
    "FedSAM",
    "FedYogi",
    "GeometricMedian",
    "Krum",
    "MasFL",
    "MultiKrum",
    "QFedAvg",
    "Scaffold",
    "ServerContext",
    "ShardedRound",
    "ShardedStrategy",
    "Strategy",
    "SumsStrategy",
    "TrimmedMean",
    "fedavg_step",
]
