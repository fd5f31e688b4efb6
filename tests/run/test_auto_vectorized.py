"""``clients_in_parallel: auto`` trains a round of short-step clients vectorized, in blocks the engine deals whole to
processes: the same weights on one and two processes; what does not vectorize trains one client at a time."""

from dataclasses import replace
from functools import partial
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from lightfed.core.local_rule import LocalRule
from lightfed.errors import ConfigError
from lightfed.models import MLP
from lightfed.privacy import DPSGD
from lightfed.run.client_workers import ClientWorkers, torch_threads
from lightfed.run.engine import RoundEngine
from lightfed.run.training_choice import auto_vectorizes
from lightfed.run.vectorized_clients import VectorizedClients
from lightfed.strategies import FedAvg, FedSAM, Scaffold
from lightfed.strategies.base import NOTHING
from tests.conftest import QUICKSTART, fit_in_subprocess, small_data, small_model, small_trainer, trainer_options

SYNTHETIC = QUICKSTART.parent / "synthetic" / "base.yaml"


def mlp(hidden: int = 16) -> MLP:
    torch.manual_seed(0)
    return MLP(64, 10, hidden=[hidden], optimizer=partial(torch.optim.SGD, lr=0.1))


class DropoutMLP(MLP):
    """An MLP whose training draws dropout masks from torch's random generator."""

    def __init__(self) -> None:
        torch.manual_seed(0)
        super().__init__(64, 10, hidden=[16], optimizer=partial(torch.optim.SGD, lr=0.1))
        self.net.insert(2, nn.Dropout(0.2))


class NoisyMLP(DropoutMLP):
    """A ``DropoutMLP`` whose ``training_step`` draws noise from torch's random generator, which vmap refuses."""

    def training_step(self, batch, batch_idx):
        x, y = batch
        return super().training_step((x + 0.1 * torch.randn_like(x), y), batch_idx)


class OwnStepMLP(MLP):
    """An MLP with a ``training_step`` of its own (the same), which vectorized training runs under vmap."""

    def training_step(self, batch, batch_idx):
        return super().training_step(batch, batch_idx)


def own_step() -> OwnStepMLP:
    torch.manual_seed(0)
    return OwnStepMLP(64, 10, hidden=[16], optimizer=partial(torch.optim.SGD, lr=0.1))


def own_step_normed() -> OwnStepMLP:
    """An ``OwnStepMLP`` with a layer norm: a parameter of a layer other than a linear one, not folded: vmap."""
    model = own_step()
    model.net.insert(2, torch.nn.LayerNorm(16))
    return model


def _fit(root, model, strategy=None, **settings):
    trainer = small_trainer(root, rounds=2, local_steps=3, **settings)
    trainer.fit(model, small_data(), strategy or FedAvg())
    return trainer


@pytest.mark.parametrize(
    ("model", "strategy", "per_round", "vectorized"),
    [
        (mlp, FedAvg, 2, True),  # on batched matmuls
        (mlp, FedAvg, 1, False),
        (own_step, FedAvg, 2, True),  # its own training_step, folded (folded_step)
        (own_step_normed, FedAvg, 8, True),  # under vmap
        (own_step_normed, FedAvg, 4, False),  # too few clients a round to pay under vmap
        (small_model, FedAvg, 8, False),  # convolutions: long steps
        (mlp, Scaffold, 2, True),  # client i on process i % world (its control variate there): stacked there
        (own_step_normed, Scaffold, 8, False),  # the same under vmap: a client's rows computed with its group's
    ],
    ids=["mlp", "one-client", "folded", "vmap", "vmap-four-clients", "cnn", "client-state", "client-state-vmap"],
)
def test_auto_vectorizes_short_step_models_from_two_clients_a_round_or_eight_under_vmap(
    tmp_path, model, strategy, per_round, vectorized
):
    trainer = _fit(tmp_path, model(), strategy(), clients_per_round=per_round)
    assert isinstance(trainer.workers, VectorizedClients if vectorized else ClientWorkers)


@pytest.mark.parametrize(
    ("model", "num_workers", "vectorizes"),
    [(mlp, 0, True), (small_model, 0, False), (DropoutMLP, 0, False), (mlp, 2, False)],
    ids=["mlp", "cnn", "dropout", "dataloader-workers"],
)
def test_auto_vectorizes_on_a_gpu_models_without_convolutions_recurrences_attention_or_dropout(
    model, num_workers, vectorizes
):
    gpu = SimpleNamespace(device=torch.device("cuda"))
    assert auto_vectorizes(gpu, model(), SimpleNamespace(num_workers=num_workers)) is vectorizes


def _one_at_a_time(root, model, strategy=None):
    """The run of ``clients_in_parallel: 1`` on one torch thread, as ``auto`` trains one client at a time."""
    with torch_threads(1):
        return _fit(root, model, strategy, clients_per_round=8, clients_in_parallel=1).params


def test_a_model_that_draws_random_numbers_trains_one_client_at_a_time_which_one_line_says(tmp_path, capsys):
    auto = _fit(tmp_path / "auto", NoisyMLP(), clients_per_round=8)
    lines = [line for line in capsys.readouterr().out.splitlines() if "does not train vectorized" in line]
    assert len(lines) == 1 and lines[0].startswith(
        "trainer.clients_in_parallel auto trains one client at a time: NoisyMLP does not train vectorized "
        "(RuntimeError: vmap: called random operation"
    )
    assert torch.equal(auto.params, _one_at_a_time(tmp_path / "one", NoisyMLP()))


def test_explicit_vectorized_training_refuses_a_random_draw_under_vmap_in_one_line(tmp_path):
    with pytest.raises(ConfigError, match="NoisyMLP draws random numbers in training_step under vmap") as refused:
        _fit(tmp_path, NoisyMLP(), clients_per_round=8, clients_in_parallel="vectorized")
    assert "\n" not in str(refused.value)
    with pytest.raises(ConfigError, match="DropoutMLP draws .*every example's gradient under DP-SGD is taken under"):
        _fit(
            tmp_path / "private",
            DropoutMLP(),
            clients_per_round=8,
            clients_in_parallel="vectorized",
            privacy=DPSGD(1.0),
        )


def test_dropout_trains_vectorized_with_each_clients_one_at_a_time_masks(tmp_path, capsys):
    auto = _fit(tmp_path / "auto", DropoutMLP(), clients_per_round=8)
    assert isinstance(auto.workers, VectorizedClients) and "vectorized" not in capsys.readouterr().out
    one = _one_at_a_time(tmp_path / "one", DropoutMLP())
    assert float((auto.params - one).abs().max() / one.abs().max()) <= 1e-5


class _HalvedSteps(LocalRule):
    """Halves each step's gradient; does not declare that it vectorizes."""

    def adjust(self, grad, params):
        grad.mul_(0.5)


class _HalvedFedAvg(FedAvg):
    def configure_client(self, plan, received=NOTHING):
        return replace(plan, rule=_HalvedSteps())


def test_a_client_whose_local_rule_does_not_vectorize_trains_alone(tmp_path, capsys):
    """Every client trains alone, as one at a time, and nothing falls back."""
    auto = _fit(tmp_path / "auto", mlp(), _HalvedFedAvg(), clients_per_round=8)
    assert isinstance(auto.workers, VectorizedClients) and "vectorized" not in capsys.readouterr().out
    assert torch.equal(auto.params, _one_at_a_time(tmp_path / "one", mlp(), _HalvedFedAvg()))


def test_fedsams_clients_train_vectorized_within_rounding_of_one_at_a_time(tmp_path, monkeypatch):
    together = []
    train_together = VectorizedClients._train_together
    monkeypatch.setattr(
        VectorizedClients,
        "_train_together",
        lambda self, jobs, *a: together.append(len(jobs)) or train_together(self, jobs, *a),
    )
    auto = _fit(tmp_path / "auto", mlp(), FedSAM(rho=0.05), clients_per_round=8)
    assert together == [8, 8]  # each round's clients trained together, none alone
    one = _one_at_a_time(tmp_path / "one", mlp(), FedSAM(rho=0.05))
    assert float((auto.params - one).abs().max() / one.abs().max()) <= 1e-5


def test_processes_take_whole_blocks_of_consecutive_jobs_in_turn():
    jobs = list(range(8))

    def share(block, rank, fixed=False):
        engine = SimpleNamespace(fabric=SimpleNamespace(global_rank=0, world_size=2), fixed_process=fixed)
        engine.training = SimpleNamespace(block=block)
        return RoundEngine.share(engine, jobs, rank)  # type: ignore[arg-type]

    assert [share(3, 0), share(3, 1)] == [[0, 1, 2, 6, 7], [3, 4, 5]]
    assert [share(1, 0), share(1, 1)] == [[0, 2, 4, 6], [1, 3, 5, 7]]


@pytest.mark.slow
def test_auto_gives_the_same_weights_on_one_and_two_processes(tmp_path):
    """Synthetic(1, 1) with multinomial logistic regression, 10 clients a round of lognormal sizes (its stragglers
    in tiers of their own): vectorized by ``auto``, bit for bit the same on one and two processes."""
    final = {}
    for devices in (1, 2):
        root = tmp_path / f"devices{devices}"
        fit_in_subprocess(SYNTHETIC, root, devices, *trainer_options(rounds=3, check_replicas="true"))
        final[devices] = torch.load(next(root.glob("*/version_0/checkpoints/last.ckpt")), weights_only=True)["params"]
    assert torch.equal(final[1], final[2])


@pytest.mark.slow
@pytest.mark.parametrize(
    "options",
    [
        ["--strategy.class_path", "lightfed.strategies.Scaffold"],
        ["--trainer.privacy.class_path", "lightfed.privacy.DPSGD", "--trainer.privacy.init_args.noise_multiplier", "1"],
    ],
    ids=["scaffold", "dp-sgd"],
)
def test_auto_stacks_per_client_state_alike_on_one_and_two_processes(tmp_path, options):
    """Per-client state (SCAFFOLD's control variates, DP-SGD's accountants) pins client i to process i % world, where
    ``auto`` stacks each process's own clients: the stacks differ with the number of processes (and a process may
    hold one client: a stack of one), the weights do not, bit for bit, on ragged clients."""
    final = {}
    for devices in (1, 2):
        root = tmp_path / f"devices{devices}"
        settings = trainer_options(rounds=2, clients_per_round=5, check_replicas="true", local_epochs=1)
        fit_in_subprocess(SYNTHETIC, root, devices, *settings, *options)
        final[devices] = torch.load(next(root.glob("*/version_0/checkpoints/last.ckpt")), weights_only=True)["params"]
    assert torch.equal(final[1], final[2])
