"""Stops a run when a monitored metric has not improved for a number of evaluations."""

from typing import Literal

from lightfed.callbacks.base import Callback, TrainerState
from lightfed.data.module import FederatedDataModule
from lightfed.errors import ConfigError


class EarlyStopping(Callback):
    """Stops after the round where ``monitor`` has not improved by more than ``min_delta`` for ``patience``
    consecutive rounds that logged it (the metrics are reduced over processes, so every process stops together;
    the checkpoint of that round is written). Rounds that do not log ``monitor`` are not counted. A ``val_*`` monitor
    is measured on the validation split (``data.val_fraction``), never on the test set.

    In a config:

    ```yaml
    trainer:
      callbacks:
        - class_path: lightfed.callbacks.EarlyStopping
          init_args: {monitor: val_acc, patience: 5}
    ```

    Examples:
        >>> from lightfed import FederatedTrainer
        >>> from lightfed.callbacks import EarlyStopping
        >>> stopping = EarlyStopping(monitor="val_acc", patience=2)
        >>> trainer = FederatedTrainer.from_settings(accelerator="cpu", callbacks=[stopping], logger=False)
        >>> for round, accuracy in enumerate([0.50, 0.60, 0.58, 0.59]):
        ...     trainer.round = round + 1  # the rounds done, as fit counts them
        ...     stopping.on_round_end(trainer, round, {"val_acc": accuracy})
        early stopping after round 4: val_acc has not improved on 0.6 for 2 evaluations
        >>> trainer.should_stop
        True
        >>> EarlyStopping(patience=0)
        Traceback (most recent call last):
        ...
        lightfed.errors.ConfigError: EarlyStopping needs patience >= 1, mode 'max' or 'min' and min_delta >= 0
    """

    def __init__(
        self, monitor: str = "val_acc", patience: int = 3, mode: Literal["max", "min"] = "max", min_delta: float = 0.0
    ) -> None:
        if patience < 1 or mode not in ("max", "min") or min_delta < 0:
            raise ConfigError("EarlyStopping needs patience >= 1, mode 'max' or 'min' and min_delta >= 0")
        self.monitor, self.patience, self.mode, self.min_delta = monitor, patience, mode, min_delta
        self.best: float | None = None
        self.waited = 0

    def _improved(self, value: float) -> bool:
        if self.best is None:
            return True
        return value > self.best + self.min_delta if self.mode == "max" else value < self.best - self.min_delta

    def setup(self, trainer: TrainerState, data: FederatedDataModule) -> None:
        if self.monitor.startswith("val_") and not data.has_validation:
            raise ConfigError(
                f"EarlyStopping monitors {self.monitor}, but data.val_fraction is 0 (no validation split): "
                "set data.val_fraction > 0 (e.g. 0.1)"
            )

    def on_round_end(self, trainer: TrainerState, round: int, metrics: dict[str, float]) -> None:
        if self.monitor not in metrics:
            return
        value = metrics[self.monitor]
        if self._improved(value):
            self.best, self.waited = value, 0
            return
        self.waited += 1
        if self.waited >= self.patience:
            trainer.should_stop = True
            trainer.fabric.print(
                f"early stopping after round {trainer.round}: {self.monitor} has not improved on {self.best:.4g} "
                f"for {self.patience} evaluations"
            )

    def on_save_checkpoint(self, trainer: TrainerState, checkpoint: dict) -> None:
        checkpoint["early_stopping"] = {"best": self.best, "waited": self.waited}

    def on_load_checkpoint(self, trainer: TrainerState, checkpoint: dict) -> None:
        state = checkpoint.get("early_stopping", {"best": None, "waited": 0})
        self.best, self.waited = state["best"], state["waited"]
