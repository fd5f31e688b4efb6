"""What a strategy, a client's local rule or a privacy mechanism needs of the run, declared as data."""

from dataclasses import dataclass, replace
from typing import Literal

Origin = Literal["size", "gradients", "data", "kept"]


@dataclass(frozen=True)
class Sent:
    """A value clients send besides their delta and counts (a key of ``ClientUpdate.report``), by what it is
    computed from:

    - "size": only the client's number of examples and its plan (public, as FedAvg's example weights are);
    - "gradients": only the gradients of its local steps (under ``trainer.privacy``, post-processing of what the
      mechanism releases and accounts);
    - "data": its data, in a way ``trainer.privacy`` does not account for (a run with an accounting mechanism
      refuses it, naming ``removed_by``);
    - "kept": nothing the server sees: the client's own state (personal weights), which the simulation keeps in the
      per-client store of the process that trains it; it enters no sum.
    """

    name: str
    origin: Origin
    removed_by: str = ""  # the setting that stops clients sending it ("": none does)


@dataclass(frozen=True)
class Requirements:
    """Needs that ``lightfed.strategies.requirements.check_requirements`` checks once, before a run writes anything.

    Requirements combine with ``|`` (a strategy's are its own and its local rule's): a need of either is a need.
    """

    client_state: bool = False  # keeps per-client state: client i always trains on process i % world size
    plain_sgd: bool = False  # assumes local steps x <- x - lr g: the model's optimizer is SGD with momentum 0
    no_weight_decay: bool = False  # sets the whole local direction: the optimizer's weight_decay is 0
    chooses_client_steps: bool = False  # its local rule sets every step size itself (no trainer.lr_schedule)
    sends: frozenset[Sent] = frozenset()  # what clients send besides their delta and counts (``ClientUpdate.report``)
    reads_each_update: bool = False  # its aggregate needs each client's update, not only the sum of their deltas
    sums_path: bool = False  # a transform that reads or changes the round's sums: the synchronous sums path only
    mean_only: bool = False  # a transform that gives the strategy only the mean delta: its sums are delta and weight
    every_client_sends: bool = False  # a transform that needs a contribution from every client of the round
    drops_clients: bool = False  # a transform that simulates clients of the round sending nothing
    encodes: bool = False  # a transform that encodes what a client sends (a compressor, secure aggregation's masks)

    def __or__(self, other: "Requirements") -> "Requirements":
        return Requirements(
            client_state=self.client_state or other.client_state,
            plain_sgd=self.plain_sgd or other.plain_sgd,
            no_weight_decay=self.no_weight_decay or other.no_weight_decay,
            chooses_client_steps=self.chooses_client_steps or other.chooses_client_steps,
            sends=self.sends | other.sends,
            reads_each_update=self.reads_each_update or other.reads_each_update,
            sums_path=self.sums_path or other.sums_path,
            mean_only=self.mean_only or other.mean_only,
            every_client_sends=self.every_client_sends or other.every_client_sends,
            drops_clients=self.drops_clients or other.drops_clients,
            encodes=self.encodes or other.encodes,
        )

    def without(self, *names: str) -> "Requirements":
        """These requirements, less what clients send under ``names`` (a setting keeps them from sending it)."""
        return replace(self, sends=frozenset(sent for sent in self.sends if sent.name not in names))

    @property
    def sent_names(self) -> frozenset[str]:
        """The names of what clients send."""
        return frozenset(sent.name for sent in self.sends)

    def unaccounted(self) -> list[Sent]:
        """What clients send computed from their data outside a privacy mechanism's accounting, by name."""
        return sorted((sent for sent in self.sends if sent.origin == "data"), key=lambda sent: sent.name)
