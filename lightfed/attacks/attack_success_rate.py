"""Logs a backdoor's success rate on the global model whenever the run evaluates it."""

from collections.abc import Callable, Iterator
from typing import Any

import torch

from lightfed.callbacks import Callback

SuccessRate = Callable[[torch.nn.Module, Iterator[Any]], tuple[float, float]]  # (module, batches) -> (hits, count)


class AttackSuccessRate(Callback):
    """After each round with a validation, ``attack/success_rate``: ``success_rate`` (hits, count) of the global model
    (the weights the strategy evaluates) on every process's share of the validation split, reduced."""

    def __init__(self, success_rate: SuccessRate) -> None:
        self.success_rate = success_rate

    def on_round_end(self, trainer: Any, round: int, metrics: dict[str, float]) -> None:
        if not trainer.due(trainer.evaluation.interval):
            return
        fabric, client = trainer.fabric, trainer.workers.reference
        if not client.data.has_validation:
            return
        client.flat.load(trainer.strategy.evaluated(trainer.params), trainer.buffers)
        client.module.eval()
        batches = client.data.val_batches(fabric.global_rank, fabric.world_size)
        counts = torch.tensor(self.success_rate(client.module, batches), device=fabric.device)
        hits, count = torch.as_tensor(fabric.all_reduce(counts, reduce_op="sum")).tolist()
        metrics["attack/success_rate"] = hits / max(count, 1.0)
