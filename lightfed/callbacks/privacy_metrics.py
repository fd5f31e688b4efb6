"""The clients' privacy spending as round metrics (``privacy/epsilon_max``, ``privacy/epsilon_mean``)."""

from lightfed.callbacks.base import Callback


class PrivacyMetrics(Callback):
    """Adds ``trainer.privacy.metrics`` to every round's metrics (a collective call on every process)."""

    def on_round_end(self, trainer, round: int, metrics: dict[str, float]) -> None:
        metrics.update(trainer.privacy.metrics(trainer.fabric))
