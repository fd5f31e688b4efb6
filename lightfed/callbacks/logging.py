"""Hands each round's metrics to the run's loggers (``trainer.logger``: TensorBoard by default)."""

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from lightning.fabric.loggers import Logger, TensorBoardLogger

from lightfed.callbacks.base import Callback
from lightfed.errors import LightfedError


class LoggerError(LightfedError):
    """A logger (a tracker) failed: its store refused, its client library missing, its server unreachable."""

    def __init__(self, logger: str, failed: str, error: BaseException) -> None:
        while error.__cause__ is not None:  # the reason, not a wrapper's guess (Lightning's "you tried to log ...")
            error = error.__cause__
        reason = " ".join(f"{type(error).__name__}: {error}".split())
        super().__init__(f"the logger {logger} {failed}: {reason}; change or remove trainer.logger")


@contextmanager
def reported(logger: Logger) -> Iterator[None]:
    """Turns an error of ``logger``'s own into a ``LoggerError`` that names it."""
    try:
        yield
    except Exception as error:
        raise LoggerError(f"{type(logger).__module__}.{type(logger).__qualname__}", "failed", error) from error


def flat_hparams(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"trainer": {"rounds": 5}}`` -> ``{"trainer/rounds": 5}``; values TensorBoard cannot show become strings."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, Mapping):
            flat.update(flat_hparams(value, f"{prefix}{key}/"))
        else:
            flat[f"{prefix}{key}"] = value if isinstance(value, (bool, int, float, str)) else str(value)
    return flat


class LogMetrics(Callback):
    """Logs every round's metrics at step = rounds done to ``trainer.loggers``; at the end, TensorBoard loggers also
    record the run's hyperparameters against its final metrics (the HPARAMS tab, so a sweep compares in
    TensorBoard; the metrics' values are the scalars already logged). A logger's own error stops the run as a
    ``LoggerError``, one line that names the logger."""

    def on_round_end(self, trainer, round: int, metrics: dict[str, float]) -> None:
        for logger in trainer.loggers:
            with reported(logger):
                logger.log_metrics(metrics, step=trainer.round)

    def on_fit_end(self, trainer, metrics: dict[str, float]) -> None:
        from torch.utils.tensorboard.summary import hparams  # TensorBoard only where a run logs to it

        for logger in trainer.loggers:
            with reported(logger):
                if isinstance(logger, TensorBoardLogger) and metrics and trainer.fabric.is_global_zero:
                    writer = logger.experiment._get_file_writer()  # what Lightning's own log_hyperparams writes to
                    for summary in hparams(flat_hparams(trainer.hparams), metrics):
                        writer.add_summary(summary)
                logger.finalize("success")
