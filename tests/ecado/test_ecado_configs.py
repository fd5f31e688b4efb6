"""The paper-scale FedECADO and Adaptive FedECADO configs train one round end to end on a few fake images."""

from pathlib import Path

import numpy as np
import pytest
import torch

from lightfed.cli import run
from lightfed.data import DatasetSource, TensorSplits
from tests.conftest import trainer_options

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = [
    ROOT / "configs" / folder / f"{name}.yaml"
    for folder in ("cifar10", "cifar100")
    for name in ("fedecado", "adaptive_fedecado")
]


class FakeImages(DatasetSource):
    """Random 3 x size x size images with labels 0..num_classes-1, standing in for CIFAR (the ResNets take 8x8)."""

    def __init__(self, num_classes: int = 10, size: int = 32, examples: int = 64) -> None:
        self.num_classes, self.size, self.examples = num_classes, size, examples

    def load(self, seed: int) -> TensorSplits:
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(self.examples, 3, self.size, self.size, generator=g)
        y = torch.from_numpy(np.arange(self.examples) % self.num_classes)
        return TensorSplits(x, y, x[:4], y[:4], self.num_classes)


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: f"{p.parent.name}-{p.stem}")
@pytest.mark.slow
def test_paper_config_runs_one_round_on_fake_data(config, tmp_path):
    classes = 100 if config.parent.name == "cifar100" else 10
    size = 32 if "VGG11" in config.read_text() else 8  # VGG-11's classifier needs 32x32
    dataset = f'{{"class_path": "{__name__}.FakeImages", "init_args": {{"num_classes": {classes}, "size": {size}}}}}'
    loose = ["--strategy.init_args.tolerance", "1e6"]  # one or two server steps on d ~ 2e7 parameters
    metrics = run(
        [
            "fit",
            "--config",
            str(config.with_name("base.yaml")),
            "--config",
            str(config),
            "--data.dataset",
            dataset,
            "--data.batch_size",
            "4",
            "--data.partitioner.init_args.num_clients",
            "4",
            "--data.partitioner.init_args.alpha",
            "100",
            *trainer_options(
                clients_per_round=2,
                local_epochs="null",
                local_steps=1,
                redraw_local_work="false",
                rounds=1,
                accelerator="cpu",
            ),
            "--strategy.init_args.curvature_batches",
            "1",
            "--strategy.init_args.curvature_probes",
            "1",
            *trainer_options(root_dir=str(tmp_path), progress_bar="false"),
            *loose,
        ]
    )
    assert "val_acc" in metrics and metrics["strategy/server_steps"] >= 1
