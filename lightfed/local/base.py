"""The place where an algorithm changes a client's local steps."""

from abc import ABC, abstractmethod

from torch import Tensor


class LocalRule(ABC):
    """Changes every local step of one client: applied to the flat gradient between the backward pass and the step
    of the user's own optimizer. A strategy builds one per client in ``configure_client``."""

    def start(self, params: Tensor) -> None:
        """Called with the global parameters (flat, read-only) before the client's first step."""

    @abstractmethod
    def adjust(self, grad: Tensor, params: Tensor) -> None:
        """Changes the flat gradient ``grad`` in place; ``params`` are the client's current flat parameters."""
