"""What every compressor has: it encodes each client's delta, whose size replaces the plain delta's in what the
client sends."""

from abc import abstractmethod

from lightfed.core.requirements import Requirements
from lightfed.core.transforms import Transform, TransformContext


class Compressor(Transform):
    """Encodes what a client sends (one encoding per message: ``Requirements.encodes``); its ``delta_bytes`` replace
    the delta's 32-bit values in ``communication/sent_bytes``."""

    @property
    def requirements(self) -> Requirements:
        return Requirements(encodes=True)

    def setup(self, context: TransformContext) -> None:
        self.numel = context.server.num_params

    @abstractmethod
    def delta_bytes(self) -> int:
        """The bytes of a compressed delta."""

    def sent_bytes(self, size: int, client_id: int, round: int) -> int:
        """The plain message with the delta's 32-bit values replaced by the compressed delta (nothing: nothing)."""
        return size and size - 4 * self.numel + self.delta_bytes()
