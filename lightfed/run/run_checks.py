"""The trainer's refusals: settings that cannot work, checked before anything of a run is written."""

from lightning import LightningModule
from lightning.pytorch.utilities.model_helpers import is_overridden

from lightfed.data.module import FederatedDataModule
from lightfed.errors import ConfigError


def check_clients(clients_per_round: int, data: FederatedDataModule) -> None:
    if clients_per_round > data.num_clients:
        raise ConfigError(
            f"trainer.clients_per_round ({clients_per_round}) is larger than the number of clients "
            f"({data.num_clients}); lower it or add clients"
        )


def check_step(model: LightningModule, step: str) -> None:
    """Refuses a model without ``step``, the global model's evaluation."""
    if not is_overridden(step, model, LightningModule):
        raise ConfigError(f"{type(model).__name__} must define {step} to evaluate the global model")


def check_parameters(model: LightningModule) -> None:
    """Refuses a model with nothing to train: no parameter that requires a gradient."""
    if not any(parameter.requires_grad for parameter in model.parameters()):
        raise ConfigError(f"{type(model).__name__} has no trainable parameters: a client would have nothing to train")
