"""FedBN (Li et al. 2021): every BatchNorm layer, its weights and its running statistics, stays on its client."""

from lightning import LightningModule

from lightfed.personalization.fedper import FedPer
from lightfed.personalization.personal_coordinates import PersonalCoordinates, batchnorm_coordinates


class FedBN(FedPer):
    """``FedPer`` whose personal layers are the model's BatchNorm layers: their weight, bias, running mean and running
    variance are trained and kept by each client and never averaged; everything else is aggregated by the strategy.
    (The global model's own BatchNorm statistics, the engine's average over a round's clients, serve only to evaluate
    the global model and never reach a client that has trained.)"""

    method = "FedBN"

    def __init__(self) -> None:
        super().__init__()

    def personal_coordinates(self, module: LightningModule) -> PersonalCoordinates:
        return batchnorm_coordinates(module)
