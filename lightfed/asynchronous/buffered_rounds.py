"""Buffered asynchronous rounds on a virtual clock (``trainer.asynchrony``), a source of rounds for the one trainer:
``asynchrony.concurrency`` clients (M_c) train at once, each from the model version that was current when it started;
every ``clients_per_round`` (S) arrivals the strategy aggregates them into the next version (one round = one
aggregation, ``rounds`` = T). Job durations come from ``asynchrony.delays`` on a virtual clock.

A job is trained when it arrives, from the stored version it started from (results are the same as training it when
it starts: nothing it uses changes while it is in flight), so the S jobs of an aggregation are split across processes
like a synchronous round. Logs staleness and virtual time per aggregation, and every evaluated metric also as
``vs_time/<metric>`` with step = virtual time x 1000.
"""

import threading
from dataclasses import replace
from typing import Any, Protocol

import torch
from torch import Tensor

from lightfed.asynchronous.schedule import Asynchrony, BufferedSchedule
from lightfed.callbacks.base import Callback, TrainerState
from lightfed.core.messages import ClientUpdate
from lightfed.core.seeding import derived_seed
from lightfed.core.sums import Sums
from lightfed.errors import ConfigError
from lightfed.heterogeneity import LocalWork
from lightfed.run.client_training import TrainingJob
from lightfed.run.engine import Job, RoundEngine
from lightfed.run.rounds import SampledRounds, client_plan
from lightfed.strategies.async_base import AsyncStrategy
from lightfed.streams import Stream

TIME_STEPS = 1000  # TensorBoard steps per virtual time unit of the ``vs_time/`` scalars


class BufferedRounds(SampledRounds):
    """A round is one aggregation: the S earliest arrivals on the virtual clock, each trained from the stored model
    version it started from; after it, S idle clients start from the new version."""

    def __init__(
        self,
        seed: int,
        num_clients: int,
        buffer_size: int,
        local_work: LocalWork,
        asynchrony: Asynchrony,
        strategy: AsyncStrategy,
        device: torch.device,
    ) -> None:
        super().__init__(seed, num_clients, buffer_size, local_work)
        self.device = device
        self.schedule = BufferedSchedule(num_clients, asynchrony.concurrency, buffer_size, asynchrony.delays, seed)
        self.strategy = strategy
        self.versions: dict[int, dict[str, Any]] = {}  # the model versions that jobs in flight started from
        self.staleness: list[int] = []

    def begin(self, engine: RoundEngine, params: Tensor, buffers: Tensor) -> None:
        """The warm-up job of every client (if the strategy wants one), then the first M_c jobs."""
        strategy, fabric, training = self.strategy, engine.fabric, engine.training
        if strategy.warms_up:  # through the client-training seam; each lane's sums added in lane order
            lanes = [Sums(strategy.sum_sizes(), fabric.device) for _ in range(training.lanes)]
            everyone = [
                Job(client_plan(self.seed, self.local_work, 0, c), params, buffers) for c in range(self.num_clients)
            ]
            jobs = [
                TrainingJob(
                    strategy.configure_warm_up(
                        replace(job.plan, seed=derived_seed(self.seed, Stream.WARM_UP, job.plan.client_id))
                    ),
                    params,
                    buffers,
                )
                for job in engine.share(everyone)
            ]
            lock = threading.Lock()

            def deliver(lane: int, index: int, update: ClientUpdate) -> None:
                with lock:
                    strategy.accumulate_warm_up(lanes[lane], update)

            training.train(jobs, deliver)
            sums = lanes[0]
            for lane_sums in lanes[1:]:
                sums.buffer.add_(lane_sums.buffer)
            sums.buffer.copy_(torch.as_tensor(fabric.all_reduce(sums.buffer, reduce_op="sum")))
            strategy.finish_warm_up(sums)
            training.logged().compute(fabric, training.reference.module)  # the warm-up's losses are not round 1's
        self.schedule.start()
        self._publish(0, params, buffers)

    def jobs(self, round: int, params: Tensor, buffers: Tensor) -> list[Job]:
        arrivals = self.schedule.next_buffer()
        self.staleness = [round - job.version for job in arrivals]
        return [
            Job(
                client_plan(self.seed, self.local_work, job.version, job.client_id),
                self.versions[job.version]["params"],
                self.versions[job.version]["buffers"],
                round - job.version,
                self.versions[job.version],
            )
            for job in arrivals
        ]

    def finish(self, round: int, params: Tensor, buffers: Tensor) -> dict[str, float]:
        self.schedule.dispatch(round + 1)
        self._publish(round + 1, params, buffers)
        return {
            "async/virtual_time": self.schedule.clock,
            "async/staleness_max": float(max(self.staleness)),
            "async/staleness_mean": sum(self.staleness) / len(self.staleness),
            "async/versions_in_flight": float(len(self.versions)),
        }

    def _publish(self, version: int, params: Tensor, buffers: Tensor) -> None:
        """Stores ``version`` for the jobs that start from it and forgets the versions no job needs any more."""
        self.versions[version] = {"params": params.clone(), "buffers": buffers.clone(), **self.strategy.package()}
        needed = {job.version for job in self.schedule.in_flight}
        self.versions = {v: tensors for v, tensors in self.versions.items() if v in needed}

    def state_dict(self) -> dict[str, Any]:
        versions = {v: {k: t.cpu() for k, t in tensors.items()} for v, tensors in self.versions.items()}
        return {"schedule": self.schedule.state_dict(), "versions": versions}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "schedule" not in state:
            raise ConfigError(
                "the checkpoint was written by the synchronous trainer; resume it without `asynchronous:`"
            )
        self.schedule.load_state_dict(state["schedule"])
        self.versions = {
            v: {k: t.to(self.device) for k, t in tensors.items()} for v, tensors in state["versions"].items()
        }


class AsyncTrainerState(TrainerState, Protocol):
    """What a callback reads of the asynchronous trainer: ``TrainerState`` and the virtual clock."""

    @property
    def virtual_time(self) -> float:
        """The virtual clock at the last aggregation (``async/virtual_time``)."""


class VirtualTimeLogging(Callback):
    """Logs every evaluation again as ``vs_time/<metric>`` at step = virtual time x 1000."""

    def on_evaluation_end(self, trainer: AsyncTrainerState, metrics: dict[str, float]) -> None:  # type: ignore[override]
        step = round(trainer.virtual_time * TIME_STEPS)
        for logger in trainer.loggers:
            logger.log_metrics({f"vs_time/{k}": v for k, v in metrics.items()}, step=step)
