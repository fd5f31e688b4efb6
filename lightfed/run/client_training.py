"""The seam for client training: what trains a process's share of a round's jobs from given weights.

The round engine sees client training only through ``ClientTraining``; ``lightfed.run.client_workers.ClientWorkers``
(one client at a time, or several in worker threads) implements it, and another implementation (several clients as
one batched computation) plugs in without any other change.
"""

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol

from torch import Tensor

from lightfed.core.logged_values import LoggedValues
from lightfed.core.messages import ClientPlan, ClientRows, ClientUpdate
from lightfed.run.client import ClientTrainer


@dataclass(frozen=True)
class TrainingJob:
    """One client's local training: its configured plan and the global weights it starts from."""

    plan: ClientPlan
    params: Tensor
    buffers: Tensor


Deliver = Callable[[int, int, ClientUpdate], None]
"""``deliver(lane, index, update)``: job ``index``'s update, handed over in ``lane``; consume it before returning."""
DeliverRows = Callable[[int, ClientRows], None]
"""``deliver_rows(lane, rows)``: the updates of jobs trained together, handed over in ``lane`` as rows; consume them
before returning."""


class ClientTraining(Protocol):
    """Trains jobs and hands each update over as it is done.

    The updates of one lane come in increasing job index and which lane trains a job depends only on its index, so a
    caller that adds each lane's updates into its own sums, and the lanes' sums in lane order, gets the same sums
    every run. ``reference`` is the client whose live module evaluation, checkpoint hooks and logging use.
    """

    @property
    def lanes(self) -> int:
        """How many lanes ``train`` delivers in (0 .. lanes - 1)."""

    @property
    def block(self) -> int:
        """How many consecutive jobs of a round train together: a process's share holds whole blocks."""

    @property
    def reference(self) -> ClientTrainer:
        """The client whose module the run evaluates and whose data it reads."""

    def train(self, jobs: Sequence[TrainingJob], deliver: Deliver, deliver_rows: DeliverRows | None = None) -> None:
        """Trains every job, calling ``deliver`` once per job, or, where given, ``deliver_rows`` once for the jobs
        trained together instead (the sums are then the same up to their float64 rounding); re-raises the first
        error."""

    def logged(self) -> LoggedValues:
        """What the modules logged while training since the last ``compute``."""

    def call(self, hook: str) -> None:
        """Calls the module hook ``hook`` (``on_fit_start``, ``on_fit_end``) of every module that trains."""

    def between_runs(self) -> AbstractContextManager[None]:
        """The context for the caller's own work between two ``train`` calls (planning, reduction, server step)."""

    def close(self) -> None:
        """Releases threads or devices held between runs."""
