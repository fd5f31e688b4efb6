"""The run folder's TensorBoard logger writes a round's numbers as one event, read back as Fabric's logger's are, and
hands its events to TensorBoard's writer once a second, at a save, at the run's end and when an error ends it. Its tags
put the run's main curves in the groups TensorBoard's Time Series opens."""

import re
from functools import cmp_to_key
from types import SimpleNamespace

import pytest
import torch
from lightning.fabric.loggers import TensorBoardLogger
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from lightfed.run.round_tensorboard import RoundTensorBoardLogger, tensorboard_tag


def _scalars(folder) -> dict[str, list[tuple[int, float]]]:
    events = EventAccumulator(str(folder)).Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


NUMBER = re.compile(r"\d+(?:\.\d*)?(?:[eE](?:[-+\d]\d*)?)?")  # what TensorBoard's tag order reads as one number


def _compare_tags(a: str, b: str) -> int:
    """TensorBoard's order of tags (``compareTagNames`` in ``tensorboard/webapp/metrics/utils.ts``): character by
    character, runs of digits as numbers, ``/`` and digits before any other character."""
    i = j = 0
    while True:
        if i == len(a) or j == len(b):
            return (i < len(a)) - (j < len(b))
        if a[i].isdigit() and b[j].isdigit():
            first, second = NUMBER.match(a, i), NUMBER.match(b, j)
            assert first is not None and second is not None
            x, y = (_number(match.group()) for match in (first, second))
            i, j = first.end(), second.end()
            if x != y and x == x and y == y:
                return -1 if x < y else 1
            continue
        a_breaks, b_breaks = a[i] == "/" or a[i].isdigit(), b[j] == "/" or b[j].isdigit()
        if a_breaks != b_breaks:
            return -1 if a_breaks else 1
        if not a_breaks and a[i] != b[j]:
            return -1 if a[i] < b[j] else 1
        i, j = i + 1, j + 1


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return float("nan")  # JavaScript's Number() of "1e": compares neither less nor greater


def time_series_groups(folder) -> dict[str, list[str]]:
    """The groups of cards of TensorBoard's Time Series for the scalars and histograms in ``folder``, in its order
    (``groupCardIdWithMetdata``): tags sorted, grouped by their part before the first ``/``. It opens the first two
    (``metricsTagMetadataLoaded`` in ``tensorboard/webapp/metrics/store/metrics_reducers.ts``)."""
    tags = EventAccumulator(str(folder)).Reload().Tags()
    groups: dict[str, list[str]] = {}
    for tag in sorted({*tags["scalars"], *tags["histograms"]}, key=cmp_to_key(_compare_tags)):
        groups.setdefault(tag.split("/", 1)[0], []).append(tag)
    return groups


def test_tensorboards_tag_order():
    tags = ["b", "a10", "a2", "val_loss", "val/acc", "~final/x", "A"]
    assert sorted(tags, key=cmp_to_key(_compare_tags)) == ["A", "a2", "a10", "b", "val/acc", "val_loss", "~final/x"]


def test_tensorboard_opens_on_the_runs_curves(tmp_path):
    """A tiny run's groups in TensorBoard's Time Series: the round curves first, the diagnostics after them."""
    from lightfed import FedAvg
    from tests.conftest import small_data, small_model, small_trainer

    small_trainer(tmp_path, rounds=2, eval_interval=1, client_eval_interval=1).fit(
        small_model(), small_data(), FedAvg()
    )
    (folder,) = tmp_path.rglob("version_0")
    groups = time_series_groups(folder)
    assert list(groups) == ["curves", "~clients", "~communication", "~final", "~round"]
    assert groups["curves"] == ["curves/train_loss", "curves/val_acc", "curves/val_loss"]
    assert "~clients/val_acc" in groups["~clients"] and "~final/clients/val_acc" in groups["~final"]  # histograms


def test_a_rounds_numbers_read_back_as_fabrics_logger_writes_them(tmp_path):
    ours, fabrics = (
        cls(tmp_path, name) for cls, name in [(RoundTensorBoardLogger, "ours"), (TensorBoardLogger, "fabric")]
    )
    for round in range(1, 4):
        metrics = {"round/clients": 10, "round/client_train_loss": 1 / 3 / round, "val_acc": 0.5 + round / 7}
        ours.log_metrics(metrics, step=round)
        fabrics.log_metrics({tensorboard_tag(name): value for name, value in metrics.items()}, step=round)
    extra = {"tensor": torch.tensor(2.5), "grouped": {"a": 1.0, "b": 2.0}}  # not plain numbers: Fabric's own path
    ours.log_metrics(extra, step=4)
    fabrics.log_metrics({tensorboard_tag(name): value for name, value in extra.items()}, step=4)
    for logger in (ours, fabrics):
        logger.finalize("success")
    written = _scalars(ours.log_dir)
    assert written == _scalars(fabrics.log_dir)
    assert written["~round/client_train_loss"] == [(r, torch.tensor(1 / 3 / r).item()) for r in range(1, 4)]
    assert written["curves/tensor"] == [(4, 2.5)]
    events = EventAccumulator(ours.log_dir).Reload()
    assert (
        len(
            {e.wall_time for e in events.Scalars("~round/clients")}
            & {e.wall_time for e in events.Scalars("curves/val_acc")}
        )
        == 3
    )  # one event a round


def test_events_wait_for_the_hand_over_and_keep_the_time_they_were_logged(tmp_path, monkeypatch):
    from lightfed.adapters import tensorboard_file_writer
    from lightfed.run import round_tensorboard

    clock = {"monotonic": 100.0, "time": 5000.0}
    fake_time = SimpleNamespace(monotonic=lambda: clock["monotonic"], time=lambda: clock["time"])
    monkeypatch.setattr(round_tensorboard, "time", fake_time)  # this module's clock only, not the writer thread's
    logger = RoundTensorBoardLogger(tmp_path, "kept")
    handed: list[int] = []
    writer = tensorboard_file_writer(logger)
    add_summary = writer.add_summary
    monkeypatch.setattr(
        writer, "add_summary", lambda summary, step, wall: (handed.append(step), add_summary(summary, step, wall))
    )

    for round in (1, 2):  # within a second: kept
        logger.log_metrics({"val_acc": round / 10}, step=round)
        clock["time"] += 7.0
    assert handed == []
    clock["monotonic"] += round_tensorboard.HAND_OVER_SECONDS
    logger.log_metrics({"val_acc": 0.3}, step=3)  # a second on: the three go together
    assert handed == [1, 2, 3]
    logger.log_metrics({"val_acc": 0.4}, step=4)
    assert handed == [1, 2, 3]
    logger.save()  # a checkpoint: everything kept goes, and reaches the file
    assert handed == [1, 2, 3, 4]
    logger.log_metrics({"val_acc": 0.5}, step=5)
    logger.finalize("success")
    events = EventAccumulator(logger.log_dir).Reload().Scalars("curves/val_acc")
    assert [(e.step, e.wall_time) for e in events] == [(r, 5000.0 + 7.0 * min(r - 1, 2)) for r in range(1, 6)]


def test_a_run_that_an_error_ends_keeps_its_rounds_in_tensorboard(tmp_path, monkeypatch):
    from lightfed import Callback, FedAvg
    from lightfed.run import round_tensorboard
    from tests.conftest import small_data, small_model, small_trainer

    monkeypatch.setattr(round_tensorboard, "HAND_OVER_SECONDS", 1e9)  # kept until saved, however slow the rounds

    class FailsInRound3(Callback):
        def on_round_start(self, trainer, round):
            if round == 2:
                raise RuntimeError("round 3 fails")

    trainer = small_trainer(tmp_path, rounds=4, eval_interval=1, checkpoint_interval=100, callbacks=[FailsInRound3()])
    with pytest.raises(RuntimeError, match="round 3 fails"):
        trainer.fit(small_model(), small_data(), FedAvg())
    (folder,) = tmp_path.rglob("version_0")
    written = _scalars(folder)  # the two rounds, kept by the logger until the error
    assert [step for step, _ in written["~round/clients"]] == [1, 2]
    assert [step for step, _ in written["curves/val_acc"]] == [1, 2]


def test_a_runs_scalars_come_before_its_hparams_session_end(tmp_path, monkeypatch):
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    from lightfed import FedAvg
    from lightfed.run import round_tensorboard
    from tests.conftest import small_data, small_model, small_trainer

    monkeypatch.setattr(round_tensorboard, "HAND_OVER_SECONDS", 1e9)  # every round's events kept until the end
    small_trainer(tmp_path, rounds=2, checkpoint_interval=100).fit(small_model(), small_data(), FedAvg())
    (events_file,) = tmp_path.rglob("events.out.tfevents.*")
    kinds = []
    for event in EventFileLoader(str(events_file)).Load():
        for value in event.summary.value:
            hparams = value.metadata.plugin_data.plugin_name == "hparams"
            kinds.append(value.tag if hparams else "scalar")
    session_end = kinds.index("_hparams_/session_end_info")
    assert kinds.count("scalar") > 2 and "scalar" not in kinds[session_end:]


KILLED_AT_A_CHECKPOINT = """
import os, signal, sys
from lightfed import FedAvg
from lightfed.run.run_state import RunState
from tests.conftest import small_data, small_model, small_trainer

save, after = RunState.save, sys.argv[2] == "after"

def save_and_die_in_round_2(state, path):  # SIGKILL just before or just after last.ckpt takes its name
    if state.round == 2 and not after:
        os.kill(os.getpid(), signal.SIGKILL)
    save(state, path)
    if state.round == 2:
        os.kill(os.getpid(), signal.SIGKILL)

RunState.save = save_and_die_in_round_2
small_trainer(sys.argv[1], rounds=3).fit(small_model(), small_data(), FedAvg())
"""


@pytest.mark.slow
@pytest.mark.parametrize("moment", ["before", "after"])
def test_a_run_killed_at_a_checkpoint_and_resumed_has_each_round_once_in_tensorboard(tmp_path, moment):
    """Killed just after round 2's checkpoint took its name (the resume goes on from round 2) or just before (it
    repeats round 2): TensorBoard holds rounds 1, 2 and 3 once each, the same values as metrics.jsonl's."""
    import json
    import subprocess
    import sys
    import time
    from pathlib import Path

    from lightfed import FedAvg
    from tests.conftest import small_data, small_model, small_trainer

    root = Path(__file__).resolve().parents[2]
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_AT_A_CHECKPOINT, str(tmp_path), moment], cwd=root, timeout=600
    )
    assert killed.returncode == -9
    (killed_events,) = tmp_path.rglob("events.out.tfevents.*")
    while int(time.time()) <= int(killed_events.name.split(".")[3]):  # TensorBoard reads its files in name order,
        time.sleep(0.05)  # the second they were made first: the resume's must come after the killed run's
    small_trainer(tmp_path, rounds=3).fit(small_model(), small_data(), FedAvg(), ckpt_path="last")
    (folder,) = tmp_path.rglob("version_0")
    lines = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    logged = {line["round"]: line["val_acc"] for line in lines if "final" not in line}  # a later line replaces
    written = _scalars(folder)["curves/val_acc"]
    assert [step for step, _ in written] == [1, 2, 3]
    assert written == [(round, pytest.approx(value)) for round, value in sorted(logged.items())]
