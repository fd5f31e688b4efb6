"""FedBN (Li et al. 2021): every BatchNorm layer, its weights and its running statistics, stays on its client."""

from lightning import LightningModule

from lightfed.personalization.fedper import FedPer
from lightfed.personalization.personal_coordinates import PersonalCoordinates, batchnorm_coordinates
from lightfed.strategies.base import Strategy


class FedBN(FedPer):
    """``FedPer`` whose personal layers are the model's BatchNorm layers: their weight, bias, running mean and running
    variance are trained and kept by each client and never averaged; everything else is aggregated by ``strategy``.
    (The global model's own BatchNorm statistics, the engine's average over a round's clients, serve only to evaluate
    the global model and never reach a client that has trained.)"""

    method = "FedBN"

    def __init__(self, strategy: Strategy) -> None:
        """
        Args:
            strategy: The strategy that aggregates all but the BatchNorm layers (sums path: FedAvg, FedProx, ...).
        """
        super().__init__(strategy)

    def personal_coordinates(self, module: LightningModule) -> PersonalCoordinates:
        return batchnorm_coordinates(module)
