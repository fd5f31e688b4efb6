"""What a strategy, a client's local rule or a privacy mechanism needs of the run, declared as data."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Requirements:
    """Needs that ``lightfed.strategies.requirements.check_requirements`` checks once, before a run writes anything.

    Requirements combine with ``|`` (a strategy's are its own and its local rule's): a need of either is a need.
    """

    client_state: bool = False  # keeps per-client state: client i always trains on process i % world size
    plain_sgd: bool = False  # assumes local steps x <- x - lr g: the model's optimizer is SGD with momentum 0
    no_weight_decay: bool = False  # sets the whole local direction: the optimizer's weight_decay is 0
    chooses_client_steps: bool = False  # its local rule sets every step size itself (no trainer.lr_schedule)
    sends: frozenset[str] = frozenset()  # what clients send besides their delta and counts (``ClientUpdate.report``)

    def __or__(self, other: "Requirements") -> "Requirements":
        return Requirements(
            client_state=self.client_state or other.client_state,
            plain_sgd=self.plain_sgd or other.plain_sgd,
            no_weight_decay=self.no_weight_decay or other.no_weight_decay,
            chooses_client_steps=self.chooses_client_steps or other.chooses_client_steps,
            sends=self.sends | other.sends,
        )
