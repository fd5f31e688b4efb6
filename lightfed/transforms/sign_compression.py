"""Scaled sign compression with error feedback (EF-SignSGD, Karimireddy et al. 2019): a bit a value and one scale."""

import math

import torch
from torch import Tensor

from lightfed.transforms.error_feedback import ErrorFeedback


class SignCompression(ErrorFeedback):
    """Sends ||v||_1 / d x sign(v) of v = delta + residual (one bit a value and a 32-bit scale); the rest stays in the
    client's residual."""

    def compressed(self, vector: Tensor) -> Tensor:
        return torch.sign(vector) * (vector.abs().sum() / vector.numel())

    def delta_bytes(self) -> int:
        return math.ceil(self.numel / 8) + 4
