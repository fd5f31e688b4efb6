"""What a client of vectorized training holds in memory, and how much a chunk of clients may hold: its rows of the
stacked weights, gradients and optimizer state, the activations its step keeps for the backward pass, and under
DP-SGD its examples' rows."""

import itertools

import torch
from torch import Tensor

from lightfed.core.logged_values import LoggedValues
from lightfed.core.training_loss import training_loss
from lightfed.privacy import DPSGD
from lightfed.run.client import ClientTrainer
from lightfed.run.stacked_batches import examples

MAX_CHUNK_BYTES = 2**30  # what a chunk of clients may hold on a CPU (and under clients_in_parallel auto)
WEIGHT_COPIES = 5  # weights, gradients and up to three optimizer states (Adam's two moments, a step)
EXAMPLE_COPIES = 3  # under DP-SGD, per example: a row of the weights, its gradient and its clipped copy


def client_bytes(client: ClientTrainer) -> int:
    """A client's bytes in a chunk: ``WEIGHT_COPIES`` of its flat parameters (and ``EXAMPLE_COPIES`` per example of
    a batch under DP-SGD), and the tensors autograd keeps for the backward pass of one step of a full batch, measured
    on the first batch of client 0 as its first step (``self.trainer`` says so; the module in eval mode, its parameters
    and buffers as they were after) and scaled to ``batch_size`` examples."""
    flat = client.flat.params
    batch = next(iter(client.data.client_batches(0, torch.Generator().manual_seed(0), steps=1)))
    kept = 0

    def pack(tensor: Tensor) -> Tensor:
        nonlocal kept
        kept += tensor.numel() * tensor.element_size()
        return tensor

    module, training = client.module, client.module.training
    saved = [(tensor, tensor.detach().clone()) for tensor in itertools.chain(module.parameters(), module.buffers())]
    module.eval()
    client.view._enter("train", 0, 0)
    try:
        with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            with LoggedValues().attached(module):
                training_loss(module, batch, 0)
    finally:
        client.view._enter("")
        module.train(training)
        with torch.no_grad():
            for tensor, before in saved:
                tensor.copy_(before)
    batch_size = client.data.batch_size
    copies = WEIGHT_COPIES + (EXAMPLE_COPIES * batch_size if isinstance(client.privacy, DPSGD) else 0)
    return copies * flat.numel() * flat.element_size() + kept * batch_size // max(1, examples(batch))


def chunk_budget(device: torch.device, fixed: bool) -> int:
    """What a chunk of clients may hold: ``MAX_CHUNK_BYTES``, or on a GPU half its free memory (not ``fixed``: the
    chunks then depend on the device, as explicit vectorized training's balanced shares may)."""
    if fixed or device.type != "cuda":
        return MAX_CHUNK_BYTES
    return torch.cuda.mem_get_info(device)[0] // 2
