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
