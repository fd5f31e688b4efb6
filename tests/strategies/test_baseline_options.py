"""The authors'-code and Flower options of FedExP, FedAdam/FedYogi/FedAdagrad, FedNova and FedBuff's configs, each
on 2 clients and 3 coordinates against values computed by hand (docs/corrections/baselines.md)."""

from pathlib import Path

import pytest
import torch
import yaml

from lightfed.core.messages import ClientUpdate
from lightfed.core.sums import Sums
from lightfed.strategies import FedAdagrad, FedAdam, FedExP, FedNova, FedYogi
from lightfed.strategies.base import ServerContext
from tests.conftest import small_data, small_model, small_trainer

X = torch.tensor([1.0, 2.0, 3.0])
CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def _update(client_id, delta, examples=10, steps=1, local_time=0.1):
    return ClientUpdate(client_id, torch.tensor(delta), torch.zeros(0), examples, steps, local_time, torch.tensor(0.0))


def _ready(strategy):
    strategy.setup(ServerContext(X, num_clients=2))
    return strategy


def _round(strategy, updates, params=X, round=0):
    sums = Sums(strategy.sum_sizes(), torch.device("cpu"))
    for update in updates:
        strategy.accumulate(sums, update)
    return strategy.aggregate(params, sums, round)


UNEQUAL = [_update(0, [1.0, 0.0, 0.0], examples=30), _update(1, [0.0, 4.0, 0.0], examples=10)]  # p = (3/4, 1/4)
OPPOSED = [_update(0, [3.0, 0.0, 0.0]), _update(1, [-1.0, 0.0, 0.0])]  # mean [1, 0, 0]; sum ||D_i||^2 = 10


# FedAdam / FedYogi / FedAdagrad


@pytest.mark.parametrize("cls", [FedAdam, FedYogi, FedAdagrad])
def test_fedopt_weighting_by_examples(cls):
    # D = 3/4 [1, 0, 0] + 1/4 [0, 4, 0] = [0.75, 1, 0]; beta1 = 0: m = D. Adam, beta2 = 0: v = D^2; Yogi from
    # v_0 = 0, beta2 = 0: v = 0 - D^2 sign(0 - D^2) = D^2; Adagrad: v = 0 + D^2. x + D / (|D| + 1/4)
    strategy = _ready(cls(server_lr=1.0, beta1=0.0, beta2=0.0, tau=0.25, weighting="examples", initial_v="zero"))
    torch.testing.assert_close(_round(strategy, UNEQUAL), X + torch.tensor([0.75 / 1.0, 1.0 / 1.25, 0.0]))


def test_fedadam_initial_second_moment_zero():
    # v_1 = 3/4 v_0 + 1/4 D^2 with D = [2, 4, 0]: v_0 = 0 gives [1, 4, 0]; v_0 = tau^2 = 1 gives [1.75, 4.75, 0.75]
    updates = [_update(0, [2.0, 4.0, 0.0]), _update(1, [2.0, 4.0, 0.0])]
    zero = _ready(FedAdam(server_lr=1.0, beta1=0.0, beta2=0.75, tau=1.0, initial_v="zero"))
    torch.testing.assert_close(_round(zero, updates), X + torch.tensor([2 / 2, 4 / 3, 0.0]))
    paper = _ready(FedAdam(server_lr=1.0, beta1=0.0, beta2=0.75, tau=1.0))
    v = torch.tensor([1.75, 4.75, 0.75])
    torch.testing.assert_close(_round(paper, updates), X + torch.tensor([2.0, 4.0, 0.0]) / (v.sqrt() + 1))


def test_fedadam_bias_correction():
    # beta1 = 1/2, beta2 = 0 (v = D^2 = [4, 16, 0]), D = [2, 4, 0] twice. Round 0 (t = 1): m = [1, 2, 0],
    # eta_t = sqrt(1 - 0) / (1 - 1/2) = 2, step 2 [1/3, 2/5, 0]. Round 1 (t = 2): m = [1.5, 3, 0], eta_t = 1 / (3/4),
    # step 4/3 [1.5/3, 3/5, 0] = [2/3, 4/5, 0] again.
    updates = [_update(0, [2.0, 4.0, 0.0]), _update(1, [2.0, 4.0, 0.0])]
    strategy = _ready(FedAdam(server_lr=1.0, beta1=0.5, beta2=0.0, tau=1.0, bias_correction="adam", initial_v="zero"))
    x1 = _round(strategy, updates, round=0)
    torch.testing.assert_close(x1, X + torch.tensor([2 / 3, 4 / 5, 0.0]))
    torch.testing.assert_close(_round(strategy, updates, params=x1, round=1), x1 + torch.tensor([2 / 3, 4 / 5, 0.0]))
    plain = _ready(FedAdam(server_lr=1.0, beta1=0.5, beta2=0.0, tau=1.0, initial_v="zero"))
    torch.testing.assert_close(_round(plain, updates), X + torch.tensor([1 / 3, 2 / 5, 0.0]))
    # Flower's t is one later: round 0 has t = 2, eta_t = 1 / (3/4), step 4/3 [1/3, 2/5, 0] = [4/9, 8/15, 0].
    flower = _ready(FedAdam(server_lr=1.0, beta1=0.5, beta2=0.0, tau=1.0, bias_correction="flower", initial_v="zero"))
    torch.testing.assert_close(_round(flower, updates, round=0), X + torch.tensor([4 / 9, 8 / 15, 0.0]))


# FedNova


def test_fednova_normalised_by_steps():
    # p = (1/2, 1/2); client 1 takes 2 steps of lr 0.4 (T = 0.8). By steps: tau = (1, 2), tau_eff = 1.5,
    # sum p D / tau = [0.5, 1, 0] -> [0.75, 1.5, 0]. By local time: tau_eff = 0.45, [5, 2.5, 0] -> [2.25, 1.125, 0].
    updates = [
        _update(0, [1.0, 0.0, 0.0], steps=1, local_time=0.1),
        _update(1, [0.0, 4.0, 0.0], steps=2, local_time=0.8),
    ]
    torch.testing.assert_close(
        _round(_ready(FedNova(normalise_by="steps")), updates), X + torch.tensor([0.75, 1.5, 0.0])
    )
    torch.testing.assert_close(_round(_ready(FedNova()), updates), X + torch.tensor([2.25, 1.125, 0.0]))


# FedExP


def test_fedexp_weighting_by_examples():
    # mean D = [0.75, 1, 0], ||mean D||^2 = 1.5625; mean ||D_i||^2 = 3/4 * 1 + 1/4 * 16 = 4.75;
    # eta_g = 4.75 / (2 (1.5625 + 0.4375)) = 1.1875
    strategy = _ready(FedExP(eps=0.4375, weighting="examples"))
    torch.testing.assert_close(_round(strategy, UNEQUAL), X + 1.1875 * torch.tensor([0.75, 1.0, 0.0]))
    assert strategy.metrics()["server_lr"] == pytest.approx(1.1875)


def test_fedexp_eps_times_clients():
    # eta_g = 10 / (2 * 2 (1 + eps')): eps' = 0.25 gives 2; eps' = M eps = 0.5 gives 5/3
    assert _round(_ready(FedExP(eps=0.25)), OPPOSED).tolist() == pytest.approx((X + torch.tensor([2.0, 0, 0])).tolist())
    strategy = _ready(FedExP(eps=0.25, eps_times_clients=True))
    torch.testing.assert_close(_round(strategy, OPPOSED), X + torch.tensor([5 / 3, 0.0, 0.0]))


def test_fedexp_eps_decay():
    # eps' = 0.25 * 0.5^(t + 1): round 0: 0.125, eta_g = 10 / 4.5; round 2: 0.03125, eta_g = 10 / 4.125
    strategy = _ready(FedExP(eps=0.25, eps_decay=0.5))
    torch.testing.assert_close(_round(strategy, OPPOSED, round=0), X + torch.tensor([20 / 9, 0.0, 0.0]))
    torch.testing.assert_close(_round(strategy, OPPOSED, round=2), X + torch.tensor([80 / 33, 0.0, 0.0]))


def test_fedexp_evaluates_the_average_of_its_last_two_iterates_and_continues_from_the_last():
    # eta_g = 2 (eps = 0.25): x_1 = X + [2, 0, 0], x_2 = X + [4, 0, 0]; evaluated: x_1 after round 0 (no average
    # with the initial model, as the released code), then (x_1 + x_2) / 2 = X + [3, 0, 0]
    averaged, last = _ready(FedExP(eps=0.25, evaluate="average_last_two")), _ready(FedExP(eps=0.25))
    x1 = _round(averaged, OPPOSED, round=0)
    assert torch.equal(x1, _round(last, OPPOSED, round=0))
    assert torch.equal(averaged.evaluated(x1), x1)
    x2 = _round(averaged, OPPOSED, params=x1, round=1)
    assert torch.equal(x2, _round(last, OPPOSED, params=x1, round=1))  # the iterate is the algorithm's
    torch.testing.assert_close(averaged.evaluated(x2), X + torch.tensor([3.0, 0.0, 0.0]))
    assert torch.equal(last.evaluated(x2), x2)
    resumed = _ready(FedExP(eps=0.25, evaluate="average_last_two"))
    resumed.load_state_dict(averaged.state_dict())
    assert torch.equal(resumed.evaluated(x2), averaged.evaluated(x2))
    assert set(last.state_dict()) == {"last_server_lr"}  # the default's checkpoint is unchanged


def test_fedexp_defaults_are_the_paper():
    # uniform means, eps = 0.25 constant: eta_g = 10 / (2 * 2 (1 + 0.25)) = 2 in every round
    strategy = _ready(FedExP(eps=0.25))
    for round in range(3):
        torch.testing.assert_close(_round(strategy, OPPOSED, round=round), X + torch.tensor([2.0, 0.0, 0.0]))


# FedBuff


@pytest.mark.parametrize("dataset", ["digits", "fmnist"])
def test_fedbuff_configs_scale_by_staleness(dataset):
    config = yaml.safe_load((CONFIGS / "async" / dataset / "fedbuff.yaml").read_text())
    assert config["strategy"]["init_args"]["staleness_weighting"] is True


def test_a_run_evaluates_fedexps_average_and_trains_and_checkpoints_its_last_iterate(tmp_path):
    averaged = small_trainer(tmp_path / "averaged", rounds=2, eval_interval=1)
    data = small_data()
    averaged.fit(small_model(momentum=0.0), data, FedExP(evaluate="average_last_two"))
    last = small_trainer(tmp_path / "last", rounds=2)
    last.fit(small_model(momentum=0.0), small_data(), FedExP())
    first = small_trainer(tmp_path / "first", rounds=1)
    first.fit(small_model(momentum=0.0), small_data(), FedExP())
    assert torch.equal(averaged.params, last.params)  # the iterate, trained from and checkpointed
    checkpoint = torch.load(next((tmp_path / "averaged").rglob("last.ckpt")), weights_only=True)
    assert torch.equal(checkpoint["params"], last.params)
    evaluated = (first.params + last.params) / 2
    averaged.workers.clients[0].flat.load(evaluated, averaged.buffers)
    module = averaged.workers.clients[0].module
    module.eval()
    with torch.no_grad():
        loss = torch.nn.functional.cross_entropy(module(data.test_x), data.test_y).item()
    assert averaged.final_report["test_loss"] == pytest.approx(loss, rel=1e-5)
    assert last.final_report["test_loss"] != pytest.approx(loss, rel=1e-3)
