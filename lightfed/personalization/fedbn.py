"""FedBN (Li et al. 2021): every BatchNorm layer, its weights and its running statistics, stays on its client."""

from lightning import LightningModule

from lightfed.personalization.fedper import FedPer
from lightfed.personalization.personal_coordinates import PersonalCoordinates, batchnorm_coordinates


class FedBN(FedPer):
    """``FedPer`` whose personal layers are the model's BatchNorm layers: their weight, bias, running mean and running
    variance are trained and kept by each client and never averaged; everything else is aggregated by the strategy.
    (The global model's own BatchNorm statistics, the engine's average over a round's clients, serve only to evaluate
    the global model and never reach a client that has trained.)

    In a config:

    ```yaml
    model:
      class_path: lightfed.models.batchnorm_cnn.SmallBNCNN
    transforms:
      - class_path: lightfed.personalization.FedBN
    ```

    Examples:
        SmallBNCNN's two BatchNorm layers hold 24 weights and 24 running statistics:

        >>> import torch
        >>> from lightfed.core.transforms import TransformContext
        >>> from lightfed.models.batchnorm_cnn import SmallBNCNN
        >>> from lightfed.personalization import FedBN
        >>> from lightfed.strategies import ServerContext
        >>> model = SmallBNCNN(width=4)
        >>> params = torch.nn.utils.parameters_to_vector(model.parameters())
        >>> fedbn = FedBN()
        >>> fedbn.setup(TransformContext(ServerContext(params, num_clients=2), {}, module=model))
        >>> int(fedbn.coordinates.params.sum()), int(fedbn.coordinates.buffers.sum())
        (24, 24)
    """

    method = "FedBN"

    def __init__(self) -> None:
        super().__init__()

    def personal_coordinates(self, module: LightningModule) -> PersonalCoordinates:
        return batchnorm_coordinates(module)
