"""Which client training a run uses: one client at a time or worker threads, or one batched computation."""

from typing import Any

from lightning import LightningModule
from lightning.fabric import Fabric
from torch import nn

from lightfed.data.module import FederatedDataModule
from lightfed.privacy.dp_sgd import DPSGD
from lightfed.run.client_training import ClientTraining
from lightfed.run.client_workers import ClientWorkers, has_heavy_layers, short_cpu_steps
from lightfed.run.folded_step import may_fold
from lightfed.run.stacked_classifier import stacked_classifier
from lightfed.run.vectorizable import why_not_vectorized
from lightfed.run.vectorized_clients import VectorizedClients

VECTORIZE_FROM = 8  # clients a round from which "auto" trains a short-step model's clients together under vmap
MATMULS_FROM = 2  # the same for a model computed on batched matmuls (``stacked_classifier``, ``folded_step``)


def client_training(
    fabric: Fabric,
    model: LightningModule,
    data: FederatedDataModule,
    clients_in_parallel: int | str,
    clients_per_round: int,
    fixed_process: bool,
    **client: Any,
) -> ClientTraining:
    """``ClientWorkers`` (``clients_in_parallel`` an integer or "auto"), or ``VectorizedClients`` ("vectorized"; and
    "auto" for ``VECTORIZE_FROM`` clients a round or more, ``MATMULS_FROM`` folded or on batched matmuls, of a model that
    vectorizes and whose steps suit it, ``auto_vectorizes``; where client i must train on process i % world,
    ``fixed_process``, only folded or on batched matmuls and without DP-SGD: the clients stacked together then depend on
    the number of processes, and only there a client's update does not depend on them); ``client``: the ``ClientTrainer``'s other
    settings."""
    vectorized = clients_in_parallel == "vectorized"
    workers = ClientWorkers.build(
        fabric, model, data, 1 if vectorized else clients_in_parallel, clients_per_round, **client
    )
    if vectorized:
        return VectorizedClients(workers.reference)
    one_call = stacked_classifier(model) is not None or may_fold(model)  # a step's clients in one padded call
    least = MATMULS_FROM if one_call else VECTORIZE_FROM
    # DP-SGD's examples' gradients are taken under vmap, whose rounding depends on the examples stacked
    composable = one_call and not isinstance(workers.reference.privacy, DPSGD)
    auto = clients_in_parallel == "auto" and clients_per_round >= least and (composable or not fixed_process)
    if auto and auto_vectorizes(fabric, model, data) and why_not_vectorized(workers.reference) is None:
        return VectorizedClients(workers.reference, auto=True, composed=fixed_process)
    return workers


def auto_vectorizes(fabric: Fabric, model: LightningModule, data: FederatedDataModule) -> bool:
    """Whether "auto" may train ``model``'s clients vectorized: on a CPU where its steps are short
    (``short_cpu_steps``); on a GPU where it has no convolution, recurrence or attention (``has_heavy_layers``), no
    dropout (a GPU draws a stacked model's masks otherwise than one client at a time) and no DataLoader workers: a
    small MLP's clients trained vectorized took a twelfth of one at a time's round on an H200, and convolutions are
    not yet measured with ``exact_convolutions``' settings (docs/results/performance-gpu.md)."""
    if fabric.device.type == "cpu":
        return short_cpu_steps(fabric, model, data)
    draws = any(isinstance(layer, nn.Dropout) and layer.p > 0 for layer in model.modules())
    return data.num_workers == 0 and not has_heavy_layers(model) and not draws
