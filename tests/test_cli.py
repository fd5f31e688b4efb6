import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from lightfed.cli import main, run
from lightfed.subcommands import headline
from tests.conftest import LIGHTFED, trainer_options

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = str(ROOT / "configs" / "quickstart.yaml")


def _fit_quickstart(tmp_path, *overrides: str) -> dict[str, float]:
    return run(
        [
            "fit",
            "--config",
            QUICKSTART,
            *trainer_options(root_dir=str(tmp_path), progress_bar="false"),
            *overrides,
        ]
    )


def test_quickstart_reaches_90_percent_and_writes_logs_config_and_checkpoint(tmp_path):
    metrics = _fit_quickstart(tmp_path)
    assert metrics["val_acc"] >= 0.90
    run_dir = tmp_path / "quickstart" / "version_0"
    assert list(run_dir.glob("events.out.tfevents.*"))
    assert "class_path: lightfed.data.DirichletPartitioner" in (run_dir / "config.yaml").read_text()
    # the saved config reproduces the run's global model: `test` on its checkpoint gives the same accuracy
    config, files = (run_dir / "config.yaml").read_text(), sorted(run_dir.rglob("*"))
    tested = run(["test", "--config", str(run_dir / "config.yaml"), "--ckpt_path", "last"])
    final = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[-1])  # the run's own test of its end
    assert tested["test_acc"] == pytest.approx(final["test_acc"], abs=1e-6)
    # and leaves the run as it was: its config (ckpt_path: null, which reproduces the run) and no new files
    assert (run_dir / "config.yaml").read_text() == config and sorted(run_dir.rglob("*")) == files


def test_tensorboard_holds_the_per_round_scalars(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    _fit_quickstart(tmp_path, "--trainer.rounds", "2", "--trainer.client_eval_interval", "0")
    events = EventAccumulator(str(tmp_path / "quickstart" / "version_0")).Reload()
    tags = set(events.Tags()["scalars"])
    assert {"curves/val_acc", "curves/val_loss", "~round/client_train_loss", "~round/clients", "~round/time_s"} <= tags
    assert [e.step for e in events.Scalars("curves/val_acc")] == [1, 2]


def test_dotted_overrides_and_print_config(capsys):
    with pytest.raises(SystemExit) as exit:
        main(
            [
                "fit",
                "--config",
                QUICKSTART,
                *trainer_options(rounds=5),
                "--strategy.init_args.server_lr",
                "0.5",
                "--print_config",
            ]
        )
    assert exit.value.code == 0
    printed = capsys.readouterr().out
    assert (
        re.search(r"rounds: 5\n", printed)
        and "server_lr: 0.5" in printed
        and "class_path: lightfed.models.SmallCNN" in printed
    )


def _printed_config(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit):
        main(["fit", *argv, "--print_config"])
    return capsys.readouterr().out


def test_a_class_named_in_a_config_keeps_its_own_defaults(capsys):
    """No default model or strategy instance lends its init_args to the class a config or the command line names."""
    cifar = _printed_config(capsys, "--config", str(ROOT / "configs" / "cifar10" / "base.yaml"))
    assert "class_path: lightfed.models.ResNet18GN" in cifar and "in_channels: 3" in cifar  # not SmallCNN's 1
    fedadam = _printed_config(
        capsys, "--config", str(ROOT / "configs" / "digits" / "base.yaml"), "--strategy", "lightfed.strategies.FedAdam"
    )
    assert "class_path: lightfed.strategies.FedAdam" in fedadam and "server_lr: 0.01" in fedadam  # not FedAvg's 1.0


def test_without_model_and_strategy_the_run_uses_smallcnn_and_fedavg(tmp_path):
    config = tmp_path / "bare.yaml"
    text = open(QUICKSTART).read()
    config.write_text(text[: text.index("model:")] + text[text.index("data:") : text.index("strategy:")])
    metrics = run(
        [
            "fit",
            "--config",
            str(config),
            *trainer_options(rounds=5, client_eval_interval=0, root_dir=str(tmp_path), progress_bar="false"),
        ]
    )
    assert metrics["val_acc"] > 0.3  # SmallCNN (lr 0.05) trained by FedAvg on digits


def test_a_truncated_last_checkpoint_falls_back_to_the_previous_one_with_a_warning(tmp_path, capsys):
    """The previous checkpoint is kept beside last.ckpt: resuming from it repeats one round and ends with the weights
    of an uninterrupted run."""
    common = ["--trainer.client_eval_interval", "0"]
    _fit_quickstart(tmp_path / "full", "--trainer.rounds", "3", *common)
    _fit_quickstart(tmp_path / "cut", "--trainer.rounds", "2", *common)
    folder = tmp_path / "cut" / "quickstart" / "version_0" / "checkpoints"
    assert torch.load(folder / "previous.ckpt", weights_only=False)["round"] == 1
    (folder / "last.ckpt").write_bytes((folder / "last.ckpt").read_bytes()[:1000])
    capsys.readouterr()
    _fit_quickstart(tmp_path / "cut", "--trainer.rounds", "3", "--ckpt_path", "last", *common)
    warnings = [line for line in capsys.readouterr().out.splitlines() if "warning" in line]
    assert len(warnings) == 1 and warnings[0].startswith(f"lightfed: warning: checkpoint {folder / 'last.ckpt'} cannot")
    full = torch.load(tmp_path / "full" / "quickstart" / "version_0" / "checkpoints" / "last.ckpt", weights_only=False)
    assert torch.equal(torch.load(folder / "last.ckpt", weights_only=False)["params"], full["params"])


@pytest.mark.slow
def test_two_processes_give_the_weights_of_one(tmp_path):
    """Run through the real command, as users do: the command forks the second process, which joins over gloo."""
    config = QUICKSTART

    def final_params(devices: int):
        root = tmp_path / f"devices{devices}"
        subprocess.run(
            [
                *LIGHTFED,
                "fit",
                "--config",
                config,
                *trainer_options(
                    rounds=3,
                    name="run",
                    devices=str(devices),
                    root_dir=str(root),
                    progress_bar="false",
                    check_replicas="true",
                ),
            ],  # every round: the global weights are the same on every process
            check=True,
            cwd=tmp_path,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
            capture_output=True,
            timeout=300,
        )
        return torch.load(root / "run" / "version_0" / "checkpoints" / "last.ckpt", weights_only=False)

    one, two = final_params(1), final_params(2)
    assert one["round"] == two["round"] == 3
    assert (one["params"] - two["params"]).abs().max() <= 1e-5
    assert not list((tmp_path / "devices2" / "run").glob("version_1"))  # one run folder, written by rank 0


BLOBS_MODULE = """
import lightning as L, torch
from torch.utils.data import DataLoader, TensorDataset

class {name}(L.LightningDataModule):
    def setup(self, stage):
        generator = torch.Generator().manual_seed(0)
        y = torch.randint(0, 3, (300,), generator=generator)
        x = torch.randn(300, 1, 8, 8, generator=generator) + y.view(-1, 1, 1, 1)
        self.train, self.test = TensorDataset(x[:240], y[:240]), TensorDataset(x[240:], y[240:])

    def train_dataloader(self):
        return DataLoader(self.train, batch_size=16)

    def test_dataloader(self):
        return DataLoader(self.test, batch_size=16)
"""


def test_a_datamodule_beside_the_config_file_is_found_and_split_by_label(tmp_path, monkeypatch):
    """The config file's folder is on the import path (as a LightningCLI script's is), without PYTHONPATH."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "blobs_beside_config.py").write_text(BLOBS_MODULE.format(name="Blobs"))
    (project / "blobs.yaml").write_text(
        "trainer: {accelerator: cpu, rounds: 2, clients_per_round: 4, local_steps: 3, local_epochs: null}\n"
        "model: {class_path: lightfed.models.SmallCNN, init_args: {num_classes: 3}}\n"
        "data:\n  dataset: {class_path: blobs_beside_config.Blobs}\n"
        "  partitioner: {class_path: lightfed.data.DirichletPartitioner, init_args: {num_clients: 4, alpha: 0.5}}\n"
    )
    monkeypatch.chdir(tmp_path)
    metrics = run(
        [
            "fit",
            "--config",
            str(project / "blobs.yaml"),
            *trainer_options(root_dir=str(tmp_path / "runs"), progress_bar="false"),
        ]
    )
    assert metrics["round/clients"] == 4 and metrics["val_acc"] > 0.4  # 3 classes a unit apart


def test_a_datamodule_in_the_working_folder_is_found_from_the_command_line(tmp_path, monkeypatch, capsys):
    (tmp_path / "blobs_in_cwd.py").write_text(BLOBS_MODULE.format(name="Blobs"))
    monkeypatch.chdir(tmp_path)
    printed = _printed_config(capsys, "--data.dataset", "blobs_in_cwd.Blobs")
    assert "class_path: blobs_in_cwd.Blobs" in printed


def test_a_datamodule_at_the_top_of_data_is_refused_with_where_it_goes(tmp_path, capsys):
    config = tmp_path / "top.yaml"
    config.write_text("data:\n  class_path: tests.data.user_datamodules.BlobsDataModule\n")
    with pytest.raises(SystemExit) as exit:
        main(["fit", "--config", str(config)])
    assert exit.value.code == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "data.dataset" in error and "dataset: {class_path: " in error


def test_a_class_that_is_no_dataset_is_refused_with_what_data_dataset_takes(capsys):
    with pytest.raises(SystemExit) as exit:
        main(["fit", "--data.dataset", "torch.nn.Linear"])
    assert exit.value.code == 2
    error = capsys.readouterr().err
    assert (
        error.count("\n") == 1
        and "torch.nn.Linear is neither a lightfed DatasetSource nor a LightningDataModule" in error
    )


def _readme_own_model_and_data() -> tuple[str, str]:
    section = (ROOT / "README.md").read_text().split("## Your own model and data")[1].split("\n## ")[0]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    return code, re.search(r"```yaml\n(.*?)```", section, re.S).group(1)


@pytest.mark.slow
def test_the_readmes_own_model_and_data_train_to_the_same_weights_on_two_processes(tmp_path):
    """The README's mine.py and mine.yaml, run by the lightfed command in their folder (no PYTHONPATH)."""
    code, config = _readme_own_model_and_data()
    assert len(config.splitlines()) <= 10
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"} | {"OMP_NUM_THREADS": "1"}
    runs = []
    for devices in (1, 2):
        project = tmp_path / f"devices{devices}"
        project.mkdir()
        (project / "mine.py").write_text(code)
        (project / "mine.yaml").write_text(config)
        subprocess.run(
            [
                str(Path(sys.executable).parent / "lightfed"),
                "fit",
                "--config",
                "mine.yaml",
                *trainer_options(devices=str(devices), progress_bar="false"),
            ],
            cwd=project,
            env=env,
            check=True,
            capture_output=True,
            timeout=600,
        )
        runs.append(project / "runs" / "mine" / "version_0")
    one, two = (torch.load(run / "checkpoints" / "last.ckpt", weights_only=False) for run in runs)
    assert one["round"] == two["round"] == 5 and torch.equal(one["params"], two["params"])
    final = json.loads((runs[0] / "metrics.jsonl").read_text().splitlines()[-1])
    assert final["test_acc"] > 0.8  # three blobs 3 apart in 2 dimensions


def test_the_run_ends_on_a_short_headline_not_a_dump_of_the_strategys_metrics():
    metrics = {
        "train_loss": 0.5,
        "val_acc": 0.9,
        "strategy/c_norm": 1.0,
        "round/time_s": 2.0,
        "clients/personal/val_acc_mean": 0.98,
        "clients/personal/val_acc_min": 0.9,
        "user_level_dp/epsilon": 3.0,
        "user_level_dp/clip": 1.0,
    }
    assert headline(metrics) == (
        "last round: clients/personal/val_acc_mean=0.98 train_loss=0.5 user_level_dp/epsilon=3 val_acc=0.9 "
        "(all metrics: the logs)"
    )
