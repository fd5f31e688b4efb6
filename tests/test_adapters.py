"""Each private attribute of another library that ``lightfed.adapters`` uses is still there and does what it did."""

from datetime import timedelta

import torch
from lightning import LightningModule
from lightning.fabric.loggers import TensorBoardLogger
from lightning.fabric.strategies import DDPStrategy

from lightfed import adapters


def test_a_module_copied_without_its_trainer_keeps_its_weights_and_loses_its_trainer():
    module = LightningModule()
    module.layer = torch.nn.Linear(2, 1)
    trainer = object()
    module._trainer = trainer  # where LightningModule.trainer's setter keeps it
    copied = adapters.copy_without_trainer(module)
    assert copied._trainer is None and module._trainer is trainer
    assert torch.equal(copied.layer.weight, module.layer.weight) and copied.layer.weight is not module.layer.weight


def test_the_collective_timeout_is_the_one_ddp_strategy_takes_as_an_argument():
    assert DDPStrategy(timeout=timedelta(seconds=7))._timeout == timedelta(seconds=7)

    class OneDDPProcess:
        strategy = DDPStrategy()

    adapters.set_collective_timeout(OneDDPProcess, 5.0)
    assert OneDDPProcess.strategy._timeout == timedelta(seconds=5)


def test_tensorboards_file_writer_takes_summaries(tmp_path):
    from torch.utils.tensorboard.summary import scalar

    logger = TensorBoardLogger(tmp_path, name="run")
    adapters.tensorboard_file_writer(logger).add_summary(scalar("x", 1.0))
    logger.experiment.flush()
    assert list((tmp_path / "run").rglob("events.out.tfevents.*"))
