"""scripts/studies/sharpness_study.py: its sharpness is the largest eigenvalue of the loss's Hessian."""

import pytest
import torch
import torch.nn.functional as F

from lightfed.models import SmallCNN
from tests.scripts.script_modules import load

study = load("studies/sharpness_study.py")


def test_the_sharpness_is_the_largest_eigenvalue_of_the_whole_hessian():
    torch.manual_seed(0)
    model = SmallCNN(width=1)  # 360 weights: the whole Hessian fits
    params = torch.nn.utils.parameters_to_vector(model.parameters()).detach().clone()
    x, y = torch.rand(64, 1, 8, 8), torch.randint(0, 10, (64,))
    names, shapes = zip(*((name, p.shape) for name, p in model.named_parameters()), strict=True)

    def loss(flat):
        chunks = flat.split([shape.numel() for shape in shapes])
        weights = {name: chunk.view(shape) for name, chunk, shape in zip(names, chunks, shapes, strict=True)}
        return F.cross_entropy(torch.func.functional_call(model, weights, (x,)), y)

    eigenvalues = torch.linalg.eigvalsh(torch.autograd.functional.hessian(loss, params))
    assert eigenvalues[-1] > eigenvalues[0].abs()  # the largest is also the largest in magnitude: power iteration's
    assert study.sharpness(model, params, x, y, iterations=300) == pytest.approx(float(eigenvalues[-1]), rel=1e-3)
