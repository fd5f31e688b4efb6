"""FederatedTrainer: the round loop (plan, train, reduce, aggregate, evaluate, checkpoint) on one Fabric."""

import time
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

from lightning import LightningModule

from lightfed.core.client_states import ProcessStores
from lightfed.core.process_states import FOLDER as PROCESS_STATES
from lightfed.core.process_states import load_process_states, prune, save_process_states
from lightfed.core.transforms import Pipeline, Transform, TransformContext
from lightfed.data.module import FederatedDataModule
from lightfed.errors import ConfigError, DivergenceError
from lightfed.privacy.base import BudgetReached
from lightfed.run.availability import AlwaysOnline, ClientAvailability, DiurnalAvailability, read_trace
from lightfed.run.available_rounds import AvailableRounds
from lightfed.run.checkpoint import kept_checkpoint, restore_rng_states
from lightfed.run.determinism import deterministic_algorithms
from lightfed.run.engine import RoundEngine
from lightfed.run.final_report import final_report
from lightfed.run.resume import check_resume, resume_line
from lightfed.run.rounds import SampledRounds
from lightfed.run.run_output import run_folder_of
from lightfed.run.run_parts import RunParts
from lightfed.run.run_state import RunState
from lightfed.run.settings import AvailabilitySettings
from lightfed.run.trainer_base import TrainerBase
from lightfed.run.training_choice import client_training
from lightfed.strategies.base import Strategy, SumsStrategy
from lightfed.strategies.requirements import check_requirements, run_requirements


class FederatedTrainer(TrainerBase):
    """Runs federated rounds of a LightningModule under a server ``Strategy`` on one ``lightning.fabric.Fabric``.

    Each process holds one module instance; the clients of a round are split across processes and combined by the
    round engine (``lightfed.run.engine``). ``fit`` is the round loop; callbacks (``lightfed.callbacks``) observe it
    through the attributes ``lightfed.callbacks.TrainerState`` lists.

    ``lightfed fit`` builds it from the config's ``trainer:`` keys (``from_settings``):

    ```yaml
    trainer:
      accelerator: cpu
      rounds: 20
      clients_per_round: 10
      local_epochs: 2
    ```

    Examples:
        >>> from lightfed import FederatedTrainer
        >>> trainer = FederatedTrainer.from_settings(accelerator="cpu", rounds=20, local_epochs=2, logger=False)
        >>> trainer.rounds, trainer.clients_per_round, trainer.local.epochs, trainer.fabric.world_size
        (20, 10, 2, 1)
        >>> FederatedTrainer.from_settings(rounds=0)
        Traceback (most recent call last):
        ...
        lightfed.errors.ConfigError: trainer.rounds must be >= 1, got 0
    """

    def __init__(self, *args: Any, availability: AvailabilitySettings | None = None, **settings: Any) -> None:
        """``TrainerBase``'s settings, and ``availability``: which clients are online, selected and aggregated in a
        synchronous round (``lightfed.run.available_rounds``; None: every client online, each selected one
        aggregated)."""
        super().__init__(*args, **settings)
        self.availability = availability or AvailabilitySettings()
        if self.availability.active and self.asynchronous:
            raise ConfigError(
                "trainer.availability_trace, online_fraction, over_selection, round_deadline, client_dropout and "
                "round_delays are for synchronous rounds: leave them at their defaults with `asynchronous:`"
            )

    def fit(
        self,
        model: LightningModule,
        data: FederatedDataModule,
        strategy: Strategy,
        ckpt_path: str | None = None,
        run_config: str | None = None,
        transforms: Sequence[Transform] = (),
    ) -> dict[str, float]:
        """Trains for ``rounds`` rounds; returns the last round's metrics.

        ``ckpt_path``: a checkpoint file, or "last" for the newest ``last.ckpt`` of this experiment, to resume from
        ("auto": the same, or a fresh start when there is none). ``run_config``: saved as ``config.yaml``.
        ``transforms``: what each client's update goes through, in order, before the strategy takes it.
        """
        with deterministic_algorithms(self.processes.deterministic):  # restored when fit returns or raises
            resume = self._checked(model, data, strategy, ckpt_path, run_config)  # (checkpoint file, its state) or None
            if resume is not None and check_resume(*resume, self.fingerprint, self.rounds, self.fabric.print):
                self.output.log_dir = run_folder_of(resume[0])
                return resume[1].metrics
            parts = self._set_up(model, data, strategy, Pipeline([self.attack, *transforms]))
            resume_from = None if resume is None else resume[0]
            resumed_round = 0 if resume is None else resume[1].round
            hparams = {"seed": self.seed, "rounds": self.rounds}
            self.output.start(resume_from, self.version, run_config, hparams, resumed_round)
            self.output.write_label_names(data.label_names)
            if resume is not None:
                self._resume(*resume, parts)
            else:
                parts.source.begin(parts.engine, self.params, self.buffers)
            self.output.resume(self.round, self.last_metrics)
            self.hooks("on_fit_start", trainer=self)
            self.preemption.listen(self.fabric, self)
            parts.training.call("on_fit_start")
            try:
                while self.round < self.rounds and not self.should_stop:
                    self._round(parts)
            except BaseException as error:
                self.hooks("on_exception", trainer=self, error=error)
                self.preemption.stop_listening()
                self.output.close_on_error()
                raise
            finally:
                parts.training.close()
            parts.training.call("on_fit_end")
            if not self.stop_requested:  # a run stopped to be resumed reports when it ends
                evaluated = strategy.evaluated(self.params)
                self.final_report = final_report(parts.evaluation, self.round, evaluated, self.buffers, self.best)
                self.output.report(self.final_report)
            self.hooks("on_fit_end", trainer=self, metrics=self.last_metrics)
            self.output.finish(self.last_metrics)
            self.preemption.stop_listening()
            parts.training.reference.flat.load(self.params, self.buffers)
            if self.stop_requested and self.should_stop and self.round < self.rounds:
                self.preemption.finish(self.fabric, self.round, self.checkpoint_path)
            return self.last_metrics

    def _round(self, parts: RunParts) -> None:
        """One round; its metrics become ``last_metrics`` (``on_round_end`` may add to them)."""
        source, evaluation = parts.source, parts.evaluation
        round, began = self.round, time.perf_counter()
        self.hooks("on_round_start", trainer=self, round=round)
        jobs = source.jobs(round, self.params, self.buffers)  # plan
        try:  # train, reduce (with any process's stop request), aggregate
            with parts.training.between_runs():
                result = parts.engine.run(round, jobs, self.params, self.buffers, self.preemption.requested)
        except BudgetReached as reached:
            self._checkpoint(parts)
            self.fabric.print(f"{reached}: stopped after round {round}; {self.checkpoint_path} holds it")
            self.should_stop = True
            return
        except DivergenceError as error:
            raise DivergenceError(f"{error}; {kept_checkpoint(self.checkpoint_path)}") from None
        self.params, self.buffers, self.round = result.params, result.buffers, round + 1
        metrics = self._with_totals({**result.metrics, **source.finish(round, self.params, self.buffers)})
        if result.stop:  # a process was asked to stop (a signal): every process stops after this round
            self.preemption.requested.set()
            self.should_stop = True
        evaluated = parts.strategy.evaluated(self.params)  # the weights evaluated (self.params: the iterate)
        validation: dict[str, float] = {}
        if self.due(self.evaluation.interval) and evaluation.client.data.has_validation:  # evaluate
            validation = evaluation.global_model("validation_step", evaluated, self.buffers)
            self.hooks("on_evaluation_end", trainer=self, metrics=validation)
            metrics.update(validation)
        metrics["round/time_s"] = time.perf_counter() - began
        metrics.update(self.privacy.metrics(self.fabric))
        metrics.update(self._client_metrics(evaluation, source, evaluated))
        self.best.update(self.round, metrics, evaluated, self.buffers)
        self.last_metrics = metrics
        self.hooks("on_round_end", trainer=self, round=round, metrics=metrics)
        self._check_monitor(validation, metrics)
        checkpoint = self.should_stop or self.due(self.checkpoint_interval)
        if checkpoint:  # checkpoint, then log what it holds (a resume logs it again where a kill lost it)
            self._checkpoint(parts)
        self.output.log_round(self.round, metrics)
        if checkpoint:
            self.output.save()

    def _set_up(
        self, model: LightningModule, data: FederatedDataModule, strategy: Strategy, transforms: Pipeline
    ) -> RunParts:
        """The workers, the initial global model, the strategy and the round engine; nothing is written yet."""
        model = self.privacy.prepare(model, self.processes.precision)
        fixed = run_requirements(strategy, self.privacy, transforms).client_state  # client i on process i % world size
        parallel, per_round = self.processes.clients_in_parallel, self.clients_per_round
        self.workers = workers = client_training(
            self.fabric, model, data, parallel, per_round, fixed, **self.client_settings
        )
        optimizer = workers.reference.optimizer.optimizer
        check_requirements(strategy, optimizer, self.privacy, self.local.lr_schedule, self.asynchronous, transforms)
        self.params = self.fabric.broadcast(workers.reference.flat.params.clone())
        self.buffers = self.fabric.broadcast(workers.reference.flat.buffers.clone())
        source = self._available(self._rounds(data, strategy))
        self.strategy, self.source, context = strategy, source, self._server_context(data)
        strategy.setup(context)
        sums, cohort = strategy.sum_sizes() if isinstance(strategy, SumsStrategy) else {}, source.cohort
        transforms.setup(TransformContext(context, sums, None if self.asynchronous else cohort, model, data))
        self.engine = engine = RoundEngine(
            self.fabric,
            workers,
            strategy,
            self.clients_per_round,
            fixed,
            self.processes.check_replicas,
            partial(self.hooks, "on_client_end", self) if self.client_listeners else None,  # (trainer, update)
            self.privacy,
            transforms,
        )
        self.privacy.setup(  # its accountants live in its own per-client store
            data, self.clients_per_round, partial(source.planned, self.rounds)
        )
        self.round, self.should_stop, self.last_metrics, self._process_states = 0, False, {}, None
        self.started_for = self.rounds
        evaluation = self._evaluation(transforms, data, workers.reference)
        return RunParts(workers, strategy, transforms, source, engine, evaluation, fixed)

    def _available(self, source: SampledRounds) -> SampledRounds:
        """``source``, or its rounds of the clients online, over-selected and cut at a deadline."""
        settings = self.availability
        if not settings.active:
            return source
        population = source.num_clients
        availability: ClientAvailability = AlwaysOnline(population)
        if settings.trace is not None:
            availability = read_trace(settings.trace, population)
        elif settings.online_fraction < 1:
            availability = DiurnalAvailability(self.seed, population, settings.online_fraction, settings.day_rounds)
        return AvailableRounds(self.seed, population, self.clients_per_round, self.local_work, availability, settings)

    def _checkpoint(self, parts: RunParts) -> None:
        """Writes what each process alone holds (its clients' states, its slices) in its own file, then ``last.ckpt``
        (process 0): nothing is gathered to one process. A collective call."""
        strategy, folder, name = parts.strategy, self.checkpoint_path.parent / PROCESS_STATES, f"round_{self.round}"
        self.output.flush_metrics()  # the lines of the rounds before it are on the disk before the checkpoint is
        own = ProcessStores(strategy, self.privacy, parts.transforms).process_state()
        held = parts.fixed_process or any(own.values())  # without fixed processes, the same on every process
        files = save_process_states(self.fabric, folder, name, own, held)
        if self.fabric.is_global_zero:
            checkpoint = self._run_state(parts, files).checkpoint()
            parts.training.reference.module.on_save_checkpoint(checkpoint)
            self.hooks("on_save_checkpoint", trainer=self, checkpoint=checkpoint)
            RunState.from_checkpoint(checkpoint).save(self.checkpoint_path)
            prune(folder, {name, self._process_states})  # the previous checkpoint's stay
        self._process_states = name if held else None
        self.fabric.barrier()

    def _resume(self, path: Path, saved: RunState, parts: RunParts) -> None:
        """Restores the run from ``saved`` (read from the checkpoint file ``path``); each process reads only its own
        process file when the number of processes is unchanged."""
        self.params, self.buffers = saved.weights_for(self.params, self.buffers)
        parts.strategy.load_state_dict(saved.strategy)
        parts.transforms.load_state_dict(saved.transforms)
        stores = ProcessStores(parts.strategy, self.privacy, parts.transforms)
        self._process_states = load_process_states(
            stores, path.parent / PROCESS_STATES, saved.process_states, self.fabric.global_rank, self.fabric.world_size
        )
        restore_rng_states(saved.rng)
        parts.source.load_state_dict(saved.source)
        self.round, self.last_metrics = saved.round, saved.metrics
        self.best.load_state_dict(saved.best_round, self.params.device)
        checkpoint = saved.checkpoint()
        parts.training.reference.module.on_load_checkpoint(checkpoint)
        self.hooks("on_load_checkpoint", trainer=self, checkpoint=checkpoint)
        self.started_for = saved.started_for or self.started_for
        self.fabric.print(resume_line(self.log_dir, self.round, self.rounds, saved.started_for))
