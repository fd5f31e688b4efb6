import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from lightfed.cli import main, run
from lightfed.core.process_states import saved_client_states

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = str(ROOT / "configs" / "quickstart.yaml")


def _fit_quickstart(tmp_path, *overrides: str) -> dict[str, float]:
    return run(["fit", "--config", QUICKSTART, "--trainer.root_dir", str(tmp_path), "--trainer.progress_bar", "false", *overrides])


def test_quickstart_reaches_90_percent_and_writes_logs_config_and_checkpoint(tmp_path):
    metrics = _fit_quickstart(tmp_path)
    assert metrics["val_acc"] >= 0.90
    run_dir = tmp_path / "quickstart" / "version_0"
    assert list(run_dir.glob("events.out.tfevents.*"))
    assert "class_path: lightfed.data.DirichletPartitioner" in (run_dir / "config.yaml").read_text()
    # the saved config reproduces the run's global model: `test` on its checkpoint gives the same accuracy
    config, files = (run_dir / "config.yaml").read_text(), sorted(run_dir.rglob("*"))
    tested = run(["test", "--config", str(run_dir / "config.yaml"), "--ckpt_path", "last"])
    assert tested["test_acc"] == pytest.approx(metrics["val_acc"], abs=1e-6)
    # and leaves the run as it was: its config (ckpt_path: null, which reproduces the run) and no new files
    assert (run_dir / "config.yaml").read_text() == config and sorted(run_dir.rglob("*")) == files


def test_tensorboard_holds_the_per_round_scalars(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    _fit_quickstart(tmp_path, "--trainer.rounds", "2", "--trainer.client_eval_interval", "0")
    events = EventAccumulator(str(tmp_path / "quickstart" / "version_0")).Reload()
    tags = set(events.Tags()["scalars"])
    assert {"val_acc", "val_loss", "round/client_train_loss", "round/clients", "round/time_s"} <= tags
    assert [e.step for e in events.Scalars("val_acc")] == [1, 2]


def test_dotted_overrides_and_print_config(capsys):
    with pytest.raises(SystemExit) as exit:
        main(["fit", "--config", QUICKSTART, "--trainer.rounds", "5", "--strategy.init_args.server_lr", "0.5", "--print_config"])
    assert exit.value.code == 0
    printed = capsys.readouterr().out
    assert re.search(r"rounds: 5\n", printed) and "server_lr: 0.5" in printed and "class_path: lightfed.models.SmallCNN" in printed


def _printed_config(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit):
        main(["fit", *argv, "--print_config"])
    return capsys.readouterr().out


def test_a_class_named_in_a_config_keeps_its_own_defaults(capsys):
    """No default model or strategy instance lends its init_args to the class a config or the command line names."""
    cifar = _printed_config(capsys, "--config", str(ROOT / "configs" / "cifar10" / "fedavg.yaml"))
    assert "class_path: lightfed.models.ResNet18GN" in cifar and "in_channels: 3" in cifar  # not SmallCNN's 1
    fedadam = _printed_config(capsys, "--config", str(ROOT / "configs" / "digits" / "fedavg.yaml"),
                              "--strategy", "lightfed.strategies.FedAdam")
    assert "class_path: lightfed.strategies.FedAdam" in fedadam and "server_lr: 0.01" in fedadam  # not FedAvg's 1.0


def test_without_model_and_strategy_the_run_uses_smallcnn_and_fedavg(tmp_path):
    config = tmp_path / "bare.yaml"
    text = open(QUICKSTART).read()
    config.write_text(text[: text.index("model:")] + text[text.index("data:") : text.index("strategy:")])
    metrics = run(["fit", "--config", str(config), "--trainer.rounds", "5", "--trainer.client_eval_interval", "0",
                   "--trainer.root_dir", str(tmp_path), "--trainer.progress_bar", "false"])
    assert metrics["val_acc"] > 0.3  # SmallCNN (lr 0.05) trained by FedAvg on digits


def _error_of(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exit:
        main(argv)
    assert exit.value.code == 2
    return capsys.readouterr().err


def test_unknown_config_key_is_named(tmp_path, capsys):
    config = tmp_path / "bad.yaml"
    config.write_text(open(QUICKSTART).read().replace("rounds: 20", "roundz: 20"))
    assert "roundz" in _error_of(["fit", "--config", str(config)], capsys)


@pytest.mark.parametrize(
    "argv, names",
    [
        (["--strategy", "lightfed.strategies.NoSuch"], ["cannot import 'lightfed.strategies.NoSuch'", "no attribute"]),
        (["--model", "nosuchmodule.Model"], ["cannot import 'nosuchmodule.Model'", "No module named 'nosuchmodule'"]),
        (["--trainer.rounds", "abc"], ['Parser key "trainer.rounds"', "Got value: abc"]),
        (["--trainer.roundz", "3"], ["unrecognized arguments: --trainer.roundz 3"]),
        (["--config", "missing.yaml"], ["File does not exist", "missing.yaml"]),
        (["--config", "BAD_YAML"], ["Problems parsing config"]),
    ],
    ids=["unknown_class", "unknown_module", "wrong_type", "unknown_key", "missing_config", "yaml_syntax"],
)
def test_a_parse_error_is_one_line_that_points_to_help(tmp_path, capsys, monkeypatch, argv, names):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "BAD_YAML").write_text("trainer: {rounds: [\n")
    err = _error_of(["fit", "--config", QUICKSTART, "--trainer.root_dir", str(tmp_path / "runs"), *argv], capsys)
    assert err.count("\n") == 1 and err.startswith("lightfed: error: ") and all(name in err for name in names)
    assert err.rstrip().endswith("(lightfed fit --help lists every option)")
    assert not (tmp_path / "runs").exists()


def test_non_positive_alpha_is_refused(tmp_path, capsys):
    err = _error_of(["fit", "--config", QUICKSTART, "--data.partitioner.init_args.alpha", "0"], capsys)
    assert "alpha must be > 0" in err


def test_too_many_clients_per_round_is_refused(tmp_path, capsys):
    err = _error_of(["fit", "--config", QUICKSTART, "--trainer.root_dir", str(tmp_path), "--trainer.clients_per_round", "21"], capsys)
    assert err.strip().splitlines() == [
        "lightfed: error: trainer.clients_per_round (21) is larger than the number of clients (20); lower it or add clients"
    ]


def test_partition_that_leaves_a_client_empty_is_refused(tmp_path, capsys):
    err = _error_of(
        ["fit", "--config", QUICKSTART, "--trainer.root_dir", str(tmp_path),
         "--data.partitioner", "lightfed.data.ShardPartitioner", "--data.partitioner.num_clients", "1000"],
        capsys,
    )
    assert err.startswith("lightfed: error:") and len(err.strip().splitlines()) == 1


def test_missing_dataset_folder_is_named(tmp_path, capsys):
    err = _error_of(
        ["fit", "--config", QUICKSTART, "--trainer.root_dir", str(tmp_path),
         "--data.dataset", "lightfed.data.CIFAR10", "--data.dataset.root", str(tmp_path / "nowhere")],
        capsys,
    )
    assert str(tmp_path / "nowhere") in err and len(err.strip().splitlines()) == 1


DP = str(ROOT / "configs" / "privacy" / "dp-sgd.yaml")


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["--trainer.clients_per_round", "21"], "larger than the number of clients"),
        (["--data.dataset", "lightfed.data.CIFAR10", "--data.dataset.root", "nowhere"], "nowhere"),
        (["--data.partitioner", "lightfed.data.ShardPartitioner", "--data.partitioner.num_clients", "1000"], "lightfed: error:"),
        (["--strategy", "lightfed.strategies.FedECADO", "--trainer.devices", "2"], "trainer.devices=1"),
        (["-c", DP, "--trainer.privacy.convert_batchnorm", "false", "--model", "lightfed.models.VGG11",
          "--model.in_channels", "1", "--model.batch_norm", "true"], "convert_batchnorm: true"),
        (["-c", DP, "--trainer.precision", "bf16-mixed"], "differential privacy needs trainer.precision 32-true"),
        (["--strategy", "lightfed.strategies.MasFL"], "MasFL is asynchronous: add an `asynchronous:` section"),
        (["--trainer.devices", "0"], "trainer.accelerator 'cpu' with trainer.devices 0"),
        (["--trainer.accelerator", "gpu"] if not torch.cuda.is_available() else ["--trainer.devices", "-5"],
         "trainer.accelerator"),
    ],
    ids=["clients_per_round", "dataset_files", "empty_client", "fedecado_two_processes", "dp_batchnorm", "dp_mixed",
         "async_strategy_in_rounds", "no_devices", "no_gpu"],
)
def test_a_refused_run_leaves_no_run_folder(tmp_path, capsys, overrides, message):
    """Every check that does not need training runs before the run folder is made: the next real run is version_0."""
    err = _error_of(["fit", "--config", QUICKSTART, "--trainer.root_dir", str(tmp_path / "runs"), *overrides], capsys)
    assert message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()


def test_a_root_dir_that_cannot_hold_the_run_is_refused_in_one_line(tmp_path, capsys):
    (tmp_path / "a_file").write_text("not a folder")
    err = _error_of(["fit", "--config", QUICKSTART, "--trainer.root_dir", str(tmp_path / "a_file" / "runs")], capsys)
    assert err.strip().splitlines() == [
        f"lightfed: error: cannot make the run folder {tmp_path / 'a_file' / 'runs' / 'quickstart'}: "
        f"{tmp_path / 'a_file'} is not a folder; change trainer.root_dir"
    ]
    assert (tmp_path / "a_file").read_text() == "not a folder"


def test_a_truncated_checkpoint_is_named_in_one_line(tmp_path, capsys):
    _fit_quickstart(tmp_path, "--trainer.rounds", "1", "--trainer.client_eval_interval", "0")
    checkpoint = tmp_path / "quickstart" / "version_0" / "checkpoints" / "last.ckpt"
    checkpoint.write_bytes(checkpoint.read_bytes()[:1000])
    err = _error_of(["fit", "--config", QUICKSTART, "--trainer.root_dir", str(tmp_path), "--ckpt_path", "last"], capsys)
    assert len(err.strip().splitlines()) == 1
    assert err.startswith(f"lightfed: error: checkpoint {checkpoint} cannot be read (truncated or corrupt")


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


@pytest.mark.parametrize("config", [QUICKSTART, str(ROOT / "configs" / "digits" / "scaffold.yaml")], ids=["fedavg", "scaffold"])
def test_two_processes_give_the_weights_of_one(tmp_path, config):
    """Run through the real command, as users do: Fabric launches the second process with gloo.
    SCAFFOLD keeps per-client state on the process that trains the client, which writes it into its own file."""

    def final_params(devices: int):
        root = tmp_path / f"devices{devices}"
        subprocess.run(
            [sys.executable, "-m", "lightfed", "fit", "--config", config, "--trainer.rounds", "3", "--trainer.name", "run",
             "--trainer.devices", str(devices), "--trainer.root_dir", str(root), "--trainer.progress_bar", "false",
             "--trainer.check_replicas", "true"],  # every round: the global weights are the same on every process
            check=True, cwd=tmp_path, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, timeout=300,
        )
        path = root / "run" / "version_0" / "checkpoints" / "last.ckpt"
        return {**torch.load(path, weights_only=False), "client_states": saved_client_states(path)}

    one, two = final_params(1), final_params(2)
    assert one["round"] == two["round"] == 3
    assert (one["params"] - two["params"]).abs().max() <= 1e-5
    assert one["client_states"].keys() == two["client_states"].keys()
    for client_id, state in one["client_states"].items():
        assert (state["c"] - two["client_states"][client_id]["c"]).abs().max() <= 1e-5
    if one["client_states"]:  # each process wrote only the clients it holds, i % 2 == rank
        folder = tmp_path / "devices2" / "run" / "version_0" / "checkpoints" / "process_states" / "round_3"
        for rank in range(2):
            held = torch.load(folder / f"process_{rank}_of_2.pt", weights_only=False)["clients"]
            assert held and all(client_id % 2 == rank for client_id in held)
    assert not list((tmp_path / "devices2" / "run").glob("version_1"))  # one run folder, written by rank 0


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["--trainer.local_epochs", "gamma:1:5"], "trainer.local_epochs: unknown distribution 'gamma'"),
        (["--trainer.local_lr", "uniform:1e-3:1e-4"], "trainer.local_lr: the lower bound of 'uniform:1e-3:1e-4' is above"),
        (["--strategy", "lightfed.strategies.FedProx", "--strategy.mu", "-1"], "strategy.mu must be >= 0, got -1.0"),
    ],
)
def test_bad_heterogeneity_and_strategy_settings_get_one_line(tmp_path, capsys, overrides, message):
    err = _error_of(["fit", "--config", QUICKSTART, "--trainer.root_dir", str(tmp_path), *overrides], capsys)
    assert message in err and len(err.strip().splitlines()) == 1
