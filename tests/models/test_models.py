"""Tests of the client models: shapes, architecture choices, optimizer, training and logging."""

import pickle
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torchmetrics import Metric

from lightfed.models import MLP, VGG11, ClassificationModule, NextTokenLSTM, ResNet18GN, SmallCNN


class LogRecorder:
    """Stand-in for `LightningModule.log` that records its calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any, dict[str, Any]]] = []

    def __call__(self, name: str, value: Any, **kwargs: Any) -> None:
        self.calls.append((name, value, kwargs))

    @property
    def names(self) -> list[str]:
        return [name for name, _, _ in self.calls]

    def value(self, name: str) -> Any:
        return next(value for logged, value, _ in self.calls if logged == name)


def count_parameters(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


FACTORIES: list[Callable[[], ClassificationModule]] = [
    SmallCNN,
    ResNet18GN,
    VGG11,
    MLP,
]


@pytest.mark.parametrize(
    ("make", "input_shape", "num_classes"),
    [
        (lambda: SmallCNN(), (2, 1, 8, 8), 10),
        (lambda: SmallCNN(num_classes=7), (2, 1, 28, 28), 7),
        (lambda: SmallCNN(in_channels=3, width=8), (2, 3, 32, 32), 10),
        (lambda: ResNet18GN(), (2, 3, 32, 32), 10),
        (lambda: ResNet18GN(num_classes=7, in_channels=1, groups=4), (2, 1, 32, 32), 7),
        (lambda: VGG11(), (2, 3, 32, 32), 10),
        (lambda: VGG11(num_classes=7, in_channels=1, batch_norm=True), (2, 1, 32, 32), 7),
        (lambda: MLP(), (2, 60), 10),
        (lambda: MLP(in_features=64, num_classes=7, hidden=[16, 8]), (2, 1, 8, 8), 7),
    ],
)
def test_output_shape(make: Callable[[], ClassificationModule], input_shape: tuple[int, ...], num_classes: int) -> None:
    model = make().eval()
    with torch.no_grad():
        logits = model(torch.randn(input_shape))
    assert logits.shape == (input_shape[0], num_classes)


def test_resnet_uses_group_norm_and_cifar_stem() -> None:
    model = ResNet18GN(groups=4)
    norms = [m for m in model.modules() if isinstance(m, nn.GroupNorm)]
    assert norms and all(m.num_groups == 4 for m in norms)
    assert not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())
    assert model.net.conv1.kernel_size == (3, 3) and model.net.conv1.stride == (1, 1)
    assert isinstance(model.net.maxpool, nn.Identity)


@pytest.mark.parametrize("batch_norm", [False, True])
def test_vgg_batch_norm_switch(batch_norm: bool) -> None:
    model = VGG11(batch_norm=batch_norm)
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    norms = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    assert len(convs) == 8
    assert len(norms) == (8 if batch_norm else 0)


def test_mlp_without_hidden_layers_is_logistic_regression() -> None:
    assert count_parameters(MLP(in_features=60, num_classes=10, hidden=[])) == 60 * 10 + 10
    assert count_parameters(MLP(in_features=60, num_classes=10, hidden=[16])) == 60 * 16 + 16 + 16 * 10 + 10


@pytest.mark.parametrize("make", FACTORIES)
def test_init_is_deterministic_under_seed(make: Callable[[], ClassificationModule]) -> None:
    torch.manual_seed(0)
    first = make().state_dict()
    torch.manual_seed(0)
    second = make().state_dict()
    assert first.keys() == second.keys()
    assert all(torch.equal(first[key], second[key]) for key in first)


@pytest.mark.parametrize("make", FACTORIES)
def test_state_dict_holds_only_network_weights(make: Callable[[], ClassificationModule]) -> None:
    assert all(key.startswith("net.") for key in make().state_dict())


def test_resnet_with_an_importable_optimizer_pickles() -> None:
    """A `functools.partial` of an optimizer class pickles (as the CLI's optimizers do); the default lambda does not."""
    model = ResNet18GN(num_classes=3, optimizer=partial(torch.optim.SGD, lr=0.05))
    assert isinstance(pickle.loads(pickle.dumps(model)), ResNet18GN)


def test_configure_optimizers_builds_the_given_optimizer_over_all_parameters() -> None:
    model = SmallCNN(optimizer=partial(torch.optim.SGD, lr=0.3, momentum=0.9, weight_decay=1e-4))
    optimizer = model.configure_optimizers()
    assert type(optimizer) is torch.optim.SGD
    (group,) = optimizer.param_groups
    assert (group["lr"], group["momentum"], group["weight_decay"]) == (0.3, 0.9, 1e-4)
    assert {id(p) for p in group["params"]} == {id(p) for p in model.parameters()}
    assert type(MLP(optimizer=torch.optim.Adam).configure_optimizers()) is torch.optim.Adam


@pytest.mark.parametrize(("make", "lr"), [*((make, 0.05) for make in FACTORIES), (NextTokenLSTM, 2.0)])
def test_the_default_optimizer_is_each_models_former_sgd(make: Callable[[], ClassificationModule], lr: float) -> None:
    """SGD without momentum or weight decay, at lr 0.05 (2.0 for the LSTM): the defaults of the lr, momentum and
    weight_decay arguments the optimizer replaced."""
    optimizer = make().configure_optimizers()
    (group,) = optimizer.param_groups
    assert type(optimizer) is torch.optim.SGD
    assert (group["lr"], group["momentum"], group["weight_decay"], group["nesterov"]) == (lr, 0, 0, False)


def test_hyperparameters_hold_the_constructor_arguments_but_the_optimizer() -> None:
    model = SmallCNN(num_classes=5, width=8, optimizer=partial(torch.optim.SGD, lr=0.1))
    assert dict(model.hparams) == {"num_classes": 5, "in_channels": 1, "width": 8}


def test_sgd_steps_reduce_training_loss() -> None:
    torch.manual_seed(0)
    model = SmallCNN(width=8, optimizer=partial(torch.optim.SGD, lr=0.1))
    recorder = LogRecorder()
    model.log = recorder
    batch = (torch.rand(16, 1, 8, 8), torch.arange(16) % 4)
    optimizer = model.configure_optimizers()
    losses = []
    for step in range(20):
        loss = model.training_step(batch, step)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    assert losses[-1] < 0.8 * losses[0]
    assert recorder.names == ["train_loss"] * 20
    assert recorder.calls[0][2]["batch_size"] == 16


def identity_classifier() -> MLP:
    """Logistic regression on 3 features whose logits are its inputs, so predictions are known."""
    model = MLP(in_features=3, num_classes=3)
    with torch.no_grad():
        model.net[1].weight.copy_(torch.eye(3))
        model.net[1].bias.zero_()
    return model


@pytest.mark.parametrize("stage", ["val", "test"])
def test_evaluation_step_logs_loss_and_accuracy(stage: str) -> None:
    model = identity_classifier()
    recorder = LogRecorder()
    model.log = recorder
    step = model.validation_step if stage == "val" else model.test_step
    batches = [
        (torch.eye(3)[[0, 0, 0, 1]] + 0.1, torch.tensor([0, 0, 0, 2])),
        (torch.eye(3)[[1, 1]] + 0.1, torch.tensor([1, 1])),
    ]
    for batch_idx, batch in enumerate(batches):
        step(batch, batch_idx)

    assert recorder.names == [f"{stage}_loss", f"{stage}_acc"] * 2
    assert [kwargs["batch_size"] for _, _, kwargs in recorder.calls] == [4, 4, 2, 2]
    x, y = batches[0]
    assert torch.allclose(recorder.value(f"{stage}_loss"), F.cross_entropy(x, y))

    accuracy = recorder.value(f"{stage}_acc")
    assert isinstance(accuracy, Metric)
    assert accuracy is (model.val_acc if stage == "val" else model.test_acc)
    correct = sum((x.argmax(dim=1) == y).sum().item() for x, y in batches)
    assert accuracy.compute().item() == pytest.approx(correct / 6)  # micro 5/6; per-class mean would be 2/3
    other = model.test_acc if stage == "val" else model.val_acc
    assert not other.update_called
