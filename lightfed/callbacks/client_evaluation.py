"""The global model on every client's own data: the distribution of a metric over clients (fairness)."""

import numpy as np
import torch
from lightning.fabric.loggers import TensorBoardLogger

from lightfed.callbacks.base import Callback
from lightfed.core.evaluation import evaluation_pass
from lightfed.errors import ConfigError


class ClientEvaluation(Callback):
    """Every ``every_n_rounds`` rounds (and after the last), evaluates the global model with ``validation_step`` on
    each client's data (clients split across processes): its held-out share with ``data.client_val_fraction`` > 0,
    else the examples it trains on. Adds ``clients/<monitor>_{mean,std,min,p10}``; TensorBoard also gets the
    histogram ``clients/<monitor>``."""

    def __init__(self, every_n_rounds: int) -> None:
        self.every_n_rounds = every_n_rounds

    def on_round_end(self, trainer, round: int, metrics: dict[str, float]) -> None:
        if not trainer.due(self.every_n_rounds):
            return
        fabric, client, monitor = trainer.fabric, trainer.client, trainer.monitor
        data = client.data
        values = torch.zeros(data.num_clients, dtype=torch.float64, device=fabric.device)
        for client_id in range(fabric.global_rank, data.num_clients, fabric.world_size):
            batches = data.client_eval_batches(client_id)
            result = evaluation_pass(fabric, client, trainer.params, trainer.buffers, "validation_step", batches).compute()
            if monitor not in result:
                raise ConfigError(f"per-client evaluation needs validation_step to log {monitor!r} (trainer.monitor)")
            values[client_id] = result[monitor]
        values = fabric.all_reduce(values, reduce_op="sum").cpu().numpy()
        for logger in trainer.loggers:
            if isinstance(logger, TensorBoardLogger) and fabric.is_global_zero:
                logger.experiment.add_histogram(f"clients/{monitor}", values, global_step=trainer.round)
        metrics.update({
            f"clients/{monitor}_mean": float(values.mean()),
            f"clients/{monitor}_std": float(values.std()),
            f"clients/{monitor}_min": float(values.min()),
            f"clients/{monitor}_p10": float(np.percentile(values, 10)),
        })
