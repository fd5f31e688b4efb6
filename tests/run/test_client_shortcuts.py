"""The client loop's shortcuts around Fabric's and Lightning's calls give what those calls give."""

import warnings

import pytest
import torch
from lightning.fabric import Fabric
from lightning.pytorch.utilities.data import extract_batch_size
from torch import nn

from lightfed.core.flat import FlatModule
from lightfed.core.logged_values import batch_size_of
from lightfed.run.client import plain_precision


def test_a_batch_size_read_directly_is_the_one_lightning_finds():
    x, y = torch.ones(10, 3), torch.ones(10)
    batches = [
        *((x, y), [x, y], (x,), x, ((x, y), y), (x, [y]), {"x": x, "y": y}),
        *((x, torch.ones(4)), (x, torch.tensor(3.0)), (torch.ones(0, 3), torch.ones(0))),
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Lightning warns of the ambiguous (x, torch.ones(4))
        assert [batch_size_of(batch) for batch in batches] == [extract_batch_size(batch) for batch in batches]


@pytest.mark.parametrize("precision, plain", [("32-true", True), ("bf16-mixed", False), ("64-true", False)])
def test_only_fabrics_base_precision_is_called_as_nullcontext_and_loss_backward(precision, plain):
    assert plain_precision(Fabric(accelerator="cpu", devices=1, precision=precision)) is plain


def test_a_gradient_the_module_replaced_is_viewed_flat_again():
    module = nn.Linear(3, 2)
    flat = FlatModule(module, torch.device("cpu"))
    module.zero_grad(set_to_none=True)
    flat.zero_grad()
    module.bias.grad = torch.ones(2)
    flat.zero_grad()
    module(torch.ones(4, 3)).sum().backward()
    assert torch.equal(flat.grads, torch.cat([module.weight.grad.flatten(), module.bias.grad]))
    assert torch.equal(flat.grads[-2:], torch.full((2,), 4.0))
