"""Simulated attacks on federated training (``trainer.attack``): a fraction of the clients, drawn from the run's seed,
is malicious; one file per attack."""

from lightfed.attacks.backdoor import Backdoor
from lightfed.attacks.base import Attack, NoAttack, malicious_clients
from lightfed.attacks.collusion import ColludingAttack
from lightfed.attacks.gaussian import GaussianUpdates
from lightfed.attacks.label_flipping import LabelFlipping
from lightfed.attacks.little_is_enough import LittleIsEnough
from lightfed.attacks.min_max import MinMax
from lightfed.attacks.scaling import Scaling
from lightfed.attacks.sign_flipping import SignFlipping

__all__ = [
    "Attack",
    "NoAttack",
    "Backdoor",
    "ColludingAttack",
    "GaussianUpdates",
    "LabelFlipping",
    "LittleIsEnough",
    "MinMax",
    "Scaling",
    "SignFlipping",
    "malicious_clients",
]
