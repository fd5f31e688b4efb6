"""Biased compressors with error feedback (Seide et al. 2014; Karimireddy et al. 2019): each client adds what its
compressor left out of its earlier messages to its delta before compressing, and keeps the new remainder."""

from abc import abstractmethod
from dataclasses import replace

from torch import Tensor

from lightfed.core.client_states import ClientStates, ProcessStore
from lightfed.core.messages import ClientUpdate
from lightfed.core.requirements import Requirements
from lightfed.core.sums import Sums
from lightfed.core.transforms import TransformContext
from lightfed.transforms.compressor import Compressor

RESIDUAL = "residual"  # a client's remainder, in the transform's per-client store


class ErrorFeedback(Compressor):
    """Sends ``compressed(delta + residual)``; the residual becomes what that left out. The residual lives in the
    per-client store (``trainer.client_states``: in memory or on disk), on the process that trains the client."""

    @property
    def requirements(self) -> Requirements:
        return super().requirements | Requirements(client_state=True)

    def setup(self, context: TransformContext) -> None:
        super().setup(context)
        self.client_states: ClientStates = context.server.client_store()

    @abstractmethod
    def compressed(self, vector: Tensor) -> Tensor:
        """What the client sends of ``vector`` (decoded: a vector of its length)."""

    def contribution(self, update: ClientUpdate, round: int, sums: Sums) -> ClientUpdate:
        residual = self.client_states.get(update.client_id, RESIDUAL)
        corrected = update.delta if residual is None else update.delta + residual.to(update.delta.device)
        sent = self.compressed(corrected)
        self.client_states.set(update.client_id, RESIDUAL, corrected - sent)
        return replace(update, delta=sent)

    def stores(self) -> dict[str, ProcessStore]:
        return {"clients": self.client_states}
