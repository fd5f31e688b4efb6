"""AsyncFederatedTrainer: buffered asynchronous FL on a virtual clock, through the synchronous trainer's loop."""

from dataclasses import replace
from typing import Any

import torch
from lightning import LightningModule
from torch import Tensor

from lightfed.asynchronous.schedule import Asynchrony, BufferedSchedule
from lightfed.core.client import ClientTrainer
from lightfed.data.module import FederatedDataModule
from lightfed.errors import ConfigError, DivergenceError
from lightfed.core.seeding import derived_seed
from lightfed.strategies.async_base import AsyncSetting, AsyncStrategy
from lightfed.strategies.base import Strategy
from lightfed.core.sums import Sums
from lightfed.trainer import FederatedTrainer

WARM_UP = 103  # the clients' warm-up jobs before the first aggregation
TIME_STEPS = 1000  # TensorBoard steps per virtual time unit of the ``vs_time/`` scalars


class AsyncFederatedTrainer(FederatedTrainer):
    """Buffered asynchronous training: ``asynchrony.concurrency`` clients (M_c) train at once, each from the model
    version that was current when it started; every ``clients_per_round`` (S) arrivals the strategy aggregates them
    into the next version (one round = one aggregation, ``rounds`` = T). Job durations come from
    ``asynchrony.delays`` on a virtual clock.

    A job is trained when it arrives, from the stored version it started from (results are the same as training it
    when it starts: nothing it uses changes while it is in flight), so the S jobs of an aggregation are split across
    processes like a synchronous round. Logs staleness and virtual time per aggregation, and every evaluated metric
    also as ``vs_time/<metric>`` with step = virtual time x 1000.
    """

    def __init__(self, asynchrony: Asynchrony, **trainer: Any) -> None:
        """
        Args:
            asynchrony: Concurrency and job durations.
            **trainer: ``FederatedTrainer``'s arguments; ``clients_per_round`` is the buffer size S.
        """
        super().__init__(**trainer)
        self.asynchrony = asynchrony
        self.schedule: BufferedSchedule | None = None
        self.versions: dict[int, dict[str, Any]] = {}  # the model versions that jobs in flight started from
        self._fitting = False

    def fit(
        self,
        model: LightningModule,
        data: FederatedDataModule,
        strategy: Strategy,
        ckpt_path: str | None = None,
        run_config: str | None = None,
    ) -> dict[str, float]:
        if not isinstance(strategy, AsyncStrategy):
            raise ConfigError(
                f"{type(strategy).__name__} is synchronous; with `asynchronous:` use lightfed.strategies.FedBuff, "
                "CA2FL, FADAS, MasFL or AdaMasFL"
            )
        if self.privacy is not None:
            raise ConfigError("trainer.privacy is not supported with `asynchronous:` yet: its budgets assume rounds")
        steps = self.local_work.steps
        fixed_steps = int(steps.low) if steps is not None and steps.kind == "fixed" else None
        strategy.configure_async(AsyncSetting(self.clients_per_round, fixed_steps, self.rounds))
        self._fitting = True
        try:
            return super().fit(model, data, strategy, ckpt_path, run_config)
        finally:
            self._fitting = False

    def _start(
        self, model: LightningModule, data: FederatedDataModule, ckpt_path: str | None, run_config: str | None, step: str = "validation_step"
    ) -> dict | None:
        checkpoint = super()._start(model, data, ckpt_path, run_config, step)
        a = self.asynchrony
        self.schedule = BufferedSchedule(data.num_clients, a.concurrency, self.clients_per_round, a.delays, self.seed)
        self.versions = {}
        if checkpoint is not None and "schedule" in checkpoint:
            self.schedule.load_state_dict(checkpoint["schedule"])
            device = self.fabric.device
            self.versions = {v: {k: t.to(device) for k, t in tensors.items()} for v, tensors in checkpoint["versions"].items()}
        return checkpoint

    def _extra_checkpoint_state(self) -> dict:
        versions = {v: {k: t.cpu() for k, t in tensors.items()} for v, tensors in self.versions.items()}
        return {"schedule": self.schedule.state_dict(), "versions": versions}

    def _publish(self, version: int, strategy: AsyncStrategy, params: Tensor, buffers: Tensor) -> None:
        """Stores ``version`` for the jobs that start from it and forgets the versions no job needs any more."""
        self.versions[version] = {"params": params.clone(), "buffers": buffers.clone(), **strategy.package()}
        needed = {job.version for job in self.schedule.in_flight}
        self.versions = {v: tensors for v, tensors in self.versions.items() if v in needed}

    def _begin(self, client: ClientTrainer, strategy: AsyncStrategy, params: Tensor, buffers: Tensor) -> None:
        """The warm-up job of every client (if the strategy wants one), then the first M_c jobs."""
        if strategy.warms_up:
            sums = Sums(strategy.sum_sizes(), self.fabric.device)
            for client_id in self._my_share(list(range(client.data.num_clients)), strategy):
                plan = replace(self._client_plan(0, client_id), seed=derived_seed(self.seed, WARM_UP, client_id))
                strategy.accumulate_warm_up(sums, client.train(strategy.configure_warm_up(plan), params, buffers))
            sums.buffer.copy_(self.fabric.all_reduce(sums.buffer, reduce_op="sum"))
            strategy.finish_warm_up(sums)
            client.logged.compute(self.fabric)  # the warm-up's training losses are not round 1's
        self.schedule.start()
        self._publish(0, strategy, params, buffers)

    def _train_round(
        self, round: int, client: ClientTrainer, strategy: AsyncStrategy, sums: Sums, params: Tensor, buffers: Tensor
    ) -> tuple[Tensor, Tensor, dict[str, float]]:
        """Takes the next S arrivals, trains them from their versions, aggregates, and starts S idle clients."""
        if not self.versions:
            if round > 0:
                raise ConfigError("the checkpoint was written by the synchronous trainer; resume it without `asynchronous:`")
            self._begin(client, strategy, params, buffers)
        jobs = self.schedule.next_buffer()
        staleness = [round - job.version for job in jobs]
        by_client = {job.client_id: job for job in jobs}
        for client_id in self._my_share(sorted(by_client), strategy):
            job = by_client[client_id]
            version = self.versions[job.version]
            plan = strategy.configure_job(self._client_plan(job.version, client_id), version)
            update = client.train(plan, version["params"], version["buffers"])
            strategy.accumulate_job(sums, update, round - job.version)
            sums.add("_buffers", update.buffers, weight=update.num_examples)
            sums.add("_examples", update.num_examples)
            sums.add("_train_loss", update.train_loss)
            sums.add("_clients", 1)
        sums.buffer.copy_(self.fabric.all_reduce(sums.buffer, reduce_op="sum"))
        params = strategy.aggregate_buffer(params, sums, round, staleness)
        buffers = (sums["_buffers"] / sums["_examples"]).to(buffers.dtype)
        if self.check_replicas:
            self._check_replicas(round, params, buffers)
        if not (torch.isfinite(params).all() and torch.isfinite(buffers).all()):
            raise DivergenceError(
                f"the global weights became NaN/Inf in aggregation {round + 1}; lower the step sizes (model lr or "
                f"strategy.server_lr); the last good checkpoint is kept in {self.log_dir / 'checkpoints'}"
            )
        self.schedule.dispatch(round + 1)
        self._publish(round + 1, strategy, params, buffers)
        metrics = {
            "round/clients": float(sums["_clients"]),
            "round/client_train_loss": float(sums["_train_loss"] / sums["_clients"]),
            "async/virtual_time": self.schedule.clock,
            "async/staleness_max": float(max(staleness)),
            "async/staleness_mean": sum(staleness) / len(staleness),
            "async/versions_in_flight": float(len(self.versions)),
            **client.logged.compute(self.fabric),
            **{f"strategy/{k}": v for k, v in strategy.metrics().items()},
        }
        return params, buffers, metrics

    def _evaluate(self, client: ClientTrainer, params: Tensor, buffers: Tensor, step: str) -> dict[str, float]:
        """Also logs the metrics against virtual time during training."""
        metrics = super()._evaluate(client, params, buffers, step)
        if self._fitting:
            time_step = round(self.schedule.clock * TIME_STEPS)
            self._logger.log_metrics({f"vs_time/{k}": v for k, v in metrics.items()}, step=time_step)
        return metrics
