"""Hutchinson estimates of the Hessian diagonal (and of its mean from the loss alone): exact where they must be,
unbiased where they cannot be."""

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from lightfed.ecado.curvature import (
    SquaredGradients,
    client_hessian_diagonal,
    hutchinson_diagonal,
    loss_difference_curvature,
    module_hessian_diagonal,
    probe_generator,
)
from lightfed.errors import ConfigError


def test_a_diagonal_hessian_is_recovered_exactly_by_one_probe():
    """z * (H z) = z^2 h = h for Rademacher z when H = diag(h)."""
    h = torch.tensor([0.5, 2.0, -1.0, 3.0])
    x = torch.randn(4, requires_grad=True)
    loss = (h * x**2).sum() / 2
    estimate = hutchinson_diagonal(loss, [x], probes=1, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(estimate, h)


def test_probes_on_the_cpu_come_from_the_callers_generator():
    """The draws every CPU run so far made (their weights are pinned by scripts/checks/final_weights.py)."""
    generator = torch.Generator().manual_seed(3)
    assert probe_generator(generator, torch.device("cpu")) is generator
    h = torch.tensor([0.5, 2.0, -1.0])
    x = torch.randn(3, requires_grad=True)
    loss = x @ torch.tensor([[1.0, 0.3, 0.0], [0.3, 2.0, 0.4], [0.0, 0.4, 3.0]]) @ x / 2 + (h * x).sum()
    expected_z = torch.randint(0, 2, (3,), generator=torch.Generator().manual_seed(3), dtype=torch.float32) * 2 - 1
    hz = torch.tensor([[1.0, 0.3, 0.0], [0.3, 2.0, 0.4], [0.0, 0.4, 3.0]]) @ expected_z
    estimate = hutchinson_diagonal(loss, [x], probes=1, generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(estimate, expected_z * hz)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_probes_on_a_gpu_are_drawn_there_reproducibly():
    h = torch.tensor([0.5, 2.0, -1.0, 3.0], device="cuda")
    x = torch.randn(4, device="cuda", requires_grad=True)
    draws = probe_generator(torch.Generator().manual_seed(0), h.device)
    assert draws.device.type == "cuda"
    estimate = hutchinson_diagonal((h * x**2).sum() / 2, [x], probes=1, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(estimate, h)


def test_a_dense_hessian_diagonal_and_trace_are_estimated_without_bias():
    g = torch.Generator().manual_seed(0)
    Q = torch.randn(6, 6, generator=g)
    A = Q @ Q.T
    x = torch.randn(6, requires_grad=True)
    loss = x @ A @ x / 2
    estimate = hutchinson_diagonal(loss, [x], probes=4000, generator=g)
    off_diagonal = (A - torch.diag(A.diagonal())).norm(dim=1)  # each coordinate's error scale per probe
    assert torch.all((estimate - A.diagonal()).abs() < 5 * off_diagonal / 4000**0.5)
    assert estimate.mean() == pytest.approx((A.trace() / 6).item(), rel=0.05)


class TwoLayers(nn.Module):
    """y = w2 * (w1 * x) with w1 frozen: the loss is quadratic in w2 with Hessian mean (w1 x)^2; BatchNorm buffers."""

    def __init__(self) -> None:
        super().__init__()
        self.w1 = nn.Parameter(torch.tensor([2.0, -1.0]), requires_grad=False)
        self.w2 = nn.Parameter(torch.tensor([0.3, 0.7]))
        self.norm = nn.BatchNorm1d(2, affine=False)

    def training_step(self, batch, batch_idx):
        x, y = batch
        self.log("train_loss", 0.0)  # logging must not need a Lightning trainer
        return ((self.norm(x) * self.w1 * self.w2 - y) ** 2).mean() / 2


def test_module_diagonal_averages_batches_in_eval_mode_over_the_trainable_parameters_only():
    module = TwoLayers().train()
    x1, x2 = torch.tensor([[1.0, 2.0], [3.0, 1.0]]), torch.tensor([[2.0, 2.0], [1.0, 0.0]])
    batches = [(x1, torch.zeros(2, 2)), (x2, torch.zeros(2, 2))]
    running = module.norm.running_mean.clone()
    estimate = module_hessian_diagonal(module, batches, probes=1, generator=torch.Generator().manual_seed(0))
    # eval-mode BatchNorm is the identity at its initial statistics; the loss is a mean over 2 x 2 entries, so
    # d2/dw2_j^2 = sum_b (w1_j x_bj)^2 / 4, averaged over the two batches
    expected_w2 = torch.stack([(x * module.w1) ** 2 for x in (x1, x2)]).sum(dim=1).mean(dim=0) / 4
    torch.testing.assert_close(estimate, expected_w2, rtol=1e-4, atol=1e-6)  # frozen w1: not federated, no entry
    assert module.training and torch.equal(module.norm.running_mean, running)


class DenseQuadratic(nn.Module):
    """L = w' A w / 2 + the sum of a frozen parameter, float64."""

    def __init__(self, A: torch.Tensor) -> None:
        super().__init__()
        self.A = A
        self.w = nn.Parameter(torch.randn(len(A), dtype=torch.float64, generator=torch.Generator().manual_seed(1)))
        self.frozen = nn.Parameter(torch.ones(2, dtype=torch.float64), requires_grad=False)

    def training_step(self, batch, batch_idx):
        return self.w @ self.A @ self.w / 2 + self.frozen.sum()


def test_loss_differences_give_each_probes_z_h_z_over_the_trainable_parameters():
    """On a quadratic the second difference is exact: the mean of z' A z / d over the probes of every batch, d = 5
    trainable parameters (the 2 frozen ones are not federated), for the Rademacher z drawn as Hutchinson's (so it
    equals the mean of Hutchinson's diagonal from the same probes); each batch's centre loss at the parameters
    themselves."""
    Q = torch.randn(5, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    module = DenseQuadratic(Q @ Q.T).train()
    before = [p.detach().clone() for p in module.parameters()]
    batches = [None, None]  # the loss is the same on every batch: 2 batches x 2 probes
    estimate = loss_difference_curvature(
        module, batches, probes=2, generator=torch.Generator().manual_seed(3), step=1e-3
    )
    draws = torch.Generator().manual_seed(3)
    z = [torch.randint(0, 2, (5,), generator=draws, dtype=torch.float32).double() * 2 - 1 for _ in range(4)]
    expected = sum(float(zk @ module.A @ zk) for zk in z) / 4 / 5
    assert estimate.shape == (1,) and estimate.dtype == torch.float64
    assert float(estimate) == pytest.approx(expected, rel=1e-6)
    hutchinson = module_hessian_diagonal(module, batches, probes=2, generator=torch.Generator().manual_seed(3))
    assert float(hutchinson.mean()) == pytest.approx(expected, rel=1e-6)  # summed in float32
    assert module.training and all(torch.equal(p, q) for p, q in zip(module.parameters(), before, strict=False))


def test_loss_differences_leave_buffers_and_parameters_as_they_were():
    """In eval mode, with every parameter restored bit for bit (x + s z - s z need not be x in floating point)."""
    module = TwoLayers().train()
    before = [p.detach().clone() for p in module.parameters()]
    running = module.norm.running_mean.clone()
    batches = [(torch.tensor([[1.0, 2.0], [3.0, 1.0]]), torch.zeros(2, 2))]
    loss_difference_curvature(module, batches, probes=3, generator=torch.Generator().manual_seed(0), step=0.1)
    assert module.training and torch.equal(module.norm.running_mean, running)
    assert all(torch.equal(p, q) for p, q in zip(module.parameters(), before, strict=False))
    with pytest.raises(ValueError, match="no batches"):
        loss_difference_curvature(module, [], probes=1, generator=torch.Generator(), step=0.1)
    with pytest.raises(ConfigError, match="needs float32 or float64 weights"):
        loss_difference_curvature(module.bfloat16(), batches, probes=1, generator=torch.Generator(), step=0.1)


class SubsetData:
    """A client's examples behind ``client_subset``, noting the positions asked for; no whole batches."""

    def __init__(self, x: torch.Tensor) -> None:
        self.x, self.asked = x, []

    def client_size(self, client_id: int) -> int:
        return len(self.x)

    def client_subset(self, client_id, positions, generator=None):
        self.asked.append(positions)
        return self.x[positions], torch.zeros(len(positions), 2)

    def client_batches(self, *args, **kwargs):
        raise AssertionError("an estimate on a smaller sample set reads no whole batch")


def test_an_estimate_on_fewer_examples_averages_random_subsets_of_that_size():
    module = TwoLayers().train()
    data = SubsetData(torch.arange(1.0, 21.0).reshape(10, 2))
    context = SimpleNamespace(module=module, data=data)
    estimate = client_hessian_diagonal(context, 0, batches=3, probes=1, seed=5, examples=4)  # type: ignore[arg-type]
    assert [len(p) for p in data.asked] == [4, 4, 4] and all(len(set(p.tolist())) == 4 for p in data.asked)
    # as above: d2/dw2_j^2 = sum over the subset's examples of (w1_j x_bj)^2 / (2 x 4), averaged over the 3 subsets
    expected = torch.stack([((data.x[p] * module.w1) ** 2).sum(0) / 8 for p in data.asked]).mean(0)
    torch.testing.assert_close(estimate, expected, rtol=1e-4, atol=1e-6)


def test_squared_gradients_of_balanced_batches_give_the_hessian_of_a_well_specified_least_squares():
    """l_s = (a_s x - y_s)^2 / 2 with residuals r_s = +-1 that cancel (mean gradient 0): per-example gradients r_s a_s,
    so the empirical Fisher mean_s a_s^2 is the Hessian's diagonal, mean_s a_s^2 = (5, 2.5). Batches of B = 2 drawn
    with replacement (all 16 ordered pairs): E[g_B^2] = Fisher / B, which the factor B undoes."""
    a = torch.tensor([[1.0, 2.0], [1.0, 2.0], [3.0, -1.0], [3.0, -1.0]])
    r = torch.tensor([1.0, -1.0, 1.0, -1.0])
    x = torch.tensor([0.5, -0.25], requires_grad=True)
    y = a @ x.detach() - r
    squares = SquaredGradients(batch_size=2)
    for i in range(4):
        for j in range(4):
            batch = torch.tensor([i, j])
            loss = ((a[batch] @ x - y[batch]) ** 2).mean() / 2
            squares.add(torch.autograd.grad(loss, x)[0])
    torch.testing.assert_close(squares.estimate(), torch.tensor([5.0, 2.5]))


def test_squared_gradients_need_a_step():
    with pytest.raises(ValueError, match="no training step"):
        SquaredGradients(batch_size=4).estimate()
