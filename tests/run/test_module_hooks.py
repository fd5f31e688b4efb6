"""A client is any LightningModule: its hooks in Lightning's order, ``self.trainer``, dict batches, round-wise
learning-rate schedules and gradient clipping."""

import json
from functools import partial

import pytest
import torch

from lightfed.data import Digits, IIDPartitioner
from lightfed.data.module import FederatedDataModule
from lightfed.errors import ConfigError
from lightfed.schedules import CosineDecay, ExponentialDecay, StepDecay
from lightfed.strategies import AdaptiveFedECADO, FedAvg
from tests.conftest import fit_in_subprocess, small_data, small_model, small_trainer
from tests.run.hook_modules import DictBatchCNN, RecordingCNN

STEP = [
    "on_train_batch_start",
    "on_before_backward",
    "on_after_backward",
    "on_before_optimizer_step",
    "on_train_batch_end",
]


def _tiny_clients() -> FederatedDataModule:
    """60 IID clients of 23-24 digits: 2 batches of 16 an epoch."""
    return FederatedDataModule(Digits(), IIDPartitioner(60), batch_size=16, eval_batch_size=1000)


def test_hooks_of_a_one_client_round_come_in_lightnings_order(tmp_path):
    torch.manual_seed(0)
    model = RecordingCNN(width=8)
    trainer = small_trainer(tmp_path, rounds=1, clients_per_round=1, local_steps=None, local_epochs=2)
    trainer.fit(model, _tiny_clients(), FedAvg())
    validation = [
        "on_validation_start",
        "on_validation_epoch_start",
        "on_validation_batch_start",
        "on_validation_batch_end",
        "on_validation_epoch_end",
        "on_validation_end",
    ]  # 360 test digits, one batch
    epoch = ["on_train_epoch_start", *STEP, *STEP, "on_train_epoch_end"]
    test = [
        "on_test_start",
        "on_test_epoch_start",
        "on_test_epoch_end",
        "on_test_end",
    ]  # the final report, after the fit: the test set, then each of the 60 clients' own data, one batch each
    expected = [
        "on_fit_start",
        "on_train_start",
        *epoch,
        *epoch,
        "on_train_end",
        *validation,
        "on_save_checkpoint",
        "on_fit_end",
        *test,
        *validation * 60,
    ]
    assert model.calls == expected
    assert model.saved[0]["recorded_calls"] == expected.index("on_fit_end")  # the module's key reached the checkpoint
    client_id = trainer.source.jobs(0, trainer.params, trainer.buffers)[0].plan.client_id
    train_views = [v for v in model.views if v[0] == "on_train_batch_start"]
    # (round, client, epoch, step) from the view and through LightningModule's own properties; training, rank
    assert [v[1:] for v in train_views] == [
        (0, client_id, e, s, e, s, True, False, 1, 0) for e, s in [(0, 0), (0, 1), (1, 2), (1, 3)]
    ]
    validation_view, *per_client = [v for v in model.views if v[0] == "on_validation_batch_start"]
    assert validation_view[2:] == (None, 0, 0, 0, 0, False, True, 1, 0)  # the global model's, then each client's
    assert len(per_client) == 60


def test_a_partial_last_epoch_ends_too_and_resume_calls_on_load_checkpoint(tmp_path):
    torch.manual_seed(0)
    model = RecordingCNN(width=8)
    small_trainer(tmp_path, rounds=1, clients_per_round=1, local_steps=3, eval_interval=5).fit(
        model, _tiny_clients(), FedAvg()
    )
    train = model.calls[model.calls.index("on_train_start") : model.calls.index("on_train_end") + 1]
    assert train == [
        "on_train_start",
        "on_train_epoch_start",
        *STEP,
        *STEP,
        "on_train_epoch_end",
        "on_train_epoch_start",
        *STEP,
        "on_train_epoch_end",
        "on_train_end",
    ]
    resumed = RecordingCNN(width=8)
    small_trainer(tmp_path, rounds=2, clients_per_round=1, local_steps=3).fit(
        resumed, _tiny_clients(), FedAvg(), ckpt_path="last"
    )
    assert resumed.calls[0] == "on_load_checkpoint" and resumed.loaded[0]["round"] == 1


class _DictBatches(FederatedDataModule):
    """The same batches as ``small_data``'s, as dicts."""

    def client_batches(self, *args, **kwargs):
        return ({"label": y, "image": x} for x, y in super().client_batches(*args, **kwargs))

    def test_batches(self, *args, **kwargs):
        return ({"label": y, "image": x} for x, y in super().test_batches(*args, **kwargs))

    def val_batches(self, *args, **kwargs):
        return ({"label": y, "image": x} for x, y in super().val_batches(*args, **kwargs))

    def client_eval_batches(self, *args, **kwargs):
        return ({"label": y, "image": x} for x, y in super().client_eval_batches(*args, **kwargs))


def test_dict_batches_train_and_evaluate_as_tuples_do(tmp_path):
    """Batch sizes found the way Lightning finds them: the weighted means equal the tuple run's."""
    data = small_data()
    dict_data = _DictBatches(data.dataset, data.partitioner, batch_size=data.batch_size)
    tuples, dicts = small_model(), DictBatchCNN(width=8, optimizer=partial(torch.optim.SGD, lr=0.1, momentum=0.5))
    dicts.load_state_dict(tuples.state_dict())
    a = small_trainer(tmp_path / "a").fit(tuples, data, FedAvg())
    b = small_trainer(tmp_path / "b").fit(dicts, dict_data, FedAvg())
    for name in ("train_loss", "val_loss", "val_acc"):
        assert b[name] == pytest.approx(a[name], rel=1e-6)
    for p, q in zip(tuples.parameters(), dicts.parameters(), strict=False):
        torch.testing.assert_close(p, q, rtol=0, atol=0)


def test_schedule_factors_by_hand():
    assert [StepDecay(2, 0.5).factor(r, 10) for r in range(5)] == [1, 1, 0.5, 0.5, 0.25]
    assert ExponentialDecay(0.9).factor(3, 10) == pytest.approx(0.729)
    cosine = CosineDecay(min_factor=0.1)
    assert [cosine.factor(r, 3) for r in range(3)] == pytest.approx([1.0, 0.55, 0.1])
    assert CosineDecay().factor(0, 1) == 1.0
    with pytest.raises(ConfigError):
        StepDecay(0)
    with pytest.raises(ConfigError):
        ExponentialDecay(1.5)


@pytest.mark.parametrize("local_lr", [None, 0.02])
def test_each_rounds_client_lr_is_the_base_times_the_schedule(tmp_path, local_lr):
    torch.manual_seed(0)
    model = RecordingCNN(width=8, optimizer=partial(torch.optim.SGD, lr=0.1))
    trainer = small_trainer(
        tmp_path,
        rounds=3,
        clients_per_round=1,
        local_steps=2,
        eval_interval=5,
        local_lr=local_lr,
        lr_schedule=CosineDecay(min_factor=0.1),
    )
    trainer.fit(model, _tiny_clients(), FedAvg())
    base = local_lr or 0.1
    assert model.lrs == pytest.approx([base * f for f in (1.0, 1.0, 0.55, 0.55, 0.1, 0.1)])


def test_a_scheduled_run_resumes_to_the_uninterrupted_weights(tmp_path):
    def fit(root, rounds, ckpt_path=None):
        model = small_model()
        small_trainer(root, rounds=rounds, lr_schedule=ExponentialDecay(0.5)).fit(
            model, small_data(), FedAvg(), ckpt_path=ckpt_path
        )
        return torch.cat([p.detach().flatten() for p in model.parameters()])

    straight = fit(tmp_path / "straight", 3)
    fit(tmp_path / "cut", 2)
    assert torch.equal(fit(tmp_path / "cut", 3, "last"), straight)


@pytest.mark.parametrize("algorithm", ["norm", "value"])
def test_gradient_clipping_bounds_each_step(tmp_path, algorithm):
    """One SGD step of lr 1 without momentum: the client's change is minus its clipped gradient."""
    model = small_model(lr=1.0, momentum=0.0)
    start = torch.cat([p.detach().flatten() for p in model.parameters()])
    trainer = small_trainer(
        tmp_path,
        rounds=1,
        clients_per_round=1,
        local_steps=1,
        gradient_clip_val=1e-3,
        gradient_clip_algorithm=algorithm,
    )
    trainer.fit(model, small_data(), FedAvg())
    change = torch.cat([p.detach().flatten() for p in model.parameters()]) - start
    if algorithm == "norm":  # clip_grad_norm_ scales to max_norm / (norm + 1e-6)
        assert float(change.norm()) == pytest.approx(1e-3, rel=1e-3)
    else:
        assert float(change.abs().max()) == pytest.approx(1e-3, rel=1e-5)
        assert float((change.abs() > 0).float().mean()) > 0.1


def test_bad_schedule_and_clipping_settings_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="gradient_clip_val"):
        small_trainer(tmp_path, gradient_clip_val=0.0)
    with pytest.raises(ConfigError, match="gradient_clip_algorithm"):
        small_trainer(tmp_path, gradient_clip_algorithm="l1")
    with pytest.raises(ConfigError, match="lr_schedule"):
        small_trainer(tmp_path, lr_schedule=CosineDecay()).fit(small_model(), small_data(), AdaptiveFedECADO())


@pytest.mark.slow
def test_epoch_end_metrics_a_cosine_schedule_and_clipping_from_yaml_on_one_and_two_processes(tmp_path):
    """``lightfed fit`` from YAML: a metric computed only in ``on_validation_epoch_end`` is the whole pass's accuracy,
    ``on_train_epoch_end`` sees the local epochs, and 1 and 2 processes reach the same weights."""
    config = tmp_path / "hooks.yaml"
    config.write_text("""
seed_everything: 0
trainer:
  accelerator: cpu
  rounds: 3
  clients_per_round: 4
  local_epochs: 2
  name: run
  progress_bar: false
  gradient_clip_val: 0.5
  lr_schedule: {class_path: lightfed.schedules.CosineDecay, init_args: {min_factor: 0.1}}
model:
  class_path: tests.run.hook_modules.EpochMetricCNN
  init_args: {num_classes: 10, in_channels: 1, width: 8,
              optimizer: {class_path: torch.optim.SGD, init_args: {lr: 0.1}}}
data:
  partitioner: {class_path: lightfed.data.IIDPartitioner, init_args: {num_clients: 8}}
  batch_size: 32
""")

    def run(devices: int) -> tuple[dict, dict]:
        root = tmp_path / f"devices{devices}"
        fit_in_subprocess(config, root, devices)
        folder = root / "run" / "version_0"
        last = json.loads(
            (folder / "metrics.jsonl").read_text().splitlines()[-2]
        )  # the last round, before the final record
        return torch.load(folder / "checkpoints" / "last.ckpt", weights_only=False), last

    (one, metrics), (two, metrics_two) = run(1), run(2)
    assert one["round"] == two["round"] == 3
    assert (one["params"] - two["params"]).abs().max() <= 1e-5
    assert metrics["val_epoch_acc"] == pytest.approx(metrics["val_acc"], abs=1e-9) and metrics["val_acc"] > 0.15
    assert metrics_two["val_epoch_acc"] == pytest.approx(metrics["val_epoch_acc"], abs=1e-6)
    assert metrics["local_epoch_ends"] == pytest.approx(1.5)  # epochs 1 and 2 end in every client's round
