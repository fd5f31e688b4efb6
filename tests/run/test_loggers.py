"""Every logger of ``trainer.logger`` gets the run's resolved config and its final metrics, TensorBoard stays in the run
folder beside them, and a CSV logger writes into the run folder unless given a version of its own."""

import csv
from pathlib import Path

import pytest
import yaml
from lightning.fabric.loggers import Logger

from lightfed.cli import main
from lightfed.trainer import FederatedTrainer
from tests.conftest import trainer_options

ROOT = Path(__file__).resolve().parents[2]
ROUNDS = 2


def fit(tmp_path: Path, logger: object, *args: str) -> Path:
    """A 2-round quickstart run from YAML with ``trainer.logger: <logger>``; returns its run folder."""
    overlay = tmp_path / "logger.yaml"
    overlay.write_text(yaml.safe_dump({"trainer": {"logger": logger}}))
    main(
        [
            "fit",
            "--config",
            str(ROOT / "configs" / "quickstart.yaml"),
            "--config",
            str(overlay),
            *trainer_options(
                rounds=str(ROUNDS), client_eval_interval=0, progress_bar="false", root_dir=str(tmp_path / "runs")
            ),
            *args,
        ]
    )
    (folder,) = (tmp_path / "runs" / "quickstart").iterdir()
    return folder


def config_of(folder: Path) -> dict:
    return yaml.safe_load((folder / "config.yaml").read_text())


def events_in(folder: Path) -> list[Path]:
    return list(folder.glob("events.out.tfevents.*"))


def csv_rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as file:
        return list(csv.DictReader(file))


@pytest.mark.parametrize(
    "logger, argument",
    [("lightning.fabric.loggers.CSVLogger", "root_dir"), ("lightning.pytorch.loggers.CSVLogger", "save_dir")],
)
def test_a_csv_logger_writes_the_config_and_metrics_into_the_run_folder_beside_tensorboard(tmp_path, logger, argument):
    folder = fit(tmp_path, {"class_path": logger, "init_args": {argument: str(tmp_path / "elsewhere")}})
    assert not (tmp_path / "elsewhere").exists()
    assert yaml.safe_load((folder / "csv" / "hparams.yaml").read_text()) == config_of(folder)
    rows = csv_rows(folder / "csv" / "metrics.csv")
    assert [row["step"] for row in rows if row["val_acc"]] == [str(r) for r in range(1, ROUNDS + 1)]
    assert [row["step"] for row in rows if row["test_acc"]] == [str(ROUNDS)]  # the final report's test metrics
    assert len(events_in(folder)) == 1


def test_a_resumed_run_keeps_the_csv_of_its_first_start(tmp_path):
    logger = {"class_path": "lightning.fabric.loggers.CSVLogger", "init_args": {"root_dir": str(tmp_path)}}
    folder = fit(tmp_path, logger)
    fit(tmp_path, logger, "--trainer.rounds", str(ROUNDS + 1), "--ckpt_path", "last")
    first, second = csv_rows(folder / "csv" / "metrics.csv"), csv_rows(folder / "csv_1" / "metrics.csv")
    assert [row["step"] for row in first if row["val_acc"]] == [str(r) for r in range(1, ROUNDS + 1)]
    assert [row["step"] for row in second if row["val_acc"]] == [str(ROUNDS + 1)]
    assert yaml.safe_load((folder / "csv_1" / "hparams.yaml").read_text()) == config_of(folder)


class Killed(Exception):
    """What a kill does to a run: it ends in the middle of a round, without finalizing its loggers."""


def test_a_run_killed_after_a_checkpoint_keeps_the_checkpointed_rounds_in_its_csv(tmp_path, monkeypatch):
    original = FederatedTrainer._round

    def killed_in_round_3(trainer, *args):
        if trainer.round == 2:
            raise Killed
        original(trainer, *args)

    monkeypatch.setattr(FederatedTrainer, "_round", killed_in_round_3)
    logger = {"class_path": "lightning.fabric.loggers.CSVLogger", "init_args": {"root_dir": str(tmp_path)}}
    with pytest.raises(Killed):
        fit(tmp_path, logger, "--trainer.rounds", "4", "--trainer.checkpoint_interval", "2")
    (folder,) = (tmp_path / "runs" / "quickstart").iterdir()
    rows = csv_rows(folder / "csv" / "metrics.csv")
    assert [row["step"] for row in rows if row["val_acc"]] == ["1", "2"]  # the rounds that last.ckpt holds


def test_a_csv_logger_with_a_version_keeps_its_own_folder(tmp_path):
    own = tmp_path / "csv-logs"
    folder = fit(
        tmp_path,
        {
            "class_path": "lightning.fabric.loggers.CSVLogger",
            "init_args": {"root_dir": str(own), "name": "sweep", "version": "run-a"},
        },
    )
    assert yaml.safe_load((own / "sweep" / "run-a" / "hparams.yaml").read_text()) == config_of(folder)
    assert (own / "sweep" / "run-a" / "metrics.csv").is_file()
    assert not (folder / "csv").exists() and len(events_in(folder)) == 1


def test_mlflow_file_store_gets_the_config_as_params_and_the_final_metrics(tmp_path, monkeypatch):
    pytest.importorskip("mlflow")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 refuses its file store without it
    from mlflow.tracking import MlflowClient

    store = f"file:{tmp_path / 'mlruns'}"
    folder = fit(
        tmp_path,
        {
            "class_path": "lightning.pytorch.loggers.MLFlowLogger",
            "init_args": {"experiment_name": "sweep", "tracking_uri": store},
        },
    )
    client = MlflowClient(store)
    (run,) = client.search_runs([client.get_experiment_by_name("sweep").experiment_id])
    params = run.data.params
    assert params["trainer/rounds"] == str(ROUNDS) and params["seed_everything"] == "0"
    assert params["strategy/class_path"] == "lightfed.strategies.FedAvg"
    assert params["data/partitioner/init_args/alpha"] == "0.5"
    assert "test_acc" in run.data.metrics and "val_acc" in run.data.metrics
    assert [m.step for m in client.get_metric_history(run.info.run_id, "val_acc")] == list(range(1, ROUNDS + 1))
    assert len(events_in(folder)) == 1


class Recording(Logger):
    """Keeps what it is given (a stand-in for a tracker such as W&B)."""

    def __init__(self) -> None:
        super().__init__()
        self.hparams: list[dict] = []
        self.metrics: list[tuple[int | None, dict]] = []

    name = "recording"
    version = 0

    def log_hyperparams(self, params, *args, **kwargs) -> None:
        self.hparams.append(params)

    def log_metrics(self, metrics, step=None) -> None:
        self.metrics.append((step, metrics))


def test_any_logger_gets_the_config_once_and_tensorboard_is_not_added_twice(tmp_path):
    from lightning.fabric.loggers import TensorBoardLogger

    from lightfed.run.run_output import run_loggers

    recording = Recording()
    run = tmp_path / "exp" / "version_0"
    (tensorboard, given) = run_loggers(run, recording)
    assert isinstance(tensorboard, TensorBoardLogger) and Path(tensorboard.log_dir) == run and given is recording
    own = TensorBoardLogger(tmp_path / "own")
    assert run_loggers(run, [own, recording]) == [own, recording]
    assert run_loggers(run, False) == []


def test_a_python_logger_gets_the_run_config_and_every_round_beside_tensorboard(tmp_path):
    from lightfed import FedAvg, FederatedDataModule, FederatedTrainer, OutputSettings, Processes
    from lightfed.data import Digits, DirichletPartitioner
    from lightfed.models import SmallCNN

    recording = Recording()
    output = OutputSettings(root_dir=str(tmp_path), progress_bar=False, logger=recording)
    trainer = FederatedTrainer(
        rounds=ROUNDS, clients_per_round=4, processes=Processes(accelerator="cpu"), output=output
    )
    trainer.fit(
        SmallCNN(),
        FederatedDataModule(Digits(), DirichletPartitioner(8, alpha=0.5), batch_size=16, val_fraction=0.1),
        FedAvg(),
    )
    assert recording.hparams == [trainer.hparams] and trainer.hparams["rounds"] == ROUNDS
    assert [step for step, metrics in recording.metrics if "val_acc" in metrics] == list(range(1, ROUNDS + 1))
    assert [step for step, metrics in recording.metrics if "test_acc" in metrics] == [ROUNDS]
    assert len(events_in(trainer.log_dir)) == 1
