"""FedBN's BatchNorm layers stay on their clients, FedRep trains the head and then the body, Ditto's personal update
is the hand-computed one."""

from functools import partial
from types import SimpleNamespace

import lightning as L
import pytest
import torch
import torch.nn.functional as F

from lightfed.callbacks import Callback
from lightfed.core.flat import FlatModule
from lightfed.local.personal_layers import PersonalLayers
from lightfed.models.batchnorm_cnn import SmallBNCNN
from lightfed.personalization import APFL, Ditto, FedBN, FedRep
from lightfed.personalization.personal_coordinates import batchnorm_coordinates
from lightfed.strategies import FedAvg
from tests.conftest import small_trainer
from tests.personalization.conftest import linear_net, pathological_data


def bn_model() -> SmallBNCNN:
    L.seed_everything(0, verbose=False)
    return SmallBNCNN(width=4, optimizer=partial(torch.optim.SGD, lr=0.05))


class Updates(Callback):
    """Every client update's final buffers, by client, in training order."""

    def __init__(self) -> None:
        self.buffers: dict[int, list[torch.Tensor]] = {}

    def on_client_end(self, trainer, update) -> None:
        self.buffers.setdefault(update.client_id, []).append(update.buffers.clone())


def test_fedbn_keeps_each_clients_own_batchnorm_statistics_and_never_their_average(tmp_path):
    updates, fedbn = Updates(), FedBN()
    trainer = small_trainer(tmp_path, rounds=3, callbacks=[updates], clients_in_parallel=1)
    trainer.fit(bn_model(), pathological_data(6), FedAvg(), transforms=[fedbn])
    mask = batchnorm_coordinates(bn_model()).buffers
    assert mask.all()  # the model's only floating-point buffers are BatchNorm statistics
    averaged = trainer.buffers[mask]
    for client_id, buffers in updates.buffers.items():
        kept = fedbn.client_states.get(client_id, "personal_buffers")
        assert torch.equal(kept, buffers[-1][mask])  # exactly what its own last training ended with
        assert not torch.equal(kept, averaged)
    params = fedbn.client_states.get(next(iter(updates.buffers)), "personal")
    assert params.numel() == 2 * (4 + 8)  # weight and bias of both BatchNorm layers, nothing else


def test_a_client_starts_from_its_own_personal_layers_and_the_global_rest():
    flat = FlatModule(bn_model(), torch.device("cpu"))
    coordinates = batchnorm_coordinates(bn_model())
    params, buffers = torch.randn_like(flat.params), torch.randn_like(flat.buffers)
    own, own_buffers = torch.randn(int(coordinates.params.sum())), torch.randn(int(coordinates.buffers.sum()))
    flat.load(params, buffers)
    rule = PersonalLayers(coordinates.params, coordinates.buffers, own, own_buffers)
    rule.start(params, SimpleNamespace(flat=flat))
    assert torch.equal(flat.params[coordinates.params], own)
    assert torch.equal(flat.params[~coordinates.params], params[~coordinates.params])
    assert torch.equal(flat.buffers[coordinates.buffers], own_buffers)
    assert torch.equal(rule.report()["personal"], own)


class StepRecorder(SmallBNCNN):
    """Keeps its flat parameters before training and after every step."""

    def on_train_start(self) -> None:
        self.trajectory = [self.flat_params()]

    def on_train_batch_end(self, outputs, batch, batch_idx) -> None:
        self.trajectory.append(self.flat_params())

    def flat_params(self) -> torch.Tensor:
        return torch.cat([p.detach().flatten() for p in self.parameters()])


def test_fedrep_trains_the_head_for_its_epochs_with_the_body_frozen_then_the_body_with_the_head_frozen(tmp_path):
    L.seed_everything(0, verbose=False)
    model = StepRecorder(width=4, optimizer=partial(torch.optim.SGD, lr=0.05))
    data, fedrep = pathological_data(6), FedRep(personal=["net.9.*"], head_epochs=2)
    trainer = small_trainer(tmp_path, rounds=1, clients_per_round=1, local_steps=3, clients_in_parallel=1)
    trainer.fit(model, data, FedAvg(), transforms=[fedrep])
    (client_id,) = fedrep.client_states.state_dict()
    head_steps = 2 * -(-data.client_size(client_id) // data.batch_size)
    head = fedrep.coordinates.params
    moves = [after != before for before, after in zip(model.trajectory, model.trajectory[1:], strict=False)]
    assert len(moves) == head_steps + 3
    assert all(m[head].any() and not m[~head].any() for m in moves[:head_steps])
    assert all(m[~head].any() and not m[head].any() for m in moves[head_steps:])


def _gradient(model, w: torch.Tensor, batch) -> torch.Tensor:
    """The gradient at flat weights ``w`` of the mean cross-entropy of ``batch`` (a linear model: weight, bias)."""
    w = w.clone().requires_grad_(True)
    x, y = batch
    weight, bias = w[:640].view(10, 64), w[640:]
    return torch.autograd.grad(F.cross_entropy(x.flatten(1) @ weight.T + bias, y), w)[0]


@pytest.mark.parametrize("parallel", [1, "vectorized"])
def test_dittos_personal_model_is_the_hand_computed_one(tmp_path, parallel):
    lr, lam = 0.1, 0.5
    data, ditto = pathological_data(2, batch_size=10_000), Ditto(lam=lam)
    trainer = small_trainer(tmp_path, rounds=2, clients_per_round=2, local_steps=1, clients_in_parallel=parallel)
    model = linear_net(lr)
    w0 = torch.cat([p.detach().flatten() for p in model.parameters()])
    trainer.fit(model, data, FedAvg(), transforms=[ditto])
    batches = [data.client_subset(k, torch.arange(data.client_size(k))) for k in range(2)]
    sizes = torch.tensor([data.client_size(k) for k in range(2)], dtype=torch.float64)
    v1 = [w0 - lr * _gradient(model, w0, batches[k]) for k in range(2)]  # v starts from w0: no pull yet
    w1 = (sum(sizes[k] * v1[k].double() for k in range(2)) / sizes.sum()).float()  # FedAvg: the same step, averaged
    for k in range(2):
        v2 = v1[k] - lr * (_gradient(model, v1[k], batches[k]) + lam * (v1[k] - w1))
        personal, _ = ditto.client_model(k, trainer.params, trainer.buffers)
        assert torch.allclose(personal, v2, atol=1e-6), (personal - v2).abs().max()
        assert not torch.allclose(personal, trainer.params, atol=1e-3)


@pytest.mark.parametrize("parallel", [1, "vectorized"])
def test_apfls_personal_model_and_alpha_are_the_hand_computed_ones(tmp_path, parallel):
    lr, alpha, alpha_lr = 0.1, 0.25, 0.5
    data, apfl = pathological_data(2, batch_size=10_000), APFL(alpha=alpha, alpha_lr=alpha_lr)
    trainer = small_trainer(tmp_path, rounds=1, clients_per_round=1, local_steps=2, clients_in_parallel=parallel)
    model = linear_net(lr)
    w0 = torch.cat([p.detach().flatten() for p in model.parameters()])
    trainer.fit(model, data, FedAvg(), transforms=[apfl])
    (k,) = apfl.client_states.state_dict()
    batch = data.client_subset(k, torch.arange(data.client_size(k)))
    g0 = _gradient(model, w0, batch)  # step 1: v = w = w0, so the mixture is w0 and alpha does not move
    w1, v1 = w0 - lr * g0, w0 - lr * alpha * g0
    g = _gradient(model, alpha * v1 + (1 - alpha) * w1, batch)  # step 2: the gradient at the mixture
    v2, alpha2 = v1 - lr * alpha * g, alpha - alpha_lr * float(torch.dot(v1 - w1, g))
    assert torch.allclose(trainer.params, w1 - lr * _gradient(model, w1, batch), atol=1e-6)  # w: plain steps
    assert abs(float(apfl.client_states.get(k, "alpha")) - alpha2) < 1e-6 and alpha2 != alpha
    personal, _ = apfl.client_model(k, trainer.params, trainer.buffers)
    assert torch.allclose(personal, alpha2 * v2 + (1 - alpha2) * trainer.params, atol=1e-6)
