"""lightfed: federated learning with LightningModule clients on Lightning Fabric."""

from lightfed.asynchronous.schedule import Asynchrony
from lightfed.callbacks import Callback
from lightfed.core.messages import ClientPlan, ClientUpdate
from lightfed.core.sums import Sums
from lightfed.data.module import FederatedDataModule
from lightfed.errors import ConfigError, DatasetNotFoundError, DivergenceError, LightfedError
from lightfed.run.settings import ClientStateSettings, EvaluationSettings, LocalTraining, OutputSettings, Processes
from lightfed.strategies import FedAvg, ShardedRound, ShardedStrategy, Strategy
from lightfed.trainer import FederatedTrainer

__all__ = [
    "Asynchrony",
    "Callback",
    "ClientStateSettings",
    "ClientPlan",
    "ClientUpdate",
    "ConfigError",
    "DatasetNotFoundError",
    "DivergenceError",
    "EvaluationSettings",
    "FedAvg",
    "FederatedDataModule",
    "FederatedTrainer",
    "LightfedError",
    "LocalTraining",
    "OutputSettings",
    "Processes",
    "ShardedRound",
    "ShardedStrategy",
    "Strategy",
    "Sums",
]
