"""Per-client persistent state (control variates and the like), kept where the client trains."""

import torch
from torch import Tensor


class ClientStates:
    """Named tensors per client, held on the CPU by default (memory: one vector per client and name).

    With several processes each process holds the clients it trains (client ``i`` trains on process
    ``i % world_size``); the trainer gathers all of them into checkpoints.
    """

    def __init__(self, device: torch.device | str = "cpu") -> None:
        self.device = torch.device(device)
        self._states: dict[int, dict[str, Tensor]] = {}

    def get(self, client_id: int, name: str) -> Tensor | None:
        return self._states.get(client_id, {}).get(name)

    def set(self, client_id: int, name: str, value: Tensor) -> None:
        self._states.setdefault(client_id, {})[name] = value.detach().to(self.device, copy=True)

    def __len__(self) -> int:
        return len(self._states)

    def state_dict(self) -> dict[int, dict[str, Tensor]]:
        return {client_id: dict(state) for client_id, state in self._states.items()}

    def load_state_dict(self, state: dict[int, dict[str, Tensor]]) -> None:
        self._states = {client_id: {k: v.to(self.device) for k, v in s.items()} for client_id, s in state.items()}
