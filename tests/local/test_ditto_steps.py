"""lightfed.local.ditto_steps: before local training, Ditto's personal steps v <- v - lr (grad F(v) + lam (v - w))
over the client's batches; the live model is left at the global weights and buffers."""

import pytest
import torch

from lightfed.errors import ConfigError
from lightfed.local.ditto_steps import DittoSteps
from tests.local.conftest import Client, Recorder

# w = (1, -2, 0.5), v = (0, 1, 2), batches t1 = (1, 1, 1), t2 = 0, lam 0.5, lr 0.1:
# v1 = v - 0.1 ((v - t1) + 0.5 (v - w)) = v - 0.1 ((-1, 0, 1) + (-0.5, 1.5, 0.75)) = (0.15, 0.85, 1.825)
# v2 = v1 - 0.1 (v1 + 0.5 (v1 - w)) = v1 - 0.1 ((0.15, 0.85, 1.825) + (-0.425, 1.425, 0.6625))
#    = (0.1775, 0.6225, 1.57625)
W, V = [1.0, -2.0, 0.5], [0.0, 1.0, 2.0]
BATCHES = [torch.ones(3), torch.zeros(3)]


def _ditto(client: Client, **settings) -> DittoSteps:
    options = {"personal": torch.tensor(V), "personal_buffers": torch.tensor([5.0, 6.0]), "lam": 0.5, "seed": 7}
    return DittoSteps(client_id=3, **{**options, "epochs": 1, "steps": None, **settings})


def test_the_personal_steps_by_hand_and_the_live_model_is_left_at_the_global_weights():
    client, inner = Client(W, b=[0.5, 0.5], batches=BATCHES), Recorder()
    client.module.eval()
    rule = _ditto(client, inner=inner)
    rule.start(client.flat.params.clone(), client.context)
    report = rule.report()
    torch.testing.assert_close(report["personal"], torch.tensor([0.1775, 0.6225, 1.57625]))
    assert report["personal_buffers"].tolist() == [7.0, 8.0]  # its own buffers, through both steps
    assert report["inner"] == 1  # the inner rule's report, its "personal" overridden
    at = torch.tensor([weights for weights, _ in client.module.steps])  # each step's weights: v, then v1
    torch.testing.assert_close(at, torch.tensor([V, [0.15, 0.85, 1.825]]))
    assert all(training for _, training in client.module.steps)  # in training mode
    assert client.flat.params.tolist() == W and client.flat.buffers.tolist() == [0.5, 0.5]
    assert not bool(client.flat.grads.any())
    ((client_id, generator, epochs, steps),) = client.batches_asked
    assert (client_id, epochs, steps) == (3, 1, None) and generator.initial_seed() == 7
    ((name, params),) = inner.calls
    assert name == "start" and params.tolist() == W  # the inner rule starts from the global model


def test_its_own_lr_and_without_a_personal_model_the_global_one():
    """v = w, one batch t = 0, lr 0.2: v1 = w - 0.2 (w + 0) = 0.8 w; buffers of another size are not loaded."""
    client = Client(W, b=[0.5, 0.5], batches=BATCHES[1:])
    rule = _ditto(client, personal=None, personal_buffers=torch.zeros(5), lr=0.2, epochs=None, steps=1)
    rule.start(client.flat.params.clone(), client.context)
    torch.testing.assert_close(rule.report()["personal"], 0.8 * torch.tensor(W))
    assert rule.report()["personal_buffers"].tolist() == [1.5, 1.5]  # the global buffers, one step
    assert client.batches_asked[0][2:] == (None, 1) and set(rule.report()) == {"personal", "personal_buffers"}


def test_scaled_gradients_are_refused():
    client = Client(W, batches=BATCHES)
    client.context.scales_gradients = True
    with pytest.raises(ConfigError, match="Ditto's personal steps need unscaled gradients"):
        _ditto(client).start(client.flat.params.clone(), client.context)
