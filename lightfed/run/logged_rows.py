"""What the module logs at the steps of clients trained together, logged once they are done."""

import torch
from torch import Tensor

from lightfed.core.logged_values import LoggedValues


class LoggedRows:
    """Each logged name's values, one a client (or example), each with its weight, the batch size it was logged with
    (a mean and a call a step took half as long as a small MLP's optimizer step)."""

    def __init__(self) -> None:
        self.values: dict[str, list[Tensor]] = {}
        self.weights: dict[str, list[int]] = {}

    def add(self, name: str, values: Tensor, weight: int | list[int]) -> None:
        """``values``, one a client, each with ``weight`` (or its own of ``weight``)."""
        self.values.setdefault(name, []).append(values.float())
        self.weights.setdefault(name, []).extend(weight if isinstance(weight, list) else [weight] * len(values))

    def log_to(self, logged: LoggedValues) -> None:
        """Logs each name's weighted mean, with the sum of its weights as its batch size; then holds nothing."""
        for name, values in self.values.items():
            rows = torch.cat(values)
            weights = self.weights[name]
            total = sum(weights)
            mean = rows @ torch.tensor(weights, dtype=rows.dtype, device=rows.device) / total
            logged.log(name, mean, batch_size=total)
        self.values.clear()
        self.weights.clear()
