"""The hooks a callback may implement, and what of the trainer a callback reads; the trainer calls the hooks by name
as ``Fabric.call`` does (``lightfed.callbacks.calls``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from lightning.fabric import Fabric
from lightning.fabric.loggers import Logger

from lightfed.core.messages import ClientUpdate

if TYPE_CHECKING:
    from lightfed.data.module import FederatedDataModule


class TrainerState(Protocol):
    """What a callback reads of the trainer it observes (``FederatedTrainer``, with synchronous or asynchronous rounds). A hook
    may set ``should_stop``; nothing else here is a callback's to change, and a callback calls none of the trainer's
    methods.

    Examples:
        >>> from lightfed import FederatedTrainer
        >>> trainer = FederatedTrainer.from_settings(accelerator="cpu", rounds=5, logger=False)
        >>> trainer.rounds, trainer.round, trainer.monitor, trainer.should_stop
        (5, 0, 'val_acc', False)
        >>> trainer.log_dir is None  # before the run starts
        True
    """

    fabric: Fabric  # the run's processes: ``is_global_zero``, ``global_rank``, ``world_size``, ``print``
    rounds: int  # the rounds the run is to do (``trainer.rounds``)
    round: int  # the rounds done
    monitor: str  # the metric the progress bar shows and the best round is chosen by
    should_stop: bool  # set to stop after the current round, the same on every process (its checkpoint is written)

    @property
    def stop_requested(self) -> bool:
        """A signal (a cluster's warning, SIGTERM, Ctrl-C) asked the run to stop, to be resumed."""

    @property
    def log_dir(self) -> Path | None:
        """The run folder (None before the run starts)."""

    @property
    def checkpoint_path(self) -> Path:
        """``<log_dir>/checkpoints/last.ckpt``."""

    @property
    def loggers(self) -> list[Logger]:
        """The run's loggers."""

    @property
    def hparams(self) -> dict[str, Any]:
        """The run's settings (its config), as the loggers record them."""

    @property
    def last_metrics(self) -> dict[str, float]:
        """The last round's metrics."""


class Callback:
    """Base class of lightfed callbacks (``trainer.callbacks`` in a config); implement only the hooks you need.

    A callback observes the run through ``TrainerState``. Every process calls every hook: a hook that writes files
    should do so on ``trainer.fabric.is_global_zero`` only, and one that stops the run (``trainer.should_stop = True``)
    must decide the same way on every process (the metrics are reduced, so a decision made from them is). After
    ``on_round_end`` the trainer writes the round's checkpoint (when due, or when the run stops), then hands the
    metrics to the loggers and ``metrics.jsonl``.

    In a config, after the class is importable (``my_project/callbacks.py``):

    ```yaml
    trainer:
      callbacks:
        - class_path: my_project.callbacks.PrintAccuracy
    ```

    Examples:
        >>> from lightfed import FederatedTrainer
        >>> from lightfed.callbacks import Callback
        >>> class PrintAccuracy(Callback):
        ...     def on_round_end(self, trainer, round, metrics):
        ...         if trainer.fabric.is_global_zero:
        ...             print(f"round {round}: val_acc {metrics['val_acc']:.2f}")
        >>> printer = PrintAccuracy()
        >>> trainer = FederatedTrainer.from_settings(accelerator="cpu", callbacks=[printer], logger=False)
        >>> printer.on_round_end(trainer, 0, {"val_acc": 0.8125})
        round 0: val_acc 0.81
    """

    def setup(self, trainer: TrainerState, data: FederatedDataModule) -> None:
        """The data is loaded and nothing of the run is written yet: the place to refuse a setting."""

    def on_fit_start(self, trainer: TrainerState) -> None:
        """The run is set up (resumed where it resumes), before its first round."""

    def on_round_start(self, trainer: TrainerState, round: int) -> None:
        """Round ``round`` (0-based) is about to train."""

    def on_client_end(self, trainer: TrainerState, update: ClientUpdate) -> None:
        """A client of this process finished; its delta lives in a buffer the next client reuses. A callback with
        this hook makes the round engine take every update alone (not a vectorized chunk's as rows)."""

    def on_evaluation_end(self, trainer: TrainerState, metrics: dict[str, float]) -> None:
        """The global model was evaluated on the validation split (``metrics``: the reduced results)."""

    def on_round_end(self, trainer: TrainerState, round: int, metrics: dict[str, float]) -> None:
        """Round ``round`` is aggregated and evaluated (privacy and per-client metrics included); ``metrics`` may be
        added to; ``trainer.round`` counts it."""

    def on_save_checkpoint(self, trainer: TrainerState, checkpoint: dict[str, Any]) -> None:
        """``checkpoint`` is about to be written (on process 0): add what this callback needs to resume."""

    def on_load_checkpoint(self, trainer: TrainerState, checkpoint: dict[str, Any]) -> None:
        """The run resumes from ``checkpoint`` (on every process)."""

    def on_fit_end(self, trainer: TrainerState, metrics: dict[str, float]) -> None:
        """The run ended (all rounds done, or stopped); ``metrics`` are the last round's."""

    def on_exception(self, trainer: TrainerState, error: BaseException) -> None:
        """The run failed with ``error`` (re-raised after the callbacks); the last checkpoint written is kept."""
