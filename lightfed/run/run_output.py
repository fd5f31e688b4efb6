"""What a run writes as it goes: its folder and config, its loggers' records and ``metrics.jsonl``."""

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from itertools import count
from pathlib import Path
from typing import IO, Any

import numpy as np
import yaml
from lightning.fabric import Fabric
from lightning.fabric.loggers import CSVLogger, Logger, TensorBoardLogger

from lightfed.adapters import csv_logger_version, point_csv_logger_at, tensorboard_file_writer
from lightfed.core.folder_lock import LOCK, FolderLock
from lightfed.core.no_follow import open_no_follow
from lightfed.errors import ConfigError, LightfedError
from lightfed.run.final_report import PER_CLIENT, logged_part, summary
from lightfed.run.hparams import flat_hparams, summary_hparams
from lightfed.run.round_tensorboard import RoundTensorBoardLogger, tensorboard_tag
from lightfed.run.run_folder import CONFIG, claim_run_folder, write_run_config

METRICS_FILE = "metrics.jsonl"
LABELS_FILE = "labels.json"
CSV_FOLDER = "csv"  # a CSV logger's folder in the run folder; csv_1, csv_2, ... for the starts of a resumed run
HPARAMS_FILE = "hparams.yaml"  # the config beside a Fabric CSVLogger's metrics.csv (Lightning's CSVLogger's name)
FLUSH_SECONDS = 1.0  # metrics.jsonl reaches the disk this often at least, and before every checkpoint


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


def check_writable(folder: Path) -> None:
    """Refuses a run folder that cannot be made (a file in the way, no permission), before anything is written."""
    existing = next(path for path in [folder, *folder.parents] if path.exists())
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        reason = "is not a folder" if not existing.is_dir() else "is not writable"
        raise ConfigError(f"cannot make the run folder {folder}: {existing} {reason}; change trainer.root_dir")


def check_no_links(folder: Path) -> None:
    """Refuses a run folder where a symbolic link stands in place of a file the run writes again (its lock, its
    ``metrics.jsonl``, its ``labels.json``), before anything is written: the run never writes through a link (the
    files are opened without following one), and would otherwise stop midway."""
    for name in (LOCK, METRICS_FILE, LABELS_FILE):
        if (folder / name).is_symlink():
            raise ConfigError(
                f"the run folder {folder} holds a symbolic link {name}, where the run writes its own file: remove the "
                "link, then resume with --ckpt_path last"
            )


def in_use_check(folder: Path) -> FolderLock:
    """The lock of the run ``folder``, taken; a folder another process uses (its run, or a resume of it) is refused."""
    lock = FolderLock(folder)
    if not lock.acquire() and not lock.held_by_this_process:
        raise ConfigError(
            f"the run folder {folder} is in use by process {lock.holder or '(unknown)'}: wait until that run ends or "
            "stop it, then resume with --ckpt_path last"
        )
    return lock


def run_folder_of(checkpoint: Path) -> Path | None:
    """The run folder a checkpoint file belongs to (``<run>/checkpoints/last.ckpt``); None for a file elsewhere."""
    return checkpoint.parent.parent if checkpoint.parent.name == "checkpoints" else None


def into_folder(logger: CSVLogger, folder: Path) -> None:
    """Points a CSV logger (Fabric's or Lightning's, before it has written anything) at ``folder/csv``, or at the
    first of ``csv_1``, ``csv_2``, ... not there yet when a resumed run starts again (Lightning's CSV writer would empty
    the folder of an earlier start)."""
    names = (CSV_FOLDER if start == 0 else f"{CSV_FOLDER}_{start}" for start in count())
    point_csv_logger_at(logger, str(folder), next(name for name in names if not (folder / name).exists()))


def run_loggers(folder: Path, logger: bool | Logger | list[Logger], resumed_round: int = 0) -> list[Logger]:
    """The loggers of a run in ``folder``: TensorBoard there (unless ``logger`` is false), then the given ones; a
    CSV logger without a ``version`` of its own writes into ``folder/csv`` (``into_folder``). A run resumed after
    ``resumed_round`` rounds hides from TensorBoard the events of that round and later ones that a killed run had
    logged (its ``purge_step``): the resume logs them again (``RunOutput.resume``)."""
    if logger is False:
        return []
    given = [] if logger is True else [logger] if isinstance(logger, Logger) else list(logger)
    for each in given:
        if isinstance(each, CSVLogger) and csv_logger_version(each) is None:
            into_folder(each, folder)
    if any(isinstance(each, TensorBoardLogger) for each in given):
        return given
    purge = {"purge_step": resumed_round} if resumed_round else {}
    tensorboard = RoundTensorBoardLogger(
        folder.parent.parent, folder.parent.name, folder.name, default_hp_metric=False, **purge
    )
    return [tensorboard, *given]


class RunOutput:
    """The run folder ``<experiment>/version_<n>`` with its ``config.yaml``, the loggers (``trainer.logger``:
    TensorBoard there unless false, and the given ones, which get the run's config when it starts) and
    ``metrics.jsonl``: one JSON line per round, ``{"round": <rounds done>, <metric>: <value>, ...}``, flushed at once (a
    later line for a round replaces an earlier one), and the final report's line. Every process calls every method;
    process 0 writes the files and holds the run folder's lock from ``start`` to ``finish`` (another process's run or
    resume of the same folder is refused). A logger's own error is a ``LoggerError``."""

    def __init__(self, fabric: Fabric, experiment: Path, logger: bool | Logger | list[Logger]) -> None:
        self.fabric, self.experiment, self.logger = fabric, experiment, logger
        self.log_dir: Path | None = None  # set when a run starts
        self.lock: FolderLock | None = None
        self.loggers: list[Logger] = []
        self.hparams: dict[str, Any] = {}
        self._lines: IO[str] | None = None  # metrics.jsonl, open from its first line to ``close_metrics``
        self._flushed = 0.0  # when metrics.jsonl was last flushed (``time.monotonic``)

    def start(
        self,
        resume_from: Path | None,
        version: int | None,
        run_config: str | None,
        hparams: dict[str, Any],
        resumed_round: int = 0,
    ) -> None:
        """Fixes the run folder (the resumed run's, or a new ``version``), writes its config and builds the loggers;
        ``hparams``: what the loggers record without a ``run_config``; ``resumed_round``: the rounds the checkpoint
        resumed from holds (``run_loggers``)."""
        folder, written = None, None  # the config as written, with its version
        if self.fabric.is_global_zero:
            resumed = None if resume_from is None else run_folder_of(resume_from)
            folder = resumed or claim_run_folder(self.experiment, version)
            check_no_links(folder)
            self.lock = in_use_check(folder)
            if run_config is not None:
                write_run_config(folder, run_config)
                written = yaml.safe_load((folder / CONFIG).read_text())
        self.log_dir, written = self.fabric.broadcast((folder, written))
        self.hparams = hparams if written is None else written
        self.loggers = run_loggers(self.folder, self.logger, resumed_round)
        self.log_hyperparams()

    def write_label_names(self, names: list[str] | None) -> None:
        """``labels.json``, what each label code stands for, where the dataset coded its labels (process 0)."""
        if names is not None and self.fabric.is_global_zero:
            with open_no_follow(self.folder / LABELS_FILE, "w") as file:
                file.write(json.dumps(dict(enumerate(names)), indent=1))

    def log_hyperparams(self) -> None:
        """The run's config to every logger but TensorBoard (which takes it with the final metrics, ``finish``); for
        Fabric's CSVLogger, which takes none, as ``hparams.yaml`` beside its ``metrics.csv`` (process 0)."""
        for logger in self.loggers:
            if isinstance(logger, TensorBoardLogger):
                continue
            with reported(logger):
                if isinstance(logger, CSVLogger) and type(logger).log_hyperparams is CSVLogger.log_hyperparams:
                    if self.fabric.is_global_zero:
                        # its writer makes the folder first (it warns about one not empty)
                        folder = Path(logger.experiment.log_dir)
                        (folder / HPARAMS_FILE).write_text(yaml.safe_dump(self.hparams, sort_keys=False))
                else:
                    logger.log_hyperparams(self.hparams)

    @property
    def folder(self) -> Path:
        """``log_dir``, once the run has started."""
        if self.log_dir is None:
            raise RuntimeError("the run folder is not fixed yet: RunOutput.start comes first")
        return self.log_dir

    @property
    def metrics_file(self) -> Path:
        return self.folder / METRICS_FILE

    def resume(self, round: int, metrics: dict[str, float]) -> None:
        """Closes a line of ``metrics.jsonl`` cut short by a kill (readers skip it and keep the rest) and writes again
        the checkpointed round's line when a kill between the checkpoint and the line lost it; logs that round again
        to the run's TensorBoard, which hides what the killed run logged of it (``run_loggers``)."""
        if not self.fabric.is_global_zero:
            return
        path = self.metrics_file
        text = path.read_bytes() if path.is_file() else b""
        with open_no_follow(path, "a") as file:
            if text and not text.endswith(b"\n"):
                file.write("\n")
            if round > 0 and f'{{"round": {round},'.encode() not in text:
                file.write(json.dumps({"round": round, **metrics}) + "\n")
        for logger in self.loggers if round > 0 else []:
            if isinstance(logger, RoundTensorBoardLogger):
                with reported(logger):
                    logger.log_metrics(metrics, step=round)

    def log_round(self, round: int, metrics: dict[str, float]) -> None:
        """The metrics of the round that makes ``round`` rounds done, to the loggers and ``metrics.jsonl``."""
        self.log(metrics, round)
        self.append({"round": round, **metrics})

    def log(self, metrics: dict[str, float], step: int) -> None:
        for logger in self.loggers:
            with reported(logger):
                logger.log_metrics(metrics, step=step)

    def save(self) -> None:
        """Every logger writes what it holds (a CSV logger writes only every so many steps otherwise; TensorBoard's
        events are kept up to a second), and so does ``metrics.jsonl``: after a checkpoint, so that a kill loses none
        of the rounds before the one it holds (``resume`` logs that one again)."""
        for logger in self.loggers:
            with reported(logger):
                logger.save()
        self.flush_metrics()

    def flush_metrics(self) -> None:
        """Writes out the lines of ``metrics.jsonl`` not yet in the file: before a checkpoint, so that a kill after it
        loses none of the lines of the rounds before it."""
        if self._lines is not None:
            self._lines.flush()
            self._flushed = time.monotonic()

    def append(self, line: dict[str, Any]) -> None:
        """One line of ``metrics.jsonl`` (process 0), flushed when ``FLUSH_SECONDS`` have passed since the last time
        (a flush each round took a hundredth of a round of many tiny clients); the file stays open (opening it took a
        thirtieth)."""
        if self.fabric.is_global_zero:
            if self._lines is None:
                self._lines = open_no_follow(self.metrics_file, "a")  # ``close_metrics`` closes it
            self._lines.write(json.dumps(line) + "\n")
            if time.monotonic() - self._flushed >= FLUSH_SECONDS:
                self.flush_metrics()

    def close_on_error(self) -> None:
        """What the loggers and ``metrics.jsonl`` hold goes to the disk, for a run that an error ends: its last rounds
        tell what went wrong. A logger that fails again here does not hide the error."""
        with suppress(Exception):
            self.save()
        self.close_metrics()

    def close_metrics(self) -> None:
        """Closes ``metrics.jsonl`` (a later line opens it again)."""
        if self._lines is not None:
            self._lines.close()
            self._lines = None

    def report(self, report: dict[str, Any]) -> None:
        """The final report: its line in ``metrics.jsonl``, its test metrics and distributions over clients to the
        loggers, its per-client values as TensorBoard histograms (``~final/clients/<monitor>``), and one printed line.

        TensorBoard gets them as ``~final/<name>``, after the round curves (``tensorboard_tag``)."""
        self.append(report)
        self.flush_metrics()
        logged = logged_part(report)
        for logger in self.loggers:
            with reported(logger):
                final = isinstance(logger, TensorBoardLogger)
                logger.log_metrics({f"~final/{k}" if final else k: v for k, v in logged.items()}, step=report["round"])
        for name, values in report.get(PER_CLIENT, {}).items():
            self.log_histogram(f"~final/{name}", np.asarray(values), report["round"])
        self.fabric.print(summary(report))

    def log_histogram(self, name: str, values: np.ndarray, step: int) -> None:
        """``values`` as a TensorBoard histogram under ``name``'s ``tensorboard_tag`` (process 0; other loggers take
        none)."""
        for logger in self.loggers:
            if isinstance(logger, TensorBoardLogger) and self.fabric.is_global_zero:
                logger.experiment.add_histogram(tensorboard_tag(name), values, global_step=step)

    def finish(self, metrics: dict[str, float]) -> None:
        """TensorBoard loggers record the run's settings for the HPARAMS tab (``lightfed.run.hparams``: the settings
        that tell runs apart first; the metrics are the scalars already logged, the test metrics included); every
        logger is finalized."""
        from torch.utils.tensorboard.summary import hparams  # TensorBoard only where a run logs to it

        for logger in self.loggers:
            with reported(logger):
                if isinstance(logger, TensorBoardLogger) and metrics and self.fabric.is_global_zero:
                    logger.save()  # the rounds' events first (``RoundTensorBoardLogger`` keeps them up to a second)
                    writer = tensorboard_file_writer(logger)
                    settings = {**summary_hparams(self.hparams), **flat_hparams(self.hparams)}
                    _, session_start, session_end = hparams(settings, metrics)  # no experiment summary: see hparams.py
                    writer.add_summary(session_start)
                    writer.add_summary(session_end)
                logger.finalize("success")
        self.close_metrics()
        if self.lock is not None:
            self.lock.release()
