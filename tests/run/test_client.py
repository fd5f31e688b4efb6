import lightning as L
import pytest
import torch
import torch.nn.functional as F
from lightning.fabric import Fabric
from torch import nn

from lightfed.core.messages import ClientPlan
from lightfed.errors import ConfigError
from lightfed.run.client import ClientTrainer
from tests.conftest import small_data


class DropoutNet(L.LightningModule):
    """Uses the global torch RNG in training (dropout), like many user models."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Dropout(0.5), nn.Linear(64, 10))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)


def _client(model=None) -> ClientTrainer:
    data = small_data()
    data.setup(seed=0, device=torch.device("cpu"))
    L.seed_everything(0, verbose=False)
    return ClientTrainer(Fabric(accelerator="cpu", devices=1), model or DropoutNet(), data)


def test_a_clients_result_depends_only_on_its_plan_and_the_global_weights():
    client = _client()
    params, buffers = client.flat.params.clone(), client.flat.buffers.clone()
    plan = ClientPlan(client_id=3, round=7, seed=1234, epochs=2)
    first = client.train(plan, params, buffers).delta.clone()
    client.train(ClientPlan(client_id=5, round=7, seed=99, epochs=1), params, buffers)  # moves RNG and momentum
    torch.manual_seed(42)
    again = client.train(plan, params, buffers)
    assert torch.equal(again.delta, first) and again.delta.abs().sum() > 0
    other_seed = client.train(ClientPlan(client_id=3, round=7, seed=1235, epochs=2), params, buffers).delta
    assert not torch.equal(other_seed, first)


def test_local_work_is_counted_in_steps_and_step_sizes():
    client = _client()
    params, buffers = client.flat.params.clone(), client.flat.buffers.clone()
    size = client.data.client_size(0)
    update = client.train(ClientPlan(client_id=0, round=0, seed=0, epochs=2), params, buffers)
    assert update.num_steps == 2 * -(-size // 16) and update.num_examples == size
    update = client.train(ClientPlan(client_id=0, round=0, seed=0, steps=7, lr=0.01), params, buffers)
    assert update.num_steps == 7 and update.local_time == pytest.approx(0.07)


def test_learning_rate_schedulers_are_refused_with_a_reason():
    class Scheduled(DropoutNet):
        def configure_optimizers(self):
            optimizer = super().configure_optimizers()
            return {"optimizer": optimizer, "lr_scheduler": torch.optim.lr_scheduler.StepLR(optimizer, 1)}

    with pytest.raises(ConfigError, match="configure_optimizers must return one torch optimizer"):
        _client(Scheduled())


def test_an_optimizer_that_needs_a_closure_is_refused_with_a_reason():
    class LBFGSNet(DropoutNet):
        def configure_optimizers(self):
            return torch.optim.LBFGS(self.parameters(), lr=0.1)

    with pytest.raises(ConfigError, match="optimizer LBFGS evaluates the loss itself in each step"):
        _client(LBFGSNet())


class Center(L.LightningModule):
    """f(w) = ||w - c||^2 / 2 whatever the batch: gradient w - c."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.zeros(3))
        self.c = torch.tensor([1.0, -2.0, 4.0])

    def training_step(self, batch, batch_idx):
        return 0.5 * (self.w - self.c).square().sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.5)


def test_a_local_rule_changes_every_step_between_backward_and_optimizer_step():
    from lightfed.local.proximal import ProximalTerm

    client = _client(Center())
    x = torch.tensor([1.0, 1.0, 1.0])
    update = client.train(
        ClientPlan(client_id=0, round=0, seed=0, steps=2, rule=ProximalTerm(mu=2.0)), x, torch.zeros(0)
    )
    c = torch.tensor([1.0, -2.0, 4.0])
    w1 = x - 0.5 * (x - c)  # the proximal term is zero at the global model
    w2 = w1 - 0.5 * ((w1 - c) + 2.0 * (w1 - x))
    assert torch.allclose(update.delta, w2 - x)


def test_a_rule_can_re_evaluate_the_batch_set_the_step_size_and_report():
    """A rule that takes the gradient at the trial point x - g and steps along it (an extragradient step) with its
    own step size: the client computes exactly that, and the rule's report comes back with the update."""
    from lightfed.core.local_rule import LocalRule

    class Extragradient(LocalRule):
        def start(self, params, context):
            self.context, self.evaluations = context, 0

        def adjust(self, grad, params):
            start = params.clone()
            with torch.no_grad():
                params.sub_(grad)  # the trial point
            self.context.recompute_gradient()  # grad (the client's flat gradient) now holds the trial point's
            with torch.no_grad():
                params.copy_(start)
            self.evaluations += 1
            self.context.lr = 0.25

        def report(self):
            return {"evaluations": self.evaluations}

    client = _client(Center())
    x = torch.tensor([1.0, 1.0, 1.0])
    c = torch.tensor([1.0, -2.0, 4.0])
    update = client.train(ClientPlan(client_id=0, round=0, seed=0, steps=1, rule=Extragradient()), x, torch.zeros(0))
    g = x - c
    trial = x - g
    expected = x - 0.25 * (trial - c)  # the step uses the gradient at the trial point, with the rule's step size
    assert torch.allclose(update.delta, expected - x)
    assert update.report == {"evaluations": 1} and update.local_time == pytest.approx(0.25)


class TwoGroups(L.LightningModule):
    """f(w, v) = ||w - c||^2 / 2 + ||v||^2 / 2, w in a group at rate 0.5 and v in one at 0.05."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.zeros(3))
        self.v = nn.Parameter(torch.zeros(2))
        self.c = torch.tensor([1.0, -2.0, 4.0])

    def training_step(self, batch, batch_idx):
        return 0.5 * (self.w - self.c).square().sum() + 0.5 * self.v.square().sum()

    def configure_optimizers(self):
        return torch.optim.SGD([{"params": [self.w]}, {"params": [self.v], "lr": 0.05}], lr=0.5)


def test_a_rule_sees_the_client_through_its_context_and_scales_every_groups_rate():
    from lightfed.core.local_rule import LocalRule

    class DoubledRate(LocalRule):
        def start(self, params, context):
            self.context = context
            context.scale_lr(2.0)
            self.rates = [group["lr"] for group in context.optimizer.param_groups]

        def adjust(self, grad, params):
            pass

    client = _client(TwoGroups())
    rule = DoubledRate()
    x = torch.ones(5)
    update = client.train(ClientPlan(client_id=0, round=0, seed=0, steps=1, rule=rule), x, torch.zeros(0))
    context = rule.context
    assert context.module is client.module and context.flat is client.flat and context.data is client.data
    assert type(context.optimizer) is torch.optim.SGD and not context.scales_gradients  # not Fabric's wrapper
    assert rule.rates == [1.0, 0.1] and update.local_time == 1.0  # the first group's rate is the step size
    w, v = x[:3], x[3:]
    assert torch.allclose(update.delta, torch.cat([-1.0 * (w - torch.tensor([1.0, -2.0, 4.0])), -0.1 * v]))
    context.lr = 0.3
    assert [group["lr"] for group in context.optimizer.param_groups] == [0.3, 0.3]
    assert client.train(ClientPlan(client_id=0, round=0, seed=0, steps=1), x, torch.zeros(0)).local_time == 0.5


def test_a_training_step_that_returns_no_loss_is_refused_with_what_it_must_return():
    class NoLoss(DropoutNet):
        def training_step(self, batch, batch_idx):
            super().training_step(batch, batch_idx)

    client = _client(NoLoss())
    with pytest.raises(ConfigError, match="NoLoss.training_step must return the loss .* got None"):
        client.train(ClientPlan(client_id=0, round=0, seed=0, steps=1), client.flat.params.clone(), client.flat.buffers)
