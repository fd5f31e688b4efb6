"""A tracker's own error (a store refused, a client library missing) ends the command in one line naming the logger."""

from pathlib import Path

import pytest
from lightning.fabric.loggers import Logger

from lightfed.cli import main
from tests.conftest import trainer_options

ROOT = Path(__file__).resolve().parents[2]


def fit_with_logger(tmp_path: Path, logger: str) -> int:
    with pytest.raises(SystemExit) as exit:
        main(
            [
                "fit",
                "--config",
                str(ROOT / "configs" / "quickstart.yaml"),
                *trainer_options(
                    rounds=2, client_eval_interval=0, root_dir=str(tmp_path), progress_bar="false", logger=logger
                ),
            ]
        )
    return exit.value.code


@pytest.mark.parametrize(
    "logger, error",
    [
        (
            "RefusingLogger",
            "failed: RuntimeError: the file store file:./mlruns is not supported: use a database-backed store",
        ),
        (
            "UnbuildableLogger",
            "could not be built: ModuleNotFoundError: no tracking client for file:./mlruns: install it",
        ),
    ],
)
def test_a_logger_that_fails_is_named_in_one_line(tmp_path, capsys, logger, error):
    code = fit_with_logger(tmp_path, f"tests.process_faults.{logger}")
    assert code == 2
    assert capsys.readouterr().err == (
        f"lightfed: error: the logger tests.process_faults.{logger} {error}; change or remove trainer.logger\n"
    )


def test_a_full_disk_under_tensorboard_is_named_not_lightnings_guess(tmp_path, monkeypatch):
    """Lightning's TensorBoardLogger re-raises any error of ``add_scalar`` as "you tried to log 10.0 which is currently
    not supported"; the line names the error underneath."""
    import errno
    import os

    from lightning.fabric.loggers import TensorBoardLogger

    from lightfed.run.run_output import LoggerError, reported

    logger = TensorBoardLogger(tmp_path)

    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(logger.experiment, "add_scalar", full_disk)
    with pytest.raises(LoggerError) as error, reported(logger):
        logger.log_metrics({"val_acc": 10.0}, step=1)
    assert str(error.value) == (
        "the logger lightning.fabric.loggers.tensorboard.TensorBoardLogger failed: OSError: [Errno 28] No space left on "
        "device; change or remove trainer.logger"
    )


class ConfigRefusingLogger(Logger):
    """A tracker that refuses the run's config (as MLflow refuses a changed param)."""

    name, version = "config-refusing", 0

    def log_hyperparams(self, params, *args, **kwargs) -> None:
        raise ValueError("Changing param values is not allowed.\nParam with key='trainer/rounds' was already logged")

    def log_metrics(self, metrics, step=None) -> None:
        pass


def test_a_logger_that_refuses_the_config_is_named_in_one_line(tmp_path, capsys):
    code = fit_with_logger(tmp_path, "tests.callbacks.test_logger_errors.ConfigRefusingLogger")
    assert code == 2
    assert capsys.readouterr().err == (
        "lightfed: error: the logger tests.callbacks.test_logger_errors.ConfigRefusingLogger failed: ValueError: "
        "Changing param values is not allowed. Param with key='trainer/rounds' was already logged; change or remove "
        "trainer.logger\n"
    )


def test_mlflow_refusing_its_file_store_is_one_line(tmp_path, capsys, monkeypatch):
    pytest.importorskip("mlflow")
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    code = fit_with_logger(tmp_path, "lightning.pytorch.loggers.MLFlowLogger")
    error = capsys.readouterr().err
    assert code == 2 and error.count("\n") == 1, error
    assert error.startswith("lightfed: error: the logger lightning.pytorch.loggers.MLFlowLogger ") and (
        "MLFLOW_ALLOW_FILE_STORE" in error
    )
