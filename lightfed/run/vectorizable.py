"""Whether a client's training runs vectorized: the optimizers, hooks and settings stacked clients train exactly
with, and the convolution settings under which they compute as each client alone."""

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from lightning import LightningModule

from lightfed.errors import ConfigError
from lightfed.privacy.dp_sgd import DPSGD
from lightfed.run.client import ClientTrainer
from lightfed.run.trainer_view import DiffersByClient

# elementwise optimizers whose one optimizer over stacked rows is tested to be one optimizer per client
ELEMENTWISE = (torch.optim.SGD, torch.optim.Adam, torch.optim.AdamW, torch.optim.Adagrad, torch.optim.RMSprop)
HOOKS = (
    "on_train_start",
    "on_train_epoch_start",
    "on_train_batch_start",
    "on_before_backward",
    "on_after_backward",
    "on_before_optimizer_step",
    "on_train_batch_end",
    "on_train_epoch_end",
    "on_train_end",
)


def why_not_vectorized(client: ClientTrainer) -> str | None:
    """Why ``client``'s training cannot run vectorized (None: it can); the plans' own limits are checked per job."""
    module, optimizer = client.module, client.optimizer.optimizer
    overridden = [hook for hook in HOOKS if getattr(type(module), hook) is not getattr(LightningModule, hook)]
    privacy = client.privacy
    reasons = {
        f"trainer.privacy {type(privacy).__name__} trains one client at a time (DPSGD vectorizes)": (
            privacy.private and not isinstance(privacy, DPSGD)
        ),
        "trainer.privacy.secure_mode draws from Opacus' secure generator, one client at a time": (
            isinstance(privacy, DPSGD) and privacy.secure_mode
        ),
        f"the model's optimizer {type(optimizer).__name__} is not one it steps per client (SGD, Adam, AdamW, Adagrad, "
        "RMSprop)": (type(optimizer) not in ELEMENTWISE),
        f"the model overrides the training hooks {overridden}": bool(overridden),
        "trainer.precision must be 32-true or bf16-mixed": (
            getattr(client.fabric.strategy.precision, "precision", "") not in ("32-true", "bf16-mixed")
        ),
    }
    return next((reason for reason, holds in reasons.items() if holds), None)


@contextmanager
def exact_convolutions(device: torch.device) -> Iterator[None]:
    """On a GPU, cuDNN's deterministic algorithms in full float32 (no TF32) while stacked clients train, the previous
    settings restored after. With PyTorch's defaults (TF32 allowed, any algorithm) the clients' convolutions, batched
    under ``vmap``, computed otherwise than each client's alone: the quickstart trained vectorized for 2 rounds on an
    H200 ended 9.4e-3 from one client at a time, and 8.2e-8 with torch's deterministic algorithms and no TF32 at all,
    which these settings narrow to cuDNN's convolutions (docs/results/performance-gpu.md)."""
    cudnn = torch.backends.cudnn
    saved = cudnn.deterministic, cudnn.benchmark, cudnn.allow_tf32
    if device.type == "cuda":
        cudnn.deterministic, cudnn.benchmark, cudnn.allow_tf32 = True, False, False
    try:
        yield
    finally:
        cudnn.deterministic, cudnn.benchmark, cudnn.allow_tf32 = saved


def _draws_under_vmap(error: Exception) -> bool:
    """Whether ``error`` is vmap's refusal of a random draw (``randomness="error"``)."""
    return isinstance(error, RuntimeError) and "called random operation" in str(error)


def training_step_refusal(error: Exception, name: str, private: bool) -> ConfigError | None:
    """The refusal, in one line, of the module ``name`` whose ``training_step`` failed with ``error`` on stacked
    clients (it read what differs between them, or drew a random number under vmap; ``private``: under DP-SGD); None
    for another error."""
    if isinstance(error, DiffersByClient):
        return ConfigError(f"trainer.clients_in_parallel vectorized: {name} {error}: set it to 'auto' or 1")
    if not _draws_under_vmap(error):
        return None
    where = (
        "every example's gradient under DP-SGD is taken under vmap"
        if private
        else "dropout is supported on batched matmuls, e.g. lightfed's MLP"
    )
    return ConfigError(
        f"trainer.clients_in_parallel vectorized: {name} draws random numbers in training_step under vmap, which "
        f"cannot give each client its own ({where}): set it to 'auto' or 1"
    )
