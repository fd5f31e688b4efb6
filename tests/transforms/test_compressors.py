"""Compressors as transforms: QSGD's unbiased quantization, error feedback's residual bookkeeping by hand, the bytes
each sends against a hand count, and the refusal of two encodings of one message."""

import math

import pytest
import torch

from lightfed.core.messages import ClientUpdate
from lightfed.core.server_context import ServerContext
from lightfed.core.sums import Sums
from lightfed.core.transforms import Pipeline, TransformContext
from lightfed.errors import ConfigError
from lightfed.strategies import FedAvg
from lightfed.strategies.requirements import check_transforms
from lightfed.transforms import QSGD, SecureAggregation, SignCompression, TopK
from lightfed.transforms.qsgd import quantized
from tests.conftest import small_data, small_model, small_trainer

D, CLIENTS = 3818, 4  # small_model's parameters (no floating buffers); small_trainer's clients a round
NONE = Sums({}, torch.device("cpu"))


def _update(delta, client_id=0):
    return ClientUpdate(client_id, torch.tensor(delta), torch.zeros(0), 10, 1, 0.1, torch.tensor(0.0))


def _set_up(transform, size):
    transform.setup(TransformContext(ServerContext(torch.zeros(size), num_clients=2), {}))
    return transform


def test_qsgd_rounds_each_value_to_a_neighbouring_level_of_the_norm_and_is_unbiased():
    v = torch.tensor([0.3, -0.4, 0.0, 1.2])  # norm 1.3
    draws = torch.stack([quantized(v, 3, torch.Generator().manual_seed(seed)) for seed in range(20_000)])
    step = 1.3 / 3  # three levels of the norm
    levels = draws / step
    assert torch.allclose(levels, levels.round(), atol=1e-5)  # every value on a level
    assert ((draws - v).abs() <= step + 1e-6).all() and (draws[:, 2] == 0).all()  # a neighbouring one; 0 stays 0
    assert (torch.sign(draws[draws != 0]) == torch.sign(v.expand_as(draws)[draws != 0])).all()
    # E[q_i] = v_i: |v_i| / step = 0.692..., 0.923..., 2.769...: Bernoulli(the fraction) rounds up
    standard_error = step / math.sqrt(len(draws))
    assert torch.allclose(draws.mean(0), v, atol=4 * standard_error)
    assert torch.equal(quantized(torch.zeros(3), 3, torch.Generator()), torch.zeros(3))


def test_top_k_keeps_the_largest_and_feeds_the_rest_back_by_hand():
    top = _set_up(TopK(fraction=0.5), 4)  # k = 2
    first = top.contribution(_update([4.0, -1.0, 2.0, 0.5]), 0, NONE)
    assert first.delta.tolist() == [4.0, 0.0, 2.0, 0.0]
    assert top.client_states.get(0, "residual").tolist() == [0.0, -1.0, 0.0, 0.5]
    second = top.contribution(_update([1.0, 0.2, 3.0, 1.0]), 1, NONE)  # + residual: [1, -0.8, 3, 1.5]
    assert second.delta.tolist() == [0.0, 0.0, 3.0, 1.5]
    assert torch.allclose(top.client_states.get(0, "residual"), torch.tensor([1.0, -0.8, 0.0, 0.0]))
    # what was sent and what is kept add up to every delta the client trained
    total = first.delta + second.delta + top.client_states.get(0, "residual")
    assert torch.allclose(total, torch.tensor([5.0, -0.8, 5.0, 1.5]))


def test_sign_compression_sends_the_mean_magnitude_with_each_sign_and_keeps_the_rest():
    sign = _set_up(SignCompression(), 4)
    sent = sign.contribution(_update([1.0, -2.0, 3.0, -4.0]), 0, NONE)
    assert sent.delta.tolist() == [2.5, -2.5, 2.5, -2.5]  # ||v||_1 / d = 10 / 4
    assert sign.client_states.get(0, "residual").tolist() == [-1.5, 0.5, 0.5, -1.5]


@pytest.mark.parametrize(
    ("transform", "delta_bytes"),
    [
        (QSGD(bits=4), math.ceil(D * 5 / 8) + 4),  # 4 bits and a sign a value, and the norm
        (TopK(fraction=0.01), 8 * math.ceil(0.01 * D)),  # 39 (index, value) pairs
        (SignCompression(), math.ceil(D / 8) + 4),  # a bit a value, and the scale
    ],
    ids=["qsgd", "top-k", "sign"],
)
def test_each_client_sends_the_compressed_delta_and_its_counts(tmp_path, transform, delta_bytes):
    trainer = small_trainer(tmp_path, rounds=1)
    trainer.fit(small_model(), small_data(), FedAvg(), transforms=[transform])
    assert trainer.last_metrics["communication/sent_bytes"] == CLIENTS * (delta_bytes + 16)


def test_two_encodings_of_one_message_are_refused():
    with pytest.raises(ConfigError, match="QSGD and SecureAggregation each encode what a client sends"):
        check_transforms(FedAvg(), Pipeline([QSGD(), SecureAggregation()]), asynchronous=False)
    with pytest.raises(ConfigError, match="TopK's fraction must be in"):
        TopK(fraction=0)


@pytest.mark.parametrize("where", ["memory", "disk"])
def test_the_residuals_are_checkpointed_and_a_resume_ends_with_the_uninterrupted_weights(tmp_path, where):
    def fit(root, rounds, ckpt_path=None):
        trainer = small_trainer(root, rounds=rounds, client_states=where, clients_per_round=8)
        trainer.fit(small_model(), small_data(), FedAvg(), transforms=[TopK(fraction=0.1)], ckpt_path=ckpt_path)
        return trainer.params

    whole = fit(tmp_path / "whole", 3)
    fit(tmp_path / "resumed", 2)
    assert torch.equal(fit(tmp_path / "resumed", 3, "last"), whole)  # every client trained twice before the stop
