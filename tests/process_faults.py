"""Faults the process tests inject from inside a run: signals at a chosen moment, a model that is signalled while it
is built, loggers that fail."""

import os
import signal
import time

from lightning.fabric.loggers import Logger

from lightfed.callbacks import Callback
from lightfed.models import SmallCNN


class SignalAtRound(Callback):
    """When round ``round`` (1-based) begins on process ``rank``, sends ``signals`` (names, one after the other) to
    that process, or to the run's whole process group (``group``: what Ctrl-C in a terminal or ``scancel`` does)."""

    def __init__(self, signals: list[str], round: int = 2, rank: int = 0, group: bool = False) -> None:
        self.signals, self.round, self.rank, self.group = signals, round, rank, group

    def on_round_start(self, trainer, round):
        if round + 1 != self.round or trainer.fabric.global_rank != self.rank:
            return
        for name in self.signals:
            if self.group:
                os.killpg(os.getpgid(0), getattr(signal, name))
            else:
                os.kill(os.getpid(), getattr(signal, name))


class BusyAtRound(Callback):
    """Keeps process ``rank`` busy for ``seconds``, outside any collective, when round ``round`` (1-based) begins."""

    def __init__(self, seconds: float, round: int = 2, rank: int = 0) -> None:
        self.seconds, self.round, self.rank = seconds, round, rank

    def on_round_start(self, trainer, round):
        if round + 1 == self.round and trainer.fabric.global_rank == self.rank:
            time.sleep(self.seconds)


class SignalledWhileBuilt(SmallCNN):
    """A SmallCNN that sends SIGUSR1 to its process while the command builds it, before the run listens for signals."""

    def __init__(self, *args, **kwargs) -> None:
        os.kill(os.getpid(), signal.SIGUSR1)
        super().__init__(*args, **kwargs)


class RefusingLogger(Logger):
    """A tracker that refuses its store when it first logs (as MLflow refuses a file store)."""

    def __init__(self, uri: str = "file:./mlruns") -> None:
        self.uri = uri

    @property
    def name(self) -> str:
        return "refusing"

    @property
    def version(self) -> int:
        return 0

    def log_hyperparams(self, params, *args, **kwargs) -> None:
        pass

    def log_metrics(self, metrics, step=None) -> None:
        raise RuntimeError(f"the file store {self.uri} is not supported:\nuse a database-backed store")


class UnbuildableLogger(RefusingLogger):
    """A tracker whose constructor fails (a client library missing, a store refused)."""

    def __init__(self, uri: str = "file:./mlruns") -> None:
        raise ModuleNotFoundError(f"no tracking client for {uri}: install it")
