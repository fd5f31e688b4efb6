"""Writes ``last.ckpt`` every few rounds, at the end and when the run stops early."""

from lightfed.callbacks.base import Callback


class Checkpointing(Callback):
    """Saves the run (``trainer.save_checkpoint``) every ``every_n_rounds`` rounds, after the last round and
    before a stop (preemption, early stopping)."""

    def __init__(self, every_n_rounds: int = 1) -> None:
        self.every_n_rounds = every_n_rounds

    def on_round_end(self, trainer, round: int, metrics: dict[str, float]) -> None:
        if trainer.should_stop or trainer.due(self.every_n_rounds):
            trainer.save_checkpoint()
