"""A trainer but its round loop: settings, Fabric, run output, state, the checks before a run, evaluating a checkpoint."""

from functools import partialmethod
from pathlib import Path
from typing import Any, TypeVar

from lightning import LightningModule
from lightning.fabric.loggers import Logger
from torch import Tensor

from lightfed.asynchronous.buffered_rounds import BufferedRounds, VirtualTimeLogging
from lightfed.asynchronous.schedule import Asynchrony
from lightfed.attacks.base import NO_ATTACK, Attack
from lightfed.callbacks import Callback, ProgressBar
from lightfed.callbacks.calls import CallbackCalls
from lightfed.core.transforms import Pipeline
from lightfed.data.module import FederatedDataModule
from lightfed.errors import ConfigError
from lightfed.heterogeneity import LocalWork
from lightfed.privacy.base import NO_PRIVACY, ClientPrivacy
from lightfed.run import run_checks
from lightfed.run.checkpoint import LAST, rng_states
from lightfed.run.client import ClientTrainer
from lightfed.run.client_training import ClientTraining
from lightfed.run.engine import RoundEngine
from lightfed.run.evaluation import (
    BestRound,
    ClientEvaluation,
    Evaluation,
    check_client_evaluation,
    evaluate_checkpoint,
    spread,
)
from lightfed.run.preemption import Preemption
from lightfed.run.resume import checkpoint_to_resume, run_fingerprint
from lightfed.run.rounds import SampledRounds
from lightfed.run.run_fabric import build_fabric, check_seed
from lightfed.run.run_output import RunOutput, check_writable, run_folder_of
from lightfed.run.run_parts import RunParts
from lightfed.run.run_state import RunState
from lightfed.run.settings import (
    ClientStateSettings,
    EvaluationSettings,
    LocalTraining,
    OutputSettings,
    Processes,
    at_least,
    trainer_settings,
)
from lightfed.strategies.async_base import AsyncSetting, AsyncStrategy
from lightfed.strategies.base import ServerContext, Strategy

T = TypeVar("T", bound="TrainerBase")


class TrainerBase:
    """A trainer but its round loop (``lightfed.trainer.FederatedTrainer.fit``): its settings (each checked), its
    ``Fabric`` (launched by the first run), its run output, the state the loop keeps, the surface callbacks read
    (``lightfed.callbacks.TrainerState``), the checks before a run, and the evaluation of a checkpoint."""

    def __init__(
        self,
        rounds: int = 10,
        clients_per_round: int = 10,
        seed: int = 0,
        processes: Processes | None = None,
        local: LocalTraining | None = None,
        evaluation: EvaluationSettings | None = None,
        output: OutputSettings | None = None,
        client_states: ClientStateSettings | None = None,
        privacy: ClientPrivacy | None = None,
        attack: Attack | None = None,
        callbacks: list[Callback] | None = None,
        asynchrony: Asynchrony | None = None,
    ) -> None:
        """The settings in groups (``lightfed.run.settings``; ``trainer_settings`` builds them from the config's
        flat ``trainer:`` keys and documents each; None: the defaults). ``callbacks`` are called in this order, after the attack's (which
        log its metrics) and before the progress bar. ``asynchrony``: buffered asynchronous rounds
        (``lightfed.asynchronous.buffered_rounds``; ``clients_per_round`` is the buffer size S); None: synchronous
        rounds."""
        check_seed(seed)
        processes, local = processes or Processes(), local or LocalTraining()
        evaluation, output = evaluation or EvaluationSettings(), output or OutputSettings()
        client_states = client_states or ClientStateSettings()
        at_least(rounds=(rounds, 1), clients_per_round=(clients_per_round, 1))
        privacy, attack = privacy or NO_PRIVACY, attack or NO_ATTACK  # None in a config: none
        privacy.check_precision(processes.precision)  # before Fabric, whose own warning would come first
        if privacy.private and processes.clients_in_parallel not in ("auto", 1, "vectorized"):
            raise ConfigError(
                "trainer.clients_in_parallel must be 1, 'auto' or 'vectorized' with trainer.privacy: its clients do "
                "not train on concurrent threads"
            )
        self.rounds, self.clients_per_round, self.seed = rounds, clients_per_round, seed
        self.processes, self.local, self.evaluation, self.client_states = processes, local, evaluation, client_states
        self.checkpoint_interval, self.version = output.checkpoint_interval, output.version
        self.privacy, self.attack = privacy, attack
        self.local_work = LocalWork(local.epochs, local.steps, local.lr, local.redraw)
        self.asynchrony = asynchrony
        attacking = attack.callbacks()
        clock = [] if asynchrony is None else [VirtualTimeLogging()]
        everything = [*attacking, *clock, *(callbacks or []), *([ProgressBar()] if output.progress_bar else [])]
        self.fabric = build_fabric(processes, everything)
        self.hooks = CallbackCalls(everything)  # calls the callbacks' hooks (as ``Fabric.call``, cheaper)
        self.client_listeners = self.hooks.listeners("on_client_end")  # the engine then takes every update alone
        self.output = RunOutput(self.fabric, Path(output.root_dir) / output.name, output.logger)
        self.preemption = Preemption()
        self.round = 0  # rounds done
        self.started_for = rounds  # trainer.rounds when the run started (a resume keeps its checkpoint's)
        self.should_stop = False  # set by a callback to stop after the current round (the same on every process)
        self.last_metrics: dict[str, float] = {}
        self.final_report: dict[str, Any] = {}  # the test set's metrics once fit has ended (none for a stopped run)
        self.best = BestRound(evaluation.monitor)
        self._monitor_checked = False  # whether a validated round was checked for the monitor (``_check_monitor``)
        self.fingerprint: dict[str, str] = {}
        self.workers: ClientTraining | None = None  # built by fit, with the engine, the strategy and the rounds' source
        self.engine: RoundEngine | None = None
        self.strategy: Strategy | None = None
        self.source: SampledRounds | None = None
        self.params = self.buffers = Tensor()  # the global model, flat
        self._process_states: str | None = None  # the process-state folder of the newest checkpoint
        self._launched = False

    @classmethod
    def from_settings(cls: type[T], asynchrony: Asynchrony | None = None, **settings: Any) -> T:
        """The trainer of the config's flat ``trainer:`` keys (``lightfed.run.settings.trainer_settings``), e.g.
        ``FederatedTrainer.from_settings(rounds=5, local_steps=10, devices=2)``, with a config's ``asynchronous:``
        section as ``asynchrony``."""
        return cls(asynchrony=asynchrony, **trainer_settings(**settings))

    @property
    def asynchronous(self) -> bool:
        """Whether rounds are buffered asynchronous aggregations (the strategies it runs: ``check_requirements``)."""
        return self.asynchrony is not None

    @property
    def virtual_time(self) -> float:
        """The virtual clock at the last asynchronous aggregation (``async/virtual_time``); 0 before or without."""
        return self.source.schedule.clock if isinstance(self.source, BufferedRounds) else 0.0

    @property
    def monitor(self) -> str:
        """The metric the progress bar shows and per-client evaluation reads (``trainer.monitor``)."""
        return self.evaluation.monitor

    @property
    def client_settings(self) -> dict[str, Any]:
        """The ``ClientTrainer``'s settings besides its module and data."""
        return dict(privacy=self.privacy, local=self.local, rounds=self.rounds, attack=self.attack)

    @property
    def stop_requested(self) -> bool:
        """A signal (a cluster's warning, SIGTERM, Ctrl-C) asked the run to stop, to be resumed."""
        return self.preemption.requested.is_set()

    @property
    def log_dir(self) -> Path | None:
        """The run folder (of the evaluated checkpoint for ``validate``/``test``); None before a run starts."""
        return self.output.log_dir

    @property
    def checkpoint_path(self) -> Path:
        return (self.log_dir or Path()) / "checkpoints" / LAST

    @property
    def loggers(self) -> list[Logger]:
        return self.output.loggers

    @property
    def hparams(self) -> dict[str, Any]:
        return self.output.hparams

    def _launch(self, data: FederatedDataModule) -> None:
        """Starts the processes (once) and loads the data on each."""
        if not self._launched:
            self.fabric.launch()
            self._launched = True
        data.setup(self.seed, self.fabric.device)

    def _checked(
        self,
        model: LightningModule,
        data: FederatedDataModule,
        strategy: Strategy,
        ckpt_path: str | None,
        run_config: str | None,
    ) -> tuple[Path, RunState] | None:
        """Launches, refuses what cannot run before anything is written; the checkpoint to resume from and the run
        state it holds, or None."""
        check_writable(self.output.experiment)
        if self.asynchrony is not None and isinstance(strategy, AsyncStrategy):  # any other: check_requirements
            steps = self.local_work.steps
            fixed_steps = int(steps.low) if steps is not None and steps.kind == "fixed" else None
            strategy.configure_async(AsyncSetting(self.clients_per_round, fixed_steps, self.rounds))
        self._launch(data)
        self.hooks("setup", trainer=self, data=data)
        run_checks.check_clients(self.clients_per_round, data)
        run_checks.check_step(model, "validation_step")
        run_checks.check_automatic_optimization(model)
        run_checks.check_parameters(model)  # before the fingerprint builds the optimizer
        self.fingerprint = self._run_fingerprint(run_config, model, data, strategy)
        resume_from = checkpoint_to_resume(self.fabric, ckpt_path, self.output.experiment, self.version)
        return None if resume_from is None else (resume_from, RunState.load(resume_from, self.fabric.print))

    def evaluate(
        self,
        step: str,
        model: LightningModule,
        data: FederatedDataModule,
        ckpt_path: str | None = None,
        run_config: str | None = None,
    ) -> dict[str, float]:
        """Evaluates the checkpoint's global model (the initial one without ``ckpt_path``) with ``step``:
        ``validation_step`` on the validation split (``validate``) or ``test_step`` on the central test set
        (``test``); writes nothing."""
        run_checks.check_step(model, step)
        self._launch(data)
        path = checkpoint_to_resume(self.fabric, ckpt_path, self.output.experiment, self.version)
        self.output.log_dir = None if path is None else run_folder_of(path) or path
        current = self._run_fingerprint(run_config, model, data, None)
        self.round, self.params, self.buffers, metrics = evaluate_checkpoint(
            self.fabric, model, data, path, current, step
        )
        return metrics

    validate = partialmethod(evaluate, "validation_step")
    test = partialmethod(evaluate, "test_step")

    def _server_context(self, data: FederatedDataModule) -> ServerContext:
        """What the strategy is set up with, from the run's settings and the global model."""
        return ServerContext(
            self.params,
            data.num_clients,
            self.fabric.world_size,
            self.fabric.global_rank,
            self.clients_per_round,
            self.seed,
            data.num_clients - self.evaluation.unseen_clients,  # the clients the rounds are sampled from
            self.client_states.where,
            self.client_states.folder,
            self.rounds,
        )

    def _evaluation(self, transforms: Pipeline, data: FederatedDataModule, client: ClientTrainer) -> Evaluation:
        """The global model's and the clients' evaluation on ``client``'s module; the best round is chosen on the
        clients' own models when a transform keeps them (personalization) and clients are evaluated."""
        settings, personal = self.evaluation, transforms.keeps_client_models
        personal_best = personal and settings.client_interval > 0
        self.best = BestRound(f"clients/personal/{self.monitor}_mean" if personal_best else self.monitor)
        clients = ClientEvaluation(
            transforms.client_model if personal else None, settings.finetune_steps, settings.clients, self.seed
        )
        unseen, per_round = settings.unseen_clients, self.clients_per_round
        check_client_evaluation(clients, self.privacy, unseen, per_round, data.num_clients, self.asynchronous)
        return Evaluation(self.fabric, client, clients)

    def _client_metrics(self, evaluation: Evaluation, source: SampledRounds, params: Tensor) -> dict[str, float]:
        """Every ``client_interval`` rounds: the spread over clients of ``monitor`` for each model evaluated on them
        (and its TensorBoard histogram); the never-sampled clients' only with ``unseen_clients``."""
        if not (self.evaluation.client_interval and self.due(self.evaluation.client_interval)):
            return {}
        everyone = set(range(evaluation.client.data.num_clients))  # asynchronous runs report no unseen clients
        seen = everyone if self.asynchronous else {plan.client_id for plan in source.planned(self.round)}
        metrics: dict[str, float] = {}
        for name, values in evaluation.clients(self.round, params, self.buffers, self.monitor, seen).items():
            if self.evaluation.unseen_clients or not name.startswith("clients/unseen/"):  # else: until first sampled
                self.output.log_histogram(name, values, self.round)
                metrics.update(spread(values, name))
        return metrics

    def _rounds(self, data: FederatedDataModule, strategy: Strategy) -> SampledRounds:
        """Which clients train in each round, from what: sampled rounds, or buffered asynchronous ones."""
        if self.asynchrony is not None:
            assert isinstance(strategy, AsyncStrategy)  # check_requirements refused any other
            device, work = self.fabric.device, self.local_work
            return BufferedRounds(
                self.seed, data.num_clients, self.clients_per_round, work, self.asynchrony, strategy, device
            )
        sampled = data.num_clients - self.evaluation.unseen_clients
        return SampledRounds(self.seed, sampled, self.clients_per_round, self.local_work)

    def _run_state(self, parts: RunParts, process_states: dict[str, Any] | None) -> RunState:
        """The run as a checkpoint holds it, after ``self.round`` rounds (``process_states``: its per-process files)."""
        return RunState(
            self.round,
            self.params.cpu(),
            self.buffers.cpu(),
            parts.strategy.state_dict(),
            process_states,
            rng_states(),
            self.last_metrics,
            self.best.state_dict(),
            self.fingerprint,
            parts.source.state_dict(),
            parts.transforms.state_dict(),
            self.started_for,
        )

    def _with_totals(self, metrics: dict[str, float]) -> dict[str, float]:
        """``metrics`` with the run's communication totals so far (a resume carries them in the last metrics)."""
        for key in ("communication/sent_bytes", "communication/received_bytes"):
            metrics[f"{key}_total"] = self.last_metrics.get(f"{key}_total", 0.0) + metrics[key]
        return metrics

    def _run_fingerprint(
        self, run_config: str | None, model: LightningModule, data: FederatedDataModule, strategy: Strategy | None
    ) -> dict[str, str]:
        """The run's fingerprint with the frozen weights' checksum, once ``trainer.trained_parameters`` has frozen
        what it leaves out (``run_checks.frozen_weights``, a collective call)."""
        frozen = run_checks.frozen_weights(self.fabric, model, self.local.trained_parameters)
        return {**run_fingerprint(run_config, self.seed, model, data, strategy, self._fingerprinted()), **frozen}

    def _fingerprinted(self) -> dict[str, Any]:
        """The settings of this trainer a run's fingerprint holds when it has no config (a run from Python)."""
        return {"clients_per_round": self.clients_per_round, "local_work": vars(self.local_work)}

    def _check_monitor(self, validation: dict[str, float], metrics: dict[str, float]) -> None:
        """Warns, in one line naming what the validation logged, once a run's first validated round (``validation``)
        lacks ``trainer.monitor`` while no round has been chosen on it."""
        if not validation or self._monitor_checked:
            return
        self._monitor_checked = True
        if self.best.round is None and self.monitor not in metrics:
            self.fabric.print(
                f"lightfed: warning: trainer.monitor {self.monitor!r} was not logged in round {self.round}, whose "
                f"validation logged {', '.join(sorted(validation))}: the final report has no best round's test "
                "metrics without it; set trainer.monitor to one of them (a resume may change it while no round was "
                "chosen on it)"
            )

    def due(self, every_n_rounds: int) -> bool:
        """Whether the round just done is one of every ``every_n_rounds`` (the last round always is)."""
        return self.round % every_n_rounds == 0 or self.round == self.rounds
