"""The trainer's settings in groups (processes, local training, evaluation, output, client states), each checked
when built, and ``trainer_settings``, which fills them from the config's flat ``trainer:`` keys."""

from dataclasses import dataclass
from typing import Any

from lightning.fabric.loggers import Logger

from lightfed.asynchronous.delays import DelayModel
from lightfed.attacks.base import Attack
from lightfed.callbacks import Callback
from lightfed.distributions import Distribution
from lightfed.errors import ConfigError
from lightfed.privacy.base import ClientPrivacy
from lightfed.run.determinism import Deterministic
from lightfed.schedules import RoundSchedule

PRECISIONS = ("32-true", "16-mixed", "bf16-mixed")
MAX_FILE_NAME = 255  # bytes, on Linux's and macOS's file systems
MAX_LR = 3.4028234663852886e38  # float32's largest: the weights' dtype cannot hold a step scaled by more
MAX_COLLECTIVE_TIMEOUT = 365 * 24 * 3600.0  # a year; torch's clocks count nanoseconds and overflow far above


def at_least(**settings: tuple[float, float]) -> None:
    """Refuses ``name=(value, lowest allowed)`` below its lowest (or NaN), naming ``trainer.<name>``."""
    for key, (value, low) in settings.items():
        if not value >= low:
            raise ConfigError(f"trainer.{key} must be >= {low}, got {value}")


@dataclass(frozen=True)
class Processes:
    """Where and how the run's processes train; see ``trainer_settings``.

    In a config:

    ```yaml
    trainer:
      accelerator: gpu
      devices: 2
      precision: bf16-mixed
    ```

    Examples:
        >>> from lightfed.run.settings import Processes, trainer_settings
        >>> trainer_settings(accelerator="gpu", devices=2, precision="bf16-mixed")["processes"]
        Processes(accelerator='gpu', devices=2, num_nodes=1, precision='bf16-mixed', collective_timeout=1800.0,
                  clients_in_parallel='auto', check_replicas=False, deterministic=False)
        >>> Processes(clients_in_parallel=0)
        Traceback (most recent call last):
        ...
        lightfed.errors.ConfigError: trainer.clients_in_parallel must be 'auto', 'vectorized' or an integer >= 1, got 0
    """

    accelerator: str = "auto"
    devices: int | str = 1
    num_nodes: int = 1
    precision: str = "32-true"
    collective_timeout: float = 1800.0
    clients_in_parallel: int | str = "auto"
    check_replicas: bool = False
    deterministic: Deterministic = False

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise ConfigError(f"trainer.precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}")
        if self.deterministic not in (False, True, "warn"):
            raise ConfigError(f"trainer.deterministic must be true, false or 'warn', got {self.deterministic!r}")
        workers = self.clients_in_parallel
        if workers not in ("auto", "vectorized") and not (isinstance(workers, int) and workers >= 1):
            raise ConfigError(
                f"trainer.clients_in_parallel must be 'auto', 'vectorized' or an integer >= 1, got {workers!r}"
            )
        if not 1 <= self.collective_timeout <= MAX_COLLECTIVE_TIMEOUT:
            raise ConfigError(
                f"trainer.collective_timeout must be from 1 to {MAX_COLLECTIVE_TIMEOUT:.0f} seconds (a year), got "
                f"{self.collective_timeout}"
            )


@dataclass(frozen=True)
class LocalTraining:
    """What each client does in a round; see ``trainer_settings`` (its keys start with ``local_``).

    In a config:

    ```yaml
    trainer:
      local_epochs: null
      local_steps: 10
      local_lr: loguniform:1e-4:1e-1  # drawn per client
    ```

    Examples:
        >>> from lightfed.run.settings import LocalTraining, trainer_settings
        >>> local = trainer_settings(local_epochs=None, local_steps=10, local_lr="loguniform:1e-4:1e-1")["local"]
        >>> local.epochs, local.steps, local.lr
        (None, 10, 'loguniform:1e-4:1e-1')
        >>> LocalTraining(lr=0)
        Traceback (most recent call last):
        ...
        lightfed.errors.ConfigError: trainer.local_lr must be > 0 and at most 3.403e+38 (float32's largest), got 0
    """

    epochs: int | str | None = 1
    steps: int | str | None = None
    lr: float | str | None = None
    redraw: bool = False
    lr_schedule: RoundSchedule | None = None
    gradient_clip_val: float | None = None
    gradient_clip_algorithm: str = "norm"
    trained_parameters: list[str] | None = None

    def __post_init__(self) -> None:
        lr = None if self.lr is None else Distribution.parse(self.lr, "trainer.local_lr")
        if lr is not None and not 0 < lr.low <= lr.high <= MAX_LR:
            raise ConfigError(
                f"trainer.local_lr must be > 0 and at most {MAX_LR:.4g} (float32's largest), got {self.lr}"
            )
        if self.gradient_clip_val is not None and not self.gradient_clip_val > 0:
            raise ConfigError(f"trainer.gradient_clip_val must be > 0 or null, got {self.gradient_clip_val}")
        if self.gradient_clip_algorithm not in ("norm", "value"):
            raise ConfigError(
                f"trainer.gradient_clip_algorithm must be 'norm' or 'value', got {self.gradient_clip_algorithm!r}"
            )


@dataclass(frozen=True)
class EvaluationSettings:
    """When and on what the global model and the clients are evaluated; see ``trainer_settings``.

    In a config:

    ```yaml
    trainer:
      eval_interval: 5
      client_eval_interval: 10
      monitor: val_loss
    ```

    Examples:
        >>> from lightfed.run.settings import EvaluationSettings, trainer_settings
        >>> trainer_settings(eval_interval=5, client_eval_interval=10, monitor="val_loss")["evaluation"]
        EvaluationSettings(interval=5, client_interval=10, clients=None, finetune_steps=0, unseen_clients=0,
                           monitor='val_loss')
        >>> EvaluationSettings(interval=0)
        Traceback (most recent call last):
        ...
        lightfed.errors.ConfigError: trainer.eval_interval must be >= 1, got 0
    """

    interval: int = 1
    client_interval: int = 0
    clients: int | None = None
    finetune_steps: int = 0
    unseen_clients: int = 0
    monitor: str = "val_acc"

    def __post_init__(self) -> None:
        at_least(
            eval_interval=(self.interval, 1),
            client_eval_interval=(self.client_interval, 0),
            client_eval_clients=(1 if self.clients is None else self.clients, 1),
            client_eval_finetune_steps=(self.finetune_steps, 0),
            unseen_clients=(self.unseen_clients, 0),
        )


@dataclass(frozen=True)
class OutputSettings:
    """Where a run writes, what it shows and how often it checkpoints; see ``trainer_settings``.

    In a config:

    ```yaml
    trainer:
      root_dir: runs
      name: fedprox-digits
      checkpoint_interval: 10
    ```

    Examples:
        >>> from lightfed.run.settings import OutputSettings, trainer_settings
        >>> trainer_settings(name="fedprox-digits", checkpoint_interval=10)["output"]
        OutputSettings(root_dir='runs', name='fedprox-digits', version=None, progress_bar=True, checkpoint_interval=10,
                       logger=True)
        >>> OutputSettings(name="../elsewhere")
        Traceback (most recent call last):
        ...
        lightfed.errors.ConfigError: trainer.name must name a folder inside trainer.root_dir (relative, without '.'
        or '..' parts), got '../elsewhere'
    """

    root_dir: str = "runs"
    name: str = "lightfed"
    version: int | None = None
    progress_bar: bool = True
    checkpoint_interval: int = 1
    logger: bool | Logger | list[Logger] = True

    def __post_init__(self) -> None:
        check_name(self.name)
        if self.version is not None and self.version < 0:
            raise ConfigError(f"trainer.version must be >= 0 or null, got {self.version}")
        at_least(checkpoint_interval=(self.checkpoint_interval, 1))


@dataclass(frozen=True)
class ClientStateSettings:
    """Where strategies keep what they remember per client; see ``trainer_settings``.

    In a config:

    ```yaml
    trainer:
      client_states: disk
      client_states_folder: /scratch/client_states
    ```

    Examples:
        >>> from lightfed.run.settings import ClientStateSettings, trainer_settings
        >>> trainer_settings(client_states="disk", client_states_folder="/scratch/client_states")["client_states"]
        ClientStateSettings(where='disk', folder='/scratch/client_states')
        >>> ClientStateSettings(where="gpu")
        Traceback (most recent call last):
        ...
        lightfed.errors.ConfigError: trainer.client_states must be "memory" or "disk", got 'gpu'
    """

    where: str = "memory"
    folder: str | None = None

    def __post_init__(self) -> None:
        if self.where not in ("memory", "disk"):
            raise ConfigError(f'trainer.client_states must be "memory" or "disk", got {self.where!r}')


@dataclass(frozen=True)
class AvailabilitySettings:
    """Which clients are online in a round, how many the server selects and which it aggregates; see
    ``trainer_settings`` and docs/guides/availability.md.

    In a config:

    ```yaml
    trainer:
      online_fraction: 0.5
      over_selection: 1.3
      round_deadline: 12.0
      client_dropout: 0.1
    ```

    Examples:
        >>> from lightfed.run.settings import AvailabilitySettings, trainer_settings
        >>> trainer_settings(over_selection=1.3, round_deadline=12.0)["availability"].active
        True
        >>> AvailabilitySettings(over_selection=0.5)
        Traceback (most recent call last):
        ...
        lightfed.errors.ConfigError: trainer.over_selection must be >= 1 (it selects clients_per_round times it), got 0.5
    """

    trace: str | None = None
    online_fraction: float = 1.0
    day_rounds: int = 24
    over_selection: float = 1.0
    deadline: float | None = None
    dropout: float = 0.0
    delays: DelayModel | None = None

    def __post_init__(self) -> None:
        if not 0 < self.online_fraction <= 1:
            raise ConfigError(f"trainer.online_fraction must be in (0, 1], got {self.online_fraction}")
        if self.trace is not None and self.online_fraction < 1:
            raise ConfigError("trainer.availability_trace and trainer.online_fraction < 1 exclude each other: set one")
        at_least(day_rounds=(self.day_rounds, 1))
        if not self.over_selection >= 1:
            raise ConfigError(
                f"trainer.over_selection must be >= 1 (it selects clients_per_round times it), got {self.over_selection}"
            )
        if self.deadline is not None and not self.deadline > 0:
            raise ConfigError(f"trainer.round_deadline must be > 0 or null, got {self.deadline}")
        if not 0 <= self.dropout < 1:
            raise ConfigError(f"trainer.client_dropout must be in [0, 1), got {self.dropout}")

    @property
    def active(self) -> bool:
        """Whether any setting differs from plain sampling of every client, each of them aggregated."""
        return self != AvailabilitySettings()


def trainer_settings(
    accelerator: str = "auto",
    devices: int | str = 1,
    num_nodes: int = 1,
    collective_timeout: float = 1800.0,
    precision: str = "32-true",
    deterministic: Deterministic = False,
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
    trained_parameters: list[str] | None = None,
    clients_in_parallel: int | str = "auto",
    client_states: str = "memory",
    client_states_folder: str | None = None,
    availability_trace: str | None = None,
    online_fraction: float = 1.0,
    day_rounds: int = 24,
    over_selection: float = 1.0,
    round_deadline: float | None = None,
    client_dropout: float = 0.0,
    round_delays: DelayModel | None = None,
    privacy: ClientPrivacy | None = None,
    attack: Attack | None = None,
    callbacks: list[Callback] | None = None,
    logger: bool | Logger | list[Logger] = True,
) -> dict[str, Any]:
    """The trainer's keyword arguments (``FederatedTrainer(**trainer_settings(...))``) from the config's ``trainer:``
    keys, each group checked as it is built (``ConfigError`` in one line naming the key).

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
        deterministic: Train with PyTorch's deterministic algorithms, as Lightning's ``Trainer(deterministic=...)``:
            true (an op without one raises), "warn" (it warns instead) or false. On a GPU a run then repeats bit for
            bit (without: one client at a time ended 6e-8 from itself after 2 rounds of the quickstart on an H200,
            vectorized 3.9e-6); on a CPU lightfed's runs repeat either way. Slower where an op's deterministic
            algorithm is.
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
            p10}``; TensorBoard also gets the histogram ``~clients/<monitor>``); with a personalization transform
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
        trained_parameters: Names (``fnmatch`` patterns, e.g. ``["*.lora_B.*", "score.*"]``) of the parameters
            clients train; the others are frozen. Only trained parameters are federated: the global weights,
            deltas, sums and client states hold them alone, and a checksum of the frozen ones is in the run's
            fingerprint (docs/guides/foundation-models.md). null: the parameters with ``requires_grad`` (all of
            them unless the model freezes some, e.g. a PEFT model's base).
        clients_in_parallel: Clients each process trains at once on a CPU, one thread and one copy of the model
            each (one torch thread each); 1: one client at a time (on a GPU, the only integer). "auto": on a CPU
            one per core of the process (cores / processes per node), else 1. Not with privacy, with
            data.num_workers > 0, with a model that draws from torch's global random generator while training
            (dropout), nor with a model whose steps are too short for threads (no convolution, recurrence or
            attention, and under 2**20 weights; docs/results/performance.md): "auto" then trains one client at a time,
            or, from 2 clients a round (a model on batched matmuls, e.g. lightfed's MLP; 8 under vmap) without
            per-client state on fixed processes, vectorized in blocks of 64 consecutive clients the processes take
            whole (the same weights on any number of processes), and so on a GPU a model without convolution,
            recurrence, attention or dropout layers; what does not vectorize trains one client at a time.
            "vectorized": all of them as one batched computation on stacked weights
            (``lightfed.run.vectorized_clients``; an elementwise optimizer, no local rule or one that runs on a row of
            stacked clients (FedProx's, SCAFFOLD's, MasFL's, FedECADO's, FedPer's, FedRep's, Ditto's, APFL's,
            FedSAM's), DP-SGD included, no randomness under vmap (dropout on batched matmuls is each client's own) or
            training hooks in the model: refused otherwise, in one line).
        client_states: Where a strategy keeps what it remembers per client (SCAFFOLD's control variates, the
            personal weights of a personalization transform, MasFL's and CA2FL's last updates, ...): "memory" (each
            process holds its clients'; a checkpoint rewrites them all) or "disk" (files read for a round's clients
            and written for those only; a checkpoint writes only the clients trained since the last one; for
            populations whose state does not fit in memory). The weights are the same either way. Not for the
            sharded path (FedECADO, robust aggregators), whose per-client state is sharded by coordinate.
        client_states_folder: With "disk", where each process keeps its files (null: a new temporary folder); on
            the file system of the run folder, a checkpoint links them instead of copying them.
        availability_trace: A JSON file ``{"<client id>": [[start, end], ...]}``: client i is online in round r
            when start <= r < end for one of its intervals; a client it does not name is never online. null: every
            client is online (or per online_fraction).
        online_fraction: The fraction of a day each client is online (diurnal availability, each client's phase
            drawn from the seed); 1: always online.
        day_rounds: The rounds of a day of diurnal availability.
        over_selection: The server selects ceil(clients_per_round x this) online clients and aggregates the first
            clients_per_round that finish by round_deadline (Bonawitz et al., 2019); 1: as many as it aggregates.
        round_deadline: The virtual time a round waits for its clients: a client finishes after its duration (from
            round_delays) times its local steps (or epochs); null: no deadline.
        client_dropout: The probability that a selected client drops out of a round, drawn per round and client.
        round_delays: The duration of one local step (or epoch) of a client, e.g.
            ``lightfed.asynchronous.delays.SpeedTiers``; null: ``lightfed.asynchronous.delays.LogNormal``.
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
    return {
        "rounds": rounds,
        "clients_per_round": clients_per_round,
        "seed": seed,
        "processes": Processes(
            accelerator,
            devices,
            num_nodes,
            precision,
            collective_timeout,
            clients_in_parallel,
            check_replicas,
            deterministic,
        ),
        "local": LocalTraining(
            local_epochs,
            local_steps,
            local_lr,
            redraw_local_work,
            lr_schedule,
            gradient_clip_val,
            gradient_clip_algorithm,
            trained_parameters,
        ),
        "evaluation": EvaluationSettings(
            eval_interval,
            client_eval_interval,
            client_eval_clients,
            client_eval_finetune_steps,
            unseen_clients,
            monitor,
        ),
        "output": OutputSettings(root_dir, name, version, progress_bar, checkpoint_interval, logger),
        "client_states": ClientStateSettings(client_states, client_states_folder),
        "availability": AvailabilitySettings(
            availability_trace,
            online_fraction,
            day_rounds,
            over_selection,
            round_deadline,
            client_dropout,
            round_delays,
        ),
        "privacy": privacy,
        "attack": attack,
        "callbacks": callbacks,
    }


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
