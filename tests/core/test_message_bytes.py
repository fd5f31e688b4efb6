"""What clients receive, against a hand count: each client's global weights and the vectors sent beside them."""

import torch

from lightfed.core.message_bytes import received_bytes


def test_every_client_receives_its_weights_and_its_vectors_shared_weights_sized_once_but_counted_each():
    params, buffers = torch.zeros(10), torch.zeros(3, dtype=torch.float64)  # 40 + 24 bytes
    stale = (torch.zeros(10), torch.zeros(3, dtype=torch.float64))  # an older model: other tensors, the same sizes
    control = {"c": torch.zeros(10), "scale": torch.zeros((), dtype=torch.float16)}  # 40 + 2 bytes
    weights = [(params, buffers), (params, buffers), stale, (params, torch.zeros(0))]
    vectors = [{}, control, control, {}]
    assert received_bytes(weights, vectors) == 64 + (64 + 42) + (64 + 42) + 40
    assert received_bytes([], []) == 0
