"""A trainer but its round loop: settings, Fabric, run output, state, the checks before a run, evaluating a checkpoint."""

from pathlib import Path
from typing import Any

from lightning import LightningModule
from lightning.fabric import Fabric
from lightning.fabric.loggers import Logger
from torch import Tensor

from lightfed.adapters import set_collective_timeout
from lightfed.attacks.base import Attack
from lightfed.callbacks import Callback, ProgressBar
from lightfed.data.module import FederatedDataModule
from lightfed.errors import ConfigError
from lightfed.heterogeneity import LocalWork
from lightfed.launcher import quiet_srun_hint
from lightfed.privacy.base import ClientPrivacy
from lightfed.run import run_checks
from lightfed.run.checkpoint import LAST, rng_states
from lightfed.run.client_workers import ClientWorkers
from lightfed.run.engine import RoundEngine
from lightfed.run.evaluation import BestRound, evaluate_checkpoint
from lightfed.run.preemption import Preemption
from lightfed.run.resume import checkpoint_to_resume, run_fingerprint
from lightfed.run.rounds import SampledRounds
from lightfed.run.run_output import RunOutput, check_writable, run_folder_of
from lightfed.run.run_state import RunState
from lightfed.schedules import RoundSchedule
from lightfed.strategies.base import Strategy

PRECISIONS = ("32-true", "16-mixed", "bf16-mixed")
MAX_SEED = 2**32 - 1  # numpy's
MAX_FILE_NAME = 255  # bytes, on Linux's and macOS's file systems


class TrainerBase:
    """A trainer but its round loop (``lightfed.trainer.FederatedTrainer.fit``): its settings (each checked), its
    ``Fabric`` (launched by the first run), its run output, the state the loop keeps, the surface callbacks read
    (``lightfed.callbacks.TrainerState``), the checks before a run, and the evaluation of a checkpoint."""

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
        client_eval_clients: int | None = None,
        client_eval_finetune_steps: int = 0,
        unseen_clients: int = 0,
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
        client_states: str = "memory",
        client_states_folder: str | None = None,
        privacy: ClientPrivacy | None = None,
        attack: Attack | None = None,
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
                (0: never); logs the distribution over clients of ``monitor`` (``clients/<monitor>_{mean,std,min,
                p10}``; TensorBoard also gets the histogram ``clients/<monitor>``); with a personalization strategy
                also each client's personal model (``clients/personal/<monitor>_*``), and apart the clients never
                sampled for training (``clients/unseen/<monitor>_*``). See docs/guides/personalization.md.
            client_eval_clients: Evaluate only this many clients, a fixed subset drawn from the seed (null: all).
            client_eval_finetune_steps: Also evaluate each client after this many local steps of the global model on
                its own data (``clients/finetuned/<monitor>_*``; FedAvg + fine-tuning); 0: not.
            unseen_clients: The last this many clients never train (the server samples the others), so that
                per-client evaluation reports clients unseen in training.
            checkpoint_interval: Write ``last.ckpt`` every this many rounds (and at the end, and before a stop).
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
            client_states: Where a strategy keeps what it remembers per client (SCAFFOLD's control variates, the
                personal weights of a personalization wrapper, MasFL's and CA2FL's last updates, ...): "memory" (each
                process holds its clients'; a checkpoint rewrites them all) or "disk" (files read for a round's clients
                and written for those only; a checkpoint writes only the clients trained since the last one; for
                populations whose state does not fit in memory). The weights are the same either way. Not for the
                sharded path (FedECADO, robust aggregators), whose per-client state is sharded by coordinate.
            client_states_folder: With "disk", where each process keeps its files (null: a new temporary folder); on
                the file system of the run folder, a checkpoint links them instead of copying them.
            privacy: Differential privacy of the clients' local training, e.g. ``lightfed.privacy.DPSGD`` (Opacus
                DP-SGD with one accountant per client); logs ``privacy/epsilon_max`` and ``privacy/epsilon_mean``.
            attack: A simulated attack by a fraction of the clients, e.g. ``lightfed.attacks.SignFlipping``
                (docs/guides/robustness.md); null: every client is benign.
            callbacks: More callbacks (``lightfed.callbacks.Callback``), called in this order, after the attack's
                (which log its metrics) and before the progress bar.
            logger: Where the per-round metrics go: true for TensorBoard in the run folder, false for none, or
                logger instances (``lightning.fabric.loggers``), which get the run's config too and write beside
                TensorBoard in the run folder (a CSV logger without a version: ``<run>/csv``). ``metrics.jsonl`` is
                written in the run folder either way.
        """
        check_seed(seed)
        check_name(name)
        check_settings(
            precision,
            gradient_clip_val,
            gradient_clip_algorithm,
            clients_in_parallel,
            privacy,
            version,
            rounds=(rounds, 1),
            clients_per_round=(clients_per_round, 1),
            eval_interval=(eval_interval, 1),
            client_eval_interval=(client_eval_interval, 0),
            client_eval_clients=(1 if client_eval_clients is None else client_eval_clients, 1),
            client_eval_finetune_steps=(client_eval_finetune_steps, 0),
            unseen_clients=(unseen_clients, 0),
            checkpoint_interval=(checkpoint_interval, 1),
            collective_timeout=(collective_timeout, 1),
        )
        if client_states not in ("memory", "disk"):
            raise ConfigError(f'trainer.client_states must be "memory" or "disk", got {client_states!r}')
        self.client_states, self.client_states_folder = client_states, client_states_folder
        self.local_work = LocalWork(local_epochs, local_steps, local_lr, redraw_local_work)
        attacking = [] if attack is None else attack.callbacks()
        everything = [*attacking, *(callbacks or []), *([ProgressBar()] if progress_bar else [])]  # attacks first
        self.fabric = build_fabric(accelerator, devices, num_nodes, precision, everything, collective_timeout)
        self.collective_timeout, self.rounds, self.clients_per_round, self.seed = (
            collective_timeout,
            rounds,
            clients_per_round,
            seed,
        )
        self.eval_interval, self.client_eval_interval, self.checkpoint_interval = (
            eval_interval,
            client_eval_interval,
            checkpoint_interval,
        )
        self.client_eval_clients, self.client_eval_finetune_steps = client_eval_clients, client_eval_finetune_steps
        self.unseen_clients = unseen_clients
        self.monitor, self.version, self.check_replicas, self.precision = monitor, version, check_replicas, precision
        self.client_settings = dict(
            privacy=privacy,
            lr_schedule=lr_schedule,
            rounds=rounds,
            gradient_clip_val=gradient_clip_val,
            gradient_clip_algorithm=gradient_clip_algorithm,
            attack=attack,
        )
        self.clients_in_parallel, self.privacy, self.lr_schedule = clients_in_parallel, privacy, lr_schedule
        self.attack = attack
        self.output = RunOutput(self.fabric, Path(root_dir) / name, logger)
        self.preemption = Preemption()
        self.round = 0  # rounds done
        self.should_stop = False  # set by a callback to stop after the current round (the same on every process)
        self.last_metrics: dict[str, float] = {}
        self.final_report: dict[str, Any] = {}  # the test set's metrics once fit has ended (none for a stopped run)
        self.best = BestRound(monitor)
        self.fingerprint: dict[str, str] = {}
        self.workers: ClientWorkers | None = None  # built by fit, with the engine, the strategy and the rounds' source
        self.engine: RoundEngine | None = None
        self.strategy: Strategy | None = None
        self.source: SampledRounds | None = None
        self.params = self.buffers = Tensor()  # the global model, flat
        self._process_states: str | None = None  # the process-state folder of the newest checkpoint
        self._launched = False

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
        if self.attack is not None:
            self.attack.setup(data.num_clients, self.seed)

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
        self._launch(data)
        self.fabric.call("setup", trainer=self, data=data)
        run_checks.check_clients(self.clients_per_round, data)
        run_checks.check_step(model, "validation_step")
        run_checks.check_parameters(model)
        self.fingerprint = run_fingerprint(run_config, self.seed, model, data, strategy, self._fingerprinted())
        resume_from = checkpoint_to_resume(self.fabric, ckpt_path, self.output.experiment, self.version)
        return None if resume_from is None else (resume_from, RunState.load(resume_from, self.fabric.print))

    def validate(
        self,
        model: LightningModule,
        data: FederatedDataModule,
        ckpt_path: str | None = None,
        run_config: str | None = None,
    ) -> dict[str, float]:
        """Evaluates the (checkpointed) global model with ``validation_step`` on the validation split."""
        return self._evaluate_once(model, data, ckpt_path, run_config, "validation_step")

    def test(
        self,
        model: LightningModule,
        data: FederatedDataModule,
        ckpt_path: str | None = None,
        run_config: str | None = None,
    ) -> dict[str, float]:
        """Evaluates the (checkpointed) global model with ``test_step`` on the central test set."""
        return self._evaluate_once(model, data, ckpt_path, run_config, "test_step")

    def _evaluate_once(
        self,
        model: LightningModule,
        data: FederatedDataModule,
        ckpt_path: str | None,
        run_config: str | None,
        step: str,
    ) -> dict[str, float]:
        """Evaluates the checkpoint's global model (the initial one without ``ckpt_path``); writes nothing."""
        run_checks.check_step(model, step)
        self._launch(data)
        path = checkpoint_to_resume(self.fabric, ckpt_path, self.output.experiment, self.version)
        self.output.log_dir = None if path is None else run_folder_of(path) or path
        current = run_fingerprint(run_config, self.seed, model, data, None, self._fingerprinted())
        self.round, self.params, self.buffers, metrics = evaluate_checkpoint(
            self.fabric, model, data, path, current, step
        )
        return metrics

    def _run_state(self, strategy: Strategy, source: SampledRounds, process_states: dict[str, Any] | None) -> RunState:
        """The run as a checkpoint holds it, after ``self.round`` rounds (``process_states``: its per-process files)."""
        return RunState(
            self.round,
            self.params.cpu(),
            self.buffers.cpu(),
            strategy.state_dict(),
            process_states,
            rng_states(),
            self.last_metrics,
            self.best.state_dict(),
            self.fingerprint,
            source.state_dict(),
        )

    def _fingerprinted(self) -> dict[str, Any]:
        """The settings of this trainer a run's fingerprint holds when it has no config (a run from Python)."""
        return {"clients_per_round": self.clients_per_round, "local_work": vars(self.local_work)}

    def due(self, every_n_rounds: int) -> bool:
        """Whether the round just done is one of every ``every_n_rounds`` (the last round always is)."""
        return self.round % every_n_rounds == 0 or self.round == self.rounds


def check_settings(
    precision: str,
    gradient_clip_val: float | None,
    gradient_clip_algorithm: str,
    clients_in_parallel: int | str,
    privacy: ClientPrivacy | None,
    version: int | None,
    **at_least: tuple[float, float],
) -> None:
    """Refuses trainer settings out of range; ``at_least``: name -> (value, lowest allowed)."""
    if precision not in PRECISIONS:
        raise ConfigError(f"trainer.precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if gradient_clip_val is not None and not gradient_clip_val > 0:
        raise ConfigError(f"trainer.gradient_clip_val must be > 0 or null, got {gradient_clip_val}")
    if gradient_clip_algorithm not in ("norm", "value"):
        raise ConfigError(f"trainer.gradient_clip_algorithm must be 'norm' or 'value', got {gradient_clip_algorithm!r}")
    if clients_in_parallel != "auto" and not (isinstance(clients_in_parallel, int) and clients_in_parallel >= 1):
        raise ConfigError(f"trainer.clients_in_parallel must be 'auto' or an integer >= 1, got {clients_in_parallel!r}")
    if privacy is not None and clients_in_parallel not in ("auto", 1):
        raise ConfigError(
            "trainer.clients_in_parallel must be 1 or 'auto' with trainer.privacy: its clients train one at a time"
        )
    for key, (value, low) in at_least.items():
        if value < low:
            raise ConfigError(f"trainer.{key} must be >= {low}, got {value}")
    if version is not None and version < 0:
        raise ConfigError(f"trainer.version must be >= 0 or null, got {version}")


def check_seed(seed: int) -> None:
    """Refuses a seed numpy cannot take (Lightning's ``seed_everything`` seeds numpy with it)."""
    if not 0 <= seed <= MAX_SEED:
        raise ConfigError(f"seed_everything must be an integer from 0 to {MAX_SEED}, got {seed}")


def check_name(name: str) -> None:
    """Refuses an experiment name that is not a folder inside ``root_dir`` (empty, ``.``, absolute, with ``..``) or
    with a part too long for a file name."""
    parts = name.split("/")
    if not name or name.startswith("/") or any(part in ("", ".", "..") for part in parts):
        raise ConfigError(
            f"trainer.name must name a folder inside trainer.root_dir (relative, without '.' or '..' parts), got {name!r}"
        )
    longest = max(len(part.encode()) for part in parts)
    if longest > MAX_FILE_NAME:
        raise ConfigError(f"trainer.name has a part of {longest} bytes: a file name holds at most {MAX_FILE_NAME}")


def build_fabric(
    accelerator: str, devices: int | str, num_nodes: int, precision: str, callbacks: list, collective_timeout: float
) -> Fabric:
    """A ``Fabric`` whose collectives wait ``collective_timeout`` seconds; Lightning's refusal as a ``ConfigError``."""
    quiet_srun_hint()
    try:
        fabric = Fabric(
            accelerator=accelerator,
            devices=devices,
            num_nodes=num_nodes,
            precision=precision,  # type: ignore[arg-type]
            callbacks=callbacks,
        )
        set_collective_timeout(fabric, collective_timeout)
    except (RuntimeError, ValueError) as error:  # Lightning's MisconfigurationException is a RuntimeError
        raise ConfigError(
            f"trainer.accelerator {accelerator!r} with trainer.devices {devices!r}, num_nodes {num_nodes}: {error}"
        ) from None
    return fabric
