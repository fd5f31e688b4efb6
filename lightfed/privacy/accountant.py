"""Opacus privacy accountants kept per client, as float64 tensors in the client state store."""

from __future__ import annotations

import math
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor

if TYPE_CHECKING:  # Opacus is imported by the runs that use it
    from opacus.accountants.accountant import IAccountant

STATE = "privacy/accountant"  # rows (noise multiplier, sample rate, steps) of an accountant's history


def poisson_schedule(num_examples: int, batch_size: int) -> tuple[float, int]:
    """Sample rate and steps per epoch of Opacus' Poisson sampling (``DPDataLoader``) for one client's data."""
    sample_rate = 1 / math.ceil(num_examples / batch_size)
    return sample_rate, int(1 / sample_rate)


def load_accountant(mechanism: str, state: Tensor | None) -> IAccountant:
    """An Opacus accountant ("rdp", "prv", ...) with the history saved in ``state`` (None: a fresh one)."""
    from opacus.accountants import create_accountant

    accountant = create_accountant(mechanism)
    if state is not None:
        accountant.history = [(float(s), float(q), int(n)) for s, q, n in state.tolist()]
    return accountant


def accountant_state(accountant: IAccountant) -> Tensor:
    return torch.tensor(accountant.history, dtype=torch.float64).reshape(-1, 3)


def compose(accountant: IAccountant, noise_multiplier: float, sample_rate: float, steps: int) -> None:
    """Adds ``steps`` steps of the subsampled Gaussian mechanism, as that many ``accountant.step`` calls would."""
    history = accountant.history
    if history and history[-1][:2] == (noise_multiplier, sample_rate):
        history[-1] = (noise_multiplier, sample_rate, history[-1][2] + steps)
    else:
        history.append((noise_multiplier, sample_rate, steps))


@lru_cache(maxsize=4096)
def _rdp_of_one_step(noise_multiplier: float, sample_rate: float) -> np.ndarray:
    from opacus.accountants import RDPAccountant
    from opacus.accountants.analysis.rdp import compute_rdp

    return compute_rdp(q=sample_rate, noise_multiplier=noise_multiplier, steps=1, orders=RDPAccountant.DEFAULT_ALPHAS)


def spent_epsilon(accountant: IAccountant, delta: float) -> float:
    """``accountant.get_epsilon(delta)``; for RDP the per-step Renyi divergences are cached (RDP adds up over steps),
    which gives exactly the accountant's number without recomputing it for every client and round."""
    from opacus.accountants import RDPAccountant
    from opacus.accountants.analysis.rdp import get_privacy_spent

    if not isinstance(accountant, RDPAccountant):
        return float(accountant.get_epsilon(delta=delta))
    if not accountant.history:
        return 0.0
    rdp = sum(_rdp_of_one_step(noise, rate) * steps for noise, rate, steps in accountant.history)
    eps, _ = get_privacy_spent(orders=RDPAccountant.DEFAULT_ALPHAS, rdp=rdp, delta=delta)
    return float(eps)
