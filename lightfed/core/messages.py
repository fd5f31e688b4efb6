"""Small values that travel between the server and its clients."""

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from torch import Tensor

from lightfed.core.local_rule import LocalRule


@dataclass(frozen=True)
class ClientPlan:
    """What a client is told to do in one round.

    The trainer plans each client; a strategy's ``configure_client`` may return a changed copy (``dataclasses.replace``).

    Examples:
        >>> import dataclasses
        >>> from lightfed import ClientPlan
        >>> plan = ClientPlan(client_id=3, round=0, seed=7, epochs=1)
        >>> dataclasses.replace(plan, epochs=None, steps=10, lr=0.05)
        ClientPlan(client_id=3, round=0, seed=7, epochs=None, steps=10, lr=0.05, rule=None)
    """

    client_id: int
    round: int
    seed: int
    epochs: int | None = None
    steps: int | None = None
    lr: float | None = None  # None keeps the learning rate of the module's optimizer
    rule: LocalRule | None = None  # applied to every local step, between backward and the optimizer step


@dataclass(frozen=True)
class ClientUpdate:
    """What a client sends back: its flat parameter change and how much work produced it.

    ``delta`` and ``buffers`` live in buffers the client reuses: consume them before the next client trains.

    Examples:
        >>> import torch
        >>> from lightfed import ClientUpdate
        >>> update = ClientUpdate(
        ...     client_id=3,
        ...     delta=torch.tensor([0.5, -1.0]),
        ...     buffers=torch.zeros(0),
        ...     num_examples=40,
        ...     num_steps=10,
        ...     local_time=0.5,  # 10 steps of size 0.05
        ...     train_loss=torch.tensor(0.25),
        ... )
        >>> update.num_examples * update.delta  # its part of FedAvg's weighted sum
        tensor([ 20., -40.])
    """

    client_id: int
    delta: Tensor  # final parameters minus the global parameters, flat fp32
    buffers: Tensor  # final floating-point buffers (e.g. BatchNorm statistics), flat
    num_examples: int
    num_steps: int
    local_time: float  # sum of the step sizes taken
    train_loss: Tensor  # mean training loss over the steps, 0-d, left on the device
    report: Mapping[str, Any] = field(default_factory=dict)  # what the plan's local rule reports (LocalRule.report)


@dataclass(frozen=True)
class ClientRows:
    """The updates of clients trained together, as rows: row k is what ``updates()[k]`` holds (``deltas`` and
    ``buffers`` ``[clients, n]``, ``train_losses`` ``[clients]``)."""

    client_ids: list[int]
    deltas: Tensor
    buffers: Tensor
    num_examples: list[int]
    num_steps: list[int]
    local_times: list[float]
    train_losses: Tensor
    reports: list[Mapping[str, Any]]

    def __len__(self) -> int:
        return len(self.client_ids)

    def updates(self) -> list[ClientUpdate]:
        """Each row as a ``ClientUpdate`` (views of the rows)."""
        rows = zip(self.deltas.unbind(), self.buffers.unbind(), self.train_losses.unbind(), strict=True)
        return [
            ClientUpdate(client_id, delta, buffers, examples, steps, time, loss, report)
            for client_id, (delta, buffers, loss), examples, steps, time, report in zip(
                self.client_ids, rows, self.num_examples, self.num_steps, self.local_times, self.reports, strict=True
            )
        ]
