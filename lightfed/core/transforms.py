"""Transforms: the stages an update goes through between a client's training and the strategy, as one flat list.

Each transform has a client half, ``contribution`` (the update a client sends, given the round), and a server half,
``recovered`` (run on the round's reduced sums before the strategy reads them). A ``Pipeline`` runs the client halves
in the listed order, each on the previous one's output, and the server halves in reverse order; no transform sees
another. The strategy (its server path: sums, asynchronous or coordinate shards) takes what the last transform gives,
so a transform stands in front of any strategy (norm bounding in front of Krum).

A transform that ``seals`` (secure aggregation) stands last: it receives the client's whole contribution to the
round's sums (the strategy's and the transforms' before it) and adds its sealed form into its own sums instead; its
server half writes the plain sums back before the others read them.

A transform that ``bounds_norm`` (a clip: UserLevelDP, NormBounding) sets a bound that the noise or the defence after it
assumes of every delta clients send; each transform after it must keep that bound (``keeps_norm_bounds``): a
compressor stands before it.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from lightning import LightningModule
from torch import Tensor

from lightfed.core.client_states import ProcessStore
from lightfed.core.message_bytes import sent_bytes
from lightfed.core.messages import ClientPlan, ClientUpdate
from lightfed.core.requirements import Requirements
from lightfed.core.server_context import ServerContext
from lightfed.core.sums import Sums
from lightfed.data.module import FederatedDataModule
from lightfed.errors import ConfigError

Accumulate = Callable[[Sums, ClientUpdate], None]  # the server path's: adds one update into the sums given


@dataclass(frozen=True)
class TransformContext:
    """What a transform is set up with, once per run (and before a resume)."""

    server: ServerContext
    strategy_sums: dict[str, int]  # the sums the strategy's server path adds into (name: length)
    cohort: Callable[[int], list[int]] | None = None  # a synchronous round's clients, as the run samples them
    module: LightningModule | None = None  # the live module (names of its parameters and buffers)
    data: FederatedDataModule | None = None  # the run's data (its clients' sizes)
    sealed: dict[str, int] | None = None  # for a sealing transform: the sums a client's contribution covers (the
    # strategy's, then the transforms' before it)


class Transform:
    """One stage of the pipeline; the base changes nothing."""

    seals = False  # whether ``seal`` replaces the client's contribution to the sums (it then stands last)
    bounds_norm = False  # whether every delta it sends has an L2 norm at most a bound it sets (a clip)
    noises_deltas = False  # whether it adds noise to the deltas it sends (a clip after it would shrink that noise)
    keeps_client_models = False  # whether ``client_model`` gives clients models of their own (personalization)

    @property
    def requirements(self) -> Requirements:
        """What it needs of the run, checked with the strategy's in one place (``check_requirements``)."""
        return Requirements()

    @property
    def keeps_norm_bounds(self) -> bool:
        """Whether no delta it sends is longer in L2 than the one it got, so that a bound set before it still holds.
        Default: where it seals, bounds norms itself, or its class changes no update."""
        return self.seals or self.bounds_norm or type(self).contribution is Transform.contribution

    def setup(self, context: TransformContext) -> None:
        """Called once before the first round (and before a resume)."""

    def plan(self, plan: ClientPlan) -> ClientPlan:
        """The client's plan for its round, after the strategy configured it."""
        return plan

    def sum_sizes(self) -> dict[str, int]:
        """The sums it adds into (name: length), reduced over every process with the round's own."""
        return {}

    def contribution(self, update: ClientUpdate, round: int, sums: Sums) -> ClientUpdate | None:
        """What the client sends instead of ``update`` in round ``round`` (0-based; None: nothing); may add into its
        ``sums``."""
        return update

    def passes(self, client_ids: Sequence[int]) -> bool:
        """Whether the updates of ``client_ids`` go through unchanged, each sending what it sends as trained (the
        round engine then adds clients trained together as rows). Default: where its class changes no update."""
        cls = type(self)
        return not self.seals and cls.contribution is Transform.contribution and cls.sent_bytes is Transform.sent_bytes

    def seal(self, contribution: Tensor, client_id: int, round: int, sums: Sums) -> None:
        """Adds the sealed form of a client's ``contribution`` (the sums ``TransformContext.sealed`` names, packed)
        into its own ``sums`` (only when ``seals``)."""
        raise NotImplementedError

    def sent_bytes(self, size: int, client_id: int, round: int) -> int:
        """The bytes client ``client_id`` sends in ``round`` when the transforms before this one would send ``size``
        (an encoding's own size: a sealed or compressed message). Default: ``size``."""
        return size

    def recovered(self, sums: Sums, round: int) -> None:
        """Reads, and may change, the round's reduced ``sums`` before the strategy reads them."""

    def stepped(self, before: Tensor, after: Tensor) -> Tensor:
        """The next global parameters, from those ``before`` the round and the strategy's step (``after``)."""
        return after

    def client_model(self, client_id: int, params: Tensor, buffers: Tensor) -> tuple[Tensor, Tensor] | None:
        """The weights a client is evaluated with when the global model is ``params``/``buffers``; None: the global
        model's (or, with ``keeps_client_models``, none yet on this process)."""
        return None

    def stores(self) -> dict[str, ProcessStore]:
        """What only this process holds, by name (saved in this process's checkpoint file)."""
        return {}

    def metrics(self) -> dict[str, float]:
        """Scalars to log after the round, under ``<the transform's name>/``."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        """What a resume needs, the same on every process (saved in ``last.ckpt``)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores what ``state_dict`` returned."""


def check_norm_bounds(transforms: Sequence[Transform]) -> None:
    """Raises ``ConfigError`` when a transform after one that ``bounds_norm`` does not keep its bound, or clips what
    one that ``noises_deltas`` has noised."""
    for i, bound in enumerate(transforms):
        for after in transforms[i + 1 :] if bound.bounds_norm else ():
            if after.keeps_norm_bounds and not (bound.noises_deltas and after.bounds_norm):
                continue
            it, reason = type(after).__name__, "the bound would not hold for what clients send"
            if after.keeps_norm_bounds:
                reason = "the noise clients add would shrink below what is accounted"
            raise ConfigError(
                f"transforms: {it} may change the deltas that {type(bound).__name__} has bounded in norm, so {reason}: "
                f"put {it} before {type(bound).__name__}"
            )


class Pipeline:
    """The run's transforms in order (none: updates go to the strategy as trained)."""

    def __init__(self, transforms: Sequence[Transform] = ()) -> None:
        """Raises ``ConfigError`` when a sealing transform is not last, or a transform after one that bounds norms
        does not keep the bound."""
        self.transforms = list(transforms)
        sealing = [t for t in self.transforms if t.seals]
        if sealing and sealing[0] is not self.transforms[-1]:
            raise ConfigError(f"transforms: {name_of(sealing[0])} seals what clients send: it must be the last one")
        check_norm_bounds(self.transforms)
        self.sealer = sealing[0] if sealing else None
        self.unsealed = self.transforms[:-1] if self.sealer else self.transforms
        self._scratch: Sums | None = None

    @property
    def sizes(self) -> dict[str, int]:
        """Every transform's sums, in order."""
        return {name: size for t in self.transforms for name, size in t.sum_sizes().items()}

    @property
    def requirements(self) -> Requirements:
        """What the transforms need together."""
        needs = Requirements()
        for transform in self.transforms:
            needs = needs | transform.requirements
        return needs

    def setup(self, context: TransformContext) -> None:
        """Sets every transform up, in order. Raises ``ConfigError`` when two of them add into the same sums (or into
        the strategy's)."""
        sizes = dict(context.strategy_sums)
        for transform in self.transforms:
            transform.setup(replace(context, sealed=dict(sizes)) if transform.seals else context)
            clash = sorted(set(sizes) & set(transform.sum_sizes()))
            if clash:
                raise ConfigError(f"transforms: {name_of(transform)} adds into sums already added into: {clash}")
            if not transform.seals:
                sizes.update(transform.sum_sizes())
        if self.sealer is not None:
            self._scratch = Sums(sizes, context.server.params.device)

    def plan(self, plan: ClientPlan) -> ClientPlan:
        for transform in self.transforms:
            plan = transform.plan(plan)
        return plan

    def add(self, sums: Sums, update: ClientUpdate, round: int, accumulate: Accumulate) -> int:
        """Sends one client's update through the client halves in order into ``sums`` (``accumulate``: the server
        path's); a sealing transform gets the whole contribution, zeros when an earlier one sends nothing. Returns the
        bytes the client sends: its update's as trained (``message_bytes.sent_bytes``; 0 when a transform sends
        nothing), then each transform's ``sent_bytes``."""
        target = sums if self._scratch is None else self._scratch
        if self._scratch is not None:
            self._scratch.zero_()
        size = sent_bytes(update)  # as trained: a transform may change the delta's dtype (UserLevelDP's float64)
        if (sent := self._through_unsealed(update, round, target)) is not None:
            accumulate(target, sent)
        else:
            size = 0
        if self.sealer is not None and self._scratch is not None:
            self.sealer.seal(self._scratch.buffer, update.client_id, round, sums)
        for transform in self.transforms:
            size = transform.sent_bytes(size, update.client_id, round)
        return size

    def _through_unsealed(self, update: ClientUpdate, round: int, sums: Sums) -> ClientUpdate | None:
        for transform in self.unsealed:
            sent = transform.contribution(update, round, sums)
            if sent is None:
                return None
            update = sent
        return update

    def passes(self, client_ids: Sequence[int]) -> bool:
        """Whether every transform passes the updates of ``client_ids`` unchanged (``Transform.passes``)."""
        return all(transform.passes(client_ids) for transform in self.transforms)

    def recovered(self, sums: Sums, round: int) -> dict[str, float]:
        """The server halves in reverse order; returns their metrics, each under its transform's name."""
        for transform in reversed(self.transforms):
            transform.recovered(sums, round)
        return {f"{name_of(t)}/{key}": value for t in self.transforms for key, value in t.metrics().items()}

    def stepped(self, before: Tensor, after: Tensor) -> Tensor:
        """The server halves' last word on the next global parameters, in reverse order."""
        for transform in reversed(self.transforms):
            after = transform.stepped(before, after)
        return after

    @property
    def keeps_client_models(self) -> bool:
        return any(transform.keeps_client_models for transform in self.transforms)

    def client_model(self, client_id: int, params: Tensor, buffers: Tensor) -> tuple[Tensor, Tensor] | None:
        """The first transform's model of the client (None: the global model)."""
        for transform in self.transforms:
            model = transform.client_model(client_id, params, buffers)
            if model is not None:
                return model
        return None

    def stores(self) -> dict[str, ProcessStore]:
        """Every transform's per-process stores, each under ``<its transform's name>.<its name>`` (a file prefix)."""
        return {f"{name_of(t)}.{name}": store for t in self.transforms for name, store in t.stores().items()}

    def state_dict(self) -> list[dict[str, Any]]:
        return [transform.state_dict() for transform in self.transforms]

    def load_state_dict(self, states: list[dict[str, Any]] | None) -> None:
        """Restores what ``state_dict`` returned; refuses a checkpoint that holds another list of transforms' states
        (None: written before transforms had state), unless none of these transforms has any."""
        if states is None and not any(transform.state_dict() for transform in self.transforms):
            return
        if states is None or len(states) != len(self.transforms):
            held = "no transforms' state" if states is None else f"the state of {len(states)} transforms"
            raise ConfigError(
                f"the checkpoint holds {held}, the run has {len(self.transforms)} (with the attack): resume with the "
                "transforms it was written with"
            )
        for transform, state in zip(self.transforms, states, strict=True):
            transform.load_state_dict(state)


NO_TRANSFORMS = Pipeline()  # updates go to the strategy as trained


def name_of(transform: Transform) -> str:
    """``NormBounding`` -> ``norm_bounding``; ``UserLevelDP`` -> ``user_level_dp``."""
    name = type(transform).__name__
    out = ""
    for i, c in enumerate(name):
        after_lower = i and name[i - 1].islower()
        out += f"_{c.lower()}" if c.isupper() and after_lower else c.lower()
    return out
