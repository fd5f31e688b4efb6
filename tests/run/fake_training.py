"""A round of the engine on tiny fakes: client training that hands over given deltas, one CPU process, no trainer."""

from collections.abc import Sequence
from contextlib import nullcontext
from types import SimpleNamespace

import torch
from lightning.fabric import Fabric
from torch import Tensor

from lightfed.core.logged_values import LoggedValues
from lightfed.core.messages import ClientPlan, ClientRows, ClientUpdate
from lightfed.core.transforms import Pipeline, Transform
from lightfed.run.client_training import Deliver, DeliverRows, TrainingJob
from lightfed.run.engine import Job, RoundEngine, RoundResult
from lightfed.strategies.base import ServerContext, Strategy


class GivenDeltas:
    """``ClientTraining`` whose client i sends ``deltas[i]`` from ``examples[i]`` examples, in ``lanes`` lanes (job k
    in lane k % lanes, as the worker threads deliver)."""

    def __init__(self, deltas: list[Tensor], examples: list[int], lanes: int = 1, as_rows: bool = False) -> None:
        self.deltas, self.examples, self.lanes, self.trained = deltas, examples, lanes, []
        self.as_rows, self.offered_rows = as_rows, None  # hands every update over as rows where the engine takes them
        self.block = 1  # no job is batched with another
        params = torch.zeros_like(deltas[0])
        flat = SimpleNamespace(params=params, buffers=torch.zeros(0))
        self.reference = SimpleNamespace(flat=flat, attack=None, module=None, data=None)

    def train(self, jobs: Sequence[TrainingJob], deliver: Deliver, deliver_rows: DeliverRows | None = None) -> None:
        self.offered_rows = deliver_rows is not None
        if self.as_rows and deliver_rows is not None:
            clients = [job.plan.client_id for job in jobs]
            self.trained += clients
            deliver_rows(0, self.rows(clients))
            return
        for k, job in enumerate(jobs):
            c = job.plan.client_id
            self.trained.append(c)
            update = ClientUpdate(
                c, self.deltas[c].clone(), torch.zeros(0), self.examples[c], 1, 1.0, torch.tensor(float(c))
            )
            deliver(k % self.lanes, k, update)

    def rows(self, clients: list[int]) -> ClientRows:
        """The updates of ``clients`` as rows, client c's training loss c (one step each)."""
        return ClientRows(
            clients,
            torch.stack([self.deltas[c] for c in clients]),
            torch.zeros(len(clients), 0),
            [self.examples[c] for c in clients],
            [1] * len(clients),
            [1.0] * len(clients),
            torch.tensor(clients, dtype=torch.float32),
            [{} for _ in clients],
        )

    def logged(self) -> LoggedValues:
        return LoggedValues()

    def call(self, hook: str) -> None:
        pass

    def between_runs(self):
        return nullcontext()

    def close(self) -> None:
        pass


def engine_round(
    strategy: Strategy,
    params: Tensor,
    deltas: list[list[float]],
    transforms: Sequence[Transform] = (),
    examples: list[int] | None = None,
    lanes: int = 1,
    staleness: list[int] | None = None,
    training: GivenDeltas | None = None,
) -> RoundResult:
    """Round 0 of ``strategy`` from ``params`` with every client of ``deltas`` (client i sends ``deltas[i]``, trained
    from weights ``staleness[i]`` versions old; ``training``: a given one of these deltas)."""
    fabric = Fabric(accelerator="cpu", devices=1)
    training = training or GivenDeltas([torch.tensor(d) for d in deltas], examples or [1] * len(deltas), lanes)
    strategy.setup(ServerContext(params, len(deltas), clients_per_round=len(deltas)))
    engine = RoundEngine(fabric, training, strategy, len(deltas), False, transforms=Pipeline(transforms))
    stale = staleness or [0] * len(deltas)
    jobs = [Job(ClientPlan(c, 0, c), params, torch.zeros(0), stale[c]) for c in range(len(deltas))]
    return engine.run(0, jobs, params, torch.zeros(0))
