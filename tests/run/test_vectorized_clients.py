"""VectorizedClients: a round's clients trained as one batched computation give every client the update its
one-at-a-time training gives (ragged clients, partial batches, momentum, Adam, clipping), and refuse what they cannot
run exactly."""

import copy
import math
from dataclasses import replace
from functools import partial

import lightning as L
import pytest
import torch
from lightning.fabric import Fabric

from lightfed.callbacks import Callback
from lightfed.core.federated_weights import federated_parameters
from lightfed.core.local_rule import LocalRule
from lightfed.core.messages import ClientPlan
from lightfed.ecado.coupling import CouplingCurrent
from lightfed.errors import ConfigError
from lightfed.local.apfl_mixing import APFLMixing
from lightfed.local.correction import GradientCorrection
from lightfed.local.ditto_steps import DittoSteps
from lightfed.local.head_then_body import HeadThenBody
from lightfed.local.personal_layers import PersonalLayers
from lightfed.local.proximal import ProximalTerm
from lightfed.local.sharpness import SharpnessAware
from lightfed.models import MLP
from lightfed.models.batchnorm_cnn import SmallBNCNN
from lightfed.privacy import DPSGD
from lightfed.run import stacked_leaves, stacked_loss, stacked_schedule, vectorized_clients
from lightfed.run.client import ClientTrainer
from lightfed.run.client_training import TrainingJob
from lightfed.run.settings import LocalTraining
from lightfed.run.stacked_classifier import stacked_classifier
from lightfed.run.vectorized_clients import VectorizedClients
from lightfed.strategies import AdaptFed, FedAvg
from lightfed.strategies.masfl import MomentumCorrection
from tests.conftest import QUICKSTART, fit_in_subprocess, small_data, small_model, small_trainer, trainer_options

CPU = torch.device("cpu")


def _clients(model, **settings):
    """The one-at-a-time client and the vectorized one, each on its own copy of ``model``."""
    data = small_data()
    data.setup(seed=0, device=CPU)
    fabric = Fabric(accelerator="cpu", devices=1)
    sequential = ClientTrainer(fabric, model, data, **settings)
    return sequential, VectorizedClients(ClientTrainer(fabric, copy.deepcopy(model), data, **settings))


def _updates(training, jobs):
    updates = {}
    training.train(jobs, lambda lane, index, update: updates.__setitem__(index, update))
    return [updates[index] for index in range(len(jobs))]


def _jobs(sequential, rule=None, **plan):
    """Eight clients' jobs from the module's weights; ``rule(client_id, size)``: a client's local rule (a fresh one)."""
    params, buffers = sequential.flat.params.clone(), sequential.flat.buffers.clone()
    return [
        TrainingJob(ClientPlan(c, 1, seed=100 + c, rule=rule and rule(c, params.numel()), **plan), params, buffers)
        for c in range(8)
    ]


def _correction(client_id, size):
    """SCAFFOLD's client rule with a control-variate difference of the client's own."""
    return GradientCorrection(torch.randn(size, generator=torch.Generator().manual_seed(client_id)) * 0.01)


def _momentum_correction(client_id, size):
    """AdaMasFL's client rule: beta grad + an offset of the client's own, normalised to length 1 a step."""
    offset = torch.randn(size, generator=torch.Generator().manual_seed(client_id)) * 0.01
    return MomentumCorrection(0.5, offset, normalise=True)


SGD = partial(torch.optim.SGD, lr=0.1)
# optimizers whose step scales each coordinate by its own history
ADAPTIVE = (torch.optim.Adam, torch.optim.AdamW, torch.optim.Adagrad, torch.optim.RMSprop)


@pytest.mark.parametrize(
    ("optimizer", "local", "rule", "plan"),
    [
        (SGD, None, None, {"epochs": 2}),  # plain SGD: torch's functional step (the clients end at different steps)
        (SGD, None, None, {"steps": 7}),  # every client ends at the last step: its rows are read where they trained
        (partial(torch.optim.SGD, lr=0.1, momentum=0.5), None, None, {"epochs": 2}),
        # eps 1e-6, not torch's 1e-8: a coordinate whose gradient is of rounding's size (1e-9) would step by about
        # the learning rate in a direction the rounding decides (2.4e-5 of one client's delta on one machine)
        (partial(torch.optim.Adam, lr=0.003, eps=1e-6), None, None, {"steps": 7}),
        (partial(torch.optim.AdamW, lr=0.003, weight_decay=0.1, eps=1e-6), None, None, {"epochs": 1}),
        (partial(torch.optim.Adagrad, lr=0.01), None, None, {"epochs": 1}),
        (partial(torch.optim.RMSprop, lr=0.001, momentum=0.5, eps=1e-6), None, None, {"epochs": 1}),
        (
            partial(torch.optim.SGD, lr=0.1, weight_decay=0.01),
            LocalTraining(gradient_clip_val=0.5),
            None,
            {"epochs": 1},
        ),
        (SGD, None, lambda client_id, size: ProximalTerm(mu=0.5), {"epochs": 2}),  # FedProx
        (SGD, LocalTraining(gradient_clip_val=0.5), _correction, {"epochs": 2}),  # SCAFFOLD, clipped after it
        # AdaMasFL, each row's step normalised: at lr 0.1 for 2 epochs one client at a time moves 1.5e-3 (relative)
        # from starts 1e-7 apart, so the comparison is at lr 0.01 for 1 epoch
        (partial(torch.optim.SGD, lr=0.01), None, _momentum_correction, {"epochs": 1}),
    ],
    ids=[
        "sgd-epochs",
        "sgd-steps",
        "sgd-momentum-epochs",
        "adam-steps",
        "adamw",
        "adagrad",
        "rmsprop",
        "sgd-clipped",
        "fedprox",
        "scaffold-clipped",
        "adamasfl",
    ],
)
@pytest.mark.parametrize("folded", [False, True], ids=["vmap", "folded"])
def test_every_clients_update_is_its_one_at_a_time_update(optimizer, local, rule, plan, folded):
    """Within rounding: the largest coordinate's difference is at most 1e-5 of the delta's largest coordinate; under
    an adaptive optimizer, whose step on a coordinate with a rounding-sized gradient is itself of the learning rate's
    order whatever the rounding, the difference's L2 norm is at most 1e-5 of the delta's. A trajectory that amplifies
    rounding (lr 0.1 with momentum 0.9) drifts further apart, as two summation orders of one client do. The CNN
    trains under vmap, an MLP with a training_step of its own folded."""
    L.seed_everything(0, verbose=False)  # the same weights whatever ran before
    model = _OwnStep(64, 10, hidden=[32]) if folded else small_model()
    model.optimizer = optimizer
    sequential, vectorized = _clients(model, local=local)
    assert vectorized.loss.prefix == folded
    jobs = _jobs(sequential, rule, **plan)
    sizes = {sequential.data.client_size(job.plan.client_id) for job in jobs}
    assert len(sizes) == len(jobs) and any(size % 16 for size in sizes)  # ragged, with partial last batches
    expected = []
    for job in _jobs(sequential, rule, **plan):  # rules of their own
        update = sequential.train(job.plan, job.params, job.buffers)
        expected.append((update.delta.clone(), update.num_steps, float(update.train_loss), update.local_time))
    for (delta, steps, loss, local_time), update in zip(expected, _updates(vectorized, jobs), strict=True):
        assert update.num_steps == steps and update.local_time == local_time
        norm = 2 if isinstance(vectorized.client.optimizer.optimizer, ADAPTIVE) else math.inf
        assert float((update.delta - delta).norm(norm) / delta.norm(norm)) <= 1e-5
        assert update.train_loss.item() == pytest.approx(loss, rel=1e-5)
    sequential_logged = sequential.logged.compute()
    assert vectorized.logged().compute() == pytest.approx(sequential_logged, rel=1e-5)
    assert set(sequential_logged) == {"train_loss"}


@pytest.mark.parametrize("folded", [False, True], ids=["vmap", "folded"])
def test_clients_of_their_own_step_sizes_train_in_the_stacks_of_alike_ones(folded, monkeypatch):
    """Plain SGD (with weight decay) steps each client's row at its own step size (``trainer.local_lr`` drawn per
    client): the clients stack as if their step sizes were one, and each gets its one-at-a-time update and local
    time."""
    L.seed_everything(0, verbose=False)
    model = _OwnStep(64, 10, hidden=[32]) if folded else small_model()
    model.optimizer = partial(torch.optim.SGD, lr=0.1, weight_decay=0.01)
    sequential, vectorized = _clients(model)
    stacks = []
    train_together = vectorized._train_together
    monkeypatch.setattr(
        vectorized, "_train_together", lambda jobs, **kw: stacks.append(len(jobs)) or train_together(jobs, **kw)
    )
    alike = _jobs(sequential, epochs=2)
    _updates(vectorized, alike)
    alike_stacks, stacks[:] = list(stacks), []
    jobs = [TrainingJob(replace(job.plan, lr=0.05 + 0.01 * k), job.params, job.buffers) for k, job in enumerate(alike)]
    expected = []
    for job in jobs:
        update = sequential.train(job.plan, job.params, job.buffers)
        expected.append((update.delta.clone(), update.local_time))  # the delta's memory is the client's own
    updates = _updates(vectorized, jobs)
    assert stacks == alike_stacks and max(stacks) > 1
    for (delta, local_time), update in zip(expected, updates, strict=True):
        assert update.local_time == local_time
        assert float((update.delta - delta).abs().max() / delta.abs().max()) <= 1e-5


@pytest.mark.parametrize(
    ("plan", "dropout"),
    [({"epochs": 2}, 0.0), ({"steps": 11}, 0.0), ({"epochs": 2}, 0.3)],
    ids=["epochs", "steps", "dropout"],
)
def test_a_linear_classifier_on_batched_matmuls_gives_every_client_its_one_at_a_time_update(plan, dropout):
    """lightfed's MLP is trained on batched matmuls (``stacked_classifier``), not under vmap: ragged clients, partial
    batches, momentum, the logged loss; with dropout, each client's masks are its one-at-a-time training's."""
    L.seed_everything(0, verbose=False)
    model = MLP(64, 10, hidden=[32], optimizer=partial(torch.optim.SGD, lr=0.1, momentum=0.5))
    if dropout:
        model.net.insert(2, torch.nn.Dropout(dropout))
    sequential, vectorized = _clients(model)
    assert vectorized.loss.stacked is not None and vectorized.loss.stacked.draws == bool(dropout)
    jobs = _jobs(sequential, **plan)
    expected = []
    for job in jobs:
        update = sequential.train(job.plan, job.params, job.buffers)
        expected.append((update.delta.clone(), float(update.train_loss)))
    for (delta, loss), update in zip(expected, _updates(vectorized, jobs), strict=True):
        assert float((update.delta - delta).abs().max() / delta.abs().max()) <= 1e-5
        assert update.train_loss.item() == pytest.approx(loss, rel=1e-5)
    assert vectorized.logged().compute() == pytest.approx(sequential.logged.compute(), rel=1e-5)


class _OwnStep(MLP):
    def training_step(self, batch, batch_idx):
        return super().training_step(batch, batch_idx) * 2


class _LogsAVector(MLP):
    def training_step(self, batch, batch_idx):
        x, y = batch
        self.log("per_class", self(x).mean(0))
        return super().training_step(batch, batch_idx)


class _Unused(MLP):
    """A parameter its training step never uses: no gradient reaches it, and weight decay still moves it."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.unused = torch.nn.Parameter(torch.ones(3))

    def training_step(self, batch, batch_idx):
        return super().training_step(batch, batch_idx)


@pytest.mark.parametrize(
    ("settings", "plain"),
    [
        ({}, True),
        ({"weight_decay": 0.01, "nesterov": False}, True),
        ({"momentum": 0.9}, False),
        ({"lr": torch.tensor(0.1)}, False),
    ],
    ids=["plain", "weight-decay", "momentum", "tensor-lr"],
)
def test_sgd_without_momentum_steps_through_torchs_functional_sgd_with_the_optimizers_settings(settings, plain):
    weight = torch.zeros(3, requires_grad=True)
    optimizer = torch.optim.SGD([weight], **{"lr": 0.1, **settings})
    arguments = stacked_leaves.plain_sgd(optimizer)
    assert (arguments is not None) == plain
    if plain:
        assert arguments == {k: v for k, v in optimizer.param_groups[0].items() if k in arguments}
        assert {"lr", "weight_decay", "momentum", "maximize", "foreach"} <= set(arguments)
    assert stacked_leaves.plain_sgd(torch.optim.Adam([weight])) is None
    assert (
        stacked_leaves.plain_sgd(torch.optim.SGD([{"params": [weight]}, {"params": [torch.zeros(1)]}], lr=0.1)) is None
    )


def test_a_parameter_without_a_gradient_steps_as_one_client_at_a_time_steps_it():
    """The optimizer steps the stacked leaves with the backward pass's gradients; a leaf that got none steps with
    zeros, as the flat gradient one client at a time steps (weight decay and momentum move it)."""
    torch.manual_seed(0)
    model = _Unused(64, 10, hidden=[16], optimizer=partial(torch.optim.SGD, lr=0.1, momentum=0.5, weight_decay=0.1))
    sequential, vectorized = _clients(model)
    jobs = _jobs(sequential, epochs=1)
    params = federated_parameters(sequential.module)
    start = sum(p.numel() for _, p in params[: [name for name, _ in params].index("unused")])
    unused = slice(start, start + 3)  # its coordinates in the flat order
    expected = [sequential.train(job.plan, job.params, job.buffers).delta.clone() for job in jobs]
    for delta, update in zip(expected, _updates(vectorized, jobs), strict=True):
        assert float((update.delta - delta).abs().max() / delta.abs().max()) <= 1e-5
        assert float(delta[unused].abs().min()) > 0  # moved


def test_clients_sent_one_tensor_or_each_their_own_train_alike():
    """The rows of clients that all start from one tensor (a broadcast view) and of clients that start from copies of
    it: bit for bit the same updates."""
    torch.manual_seed(0)
    sequential, vectorized = _clients(MLP(64, 10, hidden=[16], optimizer=SGD))
    shared = _jobs(sequential, epochs=1)
    copies = [TrainingJob(job.plan, job.params.clone(), job.buffers.clone()) for job in shared]
    for one, other in zip(_updates(vectorized, shared), _updates(vectorized, copies), strict=True):
        assert torch.equal(one.delta, other.delta) and torch.equal(one.train_loss, other.train_loss)


def test_clients_trained_together_are_delivered_as_rows_where_the_caller_takes_them():
    """Rows where the caller takes them: each row bit for bit the update delivered alone, every client once (the
    clients trained alone, the longest of these ragged ones, one by one, in job order)."""
    torch.manual_seed(0)
    sequential, vectorized = _clients(MLP(64, 10, hidden=[16], optimizer=SGD))
    jobs = _jobs(sequential, epochs=1)
    alone = _updates(vectorized, jobs)
    rows, one_by_one = [], []
    vectorized.train(jobs, lambda lane, index, update: one_by_one.append(index), lambda lane, r: rows.append(r))
    together = [c for r in rows for c in r.client_ids]
    assert rows and one_by_one == sorted(one_by_one) and sorted(together + one_by_one) == list(range(8))
    for k, update in zip(together, [update for r in rows for update in r.updates()], strict=True):
        expected = alone[k]
        assert torch.equal(update.delta, expected.delta) and torch.equal(update.train_loss, expected.train_loss)
        assert (update.client_id, update.num_examples, update.num_steps, update.local_time) == (
            expected.client_id,
            expected.num_examples,
            expected.num_steps,
            expected.local_time,
        )


class _EveryClient(Callback):
    def on_client_end(self, trainer, update):
        pass


def test_a_run_adding_rows_gives_the_weights_of_the_run_adding_one_update_at_a_time(tmp_path):
    """A callback with ``on_client_end`` makes the engine take one update at a time: the same weights (the float64
    sums differ only in their order)."""
    final = []
    for callbacks in ([], [_EveryClient()]):
        trainer = small_trainer(tmp_path / str(len(callbacks)), clients_in_parallel="vectorized", callbacks=callbacks)
        trainer.fit(small_model(), small_data(), FedAvg())
        final.append(trainer.params)
    assert torch.equal(final[0], final[1])


def test_a_logged_value_of_more_than_one_number_is_refused_in_one_line():
    _, vectorized = _clients(_LogsAVector(64, 10, hidden=[16], optimizer=SGD))
    with pytest.raises(ConfigError, match="logs one-number tensors from training_step, not per_class: a tensor of sh"):
        _updates(vectorized, _jobs(vectorized.client, epochs=1))


def _with(layer):
    model = MLP(64, 10, hidden=[32])
    model.net.insert(2, layer)
    return model


def _hooked():
    model = MLP(64, 10, hidden=[32])
    model.net[1].register_forward_hook(lambda module, inputs, output: output * 2)
    return model


@pytest.mark.parametrize(
    ("model", "batched"),
    [
        (lambda: MLP(64, 10, hidden=[32]), True),
        (lambda: _with(torch.nn.Tanh()), True),
        (small_model, False),  # convolutions
        (lambda: _OwnStep(64, 10), False),  # its own training_step
        (lambda: _with(torch.nn.Dropout(0.1)), True),  # each client's masks from its own generator
        (lambda: _with(torch.nn.AlphaDropout(0.1)), False),
        (lambda: _with(torch.nn.LayerNorm(32)), False),
        (_hooked, False),
    ],
    ids=["mlp", "tanh", "cnn", "own-step", "dropout", "alpha-dropout", "layernorm", "hook"],
)
def test_batched_matmuls_stand_in_for_vmap_only_where_they_compute_the_same_loss(model, batched):
    assert (stacked_classifier(model()) is not None) == batched


def test_batched_matmuls_give_the_losses_and_gradients_of_training_step_under_vmap(monkeypatch):
    L.seed_everything(0, verbose=False)
    model = MLP(64, 10, hidden=[32, 16])
    monkeypatch.setattr(model, "log", lambda *args, **kwargs: None)
    rows = {
        f"module.{name}": (p.detach() + 0.1 * torch.randn(5, *p.shape)).requires_grad_()
        for name, p in model.named_parameters()
    }
    batch = (torch.randn(5, 7, 1, 8, 8), torch.randint(0, 10, (5, 7)))
    step = stacked_loss.TrainingStep(model)
    expected = torch.vmap(lambda params, batch: torch.func.functional_call(step, params, (batch, 0)))(rows, batch)
    computed = stacked_classifier(model)
    assert computed is not None
    losses, logged = computed.loss(rows, batch, [])
    assert torch.allclose(losses, expected, rtol=1e-6) and torch.equal(logged["train_loss"], losses.detach())
    for mine, theirs in zip(
        torch.autograd.grad(losses.sum(), list(rows.values())),
        torch.autograd.grad(expected.sum(), list(rows.values())),
        strict=True,
    ):
        assert torch.allclose(mine, theirs, rtol=1e-5, atol=1e-7)
    assert computed.loss(rows, (batch[0], batch[1].float()), []) is None  # soft targets: vmap's


def test_apfls_mixture_gradient_runs_vectorized_as_one_at_a_time():
    """APFL's second gradient a step, at the mixture alpha v + (1 - alpha) w, taken for every client at once: the
    deltas, the personal models and the alphas (adapted from the mixture's gradient) are the one-at-a-time ones."""
    model = small_model(momentum=0.5)
    sequential, vectorized = _clients(model)
    params = sequential.flat.params.clone()

    def rule(client_id, size):
        personal = (
            None
            if client_id % 3 == 0
            else params + 0.01 * torch.randn(size, generator=torch.Generator().manual_seed(client_id))
        )
        return APFLMixing(personal, alpha=0.25, alpha_lr=0.5 if client_id % 2 else None)

    jobs, expected = _jobs(sequential, rule, epochs=1), []
    for job in _jobs(sequential, rule, epochs=1):  # rules of their own, from the same weights
        update = sequential.train(job.plan, job.params, job.buffers)
        expected.append((update.delta.clone(), update.report["personal"].clone(), float(update.report["alpha"])))
    updates = _updates(vectorized, jobs)
    for k, ((delta, personal, alpha), update) in enumerate(zip(expected, updates, strict=True)):
        start = params if k % 3 == 0 else jobs[k].plan.rule.personal
        assert float((update.delta - delta).abs().max() / delta.abs().max()) <= 1e-5
        moved = (personal - start).abs().max()
        assert float((update.report["personal"] - personal).abs().max() / moved) <= 1e-5
        assert float(update.report["alpha"]) == pytest.approx(alpha, rel=1e-5)
        assert (alpha != 0.25) == bool(k % 2)
    assert vectorized.logged().compute() == pytest.approx(sequential.logged.compute(), rel=1e-5)


@pytest.mark.parametrize(
    ("model", "adaptive"),
    [
        (lambda: MLP(64, 10, hidden=[16], optimizer=partial(torch.optim.SGD, lr=0.1, momentum=0.5)), False),
        (lambda: MLP(64, 10, hidden=[16], optimizer=partial(torch.optim.SGD, lr=0.1, momentum=0.5)), True),
        (lambda: SmallBNCNN(num_classes=10, width=8, optimizer=partial(torch.optim.SGD, lr=0.05)), False),
    ],
    ids=["sam-batched-matmuls", "asam-batched-matmuls", "sam-batchnorm-vmap"],
)
def test_sharpness_aware_steps_run_vectorized_as_one_at_a_time(model, adaptive):
    """FedSAM's and FedASAM's clients: each step's gradient taken again at w + e(w), e from the client's own gradient
    norm, for every client at once; the running statistics move in both passes, as one client at a time."""
    L.seed_everything(0, verbose=False)
    sequential, vectorized = _clients(model())
    rule = lambda client_id, size: SharpnessAware(rho=0.1, adaptive=adaptive)  # noqa: E731
    jobs = _jobs(sequential, rule, epochs=1)
    expected = [
        tuple(t.clone() for t in _pair(sequential.train(j.plan, j.params, j.buffers)))
        for j in _jobs(sequential, rule, epochs=1)
    ]
    for (delta, buffers), update in zip(expected, _updates(vectorized, jobs), strict=True):
        assert float((update.delta - delta).abs().max() / delta.abs().max()) <= 1e-5
        assert torch.allclose(update.buffers, buffers, rtol=1e-5, atol=1e-6)
    assert vectorized.logged().compute() == pytest.approx(sequential.logged.compute(), rel=1e-5)
    plain = sequential.train(ClientPlan(0, 1, seed=100, epochs=1), jobs[0].params, jobs[0].buffers)
    assert float((plain.delta - expected[0][0]).abs().max() / expected[0][0].abs().max()) > 1e-2  # ascent matters


def test_fedecados_client_runs_vectorized_as_one_at_a_time_with_its_curvature_at_the_received_model():
    """FedECADO's client: the coupling current each step, its speed decay, and its Hessian diagonal (Hutchinson)
    estimated on the live module before the first step, which holds the received weights there as one client at a
    time does, whatever an earlier client left in it."""
    sequential, vectorized = _clients(small_model(momentum=0))

    def rule(client_id, size):
        current = torch.randn(size, generator=torch.Generator().manual_seed(client_id)) * 0.01
        return CouplingCurrent(client_id, current, curvature_batches=1, curvature_probes=2, seed=300, track_decay=True)

    jobs, expected = _jobs(sequential, rule, epochs=1), []
    for job in _jobs(sequential, rule, epochs=1):  # rules of their own, from the same weights
        update = sequential.train(job.plan, job.params, job.buffers)
        expected.append((update.delta.clone(), update.report["curvature"].clone(), update.report["decay"]))
    live = vectorized.client.flat
    live.load(live.params + 0.5, live.buffers)  # an earlier client's weights
    for (delta, curvature, decay), update in zip(expected, _updates(vectorized, jobs), strict=True):
        assert float((update.delta - delta).abs().max() / delta.abs().max()) <= 1e-5
        assert float((update.report["curvature"] - curvature).abs().max() / curvature.abs().max()) <= 1e-5
        assert update.report["decay"] == pytest.approx(decay, rel=1e-5)


def test_dittos_personal_steps_run_vectorized_as_one_at_a_time():
    """Ditto's personal model v (from the global model or a client's own, at the client's step size or Ditto's own)
    trained by its prior steps, as one batched computation, then the client's own steps from the global model."""
    model = small_model(momentum=0.5)
    sequential, vectorized = _clients(model, local=LocalTraining(gradient_clip_val=0.5))
    params, buffers = sequential.flat.params.clone(), sequential.flat.buffers.clone()
    starts = {
        c: None if c % 3 == 0 else params + 0.01 * torch.randn(params.shape, generator=torch.Generator().manual_seed(c))
        for c in range(8)
    }

    def jobs():
        return [
            TrainingJob(
                ClientPlan(
                    c,
                    1,
                    seed=100 + c,
                    epochs=1,
                    rule=DittoSteps(c, starts[c], None, 0.1, 500 + c, epochs=None, steps=5, lr=None if c % 2 else 0.05),
                ),
                params,
                buffers,
            )
            for c in range(8)
        ]

    expected = []
    for job in jobs():
        update = sequential.train(job.plan, job.params, job.buffers)
        expected.append((update.delta.clone(), update.report["personal"].clone()))
    for c, ((delta, personal), update) in enumerate(zip(expected, _updates(vectorized, jobs()), strict=True)):
        start = params if starts[c] is None else starts[c]
        assert float((update.delta - delta).abs().max() / delta.abs().max()) <= 1e-5
        moved = (update.report["personal"] - start).abs().max()
        assert float((update.report["personal"] - personal).abs().max() / moved) <= 1e-5


def _personal(rule_class, **settings):
    """FedPer's (or FedRep's) rule of a client that has trained before: its own values of the head ``net.7``."""

    def rule(client_id, size):
        mask = torch.zeros(size, dtype=torch.bool)
        mask[-90:] = True  # the last 90 weights of the linear head net.7
        own = torch.randn(90, generator=torch.Generator().manual_seed(client_id)) * 0.1
        return rule_class(mask, torch.zeros(0, dtype=torch.bool), own, None, **settings)

    return rule


@pytest.mark.parametrize(
    "rule", [_personal(PersonalLayers), _personal(HeadThenBody, head_steps=5)], ids=["fedper", "fedrep"]
)
def test_a_personalization_rule_trains_each_clients_own_layers_as_one_at_a_time(rule):
    model = small_model(momentum=0)
    sequential, vectorized = _clients(model)
    jobs, expected = _jobs(sequential, rule, epochs=2), []
    for job in _jobs(sequential, rule, epochs=2):  # rules of their own, from the same weights
        update = sequential.train(job.plan, job.params, job.buffers)
        expected.append((update.delta.clone(), update.report["personal"].clone()))
    for (delta, personal), update in zip(expected, _updates(vectorized, jobs), strict=True):
        assert float((update.delta - delta).abs().max() / delta.abs().max()) <= 1e-5
        assert float((update.report["personal"] - personal).abs().max() / personal.abs().max()) <= 1e-5


def test_batchnorm_running_statistics_are_each_clients_own():
    """Digits' raw pixel values (0-16) amplify a weight's rounding in the batch means: at lr 0.1 with momentum 0.5 a
    client's statistics drifted 3e-3 apart while its delta stayed within 1e-5; at lr 0.05 both stay within 1e-6."""
    L.seed_everything(0, verbose=False)
    model = SmallBNCNN(num_classes=10, width=8, optimizer=partial(torch.optim.SGD, lr=0.05))
    sequential, vectorized = _clients(model)
    jobs = _jobs(sequential, epochs=2)
    expected = [tuple(t.clone() for t in _pair(sequential.train(j.plan, j.params, j.buffers))) for j in jobs]
    for (delta, buffers), update in zip(expected, _updates(vectorized, jobs), strict=True):
        assert float((update.delta - delta).abs().max() / delta.abs().max()) <= 1e-5
        assert not torch.equal(buffers, jobs[0].buffers)  # the client's own statistics, moved by its batches
        assert float((update.buffers - buffers).abs().max() / buffers.abs().max()) <= 1e-5


def _pair(update):
    return update.delta, update.buffers


def test_a_run_ends_within_rounding_of_the_one_at_a_time_run_and_resumes_to_itself(tmp_path):
    final = {}
    for parallel in ("vectorized", 1):
        trainer = small_trainer(
            tmp_path / str(parallel), clients_in_parallel=parallel, local_steps=None, local_epochs=1
        )
        trainer.fit(small_model(), small_data(), FedAvg())
        final[parallel] = trainer.params
    assert float((final["vectorized"] - final[1]).abs().max() / final[1].abs().max()) <= 1e-5
    interrupted = small_trainer(tmp_path / "resumed", clients_in_parallel="vectorized", rounds=2)
    interrupted.fit(small_model(), small_data(), FedAvg())
    uninterrupted = small_trainer(tmp_path / "whole", clients_in_parallel="vectorized")
    uninterrupted.fit(small_model(), small_data(), FedAvg())
    resumed = small_trainer(tmp_path / "resumed", clients_in_parallel="vectorized")
    resumed.fit(small_model(), small_data(), FedAvg(), ckpt_path="last")
    assert torch.equal(resumed.params, uninterrupted.params)


class _Rule(LocalRule):
    def adjust(self, grad, params):
        grad.zero_()


@pytest.mark.parametrize("noise", [0.0, 1.1])
def test_dp_sgd_gives_each_client_its_one_at_a_time_weights_and_exactly_its_epsilon(noise):
    """Every client's Poisson batches and noise are its own: the deltas agree within rounding (without noise too,
    where only the clipping of every example's gradient is compared), the epsilons are equal."""
    privacies = [DPSGD(noise_multiplier=noise, max_grad_norm=0.5) for _ in range(2)]
    model = small_model()
    data = small_data()
    data.setup(seed=0, device=CPU)
    for privacy in privacies:
        privacy.setup(data, clients_per_round=8, planned=lambda: [])
    fabric = Fabric(accelerator="cpu", devices=1)
    sequential = ClientTrainer(fabric, model, data, privacy=privacies[0])
    vectorized = VectorizedClients(ClientTrainer(fabric, copy.deepcopy(model), data, privacy=privacies[1]))
    jobs = _jobs(sequential, epochs=2)
    expected = []
    for job in jobs:
        update = sequential.train(job.plan, job.params, job.buffers)
        expected.append((update.delta.clone(), update.num_steps, float(update.train_loss)))
    for (delta, steps, loss), update in zip(expected, _updates(vectorized, jobs), strict=True):
        assert update.num_steps == steps
        assert float((update.delta - delta).abs().max() / delta.abs().max()) <= 1e-5
        assert update.train_loss.item() == pytest.approx(loss, rel=1e-5)
    epsilons = [[privacy.epsilon(job.plan.client_id) for job in jobs] for privacy in privacies]
    assert epsilons[0] == epsilons[1] and (noise == 0 or min(epsilons[0]) > 0)
    assert vectorized.logged().compute() == pytest.approx(sequential.logged.compute(), rel=1e-5)


def test_a_private_run_vectorized_logs_the_one_at_a_time_epsilon(tmp_path):
    """Two rounds of DP-SGD: the same epsilons, and the global model's change within rounding."""
    model, final = small_model(), {}
    start = torch.cat([p.detach().flatten() for p in model.parameters()])
    for parallel in (1, "vectorized"):
        trainer = small_trainer(
            tmp_path / str(parallel), rounds=2, clients_in_parallel=parallel, privacy=DPSGD(noise_multiplier=1.0)
        )
        metrics = trainer.fit(copy.deepcopy(model), small_data(), FedAvg())
        final[parallel] = trainer.params - start, metrics["privacy/epsilon_max"], metrics["privacy/epsilon_mean"]
    (sequential, *epsilons), (vectorized, *vectorized_epsilons) = final[1], final["vectorized"]
    assert vectorized_epsilons == epsilons and epsilons[0] > 0
    assert float((vectorized - sequential).abs().max()) <= 1e-5 * float(sequential.abs().max())


def test_what_it_cannot_run_exactly_is_refused_in_one_line(tmp_path):
    with pytest.raises(ConfigError, match="vectorized: trainer.privacy.secure_mode draws from Opacus' secure"):
        secure = DPSGD(noise_multiplier=1.0)
        secure.secure_mode = True  # as where torchcsprng is installed
        _clients(small_model(), privacy=secure)
    model = small_model()
    model.optimizer = partial(torch.optim.ASGD, lr=0.1)
    with pytest.raises(ConfigError, match="vectorized: the model's optimizer ASGD is not one it steps per client"):
        _clients(model)
    sequential, vectorized = _clients(small_model())
    jobs = _jobs(sequential, lambda client_id, size: _Rule(), steps=1)
    with pytest.raises(ConfigError, match="vectorized does not run the local rule _Rule yet"):
        vectorized.train(jobs, lambda *args: None)
    trainer = small_trainer(tmp_path, clients_in_parallel="vectorized")  # ADAPT-FED's own step sizes, with momentum
    with pytest.raises(ConfigError, match="RelativeProgressRule sets each client's step size, which only plain SGD"):
        trainer.fit(small_model(), small_data(), AdaptFed())


def test_adapt_fed_vectorized_gives_the_one_at_a_time_model(tmp_path):
    """Three rounds of ADAPT-FED (a probe of each client's loss, a step size from its relative progress, SAM steps)
    on plain SGD, vectorized: each client's row steps at its own size, and the model and the logged progress are one
    client at a time's within rounding."""
    model, final = small_model(momentum=0.0), {}
    start = torch.cat([p.detach().flatten() for p in model.parameters()])
    for parallel in (1, "vectorized"):
        trainer = small_trainer(tmp_path / str(parallel), rounds=3, clients_in_parallel=parallel)
        metrics = trainer.fit(copy.deepcopy(model), small_data(), AdaptFed())
        final[parallel] = trainer.params - start, metrics
    (sequential, logged), (vectorized, vectorized_logged) = final[1], final["vectorized"]
    assert logged["strategy/lr_std"] > 0  # the clients stepped at sizes of their own
    assert float((vectorized - sequential).abs().max()) <= 1e-5 * float(sequential.abs().max())
    assert {k: v for k, v in vectorized_logged.items() if k.startswith("strategy/")} == pytest.approx(
        {k: v for k, v in logged.items() if k.startswith("strategy/")}, rel=1e-4
    )


def test_a_clients_update_is_the_same_whichever_blocks_its_process_trains(monkeypatch):
    """Blocks of 3 of 8 ragged clients: trained by one process, or as two processes' shares (blocks 0 and 2, block
    1), every update is the same, bit for bit."""
    monkeypatch.setattr(vectorized_clients, "AUTO_BLOCK", 3)
    torch.manual_seed(0)
    model = MLP(64, 10, hidden=[33], optimizer=SGD)  # a client's rounding under vmap depends on its rows
    sequential, _ = _clients(model)
    training = VectorizedClients(sequential, auto=True)
    jobs = _jobs(sequential, epochs=1)
    together = _updates(training, jobs)
    shares = [[0, 1, 2, 6, 7], [3, 4, 5]]
    apart = {
        i: update
        for share in shares
        for i, update in zip(share, _updates(training, [jobs[i] for i in share]), strict=True)
    }
    for i, update in enumerate(together):
        assert torch.equal(update.delta, apart[i].delta) and update.num_steps == apart[i].num_steps


@pytest.mark.parametrize("rule", [None, _correction], ids=["plain", "scaffold"])
@pytest.mark.parametrize("model_class", [MLP, _OwnStep], ids=["batched-matmuls", "folded"])
def test_a_clients_update_is_the_same_in_any_stack_of_its_process_and_alone(rule, model_class):
    """Each process stacking its own clients (``composed``: client i on process i % world, per-client state): 8 ragged
    clients stacked at once, as two processes' shares, and a client alone (a stack of one): every update is the same,
    bit for bit."""
    torch.manual_seed(0)
    model = model_class(64, 10, hidden=[33], optimizer=SGD)
    sequential, _ = _clients(model)
    training = VectorizedClients(sequential, auto=True, composed=True)
    first = _jobs(sequential, epochs=1)

    def jobs(share):  # the same weights, fresh rules
        return [
            replace(first[i], plan=replace(first[i].plan, rule=rule and rule(i, first[i].params.numel())))
            for i in share
        ]

    together = _updates(training, jobs(range(8)))
    for share in ([0, 2, 4, 6], [1, 3, 5, 7], [6]):  # client 6 alone, one at a time, rounds otherwise
        for i, update in zip(share, _updates(training, jobs(share)), strict=True):
            assert torch.equal(update.delta, together[i].delta), (share, i)


@pytest.mark.slow
def test_two_processes_vectorized_end_within_rounding_of_one_process_one_at_a_time(tmp_path):
    """Each process vectorizes its share of a round; a client's rounding may depend on the rows it is batched with,
    so two processes agree with one within rounding, not bit for bit (and every round both hold the same weights)."""
    final = {}
    for devices, parallel in ((1, "1"), (2, "vectorized")):
        root = tmp_path / f"devices{devices}"
        options = trainer_options(check_replicas="true", clients_in_parallel=parallel, rounds=3)
        fit_in_subprocess(QUICKSTART, root, devices, *options)
        final[devices] = torch.load(next(root.glob("*/version_0/checkpoints/last.ckpt")), weights_only=True)["params"]
    assert float((final[2] - final[1]).abs().max() / final[1].abs().max()) <= 1e-5


@pytest.mark.parametrize(
    ("steps", "tiers"),
    [
        ({0: 7, 1: 8, 2: 6, 3: 30, 4: 40, 5: 300}, [[0, 1, 2, 3, 4], [5]]),  # median 19: under 76, then 300 alone
        ({0: 2, 1: 2, 2: 3, 3: 9, 4: 40, 5: 50, 6: 500}, [[0, 1, 2, 3], [4, 5], [6]]),  # 12, then 200, then 2000
        ({0: 0, 1: 0, 2: 3}, [[0, 1, 2]]),  # a median under 1 counts as 1: under 4
        ({}, []),
    ],
)
def test_tiers_take_the_clients_under_four_times_the_median_steps_of_those_left(steps, tiers):
    assert stacked_schedule.tiers(steps) == tiers


@pytest.mark.parametrize(
    ("layer", "parts"), [(None, [8]), (torch.nn.LayerNorm(16), [6, 2])], ids=["first-ones", "vmap"]
)
def test_stragglers_train_together_in_a_later_tier_as_one_at_a_time(monkeypatch, layer, parts):
    """Six clients of 1 step and two of 12: under vmap, where a step costs as much for one client as for all, the two
    train together in a later tier, not alone; where the clients still training are computed alone (the first ones,
    ``_prefix_loss``), all eight together; each as one at a time."""
    torch.manual_seed(0)
    model = MLP(64, 10, hidden=[16], optimizer=SGD)
    if layer is not None:
        model.net.insert(2, layer)
    sequential, vectorized = _clients(model)
    jobs = [replace(job, plan=replace(job.plan, steps=12 if k >= 6 else 1)) for k, job in enumerate(_jobs(sequential))]
    trained, together = [], vectorized._train_together

    def counted(part):
        trained.append(len(part))
        return together(part)

    monkeypatch.setattr(vectorized, "_train_together", counted)
    updates = _updates(vectorized, jobs)
    assert trained == parts
    for job, update in zip(jobs, updates, strict=True):
        expected = sequential.train(job.plan, job.params, job.buffers).delta
        assert float((update.delta - expected).abs().max() / expected.abs().max()) <= 1e-5


def test_clients_that_do_not_fit_in_memory_together_train_in_smaller_stacks_to_the_same_updates(monkeypatch, capsys):
    """A device that holds at most three clients' stacks (an out-of-memory error past them): the chunk is halved
    until its parts fit, the chunks after it are no larger, one line says so, and every client's update is the one
    it has in the stack of all eight, within rounding. A client that does not fit alone raises the error."""
    torch.manual_seed(0)
    sequential, vectorized = _clients(MLP(64, 10, hidden=[16], optimizer=SGD))
    jobs = _jobs(sequential, epochs=1)
    together = _updates(vectorized, jobs)
    train_together = VectorizedClients._train_together
    stacks = []

    def capped(self, part, *rest):
        if len(part) > 3:
            raise torch.OutOfMemoryError("out of memory")
        stacks.append(len(part))
        return train_together(self, part, *rest)

    monkeypatch.setattr(VectorizedClients, "_train_together", capped)
    vectorized.chunk = 8
    for update, expected in zip(_updates(vectorized, jobs), together, strict=True):
        torch.testing.assert_close(update.delta, expected.delta, rtol=1e-5, atol=1e-7)
    assert vectorized.chunk <= 3 and max(stacks) <= 3 and sum(stacks) <= 8
    assert "8 clients do not fit in memory together; trains them 4 at a time" in capsys.readouterr().out
    stacks.clear()
    monkeypatch.setattr(VectorizedClients, "_train_together", lambda self, part, *rest: capped(self, part * 4))
    with pytest.raises(torch.OutOfMemoryError):
        VectorizedClients(vectorized.client)._train_fitting(jobs, [0])


@pytest.mark.parametrize("model", ["cnn-vmap", "own-step-folded", "mlp-batched-matmuls"])
def test_bf16_mixed_clients_vectorized_are_within_bf16_rounding_of_one_at_a_time_in_bf16(model):
    """Under bf16-mixed every client's update vectorized is as far from its one-at-a-time update in bf16-mixed as
    bf16 rounding takes that one from float32 (at most 3x), and is computed in bf16 (not float32's update)."""
    L.seed_everything(0, verbose=False)
    built = {
        "cnn-vmap": small_model,
        "own-step-folded": lambda: _OwnStep(64, 10, hidden=[32], optimizer=SGD),
        "mlp-batched-matmuls": lambda: MLP(64, 10, hidden=[32], optimizer=SGD),
    }[model]()
    data = small_data()
    data.setup(seed=0, device=CPU)
    deltas = {}
    for precision in ("32-true", "bf16-mixed"):
        fabric = Fabric(accelerator="cpu", devices=1, precision=precision)
        sequential = ClientTrainer(fabric, copy.deepcopy(built), data)
        vectorized = VectorizedClients(ClientTrainer(fabric, copy.deepcopy(built), data))
        assert vectorized.loss.prefix == (model != "cnn-vmap")
        jobs = _jobs(sequential, epochs=1)  # (before training, which leaves the module at the last client's weights)
        one = [sequential.train(job.plan, job.params, job.buffers).delta.clone() for job in _jobs(sequential, epochs=1)]
        deltas[precision] = one, [update.delta for update in _updates(vectorized, jobs)]
    (one32, vectorized32), (one16, vectorized16) = deltas["32-true"], deltas["bf16-mixed"]
    for k in range(len(one16)):
        bf16_rounding = float((one16[k] - one32[k]).abs().max())
        assert bf16_rounding > 0
        assert float((vectorized16[k] - one16[k]).abs().max()) <= 3 * bf16_rounding
        assert float((vectorized16[k] - vectorized32[k]).abs().max()) >= 0.1 * bf16_rounding
