"""Which client training a run uses: one client at a time or worker threads, or one batched computation."""

from typing import Any

from lightning import LightningModule
from lightning.fabric import Fabric

from lightfed.data.module import FederatedDataModule
from lightfed.run.client_training import ClientTraining
from lightfed.run.client_workers import ClientWorkers
from lightfed.run.vectorized_clients import VectorizedClients


def client_training(
    fabric: Fabric,
    model: LightningModule,
    data: FederatedDataModule,
    clients_in_parallel: int | str,
    clients_per_round: int,
    **client: Any,
) -> ClientTraining:
    """``ClientWorkers`` (``clients_in_parallel`` an integer or "auto"), or ``VectorizedClients`` ("vectorized");
    ``client``: the ``ClientTrainer``'s other settings."""
    vectorized = clients_in_parallel == "vectorized"
    workers = ClientWorkers.build(
        fabric, model, data, 1 if vectorized else clients_in_parallel, clients_per_round, **client
    )
    return VectorizedClients(workers.reference) if vectorized else workers
