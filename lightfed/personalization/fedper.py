"""FedPer (Arivazhagan et al. 2019): the personal layers (a head) stay on each client; the rest is federated."""

from dataclasses import replace

from lightning import LightningModule
from torch import Tensor

from lightfed.core.local_rule import LocalRule
from lightfed.core.messages import ClientPlan, ClientUpdate
from lightfed.core.sums import Sums
from lightfed.core.transforms import TransformContext
from lightfed.local.personal_layers import PersonalLayers
from lightfed.personalization.personal_coordinates import PersonalCoordinates, declared_patterns, matching
from lightfed.personalization.personalized import PERSONAL, PERSONAL_BUFFERS, Personalized, live_module


class FedPer(Personalized):
    """Clients train all layers jointly from the global body and their own personal layers; the strategy aggregates
    the body only (the personal coordinates of every delta are zeroed, the global model's copy of them never changes).
    A client's personal model is the global body with its own personal layers; one that has not trained yet uses the
    global model's (initial) ones.

    The personal layers are the parameters (and buffers) whose names match ``personal`` (``fnmatch`` patterns over
    ``named_parameters()`` of the model, e.g. ``["net.7.*"]``), or else the model's ``personal_parameters`` attribute.

    In a config:

    ```yaml
    transforms:
      - class_path: lightfed.personalization.FedPer
        init_args: {personal: ["net.9.*"]}
    ```

    Examples:
        The head ``net.3`` of an MLP holds 10 of its 26 weights; they are zeroed in what the strategy gets:

        >>> import torch
        >>> from lightfed import ClientUpdate
        >>> from lightfed.core.transforms import TransformContext
        >>> from lightfed.models import MLP
        >>> from lightfed.personalization import FedPer
        >>> from lightfed.strategies import ServerContext
        >>> model = MLP(in_features=3, num_classes=2, hidden=(4,))
        >>> params = torch.nn.utils.parameters_to_vector(model.parameters())
        >>> fedper = FedPer(personal=["net.3.*"])
        >>> context = TransformContext(ServerContext(params, num_clients=2), {}, module=model)
        >>> fedper.setup(context)
        >>> int(fedper.coordinates.params.sum()), fedper.coordinates.params.numel()
        (10, 26)
        >>> report = {"personal": torch.ones(10), "personal_buffers": torch.zeros(0)}
        >>> update = ClientUpdate(0, torch.ones(26), torch.zeros(0), 10, 1, 1.0, torch.tensor(0.0), report)
        >>> fedper.contribution(update, 0, None).delta.sum()
        tensor(16.)
        >>> FedPer(personal=["head.*"]).setup(context)
        Traceback (most recent call last):
        ...
        lightfed.errors.ConfigError: transforms: FedPer's personal patterns ['head.*'] match 0 of 26 ...
    """

    method = "FedPer"

    def __init__(self, personal: list[str] | None = None) -> None:
        """
        Args:
            personal: Name patterns of the personal parameters, e.g. ``["net.7.*"]``; null: the model's
                ``personal_parameters`` attribute.
        """
        self.personal = personal

    def setup(self, context: TransformContext) -> None:
        super().setup(context)
        self.coordinates = self.personal_coordinates(live_module(context, self.method))

    def personal_coordinates(self, module: LightningModule) -> PersonalCoordinates:
        return matching(module, declared_patterns(module, self.personal, self.method), self.method)

    def plan(self, plan: ClientPlan) -> ClientPlan:
        return replace(plan, rule=self.rule(plan))

    def rule(self, plan: ClientPlan) -> LocalRule:
        """The client's rule: its own layers loaded before training, around the strategy's rule."""
        return PersonalLayers(*self.personal_layers(plan.client_id), plan.rule)

    def personal_layers(self, client_id: int) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None]:
        """The personal coordinates' masks (parameters, buffers) and the client's own values of them (None: none
        yet)."""
        states, coordinates = self.client_states, self.coordinates
        return (
            coordinates.params,
            coordinates.buffers,
            states.get(client_id, PERSONAL),
            states.get(client_id, PERSONAL_BUFFERS),
        )

    def contribution(self, update: ClientUpdate, round: int, sums: Sums) -> ClientUpdate | None:
        """The update with the personal coordinates of its delta zeroed (and its personal weights kept)."""
        mask = self.coordinates.params.to(update.delta.device)
        return super().contribution(replace(update, delta=update.delta.masked_fill(mask, 0.0)), round, sums)

    def stepped(self, before: Tensor, after: Tensor) -> Tensor:
        """The strategy's step with the personal coordinates as they were ``before`` (the global model's copy of them
        never changes)."""
        mask = self.coordinates.params.to(before.device)
        after[mask] = before[mask]
        return after

    def client_model(self, client_id: int, params: Tensor, buffers: Tensor) -> tuple[Tensor, Tensor] | None:
        personal = self.client_states.get(client_id, PERSONAL)
        if personal is None:
            return None
        mixed, mixed_buffers = params.clone(), buffers.clone()
        mixed[self.coordinates.params.to(params.device)] = personal.to(params.device)
        kept = self.client_states.get(client_id, PERSONAL_BUFFERS)
        if kept is not None:
            mixed_buffers[self.coordinates.buffers.to(buffers.device)] = kept.to(buffers.device)
        return mixed, mixed_buffers
