"""The run folder's TensorBoard logger writes a round's numbers as one event, read back as Fabric's logger's are."""

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
