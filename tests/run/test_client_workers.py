"""Clients trained in parallel (``trainer.clients_in_parallel``) against one client at a time."""

import os
from functools import partial
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from torch.nn.utils import parameters_to_vector

from lightfed import Callback
from lightfed.data import Digits, DirichletPartitioner
from lightfed.data.module import FederatedDataModule
from lightfed.errors import ConfigError
from lightfed.privacy import DPSGD
from lightfed.run import client_workers
from lightfed.strategies import AdaptiveFedECADO, FedAvg, FedECADO, FedProx, Scaffold
from tests.conftest import small_data, small_model, small_trainer
from tests.run.metric_model import SmallCNNWithTrainAccuracy

# Every worker adds its clients' updates into its own float64 sums: a different order of the same additions, exact to
# well below float32 rounding. Local training is the same arithmetic on one torch thread either way.
ATOL = 1e-6

SGD = partial(torch.optim.SGD, lr=0.1)


def _fit(root, workers, strategy, model=None, **settings):
    model = model or small_model(momentum=0.0)
    trainer = small_trainer(root, clients_in_parallel=workers, **settings)
    metrics = trainer.fit(model, small_data(), strategy)
    return parameters_to_vector(model.parameters()).detach(), metrics, trainer


@pytest.mark.parametrize(
    "strategy",
    [FedAvg, lambda: FedProx(mu=0.1), Scaffold, FedECADO, lambda: AdaptiveFedECADO(tolerance=1e-2)],
    ids=["FedAvg", "FedProx", "Scaffold", "FedECADO", "AdaptiveFedECADO"],
)
def test_parallel_clients_give_the_sequential_weights(tmp_path, strategy):
    sequential, seq_metrics, _ = _fit(tmp_path / "one", 1, strategy())
    parallel, par_metrics, trainer = _fit(tmp_path / "two", 2, strategy())
    assert trainer.workers.lanes == 2
    torch.testing.assert_close(parallel, sequential, rtol=0, atol=ATOL)
    assert par_metrics["round/client_train_loss"] == pytest.approx(seq_metrics["round/client_train_loss"], rel=1e-6)


def test_three_workers_on_an_uneven_round_repeat_bitwise(tmp_path):
    """Jobs go to workers by index, so the grouping of the sums does not depend on which thread finished first."""
    first, _, _ = _fit(tmp_path / "a", 3, FedAvg(), clients_per_round=5)
    second, _, _ = _fit(tmp_path / "b", 3, FedAvg(), clients_per_round=5)
    sequential, _, _ = _fit(tmp_path / "c", 1, FedAvg(), clients_per_round=5)
    assert torch.equal(first, second)
    torch.testing.assert_close(first, sequential, rtol=0, atol=ATOL)


def test_what_the_workers_log_is_reduced_over_all_of_them(tmp_path):
    def fit(workers, root):
        model = SmallCNNWithTrainAccuracy(width=8, optimizer=SGD)
        return _fit(root, workers, FedAvg(), model=model)[1]

    torch.manual_seed(0)
    sequential = fit(1, tmp_path / "one")
    torch.manual_seed(0)
    parallel = fit(2, tmp_path / "two")
    assert 0 < sequential["train_acc"] < 1
    assert parallel["train_acc"] == pytest.approx(sequential["train_acc"], abs=1e-6)


class DropoutCNN(type(small_model())):
    """Draws from torch's global random generator in every training step."""

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(F.dropout(self(x), 0.5, self.training), y)


def test_a_model_that_draws_from_the_global_generator_is_refused_in_parallel(tmp_path):
    with pytest.raises(ConfigError, match="global random generator.*clients_in_parallel 1"):
        _fit(tmp_path, 2, FedAvg(), model=DropoutCNN(width=8, optimizer=SGD))


def test_auto_trains_such_a_model_one_client_at_a_time(tmp_path):
    torch.manual_seed(0)
    automatic, _, trainer = _fit(tmp_path / "auto", "auto", FedAvg(), model=DropoutCNN(width=8, optimizer=SGD))
    torch.manual_seed(0)
    sequential, _, _ = _fit(tmp_path / "one", 1, FedAvg(), model=DropoutCNN(width=8, optimizer=SGD))
    assert trainer.workers.lanes == 1
    assert torch.equal(automatic, sequential)


class RecordingCNN(type(small_model())):
    """Notes the torch threads of every step, and fails in a round when told to."""

    def __init__(self, fail_in_round: int | None = None, **kwargs):
        super().__init__(**kwargs)
        self.fail_in_round, self.threads = fail_in_round, []

    def training_step(self, batch, batch_idx):
        if self.trainer.round == self.fail_in_round:
            raise RuntimeError(f"client {self.trainer.client_id} failed")
        self.threads.append(torch.get_num_threads())
        return super().training_step(batch, batch_idx)


def test_each_worker_runs_its_share_of_the_cores_and_the_main_thread_keeps_its_own(tmp_path):
    torch.set_num_threads(2)
    model = RecordingCNN(width=8, optimizer=SGD)
    _, _, trainer = _fit(tmp_path, 2, FedAvg(), model=model)
    cores = len(os.sched_getaffinity(0))
    copy = trainer.workers.clients[1].module
    assert set(model.threads + copy.threads) == {max(1, cores // 2)}  # also the run's first client, trained alone
    assert len(copy.threads) > 0
    assert torch.get_num_threads() == 2


class ThreadsAtAggregate(FedAvg):
    """Notes the torch threads of every server step."""

    def __init__(self):
        super().__init__()
        self.threads = []

    def aggregate(self, params, sums, round):
        self.threads.append(torch.get_num_threads())
        return super().aggregate(params, sums, round)


@pytest.mark.parametrize(
    ("workers", "serial_below", "expected"), [(1, None, 2), (2, None, 1), (2, 100, 2)], ids=["one", "small", "large"]
)
def test_a_small_models_server_step_with_several_workers_runs_on_one_thread(
    tmp_path, monkeypatch, workers, serial_below, expected
):
    """With several workers and a small model the main thread's round work takes one thread (no OpenMP threads left
    spinning on the workers' cores); with one worker, or a model of at least ``SERIAL_BETWEEN_BELOW`` weights, it
    keeps its own. The count comes back after the run."""
    if serial_below is not None:
        monkeypatch.setattr(client_workers, "SERIAL_BETWEEN_BELOW", serial_below)
    torch.set_num_threads(2)
    strategy = ThreadsAtAggregate()
    _fit(tmp_path, workers, strategy)
    assert strategy.threads == [expected] * 3
    assert torch.get_num_threads() == 2


def test_a_client_failing_in_a_worker_thread_stops_the_run_with_its_error(tmp_path):
    model = RecordingCNN(fail_in_round=1, width=8, optimizer=SGD)
    with pytest.raises(RuntimeError, match=r"client \d+ failed"):
        _fit(tmp_path, 2, FedAvg(), model=model)
    assert len(model.threads) == 2 * 5  # round 0: two clients of 5 steps on this copy, none after the failure


@pytest.mark.parametrize(
    "settings, message",
    [
        (dict(clients_in_parallel=0), "'auto', 'vectorized' or an integer >= 1, got 0"),
        (dict(clients_in_parallel="two"), "'auto', 'vectorized' or an integer >= 1, got 'two'"),
        (
            dict(clients_in_parallel=2, privacy=DPSGD(noise_multiplier=1.0)),
            "must be 1, 'auto' or 'vectorized' with trainer.privacy",
        ),
    ],
)
def test_bad_settings_are_refused(tmp_path, settings, message):
    with pytest.raises(ConfigError, match=message):
        small_trainer(tmp_path, **settings)


def test_dataloader_processes_are_refused_with_parallel_clients_before_anything_is_written(tmp_path):
    data = FederatedDataModule(Digits(), DirichletPartitioner(8, alpha=0.5), batch_size=16, num_workers=1)
    with pytest.raises(ConfigError, match="clients_in_parallel > 1 cannot be used with data.num_workers > 0"):
        small_trainer(tmp_path, clients_in_parallel=2).fit(small_model(), data, FedAvg())
    assert not (tmp_path / "lightfed").exists()


@pytest.mark.parametrize("device", ["cuda", "mps"])
def test_worker_threads_are_refused_off_a_cpu(device):
    fabric = SimpleNamespace(device=torch.device(device), strategy=None)  # nothing else is read before the refusal
    with pytest.raises(ConfigError, match=f"trains clients on CPU threads, not on a {device} device .* 'vectorized'"):
        client_workers.ClientWorkers.build(fabric, small_model(), small_data(), 2, clients_per_round=10)


def test_on_client_end_sees_every_client_of_a_round_once(tmp_path):
    class Clients(Callback):
        def __init__(self):
            self.seen = []

        def on_client_end(self, trainer, update):
            self.seen.append((trainer.round, update.client_id))

    def seen(workers, root):
        callback = Clients()
        _fit(root, workers, FedAvg(), callbacks=[callback])
        return callback.seen

    sequential, parallel = seen(1, tmp_path / "one"), seen(2, tmp_path / "two")
    assert len(sequential) == 3 * 4 and len(set(sequential)) == 12
    assert sorted(parallel) == sorted(sequential)  # in the order the workers finish them
