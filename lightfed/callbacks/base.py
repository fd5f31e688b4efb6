"""The hooks a callback may implement; the trainer calls them by name through ``Fabric.call``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lightfed.core.messages import ClientUpdate

if TYPE_CHECKING:
    from lightfed.data.module import FederatedDataModule
    from lightfed.trainer import FederatedTrainer


class Callback:
    """Base class of lightfed callbacks (``trainer.callbacks`` in a config); implement only the hooks you need.

    Every process calls every hook: a hook that writes files should do so on ``trainer.is_global_zero`` only, and
    one that stops the run (``trainer.should_stop = True``) must decide the same way on every process (the metrics
    are reduced, so a decision made from them is). ``on_round_end`` sees the round's metrics after the built-in
    callbacks that add to them (privacy, per-client evaluation) and before the checkpoint, the loggers, the metrics
    file and the progress bar, in that order.
    """

    def setup(self, trainer: FederatedTrainer, data: FederatedDataModule) -> None:
        """The data is loaded and nothing of the run is written yet: the place to refuse a setting."""

    def on_fit_start(self, trainer: FederatedTrainer) -> None:
        """The run is set up (resumed where it resumes), before its first round."""

    def on_round_start(self, trainer: FederatedTrainer, round: int) -> None:
        """Round ``round`` (0-based) is about to train."""

    def on_client_end(self, trainer: FederatedTrainer, update: ClientUpdate) -> None:
        """A client of this process finished; its delta lives in a buffer the next client reuses."""

    def on_evaluation_end(self, trainer: FederatedTrainer, metrics: dict[str, float]) -> None:
        """The global model was evaluated on the validation split (``metrics``: the reduced results)."""

    def on_round_end(self, trainer: FederatedTrainer, round: int, metrics: dict[str, float]) -> None:
        """Round ``round`` is aggregated and evaluated; ``metrics`` may be added to; ``trainer.round`` counts it."""

    def on_save_checkpoint(self, trainer: FederatedTrainer, checkpoint: dict[str, Any]) -> None:
        """``checkpoint`` is about to be written (on process 0): add what this callback needs to resume."""

    def on_load_checkpoint(self, trainer: FederatedTrainer, checkpoint: dict[str, Any]) -> None:
        """The run resumes from ``checkpoint`` (on every process)."""

    def on_fit_end(self, trainer: FederatedTrainer, metrics: dict[str, float]) -> None:
        """The run ended (all rounds done, or stopped); ``metrics`` are the last round's."""

    def on_exception(self, trainer: FederatedTrainer, error: BaseException) -> None:
        """The run failed with ``error`` (re-raised after the callbacks); the last checkpoint written is kept."""
