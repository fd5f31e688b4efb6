"""A round of the engine on tiny fakes: client training that hands over given deltas, one CPU process, no trainer."""

from collections.abc import Sequence
from contextlib import nullcontext
from types import SimpleNamespace

import torch
from lightning.fabric import Fabric
from torch import Tensor

from lightfed.core.logged_values import LoggedValues
from lightfed.core.messages import ClientPlan, ClientUpdate
from lightfed.core.transforms import Pipeline, Transform
from lightfed.run.client_training import Deliver, TrainingJob
from lightfed.run.engine import Job, RoundEngine, RoundResult
from lightfed.strategies.base import ServerContext, Strategy


class GivenDeltas:
    """``ClientTraining`` whose client i sends ``deltas[i]`` from ``examples[i]`` examples, in ``lanes`` lanes (job k
    in lane k % lanes, as the worker threads deliver)."""

    def __init__(self, deltas: list[Tensor], examples: list[int], lanes: int = 1) -> None:
        self.deltas, self.examples, self.lanes, self.trained = deltas, examples, lanes, []
        self.block = 1  # no job is batched with another
        params = torch.zeros_like(deltas[0])
        flat = SimpleNamespace(params=params, buffers=torch.zeros(0))
        self.reference = SimpleNamespace(flat=flat, attack=None, module=None, data=None)

    def train(self, jobs: Sequence[TrainingJob], deliver: Deliver) -> None:
        for k, job in enumerate(jobs):
            c = job.plan.client_id
            self.trained.append(c)
            update = ClientUpdate(
                c, self.deltas[c].clone(), torch.zeros(0), self.examples[c], 1, 1.0, torch.tensor(0.0)
            )
            deliver(k % self.lanes, k, update)

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
) -> RoundResult:
    """Round 0 of ``strategy`` from ``params`` with every client of ``deltas`` (client i sends ``deltas[i]``, trained
    from weights ``staleness[i]`` versions old)."""
    fabric = Fabric(accelerator="cpu", devices=1)
    training = GivenDeltas([torch.tensor(d) for d in deltas], examples or [1] * len(deltas), lanes)
    strategy.setup(ServerContext(params, len(deltas), clients_per_round=len(deltas)))
    engine = RoundEngine(fabric, training, strategy, len(deltas), False, transforms=Pipeline(transforms))
    stale = staleness or [0] * len(deltas)
    jobs = [Job(ClientPlan(c, 0, c), params, torch.zeros(0), stale[c]) for c in range(len(deltas))]
    return engine.run(0, jobs, params, torch.zeros(0))
