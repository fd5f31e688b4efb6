"""What every personalization method has: a transform whose clients keep a model of their own in its per-client
store."""

from dataclasses import replace

from lightning import LightningModule
from torch import Tensor

from lightfed.core.client_states import ProcessStore
from lightfed.core.messages import ClientUpdate
from lightfed.core.requirements import Requirements, Sent
from lightfed.core.sums import Sums
from lightfed.core.transforms import Transform, TransformContext
from lightfed.data.module import FederatedDataModule
from lightfed.errors import ConfigError

PERSONAL, PERSONAL_BUFFERS = "personal", "personal_buffers"  # names in the client store and in a client's report


class Personalized(Transform):
    """The strategy (of the synchronous sums path: FedAvg, FedProx, FedAdam, ...) trains the global model; each client
    also keeps personal weights (``personal``, and ``personal_buffers``) in this transform's per-client store
    (``client_states``), which its local rule (set in ``plan``) reports after training and ``contribution`` takes out
    of what the client sends. Like SCAFFOLD's control variates they live on the process that trains the client
    (client i on process i % world size), are saved in that process's checkpoint file and restored for any number of
    processes.

    ``client_model`` gives the weights a client is evaluated with (a client has none before it trains).

    In a config, a method of this family is listed under ``transforms:``, in front of the strategy:

    ```yaml
    strategy: {class_path: lightfed.strategies.FedAvg}
    transforms:
      - class_path: lightfed.personalization.FedPer
        init_args: {personal: ["net.9.*"]}
    ```

    Examples:
        A client's reported personal weights are kept, and it is evaluated with them:

        >>> import torch
        >>> from lightfed import ClientUpdate
        >>> from lightfed.core.transforms import TransformContext
        >>> from lightfed.personalization import Personalized
        >>> from lightfed.strategies import ServerContext
        >>> personalized = Personalized()
        >>> personalized.setup(TransformContext(ServerContext(torch.zeros(2), num_clients=2), {}))
        >>> report = {"personal": torch.tensor([1.0, 2.0]), "personal_buffers": torch.zeros(0)}
        >>> update = ClientUpdate(0, torch.zeros(2), torch.zeros(0), 10, 1, 1.0, torch.tensor(0.0), report)
        >>> personalized.contribution(update, 0, None).report
        {}
        >>> personalized.client_model(0, params=torch.zeros(2), buffers=torch.zeros(0))
        (tensor([1., 2.]), tensor([]))
        >>> personalized.client_model(1, params=torch.zeros(2), buffers=torch.zeros(0)) is None
        True
    """

    keeps_client_models = True
    keeps_norm_bounds = True  # it takes the personal weights out of a client's report and at most zeroes coordinates
    own_requirements = Requirements(
        client_state=True, sends=frozenset({Sent(PERSONAL, "kept"), Sent(PERSONAL_BUFFERS, "kept")}), sums_path=True
    )

    @property
    def requirements(self) -> Requirements:
        return self.own_requirements

    def setup(self, context: TransformContext) -> None:
        self.client_states = context.server.client_store()

    def contribution(self, update: ClientUpdate, round: int, sums: Sums) -> ClientUpdate | None:
        """Keeps the client's reported personal weights; the strategy gets the rest of its update."""
        report = dict(update.report)
        self.client_states.set(update.client_id, PERSONAL, report.pop(PERSONAL))
        self.client_states.set(update.client_id, PERSONAL_BUFFERS, report.pop(PERSONAL_BUFFERS))
        return replace(update, report=report)

    def client_model(self, client_id: int, params: Tensor, buffers: Tensor) -> tuple[Tensor, Tensor] | None:
        """The client's personal weights when the global model is ``params``/``buffers``; None before it has trained
        (on the process that holds its state)."""
        personal = self.client_states.get(client_id, PERSONAL)
        if personal is None:
            return None
        return personal.to(params.device), self._personal_buffers(client_id, buffers)

    def _personal_buffers(self, client_id: int, buffers: Tensor) -> Tensor:
        kept = self.client_states.get(client_id, PERSONAL_BUFFERS)
        return buffers if kept is None or kept.numel() != buffers.numel() else kept.to(buffers.device)

    def stores(self) -> dict[str, ProcessStore]:
        return {"clients": self.client_states}


def live_module(context: TransformContext, method: str) -> LightningModule:
    """The run's live module, which ``method`` reads its personal parameters' names from."""
    if context.module is None:
        raise ConfigError(f"transforms: {method} is set up with the live module (the trainer gives it); none given")
    return context.module


def run_data(context: TransformContext, method: str) -> FederatedDataModule:
    """The run's data, which ``method`` reads its clients' sizes from."""
    if context.data is None:
        raise ConfigError(f"transforms: {method} is set up with the run's data (the trainer gives it); none given")
    return context.data
