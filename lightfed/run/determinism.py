"""``trainer.deterministic``: PyTorch's deterministic algorithms for a run, as Lightning's ``Trainer(deterministic=...)``."""

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

import torch

Deterministic = bool | Literal["warn"]


@contextmanager
def deterministic_algorithms(deterministic: Deterministic) -> Iterator[None]:
    """While the block runs, with ``deterministic`` true: torch's deterministic algorithms (an op that has none raises;
    "warn": it warns instead), cuDNN's benchmark off, and cuBLAS' fixed workspace (``CUBLAS_WORKSPACE_CONFIG``, unless
    set), so that a run on a GPU repeats bit for bit; the previous settings restored after. False: as they are."""
    if not deterministic:
        yield
        return
    saved = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        torch.backends.cudnn.benchmark,
    )
    torch.use_deterministic_algorithms(True, warn_only=deterministic == "warn")
    torch.backends.cudnn.benchmark = False
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(saved[0], warn_only=saved[1])
        torch.backends.cudnn.benchmark = saved[2]
