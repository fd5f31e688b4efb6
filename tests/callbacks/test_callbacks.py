import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from lightfed import Callback, FedAvg
from lightfed.callbacks import EarlyStopping, ProgressBar
from lightfed.cli import run
from lightfed.errors import ConfigError
from lightfed.run.run_output import METRICS_FILE
from tests.conftest import LIGHTFED, small_data, small_model, small_trainer, trainer_options

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = str(ROOT / "configs" / "quickstart.yaml")


class Recorder(Callback):
    """Notes every hook the trainer calls, with what it is given."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def on_fit_start(self, trainer):
        self.calls.append(("fit_start", trainer.round))

    def on_round_start(self, trainer, round):
        self.calls.append(("round_start", round))

    def on_client_end(self, trainer, update):
        self.calls.append(("client_end", update.client_id))

    def on_evaluation_end(self, trainer, metrics):
        self.calls.append(("evaluation_end", sorted(metrics)))

    def on_round_end(self, trainer, round, metrics):
        self.calls.append(("round_end", round, trainer.round, "val_acc" in metrics))

    def on_save_checkpoint(self, trainer, checkpoint):
        checkpoint["recorder"] = len(self.calls)
        self.calls.append(("save", checkpoint["round"]))

    def on_load_checkpoint(self, trainer, checkpoint):
        self.calls.append(("load", checkpoint["recorder"]))

    def on_fit_end(self, trainer, metrics):
        self.calls.append(("fit_end", trainer.round))


def _lines(run_dir: Path) -> list[dict]:
    """The round lines (not the final record a finished run ends with)."""
    return [
        json.loads(line)
        for line in (run_dir / METRICS_FILE).read_text().splitlines()
        if not line.startswith('{"final"')
    ]


def test_hooks_are_called_in_order_with_the_round_state(tmp_path):
    recorder = Recorder()
    trainer = small_trainer(tmp_path, rounds=2, eval_interval=2, callbacks=[recorder], clients_in_parallel=1)
    trainer.fit(small_model(), small_data(), FedAvg())
    names = [call[0] for call in recorder.calls]
    assert names[0] == "fit_start" and names[-1] == "fit_end"
    round_one = names[1 : names.index("round_end") + 1]
    assert round_one == ["round_start", *["client_end"] * 4, "round_end"]  # round 1 is not evaluated
    assert ("round_end", 0, 1, False) in recorder.calls and ("round_end", 1, 2, True) in recorder.calls
    assert names.count("evaluation_end") == 1 and names.count("save") == 2  # checkpoints after the round's callbacks
    assert names.index("save") == names.index("round_end") + 1
    clients = [call[1] for call in recorder.calls if call[0] == "client_end"]
    assert clients[:4] == sorted(clients[:4])  # one client at a time: the round's clients in id order

    resumed = Recorder()
    small_trainer(tmp_path, rounds=3, callbacks=[resumed]).fit(small_model(), small_data(), FedAvg(), ckpt_path="last")
    saved = torch.load(trainer.checkpoint_path, weights_only=False)
    assert resumed.calls[0] == ("load", recorder.calls.index(("save", 2))) and resumed.calls[1] == ("fit_start", 2)
    assert saved["round"] == 3 and "recorder" in saved


def test_metrics_file_holds_each_round_and_a_resumed_round_is_appended(tmp_path):
    trainer = small_trainer(tmp_path, rounds=2, logger=False)
    metrics = trainer.fit(small_model(), small_data(), FedAvg())
    lines = _lines(trainer.log_dir)
    assert [line["round"] for line in lines] == [1, 2]
    assert lines[-1] == {"round": 2, **metrics}
    assert not list(trainer.log_dir.glob("events.out.tfevents.*"))  # logger false: no TensorBoard, the file stays
    with open(trainer.log_dir / METRICS_FILE, "a") as file:
        file.write('{"round": 3, "val_ac')  # a write cut short by a kill during round 3
    small_trainer(tmp_path, rounds=3, logger=False).fit(small_model(), small_data(), FedAvg(), ckpt_path="last")
    lines = [
        line for line in (trainer.log_dir / METRICS_FILE).read_text().splitlines() if not line.startswith('{"final"')
    ]
    assert lines[2] == '{"round": 3, "val_ac' and [json.loads(line)["round"] for line in lines[:2] + lines[3:]] == [
        1,
        2,
        3,
    ]

    from lightfed.experiments.run_logs import read_log

    log = read_log(tmp_path, "lightfed", "val_acc")
    assert [step for step, _ in log["history"]] == [1, 2, 3]


def test_early_stopping_from_a_config_stops_every_process_and_keeps_the_checkpoint(tmp_path):
    """A user callback named in YAML: with mode min on val_acc, the accuracy rising in round 2 is no improvement,
    so with patience 1 the run stops after round 2 of 5 and writes that round's checkpoint."""
    config = tmp_path / "early.yaml"
    config.write_text(
        "trainer:\n"
        "  callbacks:\n"
        "    - class_path: lightfed.callbacks.EarlyStopping\n"
        "      init_args: {monitor: val_acc, patience: 1, mode: min}\n"
    )
    metrics = run(
        [
            "fit",
            "--config",
            QUICKSTART,
            "--config",
            str(config),
            *trainer_options(rounds=5, client_eval_interval=0, root_dir=str(tmp_path / "runs"), progress_bar="false"),
        ]
    )
    run_dir = tmp_path / "runs" / "quickstart" / "version_0"
    lines = _lines(run_dir)
    assert [line["round"] for line in lines] == [1, 2] and lines[1]["val_acc"] > lines[0]["val_acc"]
    assert metrics == {k: v for k, v in lines[1].items() if k != "round"}
    checkpoint = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)
    assert checkpoint["round"] == 2 and checkpoint["early_stopping"] == {"best": lines[0]["val_acc"], "waited": 1}
    assert "EarlyStopping" in (run_dir / "config.yaml").read_text()  # the saved config reproduces the run


def test_early_stopping_settings_are_checked():
    with pytest.raises(ConfigError, match="patience >= 1"):
        EarlyStopping(patience=0)


def test_a_logger_from_the_command_line_and_the_hparams_of_tensorboard(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    common = [
        "fit",
        "--config",
        QUICKSTART,
        *trainer_options(rounds=1, progress_bar="false", client_eval_interval=0),
    ]
    run(
        [
            *common,
            *trainer_options(root_dir=str(tmp_path / "csv"), logger="lightning.fabric.loggers.CSVLogger"),
            "--trainer.logger.root_dir",
            str(tmp_path / "csv_logs"),
        ]
    )
    csv = next((tmp_path / "csv").rglob("metrics.csv")).read_text()  # a CSV logger without a version: the run folder
    assert "val_acc" in csv.splitlines()[0]

    run([*common, "--trainer.root_dir", str(tmp_path / "tb")])
    events = EventAccumulator(str(tmp_path / "tb" / "quickstart" / "version_0")).Reload()
    content = b"".join(events.PluginTagToContent("hparams").values())
    assert b"trainer/clients_per_round" in content and b"val_acc" in content


@pytest.mark.slow
def test_sigterm_mid_round_on_two_processes_checkpoints_that_round_and_exits_cleanly(tmp_path):
    """Both processes get SIGTERM while round 2 trains: each finishes round 2, it is checkpointed, both exit 0 without
    a traceback, and resuming gives the weights of an uninterrupted run."""
    import os
    import subprocess

    def fit(root: Path, *extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [
                *LIGHTFED,
                "fit",
                "--config",
                QUICKSTART,
                *trainer_options(rounds=4, client_eval_interval=0, devices=2, root_dir=str(root), progress_bar="false"),
                *extra,
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=600,
            start_new_session=True,
            env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)},
        )

    stopped = fit(tmp_path / "cut", "--trainer.callbacks+=tests.callbacks.sigterm_callback.TerminateDuringRoundTwo")
    assert stopped.returncode == 0 and "Traceback" not in stopped.stderr
    assert "stopped on request after round 2" in stopped.stderr
    checkpoint = tmp_path / "cut" / "quickstart" / "version_0" / "checkpoints" / "last.ckpt"
    assert torch.load(checkpoint, weights_only=False)["round"] == 2
    assert fit(tmp_path / "cut", "--ckpt_path", "last").returncode == 0
    assert fit(tmp_path / "full").returncode == 0
    resumed = torch.load(checkpoint, weights_only=False)
    full = torch.load(tmp_path / "full" / "quickstart" / "version_0" / "checkpoints" / "last.ckpt", weights_only=False)
    assert resumed["round"] == full["round"] == 4 and torch.equal(resumed["params"], full["params"])


def test_the_progress_bar_is_closed_after_the_last_round_before_the_run_prints_its_ending():
    fabric = SimpleNamespace(is_global_zero=True)
    state = SimpleNamespace(fabric=fabric, rounds=2, round=0, monitor="val_acc", should_stop=False)
    bar = ProgressBar()
    bar.on_fit_start(state)
    for done in (1, 2):
        assert not bar.bar.disable  # open while rounds remain
        state.round = done
        bar.on_round_end(state, done - 1, {"val_acc": 0.5})
    assert bar.bar.disable and bar.bar.n == 2  # closed: its line ends before the final report's
