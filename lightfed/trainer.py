"""FederatedTrainer: federated rounds on one Fabric; the round engine trains and aggregates, callbacks do the rest."""

import copy
import json
import math
import os
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import yaml
from lightning import LightningModule
from lightning.fabric import Fabric
from lightning.fabric.strategies import DDPStrategy
from lightning.fabric.loggers import Logger, TensorBoardLogger
from lightning.pytorch.utilities.model_helpers import is_overridden
from torch import Tensor

from lightfed.callbacks import (
    Callback,
    METRICS_FILE,
    Checkpointing,
    ClientEvaluation,
    LogMetrics,
    MetricsFile,
    Preemption,
    PrivacyMetrics,
    ProgressBar,
)
from lightfed.callbacks.logging import reported
from lightfed.core.checkpoint import LAST, load_checkpoint, resolve_checkpoint, restore_rng_states, rng_states, save_checkpoint
from lightfed.core.client import ClientTrainer
from lightfed.core.client_workers import ClientWorkers
from lightfed.core.cores import available_cores
from lightfed.core.engine import RoundEngine
from lightfed.core.fingerprint import check_fingerprint, fingerprint
from lightfed.core.evaluation import BestRound, evaluation_pass
from lightfed.core.messages import ClientPlan
from lightfed.core.process_states import FOLDER as PROCESS_STATES
from lightfed.core.process_states import gather_checksums, prune, reader, write_process_state
from lightfed.core.rounds import SampledRounds
from lightfed.core.run_folder import claim_run_folder, version_folder, write_run_config
from lightfed.core.sharding import CoordinateShards
from lightfed.data.module import FederatedDataModule
from lightfed.errors import ConfigError, DivergenceError
from lightfed.heterogeneity import LocalWork
from lightfed.privacy.base import BudgetReached, ClientPrivacy
from lightfed.schedules import RoundSchedule
from lightfed.strategies.base import Strategy

PRECISIONS = ("32-true", "16-mixed", "bf16-mixed")


def _check_writable(folder: Path) -> None:
    """Refuses a run folder that cannot be made (a file in the way, no permission), before anything is written."""
    existing = next(path for path in [folder, *folder.parents] if path.exists())
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        reason = "is not a folder" if not existing.is_dir() else "is not writable"
        raise ConfigError(f"cannot make the run folder {folder}: {existing} {reason}; change trainer.root_dir")


def _run_folder_of(checkpoint: Path) -> Path | None:
    """The run folder a checkpoint file belongs to (``<run>/checkpoints/last.ckpt``); None for a file elsewhere."""
    return checkpoint.parent.parent if checkpoint.parent.name == "checkpoints" else None


def _class_name(component: object) -> str:
    return f"{type(component).__module__}.{type(component).__qualname__}"


def _sgd_without_momentum(optimizer: torch.optim.Optimizer) -> bool:
    return isinstance(optimizer, torch.optim.SGD) and not any(group["momentum"] for group in optimizer.param_groups)


class FederatedTrainer:
    """Runs federated rounds of a LightningModule under a server ``Strategy`` on one ``lightning.fabric.Fabric``.

    Each process holds one module instance; the clients of a round are split across processes and combined by the
    round engine (``lightfed.core.engine``). Logging, checkpoints, preemption, privacy metrics, per-client
    evaluation and the progress bar are callbacks (``lightfed.callbacks``).
    """

    def __init__(
        self,
        accelerator: str = "auto",
        devices: int | str = 1,
        num_nodes: int = 1,
        collective_timeout: float = 1800.0,
        precision: str = "32-true",
        rounds: int = 10,
        clients_per_round: int = 10,
        local_epochs: int | str | None = 1,
        local_steps: int | str | None = None,
        local_lr: float | str | None = None,
        redraw_local_work: bool = False,
        eval_interval: int = 1,
        client_eval_interval: int = 0,
        checkpoint_interval: int = 1,
        monitor: str = "val_acc",
        seed: int = 0,
        root_dir: str = "runs",
        name: str = "lightfed",
        version: int | None = None,
        progress_bar: bool = True,
        check_replicas: bool = False,
        lr_schedule: RoundSchedule | None = None,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str = "norm",
        clients_in_parallel: int | str = "auto",
        privacy: ClientPrivacy | None = None,
        callbacks: list[Callback] | None = None,
        logger: bool | Logger | list[Logger] = True,
    ) -> None:
        """
        Args:
            accelerator: Fabric accelerator: "cpu", "gpu", "auto", ...
            devices: Processes (devices) per node; the clients of a round are split across all of them.
            num_nodes: Number of nodes.
            collective_timeout: Seconds a process waits in a collective (a round's reduction, a checkpoint's
                barrier) for the others before the run stops with a line naming the process that stopped
                answering. It must exceed the longest wait of a healthy run: the time between the first and the
                last process reaching a round's reduction (their clients' local work differs) or process 0
                writing a checkpoint. 1800 (torch's own default) is generous; lower it to learn sooner of a frozen
                process when rounds are short.
            precision: "32-true", "16-mixed" or "bf16-mixed" (parameters stay fp32).
            rounds: Total number of federated rounds (a resumed run continues up to this number).
            clients_per_round: Clients sampled (without replacement) in each round.
            local_epochs: Passes over its data each client makes per round: a number or a distribution drawn per
                client, e.g. "randint:1:50"; set to null when using local_steps.
            local_steps: Optimizer steps each client takes per round, instead of local_epochs (number or distribution).
            local_lr: Client learning rate overriding the optimizer's: a number or a distribution drawn per client,
                e.g. "uniform:1e-4:1e-3" or "loguniform:1e-4:1e-1"; null keeps the optimizer's own.
            redraw_local_work: Draw local epochs/steps/lr afresh every round instead of once per client.
            eval_interval: Evaluate the global model on the validation split every this many rounds (and at the end).
            client_eval_interval: Evaluate the global model on every client's own data every this many rounds
                (0: never); logs the distribution over clients of ``monitor``.
            checkpoint_interval: Write ``last.ckpt`` every this many rounds (and at the end).
            monitor: Logged metric shown in the progress bar and used for per-client evaluation; the final report
                takes the test metrics of the round where this validation metric was best (lowest for a loss).
            seed: Seed of the server's client sampling and of every client's local randomness.
            root_dir: Folder under which each run gets ``<name>/version_<n>`` with TensorBoard logs, config and
                checkpoints.
            name: Experiment name (sub-folder of root_dir).
            version: The run's folder ``<root_dir>/<name>/version_<version>``: a fresh run claims it (refused when it
                exists), ``--ckpt_path last`` resumes or evaluates that run. null: a fresh run claims the next free
                version, "last" means the newest run of the experiment. A run's saved ``config.yaml`` names its own.
            progress_bar: Show a progress bar over rounds.
            check_replicas: Debug mode: after every round, check that every process holds exactly the global weights
                of process 0 (one extra broadcast per round).
            lr_schedule: The client learning rate over rounds: base rate x factor(round), e.g.
                ``lightfed.schedules.CosineDecay`` (``StepDecay``, ``ExponentialDecay``); null: constant.
            gradient_clip_val: Clip each local step's gradient (after the strategy's correction and privacy, before
                the optimizer step) to this norm, or to this value per entry; null: no clipping.
            gradient_clip_algorithm: "norm" (``torch.nn.utils.clip_grad_norm_``) or "value" (``clip_grad_value_``).
            clients_in_parallel: Clients each process trains at once, one thread and one copy of the model each (one
                torch thread each on a CPU, one CUDA stream each on a GPU); 1: one client at a time. "auto": on a CPU
                one per core of the process (cores / processes per node), else 1. Not with privacy, with
                data.num_workers > 0, nor with a model that draws from torch's global random generator while training
                (dropout): "auto" then trains one client at a time.
            privacy: Differential privacy of the clients' local training, e.g. ``lightfed.privacy.DPSGD`` (Opacus
                DP-SGD with one accountant per client); logs ``privacy/epsilon_max`` and ``privacy/epsilon_mean``.
            callbacks: More callbacks (``lightfed.callbacks.Callback``), called after the built-in ones that add
                metrics and before those that log, show and save them.
            logger: Where the per-round metrics go: true for TensorBoard in the run folder, false for none, or
                logger instances (``lightning.fabric.loggers``). ``metrics.jsonl`` is written in the run folder
                either way.
        """
        if precision not in PRECISIONS:
            raise ConfigError(f"trainer.precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
        if gradient_clip_val is not None and not gradient_clip_val > 0:
            raise ConfigError(f"trainer.gradient_clip_val must be > 0 or null, got {gradient_clip_val}")
        if gradient_clip_algorithm not in ("norm", "value"):
            raise ConfigError(f"trainer.gradient_clip_algorithm must be 'norm' or 'value', got {gradient_clip_algorithm!r}")
        if clients_in_parallel != "auto" and not (isinstance(clients_in_parallel, int) and clients_in_parallel >= 1):
            raise ConfigError(f"trainer.clients_in_parallel must be 'auto' or an integer >= 1, got {clients_in_parallel!r}")
        if privacy is not None and clients_in_parallel not in ("auto", 1):
            raise ConfigError("trainer.clients_in_parallel must be 1 or 'auto' with trainer.privacy: its clients train one at a time")
        self.local_work = LocalWork(local_epochs, local_steps, local_lr, redraw_local_work)
        for key, value, low in [
            ("rounds", rounds, 1),
            ("clients_per_round", clients_per_round, 1),
            ("eval_interval", eval_interval, 1),
            ("client_eval_interval", client_eval_interval, 0),
            ("checkpoint_interval", checkpoint_interval, 1),
            ("collective_timeout", collective_timeout, 1),
        ]:
            if value < low:
                raise ConfigError(f"trainer.{key} must be >= {low}, got {value}")
        built_in_first = [PrivacyMetrics()] if privacy is not None else []
        if client_eval_interval:
            built_in_first.append(ClientEvaluation(client_eval_interval))
        # the checkpoint first: a round whose checkpoint could not be written is neither logged nor in metrics.jsonl
        built_in_last = [Checkpointing(checkpoint_interval), LogMetrics(), MetricsFile()]
        built_in_last += [*([ProgressBar()] if progress_bar else []), Preemption()]
        everything = [*built_in_first, *(callbacks or []), *built_in_last]
        try:
            self.fabric = Fabric(
                accelerator=accelerator, devices=devices, num_nodes=num_nodes, precision=precision, callbacks=everything
            )
            if isinstance(self.fabric.strategy, DDPStrategy):  # several processes: what DDPStrategy(timeout=) sets
                self.fabric.strategy._timeout = timedelta(seconds=collective_timeout)
        except (RuntimeError, ValueError) as error:  # Lightning's MisconfigurationException is a RuntimeError
            raise ConfigError(
                f"trainer.accelerator {accelerator!r} with trainer.devices {devices!r}, num_nodes {num_nodes}: {error}"
            ) from None
        self.collective_timeout = collective_timeout
        self.rounds = rounds
        self.clients_per_round = clients_per_round
        self.eval_interval = eval_interval
        self.monitor = monitor
        self.seed = seed
        self.run_root = Path(root_dir) / name
        if version is not None and version < 0:
            raise ConfigError(f"trainer.version must be >= 0 or null, got {version}")
        self.version = version
        self.check_replicas = check_replicas
        self.lr_schedule = lr_schedule
        self.gradient_clip_val, self.gradient_clip_algorithm = gradient_clip_val, gradient_clip_algorithm
        self.precision = precision
        self.clients_in_parallel = clients_in_parallel
        self.privacy = privacy
        self.logger = logger
        self.hparams: dict[str, Any] = {}
        self.log_dir: Path | None = None  # set when a run starts
        self.loggers: list[Logger] = []
        self.round = 0  # rounds done
        self.final_report: dict[str, Any] = {}  # the test set's metrics once fit has ended (none for a stopped run)
        self.should_stop = False  # set by a callback to stop after the current round (the same on every process)
        self.stop_requested = False  # set asynchronously (a signal); reduced with the round in flight
        self._launched = False

    # ----------------------------------------------------------------- entry points

    def fit(
        self,
        model: LightningModule,
        data: FederatedDataModule,
        strategy: Strategy,
        ckpt_path: str | None = None,
        run_config: str | None = None,
    ) -> dict[str, float]:
        """Trains for ``rounds`` rounds; returns the last round's metrics.

        ``ckpt_path``: a checkpoint file, or "last" for the newest ``last.ckpt`` of this experiment, to resume from
        ("auto": the same, or a fresh start when there is none). ``run_config``: saved as ``config.yaml``.
        """
        strategy.check(self.fabric.world_size)
        _check_writable(self.run_root)
        self._launch(data)
        self.fabric.call("setup", trainer=self, data=data)
        if self.clients_per_round > data.num_clients:
            raise ConfigError(
                f"trainer.clients_per_round ({self.clients_per_round}) is larger than the number of clients "
                f"({data.num_clients}); lower it or add clients"
            )
        self._fingerprint = self._run_fingerprint(model, data, strategy, run_config)
        resume_from = self._checkpoint_to_resume(ckpt_path)
        checkpoint = None if resume_from is None else load_checkpoint(resume_from, self.fabric.print)
        if checkpoint is not None and self._check_resume(checkpoint, resume_from):
            self.log_dir = _run_folder_of(resume_from)
            return checkpoint["metrics"]
        if self.privacy is not None:
            model = self.privacy.prepare(model, self.precision)
        if self.lr_schedule is not None and strategy.chooses_client_steps:
            raise ConfigError(f"{type(strategy).__name__} chooses its clients' step sizes itself: remove trainer.lr_schedule")
        workers, threads = self._client_workers(data)
        copies = [copy.deepcopy(model, {id(model._trainer): None}) for _ in range(workers - 1)]
        clients = [
            ClientTrainer(self.fabric, module, data, self.privacy, self.lr_schedule, self.rounds, self.gradient_clip_val,
                          self.gradient_clip_algorithm)
            for module in [model, *copies]
        ]
        self.client = client = clients[0]
        self.workers = ClientWorkers(clients, threads, strict=self.clients_in_parallel != "auto")
        optimizer = client.optimizer.optimizer
        if strategy.needs_plain_sgd and not _sgd_without_momentum(optimizer):
            settings = f" with momentum {optimizer.param_groups[0]['momentum']}" if isinstance(optimizer, torch.optim.SGD) else ""
            raise ConfigError(
                f"{type(strategy).__name__} assumes plain SGD local steps (x <- x - lr g): the model's optimizer must be "
                f"torch.optim.SGD with momentum 0, got {type(optimizer).__name__}{settings}"
            )
        self._start_run(model, resume_from, run_config)
        self.params = self.fabric.broadcast(client.flat.params.clone())
        self.buffers = self.fabric.broadcast(client.flat.buffers.clone())
        self.strategy = strategy
        self.source = source = self._rounds(data, strategy)
        if strategy.server_path == "sharded":
            strategy.shard = CoordinateShards(self.params.numel(), self.fabric.world_size, self.fabric.global_rank).local
        strategy.setup(self.params, data.num_clients)
        self.engine = engine = self._engine(self.workers, strategy)
        if self.privacy is not None:  # its accountants live in the strategy's per-client store
            self.privacy.setup(data, strategy.client_states, self.clients_per_round, lambda: source.planned(self.rounds))
        self.round, self.should_stop, self.stop_requested, self.last_metrics = 0, False, False, {}
        self._process_states: str | None = None  # the process-state folder of the newest checkpoint
        self.best = BestRound(self.monitor)
        if checkpoint is not None:
            self._resume(checkpoint, resume_from.parent)
        else:
            source.begin(engine, self.params, self.buffers)
        self.fabric.call("on_fit_start", trainer=self)
        for worker in self.workers.clients:
            worker.module.on_fit_start()
        try:
            while self.round < self.rounds and not self.should_stop:
                self._round(engine)
        except BaseException as error:
            self.fabric.call("on_exception", trainer=self, error=error)
            raise
        finally:
            self.workers.close()
        for worker in self.workers.clients:
            worker.module.on_fit_end()
        self.final_report = {} if self.stop_requested else self._final_report()  # a run stopped to resume reports later
        self.fabric.call("on_fit_end", trainer=self, metrics=self.last_metrics)
        client.flat.load(self.params, self.buffers)
        return self.last_metrics

    def _round(self, engine: RoundEngine) -> None:
        """Trains, aggregates and evaluates one round; its metrics become ``last_metrics`` (callbacks may add)."""
        round, began = self.round, time.perf_counter()
        self.fabric.call("on_round_start", trainer=self, round=round)
        jobs = self.source.jobs(round, self.params, self.buffers)
        try:
            result = engine.run(round, jobs, self.params, self.buffers, lambda: self.stop_requested)
        except BudgetReached as reached:
            self.save_checkpoint()
            self.fabric.print(f"{reached}: stopped after round {round}; {self.checkpoint_path} holds it")
            self.should_stop = True
            return
        except DivergenceError as error:
            kept = f"the last good checkpoint is kept in {self.checkpoint_path.parent}" if self.checkpoint_path.is_file() else "no checkpoint was written before it"
            raise DivergenceError(f"{error}; {kept}") from None
        self.params, self.buffers = result.params, result.buffers
        metrics = {**result.metrics, **self.source.finish(round, self.params, self.buffers)}
        self.round = round + 1
        if result.stop:  # a process was asked to stop (a signal): every process stops after this round
            self.stop_requested = self.should_stop = True
        if self.due(self.eval_interval) and self.client.data.has_validation:
            evaluation = self.evaluate("validation_step")
            self.best.update(self.round, evaluation, self.params, self.buffers)
            self.fabric.call("on_evaluation_end", trainer=self, metrics=evaluation)
            metrics.update(evaluation)
        metrics["round/time_s"] = time.perf_counter() - began
        self.last_metrics = metrics
        self.fabric.call("on_round_end", trainer=self, round=round, metrics=metrics)

    def due(self, every_n_rounds: int) -> bool:
        """Whether the round just done is one of every ``every_n_rounds`` (the last round always is)."""
        return self.round % every_n_rounds == 0 or self.round == self.rounds

    def validate(
        self, model: LightningModule, data: FederatedDataModule, ckpt_path: str | None = None, run_config: str | None = None
    ) -> dict[str, float]:
        """Evaluates the (checkpointed) global model with ``validation_step`` on the validation split."""
        return self._evaluate_once(model, data, ckpt_path, run_config, "validation_step")

    def test(
        self, model: LightningModule, data: FederatedDataModule, ckpt_path: str | None = None, run_config: str | None = None
    ) -> dict[str, float]:
        """Evaluates the (checkpointed) global model with ``test_step`` on the central test set."""
        return self._evaluate_once(model, data, ckpt_path, run_config, "test_step")

    def evaluate(self, step: str, params: Tensor | None = None, buffers: Tensor | None = None) -> dict[str, float]:
        """The global model (or ``params`` and ``buffers``) on this process's share of the validation split with
        ``validation_step``, or of the test set with ``test_step``, reduced over all processes."""
        rank, world, data = self.fabric.global_rank, self.fabric.world_size, self.client.data
        batches = data.val_batches(rank, world) if step == "validation_step" else data.test_batches(rank, world)
        params, buffers = (self.params, self.buffers) if params is None else (params, buffers)
        return evaluation_pass(self.fabric, self.client, params, buffers, step, batches).compute(self.fabric, self.client.module)

    def _final_report(self) -> dict[str, Any]:
        """The test set, once: the final model's ``test_step`` metrics and, prefixed ``best_``, those of the round with
        the best validation ``monitor``; appended to ``metrics.jsonl`` as ``{"final": true, ...}``, logged and printed."""
        report: dict[str, Any] = {"final": True, "round": self.round, "monitor": self.monitor}
        best = self.best
        if best.round is not None:
            report.update({"best_round": best.round, f"best_{self.monitor}": best.value})
        if is_overridden("test_step", self.client.module, LightningModule):
            final = self.evaluate("test_step")
            report.update(final)
            if best.round is not None:  # the final round's weights are tested once
                tested = final if best.round == self.round else self.evaluate("test_step", best.params, best.buffers)
                report.update({f"best_{k}": v for k, v in tested.items()})
        if self.fabric.is_global_zero:
            with open(self.log_dir / METRICS_FILE, "a") as file:
                file.write(json.dumps(report) + "\n")
        for logger in self.loggers:
            with reported(logger):
                logger.log_metrics({k: v for k, v in report.items() if k.startswith(("test_", "best_test_"))}, step=self.round)

        def scores(prefix: str) -> str:
            return " ".join(f"{k.removeprefix(prefix)}={v:.4g}" for k, v in report.items() if k.startswith(f"{prefix}test_"))

        line = f"test set, final model (round {self.round}): {scores('') or 'no test_step'}"
        if best.round is not None:
            line += f"; best {self.monitor} {best.value:.4g} in round {best.round}: {scores('best_') or 'no test_step'}"
        self.fabric.print(line)
        return report

    # ----------------------------------------------------------------- parts of a run

    def _rounds(self, data: FederatedDataModule, strategy: Strategy) -> SampledRounds:
        """Which clients train in each round, from what."""
        return SampledRounds(self.seed, data.num_clients, self.clients_per_round, self.local_work)

    def _client_workers(self, data: FederatedDataModule) -> tuple[int, int]:
        """How many clients this process trains at once, and the torch threads of each."""
        cores_per_process = max(1, available_cores() // getattr(self.fabric.strategy, "num_processes", 1))  # processes per node
        workers = self.clients_in_parallel
        if workers != "auto" and workers > 1 and data.num_workers > 0:
            raise ConfigError(
                "trainer.clients_in_parallel > 1 cannot be used with data.num_workers > 0 (DataLoader processes "
                "forked from concurrent training threads can deadlock): set one of them to 1 / 0"
            )
        if workers == "auto":
            parallel = self.fabric.device.type == "cpu" and self.privacy is None and data.num_workers == 0
            workers = cores_per_process if parallel else 1
        workers = min(workers, math.ceil(self.clients_per_round / self.fabric.world_size))
        return workers, max(1, cores_per_process // workers)

    def _engine(self, workers: ClientWorkers, strategy: Strategy) -> RoundEngine:
        fixed_process = strategy.keeps_client_state or (self.privacy is not None and self.privacy.keeps_client_state)
        return RoundEngine(
            self.fabric,
            workers,
            strategy,
            self.clients_per_round,
            fixed_process,
            self.check_replicas,
            on_client_end=lambda update: self.fabric.call("on_client_end", trainer=self, update=update),
            check_plans=self._check_privacy_budget,
        )

    def _check_privacy_budget(self, round: int, plans: list[ClientPlan]) -> None:
        """Raises ``BudgetReached`` on every process when a client of this round would exceed its privacy budget."""
        if self.privacy is None or not self.privacy.limits_budget:
            return
        over = max((plan.client_id for plan in plans if self.privacy.would_exceed(plan)), default=-1)
        client_id = int(self.fabric.all_reduce(torch.tensor(over + 1.0, device=self.fabric.device), reduce_op="max")) - 1
        if client_id >= 0:
            raise BudgetReached(f"client {client_id} would exceed its privacy budget in round {round + 1}")

    def _launch(self, data: FederatedDataModule) -> None:
        """Starts the processes (once) and loads the data on each."""
        if not self._launched:
            self.fabric.launch()
            self._launched = True
        data.setup(self.seed, self.fabric.device)

    def _checkpoint_to_resume(self, ckpt_path: str | None) -> Path | None:
        """The checkpoint file ``ckpt_path`` names (found by process 0), None for a fresh start; "last" is the run
        ``version`` names when it is set."""
        runs = "*" if self.version is None else version_folder(Path(), self.version).name
        path = resolve_checkpoint(ckpt_path, self.run_root, runs) if self.fabric.is_global_zero else None
        return self.fabric.broadcast(path)

    def _run_fingerprint(
        self, model: LightningModule, data: FederatedDataModule, strategy: Strategy | None, run_config: str | None
    ) -> dict[str, str]:
        """What must not change on a resume: the run's whole config but the settings a resume may change; from
        Python, the seed, the classes of the model, dataset, partitioner and strategy, the model's hyperparameters,
        the numbers of clients, the local work and the split's fractions."""
        if run_config is not None:
            return fingerprint(yaml.safe_load(run_config))
        return fingerprint({
            "seed": self.seed,
            "model": {"class_path": _class_name(model), "init_args": dict(model.hparams)},
            "data": {
                "dataset": _class_name(data.dataset),
                "partitioner": _class_name(data.partitioner),
                "num_clients": data.num_clients,
                "val_fraction": data.val_fraction,
                "client_val_fraction": data.client_val_fraction,
            },
            "strategy": None if strategy is None else _class_name(strategy),
            "trainer": {"clients_per_round": self.clients_per_round, "local_work": vars(self.local_work)},
        })

    def _check_resume(self, checkpoint: dict, path: Path) -> bool:
        """Refuses a resume whose settings differ from those of the checkpoint's run, or with fewer rounds than it has
        done; True when the run is already complete (nothing to do)."""
        check_fingerprint(checkpoint.get("fingerprint"), self._fingerprint, str(path))
        done = checkpoint["round"]
        if done > self.rounds:
            raise ConfigError(f"{path} is at round {done}, beyond trainer.rounds {self.rounds}: set trainer.rounds above {done} to continue the run")
        if done == self.rounds:
            self.fabric.print(f"the run is complete: {path} is at round {done} = trainer.rounds; raise trainer.rounds to continue it")
        return done == self.rounds

    def _start_run(self, model: LightningModule, resume_from: Path | None, run_config: str | None) -> None:
        """Fixes the run folder (the resumed run's, or a new version), its config and loggers; called once the
        checkpoint to resume from has been read, so that a run refused until then writes nothing."""
        if not is_overridden("validation_step", model, LightningModule):
            raise ConfigError(f"{type(model).__name__} must define validation_step to evaluate the global model")
        if self.fabric.is_global_zero:
            resumed_run = None if resume_from is None else _run_folder_of(resume_from)
            self.log_dir = resumed_run or claim_run_folder(self.run_root, self.version)
            if run_config is not None:
                write_run_config(self.log_dir, run_config)
        self.log_dir = self.fabric.broadcast(self.log_dir)
        self.hparams = yaml.safe_load(run_config) if run_config is not None else {"seed": self.seed, "rounds": self.rounds}
        self.loggers = self._loggers()

    def _loggers(self) -> list[Logger]:
        if self.logger is True:
            folder = self.log_dir
            return [TensorBoardLogger(folder.parent.parent, folder.parent.name, folder.name, default_hp_metric=False)]
        if self.logger is False or self.logger is None:
            return []
        return [self.logger] if isinstance(self.logger, Logger) else list(self.logger)

    # ----------------------------------------------------------------- checkpoints

    @property
    def checkpoint_path(self) -> Path:
        return self.log_dir / "checkpoints" / LAST

    def save_checkpoint(self) -> None:
        """Writes ``last.ckpt`` atomically (process 0), and beside it what each process alone holds (its clients'
        states), in its own file: nothing is gathered to one process. A collective call."""
        folder, rank, world = self.checkpoint_path.parent, self.fabric.global_rank, self.fabric.world_size
        own, name = self.strategy.process_state(), f"round_{self.round}"
        held = float(self.fabric.all_reduce(torch.tensor(float(any(own.values())), device=self.fabric.device), reduce_op="max")) > 0
        if held:  # with the files' checksums, gathered into the checkpoint
            checksums = gather_checksums(self.fabric, write_process_state(folder / PROCESS_STATES / name, rank, world, own))
        self.fabric.barrier()
        if self.fabric.is_global_zero:
            state = {
                "round": self.round,
                "params": self.params.cpu(),
                "buffers": self.buffers.cpu(),
                "strategy": self.strategy.state_dict(),
                "process_states": {"folder": name, "world_size": world, "sha256": checksums} if held else None,
                "rng": rng_states(),
                "metrics": self.last_metrics,
                "best_round": self.best.state_dict(),
                "fingerprint": self._fingerprint,
                **self.source.state_dict(),
            }
            self.client.module.on_save_checkpoint(state)
            self.fabric.call("on_save_checkpoint", trainer=self, checkpoint=state)
            save_checkpoint(self.checkpoint_path, state)
            prune(folder / PROCESS_STATES, {name, self._process_states})  # the previous checkpoint's stay
        self._process_states = name if held else None
        self.fabric.barrier()

    def _resume(self, checkpoint: dict, folder: Path) -> None:
        """Restores the run from ``checkpoint`` (read from ``folder``); each process reads only its own process file
        when the number of processes is unchanged."""
        self.params, self.buffers = self._restore_weights(checkpoint, self.params, self.buffers)
        self.strategy.load_state_dict(checkpoint["strategy"])
        saved = checkpoint["process_states"]
        if saved is not None:
            read = reader(folder / PROCESS_STATES / saved["folder"], saved["world_size"])
            self.strategy.load_process_state(read, saved["world_size"], self.fabric.global_rank, self.fabric.world_size)
            self._process_states = saved["folder"]
        restore_rng_states(checkpoint["rng"])
        self.source.load_state_dict(checkpoint)
        self.round, self.last_metrics = checkpoint["round"], checkpoint["metrics"]
        self.best.load_state_dict(checkpoint.get("best_round"), self.params.device)
        self.client.module.on_load_checkpoint(checkpoint)
        self.fabric.call("on_load_checkpoint", trainer=self, checkpoint=checkpoint)

    @staticmethod
    def _restore_weights(checkpoint: dict, params: Tensor, buffers: Tensor) -> tuple[Tensor, Tensor]:
        saved_params, saved_buffers = checkpoint["params"], checkpoint["buffers"]
        if saved_params.shape != params.shape or saved_buffers.shape != buffers.shape:
            raise ConfigError(
                f"the checkpoint holds {saved_params.numel()} parameters, the model has {params.numel()}; "
                "resume with the model configuration the checkpoint was written with"
            )
        return saved_params.to(params), saved_buffers.to(buffers)

    # ----------------------------------------------------------------- evaluation

    def _evaluate_once(
        self, model: LightningModule, data: FederatedDataModule, ckpt_path: str | None, run_config: str | None, step: str
    ) -> dict[str, float]:
        """Evaluates the checkpoint's global model (the initial one without ``ckpt_path``), refused when the model, the
        data or the seed differ from its run's (``run_config``); writes nothing: the fit run's folder, config and
        events stay as the run left them."""
        if not is_overridden(step, model, LightningModule):
            raise ConfigError(f"{type(model).__name__} must define {step} to evaluate the global model")
        self._launch(data)
        path = self._checkpoint_to_resume(ckpt_path)
        self.log_dir = None if path is None else _run_folder_of(path) or path
        self.client = ClientTrainer(self.fabric, model, data)
        self.params, self.buffers = self.client.flat.params.clone(), self.client.flat.buffers.clone()
        if path is not None:
            checkpoint = load_checkpoint(path, self.fabric.print, process_files=False)  # the weights are enough
            current = self._run_fingerprint(model, data, None, run_config)
            check_fingerprint(checkpoint.get("fingerprint"), current, str(path), evaluation=True)
            self.params, self.buffers = self._restore_weights(checkpoint, self.params, self.buffers)
            self.round = checkpoint["round"]
            self.client.module.on_load_checkpoint(checkpoint)
        return self.evaluate(step)
