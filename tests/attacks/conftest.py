"""Shared by the attack tests: known updates to collude from, and an attack set up with one malicious and one benign
client picked out."""

import torch

from lightfed.attacks import Attack

# four known updates of three coordinates (rows: clients in increasing id order)
KNOWN = torch.tensor([[1.0, -2.0, 0.5], [3.0, 0.0, 0.5], [2.0, 4.0, -1.0], [0.0, 1.0, 2.0]])


def attacked(attack: Attack, num_clients: int = 10, seed: int = 0) -> tuple[Attack, int, int]:
    """``attack`` set up for ``num_clients`` clients, its smallest malicious client id and its smallest benign one."""
    attack.draw(num_clients, seed)
    return attack, min(attack.malicious), min(set(range(num_clients)) - attack.malicious)
