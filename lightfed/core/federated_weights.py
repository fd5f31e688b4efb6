"""Which of a module's parameters are federated: those that train (``requires_grad``); the frozen rest (a
pretrained base under LoRA adapters) stays in the module, once per process, and only its checksum travels."""

import hashlib
from fnmatch import fnmatchcase

import torch
from torch import nn

from lightfed.errors import ConfigError

FROZEN_WEIGHTS = "model.frozen_weights"  # the fingerprint's key of the frozen parameters' checksum


def federated_parameters(module: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """The parameters that train, with their names, in ``named_parameters`` order: the flat vectors' layout."""
    return [(name, p) for name, p in module.named_parameters() if p.requires_grad]


def train_only(module: nn.Module, patterns: list[str]) -> None:
    """Freezes every parameter whose name matches none of ``patterns`` (``fnmatch``, e.g. ``*.lora_B.*``); refused
    when they match no trainable parameter."""
    named = list(module.named_parameters())
    chosen = {name for name, _ in named if any(fnmatchcase(name, pattern) for pattern in patterns)}
    if not any(p.requires_grad for name, p in named if name in chosen):
        some = ", ".join(name for name, _ in named[:6])
        raise ConfigError(
            f"trainer.trained_parameters {patterns} match no trainable parameter of {type(module).__name__} "
            f"(names: {some}, ...)"
        )
    for name, p in named:
        if name not in chosen:
            p.requires_grad_(False)


def frozen_fingerprint(module: nn.Module) -> dict[str, str]:
    """``{FROZEN_WEIGHTS: SHA-256 of the frozen parameters}`` (names, shapes, dtypes and bytes), or nothing when every
    parameter trains: a resume or an evaluation on another pretrained base is refused by the run's fingerprint."""
    frozen = [(name, p) for name, p in module.named_parameters() if not p.requires_grad]
    if not frozen:
        return {}
    digest = hashlib.sha256()
    for name, p in frozen:
        digest.update(f"{name}:{tuple(p.shape)}:{p.dtype};".encode())
        digest.update(p.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return {FROZEN_WEIGHTS: f'"{digest.hexdigest()}"'}
