"""The run folder's TensorBoard logger writes a round's numbers as one event, read back as Fabric's logger's are, and
hands its events to TensorBoard's writer once a second, at a save, at the run's end and when an error ends it."""

from types import SimpleNamespace

import pytest
import torch
from lightning.fabric.loggers import TensorBoardLogger
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from lightfed.run.round_tensorboard import RoundTensorBoardLogger


def _scalars(folder) -> dict[str, list[tuple[int, float]]]:
    events = EventAccumulator(str(folder)).Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def test_a_rounds_numbers_read_back_as_fabrics_logger_writes_them(tmp_path):
    ours, fabrics = (
        cls(tmp_path, name) for cls, name in [(RoundTensorBoardLogger, "ours"), (TensorBoardLogger, "fabric")]
    )
    for round in range(1, 4):
        metrics = {"round/clients": 10, "round/client_train_loss": 1 / 3 / round, "val_acc": 0.5 + round / 7}
        for logger in (ours, fabrics):
            logger.log_metrics(metrics, step=round)
    extra = {"tensor": torch.tensor(2.5), "grouped": {"a": 1.0, "b": 2.0}}  # not plain numbers: Fabric's own path
    for logger in (ours, fabrics):
        logger.log_metrics(extra, step=4)
        logger.finalize("success")
    written = _scalars(ours.log_dir)
    assert written == _scalars(fabrics.log_dir)
    assert written["round/client_train_loss"] == [(r, torch.tensor(1 / 3 / r).item()) for r in range(1, 4)]
    assert written["tensor"] == [(4, 2.5)]
    events = EventAccumulator(ours.log_dir).Reload()
    assert (
        len({e.wall_time for e in events.Scalars("round/clients")} & {e.wall_time for e in events.Scalars("val_acc")})
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
    events = EventAccumulator(logger.log_dir).Reload().Scalars("val_acc")
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
    assert [step for step, _ in written["round/clients"]] == [1, 2]
    assert [step for step, _ in written["val_acc"]] == [1, 2]


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
