import os
import warnings

import numpy as np
import pytest
import torch

from lightfed.core.messages import ClientPlan
from lightfed.core.saved_client_states import saved_client_states
from lightfed.data import Digits, DirichletPartitioner
from lightfed.data.module import FederatedDataModule
from lightfed.errors import ConfigError, DivergenceError
from lightfed.strategies import FedAvg, Scaffold
from tests.conftest import small_data, small_model, small_trainer


def _weights(model) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).clone()


@pytest.mark.parametrize("strategy_class", [FedAvg, Scaffold])  # Scaffold: per-client state must survive too
def test_resuming_after_round_k_reproduces_the_uninterrupted_run(tmp_path, strategy_class):
    model = small_model(momentum=0.0)  # SCAFFOLD's control variates assume plain SGD steps
    small_trainer(tmp_path / "full", rounds=4).fit(model, small_data(), strategy_class(server_lr=0.9))
    uninterrupted = _weights(model)

    small_trainer(tmp_path / "cut", rounds=2).fit(
        small_model(momentum=0.0), small_data(), strategy_class(server_lr=0.9)
    )
    resumed_model = small_model(momentum=0.0)
    trainer = small_trainer(tmp_path / "cut", rounds=4)
    trainer.fit(resumed_model, small_data(), strategy_class(server_lr=0.9), ckpt_path="last")
    assert torch.equal(_weights(resumed_model), uninterrupted)
    assert trainer.log_dir.name == "version_0"  # the resumed run keeps logging where it left off
    checkpoint = torch.load(trainer.log_dir / "checkpoints" / "last.ckpt", weights_only=False)
    assert checkpoint["round"] == 4
    assert len(saved_client_states(trainer.log_dir / "checkpoints" / "last.ckpt")) == (
        0 if strategy_class is FedAvg else 8
    )  # 4 rounds x 4 of 8 clients


def test_each_round_trains_the_clients_from_the_global_model(tmp_path):
    """With a learning rate of 0 told to every client, nothing moves: the weights are copied in, not kept."""

    class FrozenClients(FedAvg):
        def configure_client(self, plan: ClientPlan, received=None) -> ClientPlan:
            return ClientPlan(plan.client_id, plan.round, plan.seed, plan.epochs, plan.steps, lr=0.0)

    model = small_model()
    initial = _weights(model)
    metrics = small_trainer(tmp_path).fit(model, small_data(), FrozenClients())
    assert torch.equal(_weights(model), initial)
    assert metrics["round/clients"] == 4


def test_a_diverged_run_stops_and_keeps_its_last_good_checkpoint(tmp_path):
    class BlowsUpInRoundThree(FedAvg):
        def aggregate(self, params, sums, round):
            new = super().aggregate(params, sums, round)
            return new * float("nan") if round == 2 else new

    trainer = small_trainer(tmp_path, rounds=5)
    with pytest.raises(DivergenceError, match="NaN/Inf in round 3; lower the learning rate"):
        trainer.fit(small_model(), small_data(), BlowsUpInRoundThree())
    checkpoint = torch.load(trainer.log_dir / "checkpoints" / "last.ckpt", weights_only=False)
    assert checkpoint["round"] == 2 and torch.isfinite(checkpoint["params"]).all()


def test_a_divergence_from_nan_in_the_data_names_the_data_not_the_learning_rate(tmp_path):
    class DigitsWithANaN(Digits):
        def load(self, seed):
            splits = super().load(seed)
            splits.train_x[:, 0, 0, 0] = float("nan")  # every training image: whichever clients a round samples
            return splits

    data = FederatedDataModule(DigitsWithANaN(), DirichletPartitioner(8, alpha=0.5), batch_size=16)
    with pytest.raises(
        DivergenceError,
        match=r"NaN/Inf in round 1: client \d+'s training examples hold NaN or Inf; "
        "clean the data",
    ):
        small_trainer(tmp_path).fit(small_model(), data, FedAvg())


def test_a_model_without_trainable_parameters_is_refused_before_anything_is_written(tmp_path):
    model = small_model()
    model.requires_grad_(False)
    with pytest.raises(
        ConfigError, match="^SmallCNN has no trainable parameters: a client would have nothing to train$"
    ):
        small_trainer(tmp_path).fit(model, small_data(), FedAvg())
    assert not list(tmp_path.iterdir())


def test_more_clients_per_round_than_clients_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"clients_per_round \(9\) is larger than the number of clients \(8\)"):
        small_trainer(tmp_path, clients_per_round=9).fit(small_model(), small_data(8), FedAvg())


@pytest.mark.parametrize(
    "settings, message",
    [
        (dict(local_epochs=1, local_steps=5), "exactly one of trainer.local_epochs and trainer.local_steps"),
        (dict(rounds=0), "trainer.rounds must be >= 1"),
        (dict(precision="16-true"), "trainer.precision must be one of"),
    ],
)
def test_bad_trainer_settings_are_refused(tmp_path, settings, message):
    with pytest.raises(ConfigError, match=message):
        small_trainer(tmp_path, **settings)


def test_per_client_evaluation_matches_a_direct_computation(tmp_path):
    model, data = small_model(), small_data()
    metrics = small_trainer(tmp_path, client_eval_interval=3).fit(model, data, FedAvg())
    model.eval()
    accuracies = []
    with torch.no_grad():
        for client_id in range(data.num_clients):
            x, y = data.train_x[data._client_indices[client_id]], data.train_y[data._client_indices[client_id]]
            accuracies.append((model(x).argmax(1) == y).double().mean().item())
    assert metrics["clients/val_acc_mean"] == pytest.approx(np.mean(accuracies), abs=1e-6)
    assert metrics["clients/val_acc_min"] == pytest.approx(min(accuracies), abs=1e-6)


def test_global_evaluation_matches_a_direct_computation(tmp_path):
    model, data = small_model(), small_data()
    metrics = small_trainer(tmp_path).fit(model, data, FedAvg())
    model.eval()
    with torch.no_grad():
        logits = model(data.val_x)  # the validation split, held out from the training examples
    assert metrics["val_acc"] == pytest.approx((logits.argmax(1) == data.val_y).double().mean().item(), abs=1e-6)
    expected_loss = torch.nn.functional.cross_entropy(logits, data.val_y).item()
    assert metrics["val_loss"] == pytest.approx(expected_loss, rel=1e-5)


def test_a_preemption_signal_stops_at_a_round_boundary_and_auto_resume_finishes_the_run(tmp_path):
    import os
    import signal

    class SignalledInRoundTwo(FedAvg):
        def aggregate(self, params, sums, round):
            if round == 1:
                os.kill(os.getpid(), signal.SIGUSR1)  # what SLURM sends before the time limit
            return super().aggregate(params, sums, round)

    full = small_model()
    small_trainer(tmp_path / "full", rounds=5).fit(full, small_data(), FedAvg())

    trainer = small_trainer(tmp_path / "cut", rounds=5)
    trainer.fit(small_model(), small_data(), SignalledInRoundTwo(), ckpt_path="auto")  # nothing to resume: fresh
    assert torch.load(trainer.log_dir / "checkpoints" / "last.ckpt", weights_only=False)["round"] == 3
    assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL  # the handler is only there while training

    resumed = small_model()
    small_trainer(tmp_path / "cut", rounds=5).fit(resumed, small_data(), SignalledInRoundTwo(), ckpt_path="auto")
    assert torch.equal(_weights(resumed), _weights(full))


def test_a_preemption_signal_during_training_stops_after_that_round(tmp_path):
    """The request is read when the round's sums are reduced, so a signal while round 2's clients train ends the run
    after round 2, not round 3."""
    import os
    import signal

    from lightfed import Callback

    class SignalWhileRoundTwoTrains(Callback):
        def on_client_end(self, trainer, update):
            if trainer.round == 1:
                os.kill(os.getpid(), signal.SIGUSR1)

    trainer = small_trainer(tmp_path, rounds=5, callbacks=[SignalWhileRoundTwoTrains()])
    trainer.fit(small_model(), small_data(), FedAvg())
    assert trainer.round == 2 and torch.load(trainer.checkpoint_path, weights_only=False)["round"] == 2


@pytest.mark.parametrize("strategy", ["Scaffold", "FedNova"])
def test_strategies_that_assume_plain_sgd_refuse_momentum_before_the_run_folder(tmp_path, strategy):
    import lightfed.strategies

    with pytest.raises(ConfigError, match=f"{strategy} assumes plain SGD local steps"):
        small_trainer(tmp_path).fit(small_model(momentum=0.5), small_data(), getattr(lightfed.strategies, strategy)())
    assert not any(tmp_path.iterdir())


def test_replica_check_names_a_process_whose_global_weights_differ(tmp_path, monkeypatch):
    """Debug mode compares every process's global weights with process 0's broadcast after each round."""
    trainer = small_trainer(tmp_path, rounds=2, check_replicas=True)
    trainer.fit(small_model(), small_data(), FedAvg())  # one process: its weights are process 0's
    monkeypatch.setattr(trainer.fabric, "broadcast", lambda weights, src=0: weights + 1e-7)  # a drifted replica
    with pytest.raises(RuntimeError, match="process 0 holds other global weights than process 0 after round 3"):
        trainer.engine._check(2, torch.zeros(3), torch.zeros(1), [0])


def test_fit_sets_no_attribute_the_constructor_did_not_declare(tmp_path):
    trainer = small_trainer(tmp_path, rounds=1)
    declared = set(vars(trainer))
    trainer.fit(small_model(), small_data(), FedAvg())
    assert set(vars(trainer)) == declared


def test_srun_on_the_path_outside_a_slurm_job_prints_no_hint(tmp_path, monkeypatch, recwarn):
    srun = tmp_path / "bin" / "srun"
    srun.parent.mkdir()
    srun.write_text("#!/bin/sh\n")
    srun.chmod(0o755)
    monkeypatch.setenv("PATH", f"{srun.parent}:{os.environ['PATH']}")
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.delenv("SLURM_NTASKS", raising=False)
    with warnings.catch_warnings():  # this test's filters only
        small_trainer(tmp_path)
    assert not [warning for warning in recwarn if "srun" in str(warning.message)]
