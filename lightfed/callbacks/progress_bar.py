"""A progress bar over rounds (process 0 only), showing the monitored metric."""

from tqdm import tqdm

from lightfed.callbacks.base import Callback, TrainerState


class ProgressBar(Callback):
    """tqdm over ``trainer.rounds``, starting at the resumed round, with ``trainer.monitor`` (measured on the validation
    split for a ``val_*`` metric) as its postfix; closed after the last round, before the run prints its ending.

    The trainer adds it after the other callbacks; a config turns it off:

    ```yaml
    trainer:
      progress_bar: false
    ```

    Examples:
        >>> from lightfed import FederatedTrainer
        >>> from lightfed.callbacks import ProgressBar
        >>> trainer = FederatedTrainer.from_settings(accelerator="cpu", rounds=5, progress_bar=False, logger=False)
        >>> progress = ProgressBar()
        >>> progress.on_fit_start(trainer)
        >>> progress.on_round_end(trainer, 0, {"val_acc": 0.8125})
        >>> progress.bar.n, progress.bar.total, progress.bar.postfix
        (1, 5, 'val_acc=0.8125')
        >>> progress.on_fit_end(trainer, {"val_acc": 0.8125})
    """

    def on_fit_start(self, trainer: TrainerState) -> None:
        self.bar = tqdm(
            total=trainer.rounds, initial=trainer.round, desc="rounds", disable=not trainer.fabric.is_global_zero
        )

    def on_round_end(self, trainer: TrainerState, round: int, metrics: dict[str, float]) -> None:
        self.bar.update(1)
        if trainer.monitor in metrics:
            self.bar.set_postfix({trainer.monitor: f"{metrics[trainer.monitor]:.4f}"})
        if trainer.round >= trainer.rounds or trainer.should_stop:
            self.bar.close()

    def on_fit_end(self, trainer: TrainerState, metrics: dict[str, float]) -> None:
        self.bar.close()
