"""Every bad input to `lightfed fit` ends the same way: exit code 2, one line on stderr that says what is wrong and
how to fix it, and nothing written: no run folder (the next real run is version_0), no file of an earlier run changed."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from lightfed.cli import main, run
from lightfed.models import SmallCNN
from tests.conftest import trainer_options

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = str(ROOT / "configs" / "quickstart.yaml")
DP = str(ROOT / "configs" / "privacy" / "dp-sgd.yaml")
SCAFFOLD = str(ROOT / "configs" / "digits" / "scaffold.yaml")
HELP = "(lightfed fit --help lists every option)"


class ManualOptimization(SmallCNN):
    """A module that would step its optimizer itself (Lightning's manual optimization)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.automatic_optimization = False


PARSE_ERRORS = [  # (id, arguments, fragments of the line)
    (
        "unknown_class",
        ["--strategy", "lightfed.strategies.NoSuch"],
        ["cannot import 'lightfed.strategies.NoSuch'", HELP],
    ),
    ("unknown_module", ["--model", "nosuchmodule.Model"], ["No module named 'nosuchmodule'", HELP]),
    ("wrong_type", ["--trainer.rounds", "abc"], ['Parser key "trainer.rounds"', "Got value: abc", HELP]),
    ("unknown_key", ["--trainer.roundz", "3"], ["unrecognized arguments: --trainer.roundz 3", HELP]),
    ("missing_config", ["--config", "missing.yaml"], ["File does not exist", "missing.yaml", HELP]),
    ("yaml_syntax", ["--config", "BAD_YAML"], ["Problems parsing config", HELP]),
    ("binary_config", ["--config", "BINARY"], ["a --config file is not UTF-8 text (invalid start byte at byte 0)"]),
    (  # an option under one the class does not take
        "nested_unknown_option",
        ["--model.init_args.scheduler.init_args.gamma", "0.9"],
        ["model.scheduler: lightfed.models.SmallCNN has no option 'scheduler'; it takes num_classes, in_channels"],
    ),
    (
        "lr_nan",
        ["--model.init_args.optimizer.init_args.lr", "nan"],
        ["model.optimizer.lr: expected a finite number, got 'nan'", HELP],
    ),
]
REFUSED = [
    (
        "clients_per_round",
        ["--trainer.clients_per_round", "21"],
        ["trainer.clients_per_round (21) is larger than the number of clients (20); lower it or add clients"],
    ),
    ("dataset_files", ["--data.dataset", "lightfed.data.CIFAR10", "--data.dataset.root", "nowhere"], ["nowhere"]),
    (
        "empty_client",
        ["--data.partitioner", "lightfed.data.ShardPartitioner", "--data.partitioner.num_clients", "1000"],
        [],
    ),
    ("alpha_zero", ["--data.partitioner.init_args.alpha", "0"], ["alpha must be > 0"]),
    (
        "dp_batchnorm",
        [
            "-c",
            DP,
            "--trainer.privacy.convert_batchnorm",
            "false",
            "--model",
            "lightfed.models.VGG11",
            "--model.in_channels",
            "1",
            "--model.batch_norm",
            "true",
        ],
        ["convert_batchnorm: true"],
    ),
    (
        "dp_bf16",
        ["-c", DP, "--trainer.precision", "bf16-mixed"],
        ["differential privacy needs trainer.precision 32-true"],
    ),
    ("dp_16", ["-c", DP, "--trainer.precision", "16-mixed"], ["differential privacy needs trainer.precision 32-true"]),
    (
        "async_strategy_in_rounds",
        ["--strategy", "lightfed.strategies.MasFL"],
        ["MasFL is asynchronous: add an `asynchronous:` section"],
    ),
    (
        "scaffold_momentum",
        ["-c", SCAFFOLD, "--model.optimizer.momentum", "0.9"],
        ["Scaffold assumes plain SGD", "momentum 0.9"],
    ),
    ("no_devices", ["--trainer.devices", "0"], ["trainer.accelerator 'cpu' with trainer.devices 0"]),
    (
        "no_gpu",
        ["--trainer.accelerator", "gpu"] if not torch.cuda.is_available() else ["--trainer.devices", "-5"],
        ["trainer.accelerator"],
    ),
    ("rounds_zero", ["--trainer.rounds", "0"], ["trainer.rounds must be >= 1, got 0"]),
    ("precision", ["--trainer.precision", "64"], ["trainer.precision must be one of 32-true, 16-mixed, bf16-mixed"]),
    ("distribution", ["--trainer.local_epochs", "gamma:1:5"], ["trainer.local_epochs: unknown distribution 'gamma'"]),
    (
        "bounds",
        ["--trainer.local_lr", "uniform:1e-3:1e-4"],
        ["trainer.local_lr: the lower bound of 'uniform:1e-3:1e-4' is above"],
    ),
    (
        "fedprox_mu",
        ["--strategy", "lightfed.strategies.FedProx", "--strategy.mu", "-1"],
        ["strategy.mu must be >= 0, got -1.0"],
    ),
    ("no_last_checkpoint", ["--ckpt_path", "last"], ["--ckpt_path last: no last.ckpt under"]),
    (
        "missing_checkpoint",
        ["--ckpt_path", "nowhere.ckpt"],
        ["checkpoint nowhere.ckpt does not exist; check --ckpt_path"],
    ),
    ("clip_zero", ["--trainer.gradient_clip_val", "0"], ["trainer.gradient_clip_val must be > 0 or null, got 0.0"]),
    (
        "schedule_of_adaptive_fedecado",
        [
            "--strategy",
            "lightfed.strategies.AdaptiveFedECADO",
            *trainer_options(lr_schedule="lightfed.schedules.CosineDecay"),
        ],
        ["remove trainer.lr_schedule"],
    ),
    (
        "schedule_gamma",
        ["--trainer.lr_schedule", "lightfed.schedules.ExponentialDecay", "--trainer.lr_schedule.gamma", "2"],
        ["ExponentialDecay needs 0 < gamma <= 1, got 2.0"],
    ),
    (
        "parallel_zero",
        ["--trainer.clients_in_parallel", "0"],
        ["trainer.clients_in_parallel must be 'auto', 'vectorized' or an integer >= 1, got 0"],
    ),
    (
        "parallel_dp",
        ["-c", DP, "--trainer.clients_in_parallel", "2"],
        ["trainer.clients_in_parallel must be 1, 'auto' or 'vectorized' with trainer.privacy"],
    ),
    (
        "root_dir_under_a_file",
        ["--trainer.root_dir", "A_FILE/runs"],
        ["A_FILE is not a folder; change trainer.root_dir"],
    ),
    (
        "negative_lr",
        ["--model.init_args.optimizer.init_args.lr", "-0.1"],
        ["SmallCNN.configure_optimizers: ValueError: Invalid learning rate: -0.1"],
    ),
    (
        "yaml_nan_lr",
        ["--model.init_args.optimizer.init_args.lr", ".nan"],
        ["SmallCNN.configure_optimizers: the learning rate must be a number, got [nan]"],
    ),
    ("local_lr_nan", ["--trainer.local_lr", ".nan"], ["trainer.local_lr must be > 0 and at most 3.403e+38"]),
    ("local_lr_huge", ["--trainer.local_lr", "1e308"], ["trainer.local_lr must be > 0 and at most 3.403e+38"]),
    ("devices_negative", ["--trainer.devices", "-1"], ["trainer.accelerator 'cpu' with trainer.devices -1"]),
    ("devices_word", ["--trainer.devices", "abc"], ["trainer.accelerator 'cpu' with trainer.devices 'abc'"]),
    *[
        (
            f"collective_timeout_{i}",
            ["--trainer.collective_timeout", timeout],
            ["trainer.collective_timeout must be from 1 to 31536000 seconds (a year)"],
        )
        for i, timeout in enumerate([".inf", "1e300", ".nan"])
    ],
    ("root_dir_in_proc", ["--trainer.root_dir", "/proc/lightfed/runs"], ["/proc/lightfed/runs/quickstart: No such"]),
    (
        "manual_optimization",
        ["--model", f"{__name__}.ManualOptimization"],
        ["ManualOptimization sets automatic_optimization = False: lightfed's client loop steps the optimizer"],
    ),
    ("negative_seed", ["--seed_everything", "-1"], ["seed_everything must be an integer from 0 to 4294967295, got -1"]),
    (
        "huge_seed",
        ["--seed_everything", str(2**66)],
        [f"seed_everything must be an integer from 0 to 4294967295, got {2**66}"],
    ),
    (
        "long_name",
        ["--trainer.name", "n" * 300],
        ["trainer.name has a part of 300 bytes: a file name holds at most 255"],
    ),
    *[
        (
            f"name_{i}",
            ["--trainer.name", name],
            [
                f"trainer.name must name a folder inside trainer.root_dir (relative, "
                f"without '.' or '..' parts), got {name!r}"
            ],
        )
        for i, name in enumerate(["../x", "a/../../x", "..", ".", "", "/tmp/x"])
    ],
]


def _refusal(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exit:
        main(["fit", "--config", QUICKSTART, *argv])
    assert exit.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("lightfed: error: "), err
    return err


@pytest.mark.parametrize(
    "argv, fragments", [case[1:] for case in PARSE_ERRORS + REFUSED], ids=[case[0] for case in PARSE_ERRORS + REFUSED]
)
def test_a_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys, monkeypatch, argv, fragments):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "BAD_YAML").write_text("trainer: {rounds: [\n")
    (tmp_path / "A_FILE").write_text("not a folder")
    (tmp_path / "BINARY").write_bytes(bytes([0x91, 0xFF, 0x00, 0x12]))
    err = _refusal(["--trainer.root_dir", str(tmp_path / "runs"), *argv], capsys)
    assert all(fragment in err for fragment in fragments), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["A_FILE", "BAD_YAML", "BINARY"]
    assert (tmp_path / "A_FILE").read_text() == "not a folder"


def test_a_root_dir_that_cannot_be_written_is_refused(tmp_path, capsys):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    if os.access(locked, os.W_OK):
        pytest.skip("this user may write anywhere (root)")
    err = _refusal(["--trainer.root_dir", str(locked / "runs")], capsys)
    assert f"{locked} is not writable; change trainer.root_dir" in err and not any(locked.iterdir())


def test_a_truncated_checkpoint_without_a_previous_one_leaves_the_run_as_it_was(tmp_path, capsys):
    run(
        [
            "fit",
            "--config",
            QUICKSTART,
            *trainer_options(root_dir=str(tmp_path), progress_bar="false", rounds=1, client_eval_interval=0),
        ]
    )
    folder = tmp_path / "quickstart"
    checkpoint = folder / "version_0" / "checkpoints" / "last.ckpt"
    checkpoint.write_bytes(checkpoint.read_bytes()[:1000])
    before = {path: path.read_bytes() for path in folder.rglob("*") if path.is_file()}
    capsys.readouterr()
    err = _refusal(["--trainer.root_dir", str(tmp_path), "--ckpt_path", "last"], capsys)
    assert err.startswith(f"lightfed: error: checkpoint {checkpoint} cannot be read (truncated or corrupt")
    assert {path: path.read_bytes() for path in folder.rglob("*") if path.is_file()} == before  # config.yaml too


ONE_PROCESS_REFUSES = """
import os

from lightfed.errors import ConfigError
from lightfed.models import SmallCNN


class RefusedOnProcessOne(SmallCNN):
    def __init__(self) -> None:
        super().__init__(num_classes=10, in_channels=1)
        if os.environ.get("LOCAL_RANK") == "1":
            raise ConfigError("refused by process 1 alone")
"""


@pytest.mark.slow
def test_a_refusal_on_two_processes_is_printed_once_and_one_only_a_fork_sees_is_printed_too(tmp_path):
    """Both processes refuse a NaN local_lr after the fork: one line. Only process 1 refuses the model: its line
    reaches the terminal once, beside process 0's account of how process 1 ended."""
    (tmp_path / "mine.py").write_text(ONE_PROCESS_REFUSES)
    options = [*trainer_options(devices=2, root_dir=tmp_path / "runs", progress_bar="false"), "--trainer.rounds", "1"]
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}

    def error_lines(*extra: str) -> tuple[int, list[str]]:
        command = [sys.executable, "-m", "lightfed", "fit", "--config", QUICKSTART, *options, *extra]
        ended = subprocess.run(command, cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=600)
        return ended.returncode, [line for line in ended.stderr.splitlines() if line.startswith("lightfed: error:")]

    code, lines = error_lines("--trainer.local_lr", ".nan")
    assert code == 2 and len(lines) == 1 and "trainer.local_lr must be > 0" in lines[0]
    code, lines = error_lines("--model", "mine.RefusedOnProcessOne")
    assert code != 0 and lines.count("lightfed: error: refused by process 1 alone") == 1
    assert any("process 1 of 2 exited with status 2" in line for line in lines)
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").rglob("last.ckpt"))
