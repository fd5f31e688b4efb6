"""Each private attribute of another library that ``lightfed.adapters`` uses is still there and does what it did."""

from datetime import timedelta

import pytest
import torch
import torchmetrics
from lightning import LightningModule
from lightning.fabric.loggers import CSVLogger, TensorBoardLogger
from lightning.fabric.strategies import DDPStrategy
from lightning.pytorch import loggers as pytorch_loggers

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


class Total(torchmetrics.SumMetric):
    """A sum whose every process (two here, the gather doubling each state) is this one."""

    def __init__(self, **kwargs):
        super().__init__(distributed_available_fn=lambda: True, dist_sync_fn=lambda x, group=None: [x, x], **kwargs)


def test_a_metric_is_computed_over_processes_exactly_when_asked_whatever_its_sync_on_compute():
    for sync_on_compute in (True, False):
        metric = Total(sync_on_compute=sync_on_compute, compute_with_cache=False)
        metric.update(torch.tensor(3.0))
        assert adapters.compute_metric(metric, sync=True) == 6.0  # the two processes' 3 + 3
        assert adapters.compute_metric(metric, sync=False) == 3.0
        assert metric.compute() == (6.0 if sync_on_compute else 3.0)  # its own setting again, its own state kept


def test_a_module_logs_to_the_given_functions_inside_the_block_and_to_lightnings_own_after_it():
    class Logs(LightningModule):
        def training_step(self, batch, batch_idx):
            self.log("loss", 1.5, batch_size=4)
            self.log_dict({"acc": 0.5})

    module, seen = Logs(), []
    with adapters.logging_to(module, lambda *a, **k: seen.append((a, k)), lambda d, *a, **k: seen.append(d)):
        module.training_step(None, 0)
    assert seen == [(("loss", 1.5), {"batch_size": 4}), {"acc": 0.5}]
    assert module.log.__func__ is LightningModule.log and module.log_dict.__func__ is LightningModule.log_dict
    assert "log" not in vars(module) and "log_dict" not in vars(module)


def test_the_exit_handlers_run_when_asked_in_a_process_that_leaves_without_the_interpreters_teardown():
    import subprocess
    import sys

    code = (
        "import atexit, os\nfrom lightfed.adapters import run_exit_handlers\n"
        "atexit.register(print, 'handler ran', flush=True)\nrun_exit_handlers()\nos._exit(0)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "handler ran\n"


@pytest.mark.parametrize("csv_logger", [CSVLogger, pytorch_loggers.CSVLogger])
def test_a_csv_loggers_given_version_is_read_without_picking_one(tmp_path, csv_logger):
    assert adapters.csv_logger_version(csv_logger(tmp_path / "a")) is None
    assert adapters.csv_logger_version(csv_logger(tmp_path / "a", version=3)) == 3
    assert not (tmp_path / "a").exists()  # reading it made no folder


@pytest.mark.parametrize("csv_logger", [CSVLogger, pytorch_loggers.CSVLogger])
def test_a_csv_logger_pointed_at_a_folder_writes_there_and_nowhere_else(tmp_path, csv_logger):
    logger = csv_logger(tmp_path / "elsewhere", name="its_name")
    adapters.point_csv_logger_at(logger, str(tmp_path / "run"), "csv_1")
    logger.log_metrics({"x": 1.0}, step=0)
    logger.save()
    assert (tmp_path / "run" / "csv_1" / "metrics.csv").read_text().splitlines()[1].endswith("1.0")
    assert logger.log_dir == str(tmp_path / "run" / "csv_1") and not (tmp_path / "elsewhere").exists()


def test_a_forward_hook_anywhere_in_a_module_or_global_is_seen():
    net = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU())
    assert not adapters.forward_hooked(net)
    handle = net[0].register_forward_pre_hook(lambda module, inputs: None)
    assert adapters.forward_hooked(net)
    handle.remove()
    handle = torch.nn.modules.module.register_module_forward_hook(lambda module, inputs, output: None)
    assert adapters.forward_hooked(net)
    handle.remove()
    assert not adapters.forward_hooked(net)


def test_a_modules_parameters_are_the_given_tensors_inside_the_block_and_its_own_after_it():
    module = torch.nn.Sequential(torch.nn.Linear(2, 3))
    own = module[0].weight
    rows = torch.zeros(4, 3, 2, requires_grad=True)
    with adapters.ParameterSlots(module, ["0.weight"]).holding([rows]):
        assert module[0].weight is rows and dict(module.named_parameters())["0.bias"] is module[0].bias
    assert module[0].weight is own and isinstance(module[0].weight, torch.nn.Parameter)
