"""Empirical privacy auditing: canary clients and the one-shot estimate of epsilon (Andrew et al., ICLR 2024),
membership inference against the final model (loss threshold, offline LiRA), and ``lightfed audit``."""

from lightfed.audit.canaries import Canaries
from lightfed.audit.silent_clients import SilentClients

__all__ = ["Canaries", "SilentClients"]
