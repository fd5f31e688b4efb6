from types import SimpleNamespace

import torch

from lightfed.local.loss_at_global import LOSS_AT_GLOBAL, LossAtGlobal
from tests.local.conftest import Client, Recorder

EXAMPLES = torch.tensor([[0.0, 0.0, 0.0], [1.0, 1.0, 0.0], [3.0, 0.0, 0.0]])


def _client() -> Client:
    client = Client([1.0, 0.0, 0.0])
    client.context.data = SimpleNamespace(  # type: ignore[assignment]
        client_size=lambda client_id: 3,
        eval_batch_size=2,
        client_subset=lambda client_id, positions, generator: EXAMPLES[positions],
    )
    return client


def test_loss_at_the_received_weights_by_hand():
    # F = 0.5 sum over a batch's rows of ||w - t||^2 at w = (1, 0, 0): batch (t1, t2): 0.5 (1 + 1) = 1; batch (t3):
    # 0.5 * 4 = 2; weighted by the batch sizes: (2 * 1 + 1 * 2) / 3 = 4/3
    client, inner = _client(), Recorder()
    rule = LossAtGlobal(0, seed=0, inner=inner)
    rule.start(client.flat.params.clone(), client.context)
    assert rule.report() == {"inner": 1, "personal": -1, LOSS_AT_GLOBAL: 4 / 3}
    assert [training for _, training in client.module.steps] == [False, False]  # evaluated in eval mode
    assert client.module.training and inner.calls[0][0] == "start"  # then back to training; the inner rule started
    assert LOSS_AT_GLOBAL in rule.requirements.sent_names and rule.requirements.reads_each_update  # its and inner's
