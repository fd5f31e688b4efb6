"""The trainer's refusals: settings that cannot work, checked before anything of a run is written."""

import torch
from lightning import Fabric, LightningModule
from lightning.pytorch.utilities.model_helpers import is_overridden

from lightfed.core.federated_weights import frozen_fingerprint, train_only
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


def check_automatic_optimization(model: LightningModule) -> None:
    """Refuses a model that optimizes itself (``automatic_optimization = False``): lightfed's client loop steps the
    optimizer."""
    if not model.automatic_optimization:
        raise ConfigError(
            f"{type(model).__name__} sets automatic_optimization = False: lightfed's client loop steps the optimizer "
            "itself; return the loss from training_step and leave automatic_optimization true"
        )


def check_parameters(model: LightningModule) -> None:
    """Refuses a model with nothing to train: no parameter that requires a gradient."""
    if not any(parameter.requires_grad for parameter in model.parameters()):
        raise ConfigError(f"{type(model).__name__} has no trainable parameters: a client would have nothing to train")


def frozen_weights(fabric: Fabric, model: LightningModule, trained: list[str] | None) -> dict[str, str]:
    """Freezes the parameters ``trained`` (``trainer.trained_parameters``) leaves out; the frozen weights' checksum
    (``frozen_fingerprint``), refused on every process when a process holds other frozen weights than process 0's:
    each would train the federated adapters over another base."""
    if trained is not None:
        train_only(model, trained)
    frozen = frozen_fingerprint(model)
    if fabric.world_size > 1:
        differs = fabric.broadcast(frozen) != frozen
        if float(torch.as_tensor(fabric.all_reduce(torch.tensor(float(differs)), reduce_op="sum"))) > 0:
            raise ConfigError(
                f"the frozen weights of {type(model).__name__} differ between processes: build them the same on every "
                "process (from one local path, or from the config with the run's seed)"
            )
    return frozen
